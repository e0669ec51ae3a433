"""The writer lease on object storage, against moto's S3 server (and memory://, local files).

Leases here live for 0.5 to 1 s, so expiry (ttl + 2 s of clock slack, judged on the
store's whole-second timestamps) takes 3 to 4 s; waits poll with a deadline instead of
sleeping a fixed time wherever the outcome allows it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from types import SimpleNamespace

import fsspec
import pytest
import zarr
from helpers import Bucket, Popen, start_server, stripping_proxy

from streamacc.errors import InputError, LockedError
from streamacc.store import LEASE_ENV, LEASE_KEY, Holder, Lease, lease_seconds, open_lease_object

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

FOREIGN = {"host": "elsewhere", "boot": "", "pid": 4242}
"""A holder on another machine: nothing here can know whether it is alive."""


def root(bucket: Bucket) -> str:
    return f"{bucket.name}/out.zarr"


def acquire(bucket: Bucket, ttl: float = 1.0, **storage_options: object) -> Lease:
    fs = fsspec.filesystem("s3", **{**bucket.storage_options, **storage_options})
    return Lease.acquire(fs, root(bucket), bucket.url(), ttl=ttl)


def stored(bucket: Bucket) -> Holder | None:
    fs = bucket.server.fs()
    return Holder.from_bytes(fs.cat_file(f"{root(bucket)}/{LEASE_KEY}"))


def plant(bucket: Bucket, ttl: float) -> None:
    """Write a lease held by a writer on another machine, as it would have written it."""
    holder = Holder(**FOREIGN, token="f" * 32, ttl=ttl, seq=0, expires="2000-01-01T00:00:00Z")
    bucket.server.fs().pipe_file(f"{root(bucket)}/{LEASE_KEY}", holder.to_bytes())


def wait_until_expired(bucket: Bucket, deadline: float = 15.0) -> None:
    """Poll the store until it reports the planted lease older than its ttl plus the slack."""
    store = open_lease_object(bucket.server.fs(), f"{root(bucket)}/{LEASE_KEY}")
    end = time.monotonic() + deadline
    while (seen := store.read(5.0)) is not None and seen.remaining(1.0) > 0:
        assert time.monotonic() < end, "the planted lease never expired"
        time.sleep(0.2)


def wait_for_lockederror(lease: Lease, deadline: float = 15.0) -> LockedError:
    end = time.monotonic() + deadline
    while True:
        try:
            lease.check()
        except LockedError as exc:
            return exc
        assert time.monotonic() < end, "check() never noticed the lost lease"
        time.sleep(0.1)


def test_lease_is_a_zarr_group_node_beside_the_output(s3_bucket):
    store = zarr.storage.FsspecStore.from_url(s3_bucket.url(), storage_options=s3_bucket.storage_options)
    zarr.open_group(store, mode="w").create_group("_streamacc")
    # as the writer takes it: through the zarr store's own (asynchronous) s3fs instance
    with Lease.acquire(store.fs, store.path, s3_bucket.url(), ttl=1.0) as lease:
        reader = zarr.storage.FsspecStore.from_url(
            s3_bucket.url(), storage_options=s3_bucket.storage_options, read_only=True
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            members = dict(zarr.open_group(reader, mode="r", use_consolidated=False).members(max_depth=None))
        node = members["_streamacc/lease"]
        assert isinstance(node, zarr.Group)
        fields = json.loads(node.attrs["streamacc_lease"])
        assert fields["pid"] == os.getpid() and fields["token"] == lease.token and fields["ttl"] == 1.0
        assert set(fields) >= {"host", "pid", "token", "ttl", "expires"}


@pytest.mark.slow
def test_second_writer_is_refused_while_the_first_renews(s3_bucket):
    with acquire(s3_bucket) as first:
        with pytest.raises(LockedError) as refused:
            acquire(s3_bucket)
        message = str(refused.value)
        assert f"pid {os.getpid()}" in message and "expires in" in message and "mode='resume'" in message
        assert "\n" not in message
        time.sleep(3.5)  # past ttl + slack: only renewals keep it
        first.check()
        assert stored(s3_bucket).token == first.token
        assert stored(s3_bucket).seq >= 3
        with pytest.raises(LockedError):
            acquire(s3_bucket)


@pytest.mark.slow
def test_lease_that_stopped_renewing_is_taken_over_after_it_expires(s3_bucket):
    plant(s3_bucket, ttl=0.5)
    with pytest.raises(LockedError, match="elsewhere pid 4242"):
        acquire(s3_bucket)
    wait_until_expired(s3_bucket)
    with acquire(s3_bucket) as taker:
        assert stored(s3_bucket).token == taker.token
        taker.check()


@pytest.mark.slow
def test_of_racing_takers_exactly_one_wins(s3_bucket):
    plant(s3_bucket, ttl=0.01)
    wait_until_expired(s3_bucket)
    takers = 3
    barrier = threading.Barrier(takers)
    won: list[Lease] = []
    refused: list[LockedError] = []

    def take() -> None:
        barrier.wait()
        try:
            won.append(acquire(s3_bucket))
        except LockedError as exc:
            refused.append(exc)

    threads = [threading.Thread(target=take) for _ in range(takers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(won) == 1 and len(refused) == takers - 1
        assert stored(s3_bucket).token == won[0].token
    finally:
        for lease in won:
            lease.release()


def test_check_detects_a_lease_taken_over(s3_bucket):
    lease = acquire(s3_bucket)
    plant(s3_bucket, ttl=60.0)  # someone overwrote it: the next renewal's If-Match fails
    error = wait_for_lockederror(lease)
    assert "taken over by elsewhere pid 4242" in str(error)
    lease.release()
    assert stored(s3_bucket).host == "elsewhere"  # release leaves someone else's lease alone


class FrozenClock:
    """The lease's monotonic clock, moved by the test alone: a busy machine's delays do not count."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now


def test_check_detects_a_store_unreachable_for_longer_than_the_lease(aws_credentials, seam):
    clock = FrozenClock()
    seam("store.lease_time", SimpleNamespace(monotonic=clock.monotonic, sleep=time.sleep))
    server, described = start_server()
    try:
        described.fs().mkdir("lost")
        bucket = Bucket("lost", described)
        lease = acquire(bucket, config_kwargs={"retries": {"max_attempts": 1}})
        lease.check()  # valid: no time has passed on the lease's clock since it was renewed
    finally:
        server.stop()
    clock.now += 10.0  # well past the 1 s lease: renewals since the outage all failed
    error = wait_for_lockederror(lease)
    assert "could not renew the writer lease for 10 s" in str(error) and "mode='resume'" in str(error)
    lease.release()  # the store is gone: only logs


def test_release_deletes_the_lease(s3_bucket):
    with acquire(s3_bucket):
        assert stored(s3_bucket) is not None
    assert not s3_bucket.server.fs().exists(f"{root(s3_bucket)}/{LEASE_KEY}")
    acquire(s3_bucket).release()  # free again at once


HOLDER_SCRIPT = textwrap.dedent(
    """
    import sys, time, fsspec
    from streamacc.store import Lease
    fs = fsspec.filesystem("s3", endpoint_url=sys.argv[1])
    Lease.acquire(fs, sys.argv[2], "out", ttl=1.0)
    print("held", flush=True)
    time.sleep(600)
    """
)


@pytest.mark.slow
def test_lease_of_a_killed_writer_on_this_machine_is_waited_out(s3_bucket, caplog):
    holder = Popen(
        [sys.executable, "-c", HOLDER_SCRIPT, s3_bucket.server.endpoint, root(s3_bucket)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(LockedError, match=f"pid {holder.pid}"):
            acquire(s3_bucket)  # alive: refused at once
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with caplog.at_level(logging.WARNING, logger="streamacc"), acquire(s3_bucket) as taker:
        assert stored(s3_bucket).token == taker.token
    assert f"lease of {socket.gethostname()} pid {holder.pid} (no longer running)" in caplog.text


def test_store_ignoring_conditional_writes_is_detected_and_still_refuses_a_second_writer(s3_bucket, caplog):
    with stripping_proxy(s3_bucket.server.endpoint) as endpoint:
        with caplog.at_level(logging.WARNING, logger="streamacc"):
            lease = acquire(s3_bucket, endpoint_url=endpoint)
        assert "ignores conditional writes" in caplog.text
        try:
            with pytest.raises(LockedError):
                acquire(s3_bucket, endpoint_url=endpoint)
            time.sleep(1.0)  # renewals go on without conditions
            lease.check()
        finally:
            lease.release()
    assert not s3_bucket.server.fs().exists(f"{root(s3_bucket)}/{LEASE_KEY}")


def test_memory_lease_is_exclusive_within_the_process(caplog):
    fs = fsspec.filesystem("memory")
    with caplog.at_level(logging.WARNING, logger="streamacc"):
        first = Lease.acquire(fs, "/m/out.zarr", "memory://m", ttl=1)
    with pytest.raises(LockedError, match="memory://m is being written by"):
        Lease.acquire(fs, "/m/out.zarr", "memory://m", ttl=1)
    first.release()
    assert "best effort" not in caplog.text
    Lease.acquire(fs, "/m/out.zarr", "memory://m", ttl=1).release()
    expired = Holder(**FOREIGN, token="e" * 32, ttl=1.0, seq=0, expires="2000-01-01T00:00:00Z")
    fs.pipe_file(f"/m/out.zarr/{LEASE_KEY}", expired.to_bytes())
    with Lease.acquire(fs, "/m/out.zarr", "memory://m", ttl=1) as lease:
        assert Holder.from_bytes(fs.cat_file(f"/m/out.zarr/{LEASE_KEY}")).token == lease.token


def test_lease_on_a_filesystem_without_conditional_writes_warns(tmp_path, caplog):
    fs = fsspec.filesystem("file")
    with caplog.at_level(logging.WARNING, logger="streamacc"):
        first = Lease.acquire(fs, str(tmp_path), "out", ttl=1)
    with pytest.raises(LockedError):
        Lease.acquire(fs, str(tmp_path), "out", ttl=1)
    first.release()
    assert "best effort" in caplog.text


def test_lease_seconds_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(LEASE_ENV, raising=False)
    assert lease_seconds() == 60.0
    monkeypatch.setenv(LEASE_ENV, "1.5")
    assert lease_seconds() == 1.5
    for bad in ("soon", "0", "-3", "inf", "nan"):
        monkeypatch.setenv(LEASE_ENV, bad)
        with pytest.raises(InputError, match=f"{LEASE_ENV}='{bad}' is not a positive number of seconds"):
            lease_seconds()
    for short in ("0.01", "0.99"):  # a writer would lose such a lease before it could renew it over a network
        monkeypatch.setenv(LEASE_ENV, short)
        with pytest.raises(InputError, match=f"{LEASE_ENV}='{short}' is shorter than 1 s, too short to renew"):
            lease_seconds()
