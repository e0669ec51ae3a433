"""Fenced writes (a writer that may have lost its lease writes nothing more to the store), and which exceptions
mean that a store failed.

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

A store that stops answering holds a request as long as it is down (the client's
timeouts and retries add up to minutes), and the writer with it. So every request made
through :class:`FencedStore`, reads too, is awaited a fraction of a second at a time, the
fence asked between: once the lease cannot be renewed within its time the request is
abandoned and the writer stops with the lease's own one-line error. A read whose store
answers is never cut short, whatever the lease (a failed writer reads the manifest back
to say what is kept).

Which exceptions mean "the store failed" decides the writer's "N of M steps committed" message
and the lease's own refusals. A local disk reports failures as :class:`OSError`, and s3fs translates the S3 errors it
understands into ``OSError`` subclasses too (``FileNotFoundError`` for a missing bucket,
``PermissionError`` for a denied request, ``FileExistsError`` for a failed
``If-None-Match``). But an unreachable or dying endpoint reaches the caller untranslated:
botocore's ``EndpointConnectionError`` and ``ConnectionClosedError`` derive from
``BotoCoreError``, a plain ``Exception``; an error code s3fs does not know stays a
``ClientError``; and aiohttp's ``ClientError`` family is ``Exception`` too, except
``ClientOSError``. Other fsspec backends raise their HTTP libraries' own classes.

Classes are recognised only from modules already imported: an exception cannot be an
instance of a class that was never loaded, so nothing is imported here to check.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import sys
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, Store
from zarr.storage import WrapperStore

__all__ = ["FencedStore", "describe_store_failure", "is_store_failure", "unwrap"]


_FOREIGN_FAILURES = (
    ("botocore.exceptions", "BotoCoreError"),  # EndpointConnectionError, ReadTimeoutError, NoCredentialsError...
    ("botocore.exceptions", "ClientError"),  # a service error s3fs did not translate
    ("aiohttp", "ClientError"),  # ServerDisconnectedError, ClientPayloadError...
    ("urllib3.exceptions", "HTTPError"),
    ("gcsfs.retry", "HttpError"),
    ("azure.core.exceptions", "AzureError"),
)
"""(module, class) of failures that are not OSErrors, by the library that raises them."""


def _foreign_classes() -> tuple[type[BaseException], ...]:
    found = []
    for module_name, class_name in _FOREIGN_FAILURES:
        cls = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            found.append(cls)
    return tuple(found)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def is_store_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the store failing (I/O, network, service, permissions), not a bug or an input.

    streamacc's own errors are not: they already carry their message. An exception group
    is a store failure when every exception in it is.
    """
    from ..errors import StreamaccError

    leaves = _leaves(exc)
    foreign = _foreign_classes()
    return all(not isinstance(leaf, StreamaccError) and isinstance(leaf, (OSError, *foreign)) for leaf in leaves)


def describe_store_failure(exc: BaseException, *, limit: int = 200) -> str:
    """One line saying what went wrong, for inside a sentence: the message, then the class if not built in.

    E.g. ``No space left on device``, ``Is a directory: /data/out.zarr/x/c/7``, ``Could not connect to the endpoint URL:
    "http://127.0.0.1:9000/bucket/out.zarr/zarr.json" (EndpointConnectionError)``.
    """
    exc = _leaves(exc)[0]
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    named = (exc.filename2 or exc.filename) if isinstance(exc, OSError) and exc.strerror else None
    if named:  # the file it failed on (of a rename, the one it would replace)
        text = f"{text}: {os.fsdecode(named)}"
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    name = type(exc).__name__
    if not text:
        return name
    return text if type(exc).__module__ == "builtins" else f"{text} ({name})"


_T = TypeVar("_T")


Fence = Callable[[], None]
"""Raises LockedError when the writer may no longer write; returns quickly otherwise."""

POLL_SECONDS = 0.25
"""How often a request still waiting for its store asks the fence whether the writer may go on waiting."""

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

    FORWARDED: frozenset[str] = frozenset()
    """What it leaves to the store inside: nothing, every request is fenced or bounded."""

    def __init__(self, store: Store, fence: Fence) -> None:
        super().__init__(store)
        self._fence = fence
        self._fs = getattr(store, "fs", None) if hasattr(getattr(store, "fs", None), "_call_s3") else None

    def _with_store(self, store: Store) -> FencedStore:
        return type(self)(store, self._fence)

    @classmethod
    async def open(cls, store_cls: type[Store], *args: Any, **kwargs: Any) -> FencedStore:
        """``store_cls(*args, **kwargs)`` opened and fenced by the keyword argument ``fence`` (as zarr's
        ``WrapperStore.open`` opens a wrapper, which builds it from the store alone)."""
        fence = kwargs.pop("fence")
        store = store_cls(*args, **kwargs)
        await store._open()
        return cls(store, fence)

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

    async def _bounded(self, call: Awaitable[_T]) -> _T:
        """``call`` awaited while the fence holds: abandoned (LockedError) once the store's silence cost the lease."""
        task = asyncio.ensure_future(call)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=POLL_SECONDS)
                if done:
                    return task.result()
                self._fence()
        finally:
            if not task.done():
                task.cancel()

    async def _write(self, call: Callable[[], Awaitable[_T]]) -> _T:
        with self._fenced():
            return await self._bounded(call())  # the task made here carries the fence to its requests

    async def set(self, key: str, value: Buffer) -> None:
        await self._write(lambda: self._store.set(key, value))

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        await self._write(lambda: self._store.set_if_not_exists(key, value))

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        await self._write(lambda: self._store._set_many(values))

    async def delete(self, key: str) -> None:
        await self._write(lambda: self._store.delete(key))

    async def delete_dir(self, prefix: str) -> None:
        await self._write(lambda: self._store.delete_dir(prefix))

    async def clear(self) -> None:
        await self._write(lambda: self._store.clear())

    # reads: bounded by the lease too, never refused by it
    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        return await self._bounded(self._store.get(key, prototype, byte_range))

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return await self._bounded(self._store.get_partial_values(prototype, key_ranges))

    async def exists(self, key: str) -> bool:
        return await self._bounded(self._store.exists(key))

    async def is_empty(self, prefix: str) -> bool:
        return await self._bounded(self._store.is_empty(prefix))

    async def _listed(self, listing: AsyncIterator[str]) -> list[str]:
        async def collect() -> list[str]:
            return [key async for key in listing]

        return await self._bounded(collect())

    async def list(self) -> AsyncIterator[str]:
        for key in await self._listed(self._store.list()):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in await self._listed(self._store.list_prefix(prefix)):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        for key in await self._listed(self._store.list_dir(prefix)):
            yield key

    _get_many = Store._get_many  # each request through this store's own get, bounded

    async def connect(self) -> None:
        """Create the S3 client now and hook it, so that even the first request is fenced as it is sent."""
        if self._fs is not None:
            await self._fs.set_session()
            _hook(self._fs)

    # forwarded, not inherited: Store's defaults would read whole objects to learn their size
    async def getsize(self, key: str) -> int:
        return await self._bounded(self._store.getsize(key))

    async def getsize_prefix(self, prefix: str) -> int:
        return await self._bounded(self._store.getsize_prefix(prefix))

    @property
    def supports_consolidated_metadata(self) -> bool:
        return self._store.supports_consolidated_metadata
