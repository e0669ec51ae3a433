"""A real S3 endpoint for the tests: moto's server on 127.0.0.1, started once per session.

Tests talk to it through s3fs and zarr exactly as a user talks to AWS: only the endpoint
differs, and it is passed the way a user passes it (``storage_options={"endpoint_url":
...}``, ``--storage-option endpoint_url=...``), never through a process-wide setting, so a
code path that forgets to forward storage options fails here as it would for a user.
Dummy credentials go into the environment, where botocore looks for them first, and so
reach subprocesses (the CLI, cluster workers) too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from streamacc.store._sessions import close_store_sessions

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
"""Environment for every test process: dummy keys, and no profile or metadata service."""

CLEARED = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
"""Variables that would route requests elsewhere or sign them with someone's real session."""


@dataclass(frozen=True)
class S3Server:
    """A running moto S3 server."""

    endpoint: str
    """``http://127.0.0.1:PORT``."""

    @property
    def storage_options(self) -> dict[str, Any]:
        """What a user passes to reach this endpoint (s3fs keyword arguments)."""
        return {"endpoint_url": self.endpoint}

    def fs(self) -> Any:
        """A synchronous s3fs filesystem on this endpoint (fsspec caches one per endpoint)."""
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options)


@dataclass(frozen=True)
class Bucket:
    """A fresh, empty bucket on the test server."""

    name: str
    server: S3Server

    @property
    def storage_options(self) -> dict[str, Any]:
        return self.server.storage_options

    def url(self, key: str = "out.zarr") -> str:
        """``s3://bucket/key``."""
        return f"s3://{self.name}/{key}"

    def keys(self) -> list[str]:
        """Every key stored in the bucket, relative to it, sorted."""
        fs = self.server.fs()
        fs.invalidate_cache()
        return sorted(path.split("/", 1)[1] for path in fs.find(self.name))


def start_server() -> tuple[Any, S3Server]:
    """Start a moto server on a free loopback port; return it and its description."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, S3Server(f"http://{host}:{port}")


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
    server, described = start_server()
    try:
        yield described
    finally:
        close_store_sessions()
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> Iterator[Bucket]:
    """A new bucket for one test, emptied and removed afterwards."""
    fs = s3_server.fs()
    bucket = Bucket(f"test-{uuid.uuid4().hex[:16]}", s3_server)
    fs.mkdir(bucket.name)
    try:
        yield bucket
    finally:
        with contextlib.suppress(Exception):
            fs.rm(bucket.name, recursive=True)
        fs.invalidate_cache()


@contextlib.contextmanager
def stripping_proxy(
    endpoint: str, strip: tuple[str, ...] = ("if-match", "if-none-match"), seen: list[str] | None = None
) -> Iterator[str]:
    """An HTTP proxy on 127.0.0.1 in front of ``endpoint`` that drops the ``strip`` request headers.

    It plays an S3-compatible store that ignores conditional writes. Yields its endpoint URL.
    Each request's method is appended to ``seen``, if given, to count what a command asks.
    """
    import http.client
    import http.server
    import threading
    from urllib.parse import urlsplit

    target = urlsplit(endpoint)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            if seen is not None:
                seen.append(self.command)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            drop = {*strip, "expect", "host", "connection"}
            headers = {k: v for k, v in self.headers.items() if k.lower() not in drop}
            upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
            try:
                upstream.request(self.command, self.path, body=body, headers=headers)
                reply = upstream.getresponse()
                data = reply.read()
            finally:
                upstream.close()
            self.send_response(reply.status)
            for key, value in reply.getheaders():
                if key.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date"):
                    self.send_header(key, value)
            head = self.command == "HEAD"
            self.send_header("Content-Length", reply.getheader("Content-Length", "0") if head else str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
