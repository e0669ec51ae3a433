"""An object store that stops answering: the writer stops once its lease cannot be renewed in time.

The store is moto's S3 server behind a relay that, when frozen, keeps every connection
open and passes no byte either way (a server paused, a network that drops packets). The
writer then waits on requests that never end and on renewals that time out; once its
lease has gone unrenewed for three quarters of its time, it stops with the one line the
object-storage guide promises (``could not renew the writer lease for N s``), instead of
waiting as long as the store is down. Once the store answers again, ``--resume``
finishes the output, object for object the run never interrupted. A writer that waited
for the store instead would hold its command for as long as the store is down.
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

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

ARGS = ["--size", "4000", "--block-size", "512", "--codec", "none", "--summary-windows", "512", "--no-progress"]


class Relay:
    """A TCP relay on 127.0.0.1 in front of ``endpoint``; :attr:`frozen` set, it passes nothing on. It sets
    :attr:`frozen` itself once a request carries :attr:`freeze_on` (a key of the request line)."""

    def __init__(self, endpoint: str) -> None:
        target = urlsplit(endpoint)
        self.upstream = (target.hostname, target.port)
        self.freeze_on: bytes | None = None
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
                if self.freeze_on is not None and self.freeze_on in data:
                    self.frozen.set()
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
    monkeypatch.setenv("STREAMACC_LEASE_SECONDS", "1")
    url = s3_bucket.url("out.zarr")
    relay.freeze_on = b"/out.zarr/x/c/4 "  # the store stops answering as the fifth block's chunk is sent
    result: list[tuple[int, str]] = []

    def writer() -> None:
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["write", url, *ARGS, "--storage-option", f"endpoint_url={relay.endpoint}"])
        result.append((code, err.getvalue()))

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    assert relay.frozen.wait(120), result
    frozen_at = time.monotonic()
    thread.join(60)  # the store does not answer again before the writer ends, nor for a minute
    stopped_after = time.monotonic() - frozen_at
    relay.thawed.set()
    assert result, f"the writer was still waiting for the store {stopped_after:.0f} s after it stopped answering"
    code, err = result[0]
    assert code == 1 and err.count("\n") == 1, err
    assert "could not renew the writer lease for" in err and "rerun with --resume once the store is reachable" in err
    options = ["--storage-option", f"endpoint_url={s3_bucket.server.endpoint}"]
    deadline = time.monotonic() + 30
    while True:  # the lease is left to expire: the writer is this process, still alive
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(["write", url, *ARGS, *options, "--resume"])
        if code == 0 or "is being written by" not in err.getvalue() or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert code == 0, err.getvalue()
    assert main(["verify", url, *options, "--blocks", "2"]) == 0
