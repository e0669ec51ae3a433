"""Test configuration: x64 on (the library's documented expectation for 64-bit data)
and strict dtype promotion, so that a silent dtype change fails loudly; test outputs in
memory where there is room."""

import os
import shutil
import tempfile
from pathlib import Path

import jax
import pytest

pytest_plugins = ["_s3", "_cluster"]  # fixtures: s3_server, s3_bucket (moto's S3 server); dask_client

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


def pytest_unconfigure(config):
    made = config.stash.get(_BASETEMP, None)
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)  # memory, not disk: never left behind


_BASETEMP = pytest.StashKey[str]()


def pytest_collection_modifyitems(items):
    """A test that needs the session's dask cluster is slow: the first one starts its worker processes.

    Those tests run last, one after the other, so that the cluster (started by the first of
    them, closed at the session's end) does not idle through the rest of the suite: its four
    processes take about 2.5 s of CPU a minute doing nothing.
    """
    for item in items:
        if "dask_client" in item.fixturenames:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: "dask_client" in item.fixturenames)  # stable: each group keeps its order
