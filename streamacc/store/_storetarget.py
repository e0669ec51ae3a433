"""An output in any zarr store other than a local folder: an fsspec URL (``s3://``, ``memory://``) or a store
object, and an object store's fsspec clients at either end of a process.

A write counts as durable once the store call returns, since an object-store PUT is
atomic; the output is locked by a lease object where the store supports conditional
writes (``_lease``), and by a lock of this process for a store that lives in it.

The first question asked of an object store: is it there, and do its options make sense?
Asked once per store and process before anything else, so that a wrong bucket, an option the
backend does not take, an endpoint nobody answers at or a backend that is not installed fails
at once, in one line that says what to fix, instead of deep inside a write with the client
library's own words (``TypeError: AioSession.__init__() got an unexpected keyword
argument``) after its retries. On S3 the question is one HEAD of the bucket, asked with two
attempts and a short connect timeout whatever the store itself later uses.

The last: s3fs keeps one aiohttp session per cached filesystem. It closes a synchronous
instance's session when the instance is collected, but not an asynchronous one's (the
kind zarr's ``FsspecStore`` makes), and a session collected open prints ``Unclosed client
session``. A cluster worker that read or wrote S3 prints that when it shuts down, so
workers (and test sessions) call :func:`close_store_sessions` first.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from ..errors import InputError, LockedError, NoOutputError, StoreError, arg, one_line
from ._fence import describe_store_failure, is_store_failure
from ._target import LEASE_KEY, Target, sync

if TYPE_CHECKING:
    from zarr.abc.store import Store

__all__ = ["StoreTarget", "backend_missing", "check_store", "close_store_sessions"]


PROBE_CONFIG = {"retries": {"max_attempts": 2, "mode": "standard"}, "connect_timeout": 5}
"""botocore settings of the probe alone: a dead endpoint answers within seconds, not after every retry."""

_asked: set[str] = set()


S3_EXTRA = "pip install 'streamacc[s3]'"
"""What S3 needs, fsspec and s3fs, as the other extras are named."""


def backend_missing(url: str) -> StoreError:
    """The error for a URL whose fsspec backend is not installed, naming the package (or the extra) to install."""
    protocol = url.split("://", 1)[0]
    if protocol in ("s3", "s3a"):
        return StoreError(
            f"cannot open {url!r}: S3 is opened through s3fs and fsspec (the s3 extra), not installed here; {S3_EXTRA}"
        )
    try:
        from fsspec.registry import known_implementations
    except ImportError:
        return StoreError(
            f"cannot open {url!r}: URLs are opened through fsspec, which is not installed; {S3_EXTRA} for S3, or "
            f"pip install fsspec and the backend for {protocol}://"
        )
    known = known_implementations.get(protocol, {})
    package = str(known.get("class", "")).split(".", 1)[0]
    fix = f"pip install {package}" if package else "install the fsspec backend for it"
    return StoreError(f"cannot open {url!r}: no fsspec backend for {protocol}:// is installed; {fix}")


def _bad_option(url: str, exc: TypeError) -> InputError:
    found = re.search(r"keyword argument '(\w+)'", str(exc))
    name = f" {found.group(1)!r}" if found else ""
    return InputError(
        f"the storage option{name} is not one that the backend of {url} takes ({one_line(exc)}); "
        f"check {arg('storage_options')}"
    )


def _head_bucket(fs: Any, bucket: str, storage_options: dict[str, Any] | None) -> bool | None:
    """Whether an S3 bucket exists: True, False (it does not), or None (not allowed to ask)."""
    options = dict(storage_options or {})
    options["config_kwargs"] = {**options.get("config_kwargs", {}), **PROBE_CONFIG}
    options["skip_instance_cache"] = True  # a probe of its own, whatever the caller's caching
    probe = type(fs)(**options)
    probe.retries = 1
    try:
        probe.call_s3("head_bucket", Bucket=bucket)
    except FileNotFoundError:
        return False
    except PermissionError:
        return None  # a policy may allow writing objects without listing the bucket
    return True


def check_store(store: Any, url: str, storage_options: dict[str, Any] | None) -> None:
    """Ask the zarr ``FsspecStore`` at ``url`` whether its bucket exists, refusing with the fix otherwise."""
    fs = store.fs
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    bucket = store.path.split("/", 1)[0]
    key = json.dumps([protocol, bucket, storage_options], sort_keys=True, default=repr)
    if key in _asked or protocol not in ("s3", "s3a"):
        return
    try:
        found = _head_bucket(fs, bucket, storage_options)
    except TypeError as exc:
        raise _bad_option(url, exc) from None
    except Exception as exc:
        if not is_store_failure(exc):
            raise
        raise StoreError(
            f"cannot reach {url} ({describe_store_failure(exc)}); check the endpoint and credentials in "
            f"{arg('storage_options')} (and the environment), and the network"
        ) from None
    if found is False:
        raise NoOutputError(f"the bucket {bucket!r} of {url} does not exist; check the URL, or create the bucket first")
    _asked.add(key)


def close_store_sessions() -> int:
    """Close every cached s3fs instance's session and forget the instances; return how many were open."""
    s3fs = sys.modules.get("s3fs")
    if s3fs is None:
        return 0
    closed = 0
    for fs in list(s3fs.S3FileSystem._cache.values()):
        creator = getattr(fs, "_s3creator", None)
        if creator is None:
            continue
        with contextlib.suppress(Exception):
            if fs.asynchronous:  # zarr's instances: their session lives on zarr's event loop
                from ._zarrapi import sync

                sync(creator.__aexit__(None, None, None))
            else:
                s3fs.S3FileSystem.close_session(fs.loop, creator)
            closed += 1
        fs._s3 = fs._s3creator = None
    s3fs.S3FileSystem.clear_instance_cache()
    return closed


_memory_locks: dict[str, threading.Lock] = {}


class _OnFilesystem(Protocol):
    """A store on an fsspec filesystem: a zarr ``FsspecStore``, or a wrapper that passes its attributes on."""

    fs: Any
    path: str


def _on_filesystem(store: object) -> TypeGuard[_OnFilesystem]:
    return getattr(store, "fs", None) is not None


class StoreTarget(Target):
    """An output in any other zarr store: an fsspec URL (``s3://``, ``memory://``) or a store object.

    Every write and delete through :attr:`store` is fenced by the lease (``_fence.py``): once
    the lease may be lost, nothing more reaches the store.
    """

    def __init__(
        self, store: Store, label: str, storage_options: dict[str, Any] | None = None, *, follow: str | None = None
    ) -> None:
        """``follow``: write for the writer holding that lease (a cluster worker), fenced by it."""
        from ._fence import FencedStore

        self.raw = store
        self.store = store if store.read_only else FencedStore(store, self.check_lock)
        self.label = label
        self.storage_options = storage_options
        self._lease: Any = None
        if follow is not None and _on_filesystem(store):
            from ._lease import LeaseView

            self._lease = LeaseView.follow(store.fs, store.path, label, follow)
            self._connect()

    @property
    def lease_token(self) -> str | None:
        """The token of the lease this writer holds (None without one)."""
        return getattr(self._lease, "token", None)

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """One listing of an fsspec store (S3 returns sizes with its keys), not one request per key."""
        fs, root = getattr(self.raw, "fs", None), getattr(self.raw, "path", "")
        if fs is None or not getattr(fs, "async_impl", False):
            return super().sizes(prefix)
        base = f"{root.rstrip('/')}/{prefix}".rstrip("/") if root else prefix.rstrip("/")
        found = sync(fs._find(base, detail=True))
        cut = len(root.rstrip("/")) + 1 if root else 0
        return {path[cut:]: int(info.get("size") or 0) for path, info in found.items() if info.get("type") == "file"}

    def check_lock(self) -> None:
        if self._lease is not None:
            self._lease.check()

    def writer(self) -> str | None:
        if not _on_filesystem(self.raw):
            lock = _memory_locks.get(self.label)
            return "this process" if lock is not None and lock.locked() else None
        from ._lease import lease_seconds
        from ._leaseobject import open_lease_object

        seen = open_lease_object(self.raw.fs, f"{self.raw.path.rstrip('/')}/{LEASE_KEY}").read(10.0)
        if seen is None or seen.holder is None or seen.remaining(lease_seconds()) <= 0:
            return None
        return str(seen.holder)

    @contextlib.contextmanager
    def lock(self, command: str) -> Iterator[None]:
        """A lease object for fsspec stores (conditional writes where the store has them), else a process lock."""
        if not _on_filesystem(self.raw):
            with self._process_lock(command):
                yield
            return
        from ._lease import Lease

        self._lease = Lease.acquire(self.raw.fs, self.raw.path, self.label, command=command)
        try:
            self._connect()
            yield
        finally:
            lease, self._lease = self._lease, None
            lease.release()

    def _connect(self) -> None:
        """On S3, hook the client now, so that even the first write request is fenced as it is sent."""
        from ._fence import FencedStore

        if isinstance(self.store, FencedStore):
            sync(self.store.connect())

    @contextlib.contextmanager
    def _process_lock(self, command: str) -> Iterator[None]:
        """A store object that lives in this process only: a lock of this process suffices."""
        lock = _memory_locks.setdefault(self.label, threading.Lock())
        if not lock.acquire(blocking=False):
            raise LockedError(
                f"{self.label} is being written by this process; wait for it to finish, then rerun with {command}"
            )
        try:
            yield
        finally:
            lock.release()
