"""Which failures count as the store failing, provoked for real: a stopped S3 server, a server
that hangs up, one that denies access, a missing bucket."""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import zarr
from helpers import start_server
from zarr.storage import FsspecStore

from streamacc.errors import InputError, LockedError, StoreError
from streamacc.store import describe_store_failure, is_store_failure

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

ONE_TRY = {"config_kwargs": {"retries": {"max_attempts": 1}}}
"""botocore retries a refused connection for about 6 s by default; once is enough here."""


@pytest.fixture
def s3fs_tries_once(monkeypatch):
    """s3fs retries a dropped connection 5 times itself (a class setting, no storage option)."""
    import s3fs

    monkeypatch.setattr(s3fs.S3FileSystem, "retries", 1)


def raised(action: Callable[[], object]) -> BaseException:
    with pytest.raises(Exception) as info:  # the point is to see which class comes out
        action()
    return info.value


@contextlib.contextmanager
def raw_server(reply: Callable[[socket.socket], None]) -> Iterator[str]:
    """A TCP server on 127.0.0.1 answering every connection with ``reply``; yields its URL."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)  # so that the loop sees ``stop``: closing does not wake accept()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                conn, _ = listener.accept()
                conn.settimeout(10)
                with conn:
                    reply(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()


def write_group(url: str, **storage_options: object) -> zarr.Array:
    store = FsspecStore.from_url(url, storage_options=storage_options)
    return zarr.open_group(store, mode="w").create_array("x", shape=(8,), chunks=(4,), dtype="f8")


def test_a_server_that_stopped_mid_write_raises_a_non_oserror_store_failure(aws_credentials):
    server, described = start_server()
    try:
        described.fs().mkdir("dying")
        array = write_group("s3://dying/out.zarr", endpoint_url=described.endpoint, **ONE_TRY)
        array[:4] = np.ones(4)
    finally:
        server.stop()
    error = raised(lambda: array.__setitem__(slice(4, 8), np.ones(4)))
    assert not isinstance(error, OSError)  # botocore's EndpointConnectionError: why this module exists
    assert is_store_failure(error)
    description = describe_store_failure(error)
    assert (
        description.startswith("Could not connect to the endpoint URL") and "(EndpointConnectionError)" in description
    )
    assert described.endpoint in description


def test_a_server_that_hangs_up_is_a_store_failure(aws_credentials, s3fs_tries_once):
    def hang_up(conn: socket.socket) -> None:
        conn.recv(1024)

    with raw_server(hang_up) as endpoint:
        error = raised(lambda: write_group("s3://bucket/out.zarr", endpoint_url=endpoint, **ONE_TRY))
    assert is_store_failure(error), repr(error)


def test_access_denied_is_a_store_failure(aws_credentials, s3fs_tries_once):
    body = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"

    def deny(conn: socket.socket) -> None:
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    with raw_server(deny) as endpoint:
        error = raised(lambda: write_group("s3://bucket/out.zarr", endpoint_url=endpoint, **ONE_TRY))
    assert isinstance(error, PermissionError) and is_store_failure(error)
    assert describe_store_failure(error) == "Access Denied"


def test_a_missing_bucket_is_a_store_failure(s3_server):
    error = raised(lambda: write_group("s3://no-such-bucket/out.zarr", **s3_server.storage_options))
    assert isinstance(error, FileNotFoundError) and is_store_failure(error)
    assert describe_store_failure(error) == "The specified bucket does not exist"


def test_bugs_inputs_and_streamaccs_own_errors_are_not_store_failures():
    for error in (ValueError("bad"), TypeError("bug"), KeyboardInterrupt(), InputError("x"), LockedError("held")):
        assert not is_store_failure(error), error
    assert isinstance(LockedError("held"), StoreError)  # even the store-related ones carry their own message


def test_a_group_is_a_store_failure_only_if_all_of_it_is():
    disk_full = OSError(errno.ENOSPC, "No space left on device")
    assert is_store_failure(ExceptionGroup("writes", [disk_full, ConnectionResetError()]))
    assert not is_store_failure(ExceptionGroup("writes", [disk_full, ValueError("bug")]))


def test_description_is_one_short_line():
    assert describe_store_failure(OSError(errno.ENOSPC, "No space left on device")) == "No space left on device"
    assert describe_store_failure(TimeoutError()) == "TimeoutError"
    long = describe_store_failure(OSError("line one\n" + "x" * 500))
    assert "\n" not in long and len(long) == 200 and long.startswith("line one x")
