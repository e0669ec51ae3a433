"""Local dask clusters with worker processes: what reaches a worker, what it computes in, and
that no worker outlives its driver, however the driver ends."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from fractions import Fraction

import numpy as np
import pytest
import zarr
from helpers import Popen, gone
from zarr.storage import FsspecStore

from streamacc.errors import InputError
from streamacc.run import cluster_client

distributed = pytest.importorskip("distributed")


@dataclasses.dataclass(frozen=True)
class Affine:
    """A step function as a frozen dataclass: ``c -> a*c + b``."""

    a: float
    b: float

    def __call__(self, carry, x):
        carry = self.a * carry + self.b
        return carry, carry


def scan_in_x64(step, init, length, xs=None):
    """What a block task does on a worker: a scan in x64, whatever the worker's own setting."""
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        xs = None if xs is None else jnp.asarray(xs[:length])
        carry, ys = jax.lax.scan(step, jnp.asarray(init, jnp.float64), xs, length=length)
        return np.asarray(carry), np.asarray(ys)


def x64_default():
    import jax

    return bool(jax.config.jax_enable_x64)


def test_workers_compute_a_closure_in_x64_without_being_configured(dask_client):
    assert set(dask_client.run(x64_default).values()) == {False}  # the test process has it on; workers do not
    ratio = 1 + 2.0**-40  # rounds to 1 in float32

    def grow(carry, x):
        carry = carry * ratio
        return carry, carry

    carry, ys = dask_client.submit(scan_in_x64, grow, 1.0, 64).result()
    assert ys.dtype == np.float64
    expected = np.multiply.accumulate(np.full(64, ratio))
    np.testing.assert_array_equal(ys, expected)
    assert carry == expected[-1] != 1.0


def test_a_frozen_dataclass_step_reaches_the_workers(dask_client):
    carry, ys = dask_client.submit(scan_in_x64, Affine(0.5, 0.25), 1.0, 16).result()
    exact, expected = Fraction(1), []
    for _ in range(16):  # dyadic values: float64 holds each one exactly
        exact = exact / 2 + Fraction(1, 4)
        expected.append(float(exact))
    assert ys.tolist() == expected and float(carry) == expected[-1]


def test_a_zarr_array_on_s3_reaches_the_workers_as_xs(dask_client, s3_bucket):
    store = FsspecStore.from_url(s3_bucket.url("xs.zarr"), storage_options=s3_bucket.storage_options)
    xs = zarr.create_array(store, shape=(40,), chunks=(16,), dtype="f8")
    xs[:] = np.arange(40.0)

    def cumsum(carry, x):
        return carry + x, carry + x

    carry, ys = dask_client.submit(scan_in_x64, cumsum, 0.0, 40, xs).result()
    np.testing.assert_array_equal(ys, np.cumsum(np.arange(40.0)))
    assert carry == ys[-1]


DRIVER = textwrap.dedent(
    """
    import signal, sys, time, zarr
    from zarr.storage import FsspecStore
    from streamacc.run import cluster_client

    # as a command typed at a terminal: Ctrl-C interrupts it (a test run started in the
    # background, `pytest &`, would otherwise hand down SIGINT ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    def total(xs):
        return float(xs[:].sum())

    mode, endpoint, url = sys.argv[1:]
    xs = zarr.open_array(FsspecStore.from_url(url, storage_options={"endpoint_url": endpoint}), mode="r")
    with cluster_client(1, None) as client:
        pids = client.run(__import__("os").getpid)
        print(*pids.values(), flush=True)
        print(client.submit(total, xs, pure=False).result(), flush=True)  # workers now hold S3 sessions
        if mode == "error":
            raise RuntimeError("the driver fails")
        time.sleep(600)
    """
)


def start_driver(mode: str, s3_bucket) -> tuple[Popen, list[int]]:
    url = s3_bucket.url("in.zarr")
    zarr.create_array(FsspecStore.from_url(url, storage_options=s3_bucket.storage_options), shape=(4,), dtype="f8")[
        :
    ] = [1, 2, 3, 4]
    driver = Popen(
        [sys.executable, "-c", DRIVER, mode, s3_bucket.server.endpoint, url],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a process group of its own, as a command typed in a terminal
    )
    workers = [int(pid) for pid in driver.stdout.readline().split()]
    assert len(workers) == 1 and float(driver.stdout.readline()) == 10.0
    return driver, workers


def assert_all_gone(pids: list[int], deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while not all(gone(pid) for pid in pids):
        assert time.monotonic() < end, f"worker processes outlived their driver: {pids}"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_driver_killed_with_sigkill_leaves_no_worker_behind(s3_bucket):
    driver, workers = start_driver("kill", s3_bucket)
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=60)
    assert_all_gone(workers)


@pytest.mark.slow
def test_ctrl_c_at_a_terminal_closes_the_cluster_from_the_driver_alone(s3_bucket):
    driver, workers = start_driver("wait", s3_bucket)
    os.killpg(driver.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground group gets it
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode != 0
    # the driver's KeyboardInterrupt alone: no worker was interrupted (a worker whose heartbeat meets the closing
    # scheduler on a busy machine may log that, which is not the point here)
    assert stderr.count("KeyboardInterrupt") == 1 and stderr.rstrip().endswith("KeyboardInterrupt")
    assert_all_gone(workers)


@pytest.mark.slow
def test_an_error_closes_the_cluster_and_the_workers_store_sessions(s3_bucket):
    driver, workers = start_driver("error", s3_bucket)
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 1 and "RuntimeError: the driver fails" in stderr
    assert "Unclosed client session" not in stderr and "Unclosed connector" not in stderr
    assert_all_gone(workers)


def test_a_cluster_needs_at_least_one_worker():
    cluster = cluster_client(0, None)
    with pytest.raises(InputError, match=r"workers must be >= 1, got 0; pass e.g. workers=2"):
        cluster.__enter__()
