"""A pytest plugin for ``bench_tests.py``: the CPU each test takes, and what JAX compiles.

Loaded with ``-p _tests_cpu`` (``benchmarks/`` on ``PYTHONPATH``) in the test command's
process and in each of its pytest-xdist workers. Around each test it reads ``getrusage``
of the process itself and of its children that were waited for (the command-line tests'
processes), and it adds up JAX's compile durations (``jax.monitoring``). At the end each
process writes one JSON file into ``$STREAMACC_TESTS_CPU_DIR``.

A child's CPU counts when its parent waits for it: a process a session fixture keeps (the
dask cluster's workers, moto's S3 server) counts at the end of the session, outside every
test, and one that a test leaves running until another test reaps it counts in that test.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from typing import Any

import pytest

_TESTS: list[tuple[str, float, float, float]] = []
_COMPILE: dict[str, float] = {}


def _cpu() -> tuple[float, float]:
    me = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, children.ru_utime + children.ru_stime


def pytest_configure(config: pytest.Config) -> None:
    import jax.monitoring

    def add(event: str, duration: float, **_: Any) -> None:
        if event.startswith("/jax/core/compile/"):
            _COMPILE[event] = _COMPILE.get(event, 0.0) + duration

    jax.monitoring.register_event_duration_secs_listener(add)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    me, children = _cpu()
    start = time.perf_counter()
    yield
    me_after, children_after = _cpu()
    _TESTS.append((item.nodeid, me_after - me, children_after - children, time.perf_counter() - start))


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = os.environ.get("STREAMACC_TESTS_CPU_DIR")
    if not folder:
        return
    me, children = _cpu()
    worker = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    doc = {"worker": worker, "self_cpu_s": me, "children_cpu_s": children, "compile_s": _COMPILE, "tests": _TESTS}
    with open(os.path.join(folder, f"{worker}-{os.getpid()}.json"), "w") as fh:
        json.dump(doc, fh)
