"""Fenced writes: a writer that may have lost its lease writes nothing more to the store.

An object store has no lock that dies with its holder, only the lease (``_lease.py``),
which another writer may take over once it expires. A writer paused past its lease (a
stopped process, a frozen VM, a dead network) must not wake up and write into an output
another writer now owns. So every mutating request first asks the lease whether it
still has at least its safety margin left (``Lease.check``: no I/O, a comparison with
the monotonic clock), and raises :class:`LockedError` instead of writing once it may not.

The check runs twice for each request: :class:`FencedStore` asks before zarr's store
method starts (every chunk, record, manifest, root and array metadata write, every
delete), and on S3 botocore's ``before-send`` hook asks again microseconds before the
request's bytes leave, for each of the retries s3fs and botocore make after a failure
(which may come many seconds later, after back-offs). The hook finds the fence of the
store call that made the request in a context variable, which asyncio carries into every
task that call runs, so one s3fs client shared by several outputs fences each request
by its own writer's lease.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from zarr.abc.store import Store
from zarr.core.buffer import Buffer
from zarr.storage import WrapperStore

__all__ = ["FencedStore", "unwrap"]

Fence = Callable[[], None]
"""Raises LockedError when the writer may no longer write; returns quickly otherwise."""

_FENCE: contextvars.ContextVar[Fence | None] = contextvars.ContextVar("streamacc_fence", default=None)
_HOOKED: weakref.WeakSet[Any] = weakref.WeakSet()  # botocore clients whose requests pass the hook
_WRITES = ("PutObject", "DeleteObject", "DeleteObjects", "CopyObject", "CreateMultipartUpload", "UploadPart",
           "UploadPartCopy", "CompleteMultipartUpload")  # fmt: skip


def unwrap(store: Store) -> Store:
    """The store a :class:`FencedStore` wraps (any other store itself)."""
    return store._store if isinstance(store, FencedStore) else store


def _before_send(**kwargs: Any) -> None:
    fence = _FENCE.get()
    if fence is not None:
        fence()


def _hook(fs: Any) -> None:
    """Make the S3 client of ``fs`` (s3fs) call the current fence before each write request it sends."""
    client = getattr(fs, "_s3", None)
    if client is None or client in _HOOKED:
        return
    for operation in _WRITES:
        client.meta.events.register(f"before-send.s3.{operation}", _before_send, unique_id=f"streamacc-{operation}")
    _HOOKED.add(client)


class FencedStore(WrapperStore[Store]):
    """A zarr store whose every write and delete first calls ``fence()``; reads pass straight through.

    On an s3fs-backed store each write request is fenced once more as it is sent (see the
    module's docstring).
    """

    def __init__(self, store: Store, fence: Fence) -> None:
        super().__init__(store)
        self._fence = fence
        self._fs = getattr(store, "fs", None) if hasattr(getattr(store, "fs", None), "_call_s3") else None

    def _with_store(self, store: Store) -> FencedStore:
        return type(self)(store, self._fence)

    def __eq__(self, value: object) -> bool:
        return isinstance(value, FencedStore) and self._store == value._store

    def __hash__(self) -> int:
        return hash(id(self))

    def __str__(self) -> str:
        return str(self._store)

    @contextlib.contextmanager
    def _fenced(self) -> Iterator[None]:
        """Check the fence, and make it the fence of every request the store call makes meanwhile."""
        self._fence()
        if self._fs is not None:
            _hook(self._fs)  # a client s3fs made afresh (after idle connections closed) is hooked here
        token = _FENCE.set(self._fence)
        try:
            yield
        finally:
            _FENCE.reset(token)

    async def set(self, key: str, value: Buffer) -> None:
        with self._fenced():
            await self._store.set(key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        with self._fenced():
            await self._store.set_if_not_exists(key, value)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        with self._fenced():
            await self._store._set_many(values)

    async def delete(self, key: str) -> None:
        with self._fenced():
            await self._store.delete(key)

    async def delete_dir(self, prefix: str) -> None:
        with self._fenced():
            await self._store.delete_dir(prefix)

    async def clear(self) -> None:
        with self._fenced():
            await self._store.clear()

    async def connect(self) -> None:
        """Create the S3 client now and hook it, so that even the first request is fenced as it is sent."""
        if self._fs is not None:
            await self._fs.set_session()
            _hook(self._fs)

    # forwarded, not inherited: Store's defaults would read whole objects to learn their size
    async def getsize(self, key: str) -> int:
        return await self._store.getsize(key)

    async def getsize_prefix(self, prefix: str) -> int:
        return await self._store.getsize_prefix(prefix)

    @property
    def supports_consolidated_metadata(self) -> bool:
        return self._store.supports_consolidated_metadata
