"""The zarr store of an Icechunk writer: the writable session of the moment, which each commit replaces.

Every request goes to the session current when it starts, and a commit waits until none
is in flight (:meth:`SessionStore.quiet`). A session keeps what it is given in memory
until it commits, and nothing of it is durable before, so the store holds the group
documents it is given (streamacc's manifest and block records, rewritten after every
block) and passes only the last of each to the session, just before the commit. The
commit holds the same bytes, and a block's commit, which every later block waits for,
never waits for a request to cross to zarr's event loop and Icechunk's threads and back,
which takes long while the writer threads hold the GIL. A read of a held document
returns it; any other request that could see or change it passes the held documents on
first.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, Store
from zarr.buffer import default_buffer_prototype
from zarr.storage import WrapperStore

from ._zarrapi import sync

__all__ = ["SessionStore"]

_GROUP = re.compile(rb'\{\s*"zarr_format"\s*:\s*3\s*,\s*"node_type"\s*:\s*"group"\s*,')
"""How a group's ``zarr.json`` written by streamacc starts (``group_node``'s key order)."""


def _group_document(key: str, head: bytes) -> bool:
    return (key == "zarr.json" or key.endswith("/zarr.json")) and _GROUP.match(head) is not None


class SessionStore(WrapperStore[Store]):
    """The store of the writable session of the moment, which a commit replaces.

    Each request goes to the session current when it starts; :meth:`quiet` waits until
    none is in flight, so that a commit never races a chunk being written. Requests wait
    on the event loop (never blocking it) while a commit is under way. Group documents
    are held here until :meth:`quiet` (see the module's docstring).
    """

    FORWARDED: frozenset[str] = frozenset()
    """What it leaves to the store inside: nothing, every request goes to the session of the moment."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._held: dict[str, bytes] = {}
        self._live()

    def _live(self) -> None:
        """What lives in this process alone: the requests in flight, and the locks that wait for them."""
        self._state = threading.Condition()
        self._active = 0
        self._committing = False
        self._passing = asyncio.Lock()  # one pass at a time: two sets of one key in flight could land in any order

    def __getstate__(self) -> dict[str, Any]:
        with self._state:
            return {"_store": self._store, "_held": dict(self._held)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._live()

    def _with_store(self, store: Store) -> SessionStore:
        return type(self)(store)

    def __eq__(self, value: object) -> bool:
        return isinstance(value, SessionStore) and self._store == value._store

    def __hash__(self) -> int:
        return hash(id(self))

    def __str__(self) -> str:
        return str(self._store)

    def hold(self, key: str, data: bytes) -> bool:
        """Hold ``data`` for ``key`` if it is a group document (from any thread, without zarr's event loop).

        Returns whether it was held; anything else must be set.
        """
        if not _group_document(key, data[:64]):
            return False
        with self._state:
            self._held[key] = data
        return True

    def held(self, key: str) -> bytes | None:
        """The document held for ``key``, if any (from any thread)."""
        with self._state:
            return self._held.get(key)

    async def _pass_held(self) -> None:
        """Set the held documents in the session (on zarr's event loop, inside a request or :meth:`quiet`)."""
        if not self._held:
            return
        async with self._passing:
            with self._state:
                held, self._held = self._held, {}
            prototype = default_buffer_prototype()
            await asyncio.gather(*(self._store.set(k, prototype.buffer.from_bytes(v)) for k, v in held.items()))

    @contextlib.asynccontextmanager
    async def _entered(self, *, passing: bool = True) -> AsyncIterator[Store]:
        """The session of the moment, once no commit is under way; with ``passing`` the held documents are in it."""
        while True:
            with self._state:
                if not self._committing:
                    self._active += 1
                    break
            await asyncio.sleep(0.001)
        try:
            if passing:
                await self._pass_held()
            yield self._store
        finally:
            with self._state:
                self._active -= 1
                self._state.notify_all()

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Hold new requests back, wait for those in flight and pass the held documents on (from any thread but
        zarr's event loop)."""
        with self._state:
            self._committing = True
            self._state.wait_for(lambda: self._active == 0)
        try:
            sync(self._pass_held())
            yield
        finally:
            with self._state:
                self._committing = False

    def swap(self, store: Store) -> None:
        """Send the next requests to ``store`` (called inside :meth:`quiet`)."""
        self._store = store

    async def set(self, key: str, value: Buffer) -> None:
        self._check_writable()  # a document held is as written: a read-only session refuses it first
        document = key.endswith("zarr.json")
        if document and self.hold(key, value.to_bytes()):
            return
        async with self._entered(passing=document) as store:  # a chunk depends on no group document
            await store.set(key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        async with self._entered() as store:
            await store.set_if_not_exists(key, value)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        async with self._entered() as store:
            await store._set_many(values)

    async def delete(self, key: str) -> None:
        async with self._entered() as store:
            await store.delete(key)

    async def delete_dir(self, prefix: str) -> None:
        async with self._entered() as store:
            await store.delete_dir(prefix)

    async def _settled(self) -> None:
        """Wait for a pass under way: a key it sets may not be in the session yet."""
        if self._passing.locked():
            async with self._passing:
                pass

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        held = self.held(key)
        if held is not None and byte_range is None:
            return prototype.buffer.from_bytes(held)
        async with self._entered(passing=held is not None) as store:
            await self._settled()
            return await store.get(key, prototype, byte_range)

    _get_many = Store._get_many  # each request through this store's own get: a held document is returned

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        async with self._entered() as store:
            return await store.get_partial_values(prototype, key_ranges)

    async def exists(self, key: str) -> bool:
        if self.held(key) is not None:
            return True
        async with self._entered(passing=False) as store:
            await self._settled()
            return await store.exists(key)

    async def getsize(self, key: str) -> int:
        held = self.held(key)
        if held is not None:
            return len(held)
        async with self._entered(passing=False) as store:
            await self._settled()
            return await store.getsize(key)

    async def getsize_prefix(self, prefix: str) -> int:
        async with self._entered() as store:
            return await store.getsize_prefix(prefix)

    async def is_empty(self, prefix: str) -> bool:
        async with self._entered() as store:
            return await store.is_empty(prefix)

    async def clear(self) -> None:
        async with self._entered() as store:
            await store.clear()

    # listed whole before the first key is yielded: a caller that stops early never keeps a commit waiting
    async def list(self) -> AsyncIterator[str]:  # an async generator, as zarr calls it
        async with self._entered() as store:
            keys = [key async for key in store.list()]
        for key in keys:
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        async with self._entered() as store:
            keys = [key async for key in store.list_prefix(prefix)]
        for key in keys:
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        async with self._entered() as store:
            keys = [key async for key in store.list_dir(prefix)]
        for key in keys:
            yield key
