"""Exact two-pass runs on a real dask.distributed cluster (worker processes, not threads).

Every output written with ``client=`` (or the command line's ``--scheduler``) must be byte for
byte the single-process output: each recipe, ``cumsum`` of a Zarr input, and a closure step with
a dict of outputs; a worker SIGKILLed mid-run, halfway through writing a chunk, changes nothing
(its block runs again on another worker); a step
that computes differently on the workers is stopped by the carry cross-check before
anything wrong is committed; and a run started on the cluster resumes without it (and
the other way round).
"""

from __future__ import annotations

import os
import signal
import time

import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import assert_same_output, read_manifest

import streamacc
from streamacc.cli import main
from streamacc.recipes import get_recipe
from streamacc.run import Output

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture
def client(dask_client):
    """The session's two worker processes (one test kills a worker: its nanny restarts it)."""
    return dask_client


def write_both(tmp_path, client, f, init, xs=None, **kw):
    """Write the same run in this process and on the cluster; return both paths."""
    kw = {"progress": False, **kw}
    local, remote = tmp_path / "local.zarr", tmp_path / "cluster.zarr"
    streamacc.write(local, f, init, xs, **kw)
    streamacc.write(remote, f, init, xs, client=client, **kw)
    return local, remote


@pytest.mark.parametrize(
    "args",
    [
        ["--recipe", "gp", "--compensated"],
        ["--recipe", "affine", "--a", "0.75"],
        ["--recipe", "logistic", "--inner", "3"],
        ["--recipe", "randomwalk", "--seed", "7"],
        ["--recipe", "cumsum", "--input"],
        ["--recipe", "cumprod", "--input"],
    ],
    ids=["gp-compensated", "affine", "logistic", "randomwalk", "cumsum", "cumprod"],
)
def test_every_recipe_on_a_running_cluster_is_byte_identical(tmp_path, client, args, capsys):
    """The command line's --scheduler: the cluster's output is the single process's, and verifies.

    11 whole blocks (each block length compiles once in this process and once on each worker; the
    cluster's short last blocks are in the tests below).
    """
    if args[-1] == "--input":  # cumsum and cumprod of a Zarr input: the workers read it themselves
        source = zarr.create_array(tmp_path / "in.zarr", shape=(2816,), chunks=(700,), dtype="f8", fill_value=0.0)
        source[:] = np.random.default_rng(3).uniform(0.5, 1.5, 2816)
        args = [*args, str(tmp_path / "in.zarr")]
    else:
        args = [*args, "--size", "2816"]
    common = [*args, "--block-size", "256", "--no-progress"]
    local, remote = tmp_path / "local.zarr", tmp_path / "cluster.zarr"
    assert main(["write", str(local), *common]) == 0
    assert main(["write", str(remote), *common, "--scheduler", client.scheduler.address]) == 0
    assert_same_output(remote, local)
    capsys.readouterr()
    assert main(["verify", str(remote)]) == 0
    assert "OK, 11 of 11 committed blocks recomputed bit for bit" in capsys.readouterr().out


def test_a_closure_with_a_dict_of_outputs(tmp_path, client):
    scale = 1.25

    def step(c, x):
        c = 0.5 * c + scale * x
        return c, {"level": c, "pair": jnp.stack([c, c * c])}

    xs = np.random.default_rng(5).normal(size=2000)
    local, remote = write_both(tmp_path, client, step, np.float64(0.1), xs, block_size=128)
    assert_same_output(remote, local)
    assert sorted(zarr.open_group(remote, mode="r").array_keys()) == ["level", "pair"]


def die_writing_chunk(marker: str, chunk: str) -> None:
    """Make this worker SIGKILL itself halfway through writing chunk ``chunk`` (its temp file left), once.

    Data chunks in a local folder are written by the chunk writer's ``write_new`` (zarr's temp
    file naming); the first worker to write ``chunk`` creates ``marker``, leaves half a chunk
    in a temp file and dies; the block's retry, and every other write, goes through the real
    one. (Inside the file write, on a worker: no store wrapper reaches it.)
    """
    import uuid

    from streamacc import testing

    real = testing.original("store.write_new")

    def write_new(path, data):
        if path.parent.name == "c" and path.name == chunk:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            except OSError:
                pass  # another worker died there already (or the test is over)
            else:
                path.with_suffix(f".{uuid.uuid4().hex}.partial").write_bytes(b"half a chunk")
                os.kill(os.getpid(), signal.SIGKILL)
        real(path, data)

    testing.replace("store.write_new", write_new)


def restore_write_new() -> None:
    from streamacc import testing

    testing.restore("store.write_new")


@pytest.mark.kills_a_worker
def test_a_worker_killed_halfway_through_a_chunk_leaves_no_temp_file(tmp_path, client):
    """A worker SIGKILLed mid-run, as it writes: its block runs again elsewhere, and nothing else changes."""
    job = get_recipe("affine").build(20000, "float64")
    kw = {"length": job.length, "block_size": 1000, "attrs": job.attrs, "progress": False}
    local, remote, marker = tmp_path / "local.zarr", tmp_path / "cluster.zarr", tmp_path / "killed"
    streamacc.write(local, job.f, job.init, **kw)
    client.run(die_writing_chunk, str(marker), "5")
    try:
        streamacc.write(remote, job.f, job.init, client=client, **kw)
    finally:
        client.wait_for_workers(2, timeout=60)  # the nanny restarted the one that died
        client.run(restore_write_new, on_error="ignore")
    assert marker.exists()  # a worker did die halfway through block 5's chunk
    assert_same_output(remote, local)  # no temp file left, every file as the uninterrupted run's


def test_a_step_that_differs_on_the_workers_is_stopped_by_the_carry_check(tmp_path, client):
    driver = os.getpid()

    def step(c, _):
        factor = 1.5 if os.getpid() == driver else 1.25  # read at trace time: differs on the workers
        return c * factor, c

    out = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.CarryMismatchError, match=r"block 0 \(steps 0-100\).*not reproducible"):
        streamacc.write(out, step, np.float64(1.0), length=1000, block_size=100, progress=False, client=client)
    assert read_manifest(out)["committed_blocks"] == 0


def test_a_run_moves_between_the_cluster_and_one_process(tmp_path, client, monkeypatch):
    """Interrupted from its commits: a store object cannot travel to the workers, so no store wrapper can."""
    job = get_recipe("gp").build(20000, "float64")
    kw = {"length": job.length, "block_size": 512, "unroll": 8, "attrs": job.attrs, "progress": False}
    ref = tmp_path / "ref.zarr"
    streamacc.write(ref, job.f, job.init, **kw)
    for first, then in ((client, None), (None, client)):
        out = tmp_path / f"out-{first is None}.zarr"
        real = Output.commit

        def commit(self, *results, real=real):
            keep = [r for r in results if r.index < 7]
            real(self, *keep)
            if len(keep) < len(results):
                raise KeyboardInterrupt

        with monkeypatch.context() as m:
            m.setattr(Output, "commit", commit)
            with pytest.raises(KeyboardInterrupt):
                streamacc.write(out, job.f, job.init, client=first, **kw)
        assert read_manifest(out)["committed_blocks"] == 7
        streamacc.write(out, job.f, job.init, client=then, mode="resume", **kw)
        assert_same_output(out, ref)


def test_a_store_object_cannot_travel_to_workers(client):
    store = zarr.storage.MemoryStore()
    with pytest.raises(streamacc.errors.InputError, match="lives in this process only"):
        streamacc.write(store, lambda c, _: (c, c), np.float64(0.0), length=8, client=client)
    assert not store._store_dict  # refused before anything was written


def test_the_runs_own_summary_writes_are_no_debris_of_a_killed_worker(tmp_path, client, monkeypatch):
    """After its blocks the run clears the temp files killed workers left; its own summary chunks still being
    written in the background (slowed here while their temp files exist) are waited for, not removed."""
    real = os.replace

    def slow_replace(src, dst, *args, **kwargs):
        if "summaries" in os.fspath(src) and os.fspath(src).endswith(".partial"):
            time.sleep(0.05)
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", slow_replace)
    f = lambda c, _: (c * 1.5 + 1.0, c)  # noqa: E731
    local, remote = write_both(tmp_path, client, f, np.float64(0.0), length=1024, block_size=256)
    assert_same_output(remote, local)


def test_a_run_that_ends_on_its_condition_is_the_single_process_run(tmp_path, client):
    """The carry pass finds the block where the condition held and stops there; its task cuts it there too."""
    xs = np.random.default_rng(6).normal(size=2000)

    def step(c, x):
        c = 0.99 * c + 0.1 * x
        return c, c

    local, remote = write_both(tmp_path, client, step, np.float64(0.0), xs, block_size=128, until=lambda c, y: c > 0.9)
    assert_same_output(remote, local)
    assert 128 < streamacc.info(remote).ended_at < 1999


def test_the_seeds_progression_on_the_cluster_is_plain_lax_scans(tmp_path, client):
    """Nothing given but the step, its carry and the length: the cluster's blocks are plain lax.scan's bits (1.1.0
    chose an unroll on a CPU, and XLA folded the multiply across the unrolled copies)."""
    import jax
    from jax import lax

    def gp(c, _):
        c = c * (1 + 1e-8)
        return c, c

    n = 2**19
    out = tmp_path / "gp.zarr"
    streamacc.write(out, gp, np.float64(1.0), length=n, block_size=2**16, names="x", client=client, progress=False)
    want = jax.jit(lambda c: lax.scan(gp, c, None, length=n))(np.float64(1.0))[1]
    assert zarr.open_group(str(out), mode="r")["x"][...].tobytes() == np.asarray(want).tobytes()
