"""The benchmark harness: every benchmark is a pytest-benchmark test of this folder, run by one command.

    python -m pytest benchmarks                                   # every scenario at its small default size
    python -m pytest benchmarks -k summaries_cost --size '2**30' --repeat 3 --benchmark-autosave

A scenario takes the ``scenario`` fixture: it runs each side of the scenario in a fresh
child process under GNU time (:mod:`_harness`), alternating the sides within each round,
and keeps its rows, figures and tables in the benchmark's ``extra_info``; pytest-benchmark
times each round (``stats``). ``--size`` (repeatable) chooses the lengths of the
scenarios that take one (each has a small default); ``--repeat`` the rounds; ``--ref
CHECKOUT`` adds another checkout's code to the rotation where a scenario compares two;
``--note`` says what the run measures that the ones before did not. With
``--benchmark-autosave`` (or ``--benchmark-save=NAME``) the result is saved to
``benchmarks/results/MACHINE/NNNN_*.json``, pytest-benchmark's storage, which keeps every
run; ``--benchmark-json=FILE`` writes it elsewhere. Each file records the command that made
it, the machine, its load at the start and the end, and the versions.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _harness
import _results

DEFAULT_STORAGE = "file://./.benchmarks"
_STATE: dict[str, Any] = {}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("streamacc benchmarks")
    group.addoption("--size", action="append", default=None,
                    help="a length for the scenarios that take one, such as '2**30' (repeatable; default: each "
                         "scenario's small size)")  # fmt: skip
    group.addoption("--repeat", type=int, default=None, help="rounds of each scenario (default: each scenario's)")
    group.addoption("--ref", type=Path, default=None,
                    help="another checkout, whose code joins the rotation of the scenarios comparing two")  # fmt: skip
    group.addoption("--note", default="", help="what this run measures that the runs before it did not")
    group.addoption("--scratch", type=Path, default=None,
                    help="where the scenarios write their outputs (default: pytest's temporary folder)")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    # pytest-benchmark reads its options in a pytest_configure that runs after this one; a harness started
    # from a process of an xdist worker (a test) inherits the variable by which it would think itself one
    if not hasattr(config, "workerinput"):
        os.environ.pop("PYTEST_XDIST_WORKER", None)
    if config.getoption("benchmark_storage", DEFAULT_STORAGE) == DEFAULT_STORAGE:
        config.option.benchmark_storage = f"file://{_results.RESULTS}"
    _STATE["load_start"] = _harness.load()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "size" in metafunc.fixturenames:
        marker = metafunc.definition.get_closest_marker("sizes")
        sizes = metafunc.config.getoption("size") or (list(marker.args) if marker else ["2**16"])
        metafunc.parametrize("size", sizes, ids=sizes)


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    ref = config.getoption("ref")
    machine_info.update(_harness.machine())
    if isinstance(machine_info.get("cpu"), dict):  # py-cpuinfo's; its hundred flags say nothing here
        machine_info["cpu"].pop("flags", None)
    machine_info["load_start"] = _STATE.get("load_start") or _harness.load()
    machine_info["load_end"] = _harness.load()
    machine_info["versions"] = _harness.versions()
    if ref is not None:
        machine_info["ref"] = {"path": str(ref), "commit": _harness.git(ref)["id"]}


def pytest_benchmark_update_commit_info(config: pytest.Config, commit_info: dict[str, Any]) -> None:
    commit_info.update(_harness.git())


def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    output_json["command"] = "python -m pytest " + shlex.join(config.invocation_params.args)
    if config.getoption("note"):
        output_json["note"] = config.getoption("note")


class Scenario:
    """One scenario's measurements: the rows of its sides, its figures, its tables; saved in ``extra_info``."""

    def __init__(self, benchmark: Any, request: pytest.FixtureRequest, folder: Path) -> None:
        self.benchmark = benchmark
        self.request = request
        self.folder = folder
        self.ref: Path | None = request.config.getoption("ref")
        self.rows: list[dict[str, Any]] = []
        self.commands: dict[str, str] = {}
        self.figures: dict[str, Any] = {}
        self.tables: dict[str, list[dict[str, Any]]] = {}
        self.plots: list[dict[str, Any]] = []
        self._repeat: int | None = request.config.getoption("repeat")

    def repeat(self, default: int) -> int:
        """The rounds to run: ``--repeat``, else the scenario's ``default``."""
        if self._repeat is None:
            self._repeat = default
        return self._repeat

    def run(self, cmd: list[Any], side: str, *, root: Path | None = None, **extra: Any) -> dict[str, Any]:
        """Run one side in its own process (``root``: the checkout whose code it runs); keep its row."""
        root = root or _harness.ROOT
        self.commands.setdefault(side, _harness.shown(cmd, self.folder))
        row = _harness.run(cmd, side, root=root, **extra)
        self.rows.append(row)
        return row

    def rounds(self, body: Callable[[int], None], default: int) -> None:
        """``body(i)`` for each round ``i``, timed by pytest-benchmark as one round each."""
        counter = iter(range(self.repeat(default)))
        self.benchmark.pedantic(lambda: body(next(counter)), rounds=self.repeat(default), iterations=1,
                                warmup_rounds=0)  # fmt: skip

    def medians(self, side: str, *keys: str) -> dict[str, float]:
        return _harness.medians(self.rows, side, *keys)

    def reproduce(self) -> str:
        node = self.request.node
        path = Path(str(node.path)).relative_to(_harness.ROOT)
        words = ["python", "-m", "pytest", f"{path}::{node.originalname}"]
        size = node.callspec.params.get("size") if hasattr(node, "callspec") else None
        if size is not None:
            words += ["--size", str(size)]
        if self._repeat is not None:
            words += ["--repeat", str(self._repeat)]
        if self.ref is not None:
            words += ["--ref", "OTHER_CHECKOUT"]
        return shlex.join(words) + " --benchmark-autosave"

    def save(self) -> None:
        if self.rows:
            self.tables = {"runs": self.rows, **self.tables}
        extra: dict[str, Any] = {"commands": self.commands or {"scenario": self.reproduce()},
                                 "reproduce": self.reproduce(), "figures": self.figures,
                                 "tables": self.tables}  # fmt: skip
        if self.plots:
            extra["plots"] = self.plots
        self.benchmark.extra_info.update(extra)


@pytest.fixture
def scenario(benchmark: Any, request: pytest.FixtureRequest, tmp_path: Path):
    """The measurements of one scenario, saved into its benchmark's ``extra_info`` when it ends."""
    scratch = request.config.getoption("scratch")
    folder = tmp_path if scratch is None else Path(scratch) / request.node.name.replace("*", "p")
    folder.mkdir(parents=True, exist_ok=True)
    s = Scenario(benchmark, request, folder)
    yield s
    s.save()
    if scratch is not None:
        shutil.rmtree(folder, ignore_errors=True)
