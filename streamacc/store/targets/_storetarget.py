"""An output in any zarr store other than a local folder: an fsspec URL (``s3://``, ``memory://``) or a store object.

A write counts as durable once the store call returns, since an object-store PUT is
atomic; the output is locked by a lease object where the store supports conditional
writes (see ``lease/``), and by a lock of this process for a store that lives in it.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from ...errors import LockedError
from ._target import LEASE_KEY, Target, sync

if TYPE_CHECKING:
    from zarr.abc.store import Store

__all__ = ["StoreTarget"]

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
        from ..lease import FencedStore

        self.raw = store
        self.store = store if store.read_only else FencedStore(store, self.check_lock)
        self.label = label
        self.storage_options = storage_options
        self._lease: Any = None
        if follow is not None and _on_filesystem(store):
            from ..lease import LeaseView

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
        from ..lease import lease_seconds, open_lease_store

        seen = open_lease_store(self.raw.fs, f"{self.raw.path.rstrip('/')}/{LEASE_KEY}").read(10.0)
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
        from ..lease import Lease

        self._lease = Lease.acquire(self.raw.fs, self.raw.path, self.label, command=command)
        try:
            self._connect()
            yield
        finally:
            lease, self._lease = self._lease, None
            lease.release()

    def _connect(self) -> None:
        """On S3, hook the client now, so that even the first write request is fenced as it is sent."""
        from ..lease import FencedStore

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
