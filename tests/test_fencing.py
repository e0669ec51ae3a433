"""Fenced writers on object storage: a writer that may have lost its lease writes nothing more.

Against moto's S3 server with real writer processes: writer A is paused (SIGSTOP) past its
lease, writer B takes the output over (``--overwrite`` with other settings, or
``--resume``) and finishes; A, continued, must stop without writing a single object (no
chunk, no record, no manifest, no root metadata), and B's output must stay exactly as B
left it. Before writes were fenced, A wrote chunks and block records before its next
lease check: ``streamacc.open`` then returned A's values in B's output. A stops itself
just before a write's lease check, so that the test does not depend on where a signal
sent at a random moment lands (a request already past its check when a process is
frozen is the documented exception; ``tests/chaos.py`` pauses at random).
"""

from __future__ import annotations

import json
import signal
import time

import pytest
import s3fs
from helpers import S3_SMALL, Bucket, etags, paused_writer, remote_committed, s3_args
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore

import streamacc
from streamacc.cli import main
from streamacc.engine import make_plan, to_host
from streamacc.errors import LockedError
from streamacc.recipes import get_recipe
from streamacc.run import BlockTask, SinkSpec, run_block_tasks
from streamacc.store import LEASE_KEY, FencedStore, Lease, open_lease_object

pytest.importorskip("moto.server")

TTL = "2"


def lease_expired(bucket: Bucket, key: str) -> bool:
    """Whether the store's own clock says the lease at ``key`` has expired (or it is gone)."""
    seen = open_lease_object(bucket.server.fs(), f"{bucket.name}/{key}/{LEASE_KEY}").read(5.0)
    return seen is None or seen.remaining(float(TTL)) <= 0


@pytest.mark.slow
@pytest.mark.parametrize("takeover", [["--overwrite", "--ratio", "1+2e-8"], ["--resume"]], ids=["overwrite", "resume"])
def test_a_writer_paused_past_its_lease_writes_nothing_after_another_took_over(s3_bucket, monkeypatch, takeover):
    """Writer A stops itself (SIGSTOP) just before a write asks its lease (its 80th check: blocks in)."""
    monkeypatch.setenv("STREAMACC_LEASE_SECONDS", TTL)
    url = s3_bucket.url("out.zarr")
    a = paused_writer(80, "write", url, *S3_SMALL, *s3_args(s3_bucket))
    try:
        committed = remote_committed(s3_bucket, "out.zarr")
        assert 1 <= committed < 12, f"A paused with {committed} of 12 blocks committed"
        deadline = time.monotonic() + 60
        while not lease_expired(s3_bucket, "out.zarr"):
            assert time.monotonic() < deadline, "A's lease never expired"
            time.sleep(0.2)
        assert main(["write", url, *S3_SMALL, *s3_args(s3_bucket), *takeover]) == 0  # writer B
        after_b = etags(s3_bucket, "out.zarr")
        a.send_signal(signal.SIGCONT)
        _, err = a.communicate(timeout=120)
    finally:
        if a.poll() is None:
            a.send_signal(signal.SIGCONT)
            a.kill()
            a.communicate()
    assert a.returncode == 1, err
    assert "lease" in err and err.count("\n") == 1, err
    if "--overwrite" in takeover:  # B's run stands there now: A must not advise overwriting it
        assert "another run's output now stands there" in err and "--overwrite" not in err, err
    assert etags(s3_bucket, "out.zarr") == after_b  # not one object written, replaced or deleted by A
    assert main(["verify", url, *s3_args(s3_bucket)]) == 0


def test_a_cluster_worker_writes_only_under_the_drivers_lease(s3_bucket):
    """Workers hold no lease: each checks the driver's, by its token and the store's clock, before writing."""
    job = get_recipe("gp").build(2048, "float64")
    url, options = s3_bucket.url("out.zarr"), s3_bucket.storage_options
    kw = {"length": 2048, "block_size": 512, "unroll": job.unroll, "names": job.names, "progress": False}
    streamacc.write(url, job.f, job.init, storage_options=options, **kw)
    before = etags(s3_bucket, "out.zarr")
    plan = make_plan(job.f, job.init, length=2048, block_size=512, unroll=job.unroll)
    task = BlockTask(0, 0, 512, to_host(plan.init))
    fs = s3fs.S3FileSystem(**options)
    with Lease.acquire(fs, f"{s3_bucket.name}/out.zarr", url, ttl=2.0) as lease:  # a writer holds the output
        foreign = SinkSpec(url, json.dumps(options), ("x",), run="run-foreign", lease="0" * 32)
        with pytest.raises(LockedError, match="taken over or released, so a worker stopped before writing"):
            run_block_tasks(plan, foreign, [task], True)
        held = etags(s3_bucket, "out.zarr")
        assert held.pop(LEASE_KEY) and held == before
        ours = SinkSpec(url, json.dumps(options), ("x",), run="run-ours", lease=lease.token)
        (result,) = run_block_tasks(plan, ours, [task], True)  # the holder's own worker: the same bytes again
    assert result.index == 0 and etags(s3_bucket, "out.zarr") == before


def test_s3_write_requests_are_fenced_as_they_are_sent_and_by_their_own_writer(s3_bucket):
    """Two outputs through one cached s3fs client: a lost lease stops its own writer's requests only, and
    a request past the store-level check is checked again as it is sent (as are s3fs's retries)."""
    options = s3_bucket.storage_options
    lost: set[str] = set()

    def fenced(key: str) -> FencedStore:
        def fence() -> None:
            if key in lost:
                raise LockedError(f"the lease of {key} is lost")

        store = FencedStore(FsspecStore.from_url(s3_bucket.url(key), storage_options=options), fence)
        sync(store.connect())
        return store

    a, b = fenced("a.zarr"), fenced("b.zarr")
    assert a._store.fs is b._store.fs  # one client for both
    data = default_buffer_prototype().buffer.from_bytes(b"1")
    sync(a.set("k", data))
    lost.add("a.zarr")
    with pytest.raises(LockedError):
        sync(a.set("k2", data))
    with pytest.raises(LockedError):
        sync(a.delete("k"))
    sync(b.set("k", data))  # b's lease holds: its requests pass
    calls = []

    def runs_out() -> None:  # the lease runs out between the store-level check and the request's sending
        calls.append(True)
        if len(calls) > 1:
            raise LockedError("lost while the request was prepared")

    c = FencedStore(FsspecStore.from_url(s3_bucket.url("c.zarr"), storage_options=options), runs_out)
    with pytest.raises(LockedError, match="while the request was prepared"):
        sync(c.set("k", data))
    assert len(calls) == 2
    assert s3_bucket.keys() == ["a.zarr/k", "b.zarr/k"]
