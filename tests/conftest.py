"""Test configuration: x64 on (the library's documented expectation for 64-bit data)
and strict dtype promotion, so that a silent dtype change fails loudly; test outputs in
memory where there is room; the session's S3 server and dask cluster. Helpers are in
``helpers.py``."""

import contextlib
import gc
import os

# XLA's CPU thread pool for the operations inside one computation: the tests' computations
# are small, and on two cores its threads spend more CPU waking and spinning than they save.
# Set before JAX starts its backend, here and in every
# process the session starts. What a computation returns does not depend on it.
os.environ["XLA_FLAGS"] = " ".join(filter(None, [os.environ.get("XLA_FLAGS"), "--xla_cpu_multi_thread_eigen=false"]))
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import pytest
from helpers import CLEARED, CREDENTIALS, Bucket, S3Server, new_bucket, start_server

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.fixture
def x64_off():
    """Run one test with jax_enable_x64 off, restoring it afterwards."""
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)


@pytest.fixture
def seam() -> Iterator[Any]:
    """``seam(name, value)``: a ``streamacc.testing`` seam replaced by ``value`` until the test ends (as
    ``monkeypatch.setattr`` replaces an attribute)."""
    from streamacc import testing

    with contextlib.ExitStack() as undo:
        yield lambda name, value: undo.enter_context(testing.patched(name, value))


MEMORY = Path("/dev/shm")
MEMORY_NEEDED = 2**30
"""Free bytes the memory file system must have to take the test outputs (a session writes about 50 MB)."""


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """Put ``tmp_path`` in memory (tmpfs) unless ``--basetemp`` says otherwise.

    Outputs are written durably (fsync per chunk, folder and manifest); on a disk that other
    work keeps busy one fsync can take seconds, and a test that proves crash safety by
    killing processes gains nothing from it. What durability costs is measured in
    benchmarks/. Without room there, the usual temporary folder is used.
    """
    if config.option.basetemp is not None or not MEMORY.is_dir():
        return
    for old in MEMORY.glob("streamacc-tests-*-*"):  # left by a session that was killed
        if not Path(f"/proc/{old.name.split('-')[2]}").exists():
            shutil.rmtree(old, ignore_errors=True)
    if shutil.disk_usage(MEMORY).free >= MEMORY_NEEDED:
        prefix = f"streamacc-tests-{os.getpid()}-"
        config.option.basetemp = config.stash[_BASETEMP] = tempfile.mkdtemp(prefix=prefix, dir=MEMORY)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    """One XLA compilation cache for the session's processes, kept in memory and removed at the end.

    JAX caches a compiled executable by its computation (the HLO, the device, the compile
    options and the versions), not by the Python function that traced it: a step defined in
    each test, a block length that another test compiled already, the same block compiled by
    each worker of the dask cluster and by each writer forked from the warm interpreter
    compile once and are loaded from the cache after that. What runs is the executable XLA
    compiled for that computation either way, and each compile request is still counted
    (``/jax/core/compile/backend_compile_duration``), hit or miss, so the tests that count
    what the engine compiles see every request it makes. Set in the environment too, so that
    every process this session starts (they read it as they import JAX), the workers of
    ``pytest -n`` included, shares the cache; the process that made it removes it.
    """
    config = session.config
    folder = os.environ.get(_SHARED_XLA_CACHE)  # a worker of pytest -n: the one its controller made
    if folder is None:
        folder = tempfile.mkdtemp(prefix="streamacc-xla-cache-", dir=MEMORY if MEMORY.is_dir() else None)
        config.stash[_XLA_CACHE] = folder
        os.environ[_SHARED_XLA_CACHE] = folder
    settings = {"jax_compilation_cache_dir": folder, "jax_persistent_cache_min_compile_time_secs": 0}
    for name, value in settings.items():
        jax.config.update(name, value)
        os.environ[name.upper()] = str(value)


def pytest_collection_finish(session):
    """Move what importing the tests made (JAX, zarr, xarray, dask: most of the heap) out of the collector's way.

    Python's cyclic collector walks every object it tracks at each full collection; these
    live for the whole session and never form garbage, so walking them is CPU spent for
    nothing.
    """
    gc.collect()
    gc.freeze()


def pytest_unconfigure(config):
    made = config.stash.get(_BASETEMP, None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)  # memory, not disk: never left behind
    cache = config.stash.get(_XLA_CACHE, None)
    if cache is not None:
        shutil.rmtree(cache, ignore_errors=True)


_BASETEMP = pytest.StashKey[str]()
_XLA_CACHE = pytest.StashKey[str]()
_SHARED_XLA_CACHE = "STREAMACC_TESTS_XLA_CACHE"


SHARED_FIXTURES = {"dask_client": "cluster", "site": "site"}
"""Fixtures made once for the tests that use them (the session's dask cluster, the documentation
site built with every example run: each costly to make), by the group those tests form: with
pytest -n, a group runs in one worker, so each is made once, not once per worker."""


@pytest.hookimpl(wrapper=True)  # around pytest-xdist's own, which reads the groups into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> Iterator[None]:
    """A test that needs the session's dask cluster is slow: the first one starts its worker processes.

    Those tests run one after the other (last, in one process), and the cluster is closed after
    the last of them (``pytest_runtest_teardown``). A ``pytest -n`` run whose groups did not take
    stops (:func:`_check_grouped`).
    """
    for item in items:
        for fixture, group in SHARED_FIXTURES.items():
            if fixture in item.fixturenames:
                item.add_marker(pytest.mark.xdist_group(group))
        if "dask_client" in item.fixturenames:
            item.add_marker(pytest.mark.slow)

    def order(item: pytest.Item) -> tuple[bool, bool]:
        # the test that kills a worker last: the one its nanny starts then imports nothing more for other tests
        return "dask_client" in item.fixturenames, item.get_closest_marker("kills_a_worker") is not None

    items.sort(key=order)  # stable: each group keeps its order
    result = yield
    _check_grouped(config, items)
    return result


def _check_grouped(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Fail the grouped tests of a worker whose groups did not take: each worker would make the shared fixtures.

    pytest-xdist hands a group to one worker by the ``@GROUP`` it appends to each grouped test's
    id; a pytest that no longer reads it (9.2, pytest-dev/pytest-xdist#1386) leaves the groups
    silently ignored, the docs site built and a dask cluster started once per worker.
    """
    if not getattr(config.option, "loadgroup", False):
        return
    if any(item.get_closest_marker("xdist_group") and "@" not in item.nodeid for item in items):
        config.stash[_UNGROUPED] = (
            f"pytest-xdist's groups did not take under pytest {pytest.__version__}: install the pinned tools, "
            "pip install -c .ci/constraints.txt -e '.[test]'"
        )


_UNGROUPED = pytest.StashKey[str]()


@pytest.hookimpl(tryfirst=True)  # before the test's fixtures are made
def pytest_runtest_setup(item: pytest.Item) -> None:
    ungrouped = item.config.stash.get(_UNGROUPED, None)
    if ungrouped is not None and item.get_closest_marker("xdist_group"):
        pytest.fail(ungrouped, pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """The session's dask cluster is closed after the last test that needs it, not at the session's end.

    With pytest -n its tests are one unit of work, which pytest-xdist hands out among the first
    (it orders units by their number of tests); left running, the cluster would idle through the
    rest of the suite, and its processes and the scheduler take a few CPU-seconds a minute even
    then. A test that needed it after that would start another.
    """
    result = yield
    if "dask_client" in item.fixturenames and (nextitem is None or "dask_client" not in nextitem.fixturenames):
        for fixturedef in item._fixtureinfo.name2fixturedefs.get("dask_client", ()):
            fixturedef.finish(item._request)
    return result


# --- moto's S3 server, one for the session ------------------------------------------------------


@pytest.fixture(scope="session")
def aws_credentials() -> Iterator[None]:
    """Dummy AWS credentials in this process's environment (and so in every child's)."""
    with pytest.MonkeyPatch.context() as mp:
        for name in CLEARED:
            mp.delenv(name, raising=False)
        for name, value in CREDENTIALS.items():
            mp.setenv(name, value)
        yield


@pytest.fixture(scope="session")
def s3_server(aws_credentials: None) -> Iterator[S3Server]:
    """moto's S3 server for the whole session."""
    pytest.importorskip("s3fs")
    pytest.importorskip("moto.server")
    from streamacc.store import close_store_sessions

    server, described = start_server()
    try:
        yield described
    finally:
        close_store_sessions()
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> Iterator[Bucket]:
    """A new bucket for one test, emptied and removed afterwards."""
    bucket = new_bucket(s3_server)
    try:
        yield bucket
    finally:
        fs = s3_server.fs()
        with contextlib.suppress(Exception):
            fs.rm(bucket.name, recursive=True)
        fs.invalidate_cache()


# --- a dask cluster, one for the session -----------------------------------------------------------


@pytest.fixture(scope="session")
def dask_client(aws_credentials: None) -> Iterator[Any]:
    """A ``distributed.Client`` on a local cluster of two single-threaded worker processes, closed at the end.

    Starting one takes 1 to 2 s on the 2-core test machine (plus about 2 s the first time each
    worker imports jax), so tests share it; one that kills a worker waits for its nanny to
    restart it. The workers start after the dummy S3 credentials are set, so they inherit them.
    """
    pytest.importorskip("distributed")
    import dask

    from streamacc.run import cluster_client

    # no statistical profiler sampling each worker's threads every 10 ms: diagnostics the tests never read,
    # which cost the idle cluster a few CPU-seconds a minute
    with dask.config.set({"distributed.worker.profile.enabled": False}), cluster_client(2, None) as client:
        yield client
