"""An object store that stops answering: the writer stops once its lease cannot be renewed in time.

The store is moto's S3 server behind a relay that, when frozen, keeps every connection
open and passes no byte either way (a server paused, a network that drops packets). The
writer then waits on requests that never end and on renewals that time out; once its
lease has gone unrenewed for three quarters of its time, it stops with the one line the
object-storage guide promises (``could not renew the writer lease for N s``), instead of
waiting as long as the store is down. Once the store answers again, ``--resume``
finishes the output, object for object the run never interrupted.

Before: the writer stayed blocked as long as the store was down (400 s with a 6 s lease,
ending only when the store came back).
"""

from __future__ import annotations

import contextlib
import io
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from streamacc.cli import main
from streamacc.store.lease._lease import LEASE_KEY
from streamacc.store.lease._leasestore import open_lease_store

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

ARGS = ["--size", "4000", "--block-size", "512", "--codec", "none", "--summary-windows", "512", "--no-progress"]


class Relay:
    """A TCP relay on 127.0.0.1 in front of ``endpoint``; :attr:`frozen` set, it passes nothing on."""

    def __init__(self, endpoint: str) -> None:
        target = urlsplit(endpoint)
        self.upstream = (target.hostname, target.port)
        self.frozen = threading.Event()
        self.thawed = threading.Event()
        self.server = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.server.accept()
                upstream = socket.create_connection(self.upstream)
                self._sockets += [client, upstream]
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                if self.frozen.is_set():
                    self.thawed.wait()
                b.sendall(data)
        with contextlib.suppress(OSError):
            b.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.thawed.set()
        self.server.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


@pytest.fixture
def relay(s3_server) -> Iterator[Relay]:
    relay = Relay(s3_server.endpoint)
    try:
        yield relay
    finally:
        relay.close()


@pytest.mark.slow
def test_a_writer_whose_store_stops_answering_stops_when_its_lease_runs_out(s3_bucket, relay, monkeypatch):
    from streamacc.run.output import Output

    monkeypatch.setenv("STREAMACC_LEASE_SECONDS", "1")
    url, root = s3_bucket.url("out.zarr"), f"{s3_bucket.name}/out.zarr"
    fs = s3_bucket.server.fs()
    result: list[tuple[int, str, float]] = []
    commit = Output.commit

    def commit_then_freeze(self, *results):  # the store stops answering once three blocks are committed
        commit(self, *results)
        if self.manifest.committed_blocks == 3:
            relay.frozen.set()

    monkeypatch.setattr(Output, "commit", commit_then_freeze)

    def writer() -> None:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["write", url, *ARGS, "--storage-option", f"endpoint_url={relay.endpoint}"])
        result.append((code, err.getvalue(), time.monotonic()))

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    assert relay.frozen.wait(120), result
    frozen_at = time.monotonic()
    thread.join(60)  # the store does not answer again before the writer ends, nor for a minute
    stopped_after = time.monotonic() - frozen_at
    relay.thawed.set()
    monkeypatch.setattr(Output, "commit", commit)
    assert result, f"the writer was still waiting for the store {stopped_after:.0f} s after it stopped answering"
    code, err, _ = result[0]
    assert code == 1 and err.count("\n") == 1, err
    assert "could not renew the writer lease for" in err and "rerun with --resume once the store is reachable" in err
    store = open_lease_store(fs, f"{root}/{LEASE_KEY}")  # left to expire: the writer is this process, still alive
    deadline = time.monotonic() + 30
    while (seen := store.read(5.0)) is not None and seen.remaining(1.0) > 0:
        assert time.monotonic() < deadline, "the lease never expired"
        time.sleep(0.2)
    options = ["--storage-option", f"endpoint_url={s3_bucket.server.endpoint}"]
    assert main(["write", url, *ARGS, *options, "--resume"]) == 0
    assert main(["verify", url, *options, "--blocks", "2"]) == 0
