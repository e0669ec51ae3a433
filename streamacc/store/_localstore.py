"""A local output's zarr store: zarr's ``LocalStore`` made durable and link-safe.

zarr's ``LocalStore`` follows symbolic links and never fsyncs. :class:`DurableLocalStore` is one
that does neither: every key it sets is written through a temp file fsynced before it is
renamed over the key (then its folder fsynced), a key it deletes leaves its folder fsynced, and
no key is read, written, listed or deleted through a link, nor read from a special file or
blocking on one (an error names it instead: its keys' paths are a ``LocalFolder``'s), so that
zarr's own store tests run over it like over any zarr store. ``LocalTarget`` makes one when
its output is first written or opened through Zarr.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zarr.abc.store import ByteRequest, OffsetByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.storage import LocalStore

from ._files import atomic_write as write_durably, fsync_dir
from ._folder import LocalFolder

if TYPE_CHECKING:
    from zarr.abc.buffer import Buffer, BufferPrototype

__all__ = ["DurableLocalStore"]


def _range(byte_range: ByteRequest | None) -> dict[str, int]:
    """zarr's byte request as :meth:`LocalFolder.read`'s keywords."""
    if isinstance(byte_range, RangeByteRequest):
        return {"offset": byte_range.start, "length": max(0, byte_range.end - byte_range.start)}
    if isinstance(byte_range, OffsetByteRequest):
        return {"offset": byte_range.offset}
    if isinstance(byte_range, SuffixByteRequest):
        return {"suffix": byte_range.suffix}
    if byte_range is None:
        return {}
    raise TypeError(f"Unexpected byte_range, got {byte_range}.")


class DurableLocalStore(LocalStore):
    """zarr's ``LocalStore`` of a folder, whose writes and deletions are durable and which never goes through a link.

    Its keys' paths are its :class:`LocalFolder`'s (a target that reads the folder without Zarr
    shares it).

    Parameters
    ----------
    root : str or Path
        The folder.
    read_only : bool
        Whether the store is read-only.
    label : str, optional
        The output's name in errors (the folder's path by default).
    folder : LocalFolder, optional
        The folder's keys as its target reads them (one of its own by default).
    """

    def __init__(
        self, root: Path | str, *, read_only: bool = False, label: str | None = None, folder: LocalFolder | None = None
    ) -> None:
        super().__init__(root, read_only=read_only)
        self.folder = LocalFolder(self.root, str(self.root) if label is None else label) if folder is None else folder
        self.label = self.folder.label

    def with_read_only(self, read_only: bool = False) -> DurableLocalStore:
        return type(self)(self.root, read_only=read_only, label=self.label)

    def __repr__(self) -> str:
        return f"DurableLocalStore('{self}')"

    async def _open(self, *, mode: Any = None) -> None:
        """Opened without making the folder, nor refusing one that does not exist (it reads as empty): the target's
        lock makes it, and removes it again where a run wrote nothing."""
        await Store._open(self)

    async def clear(self) -> None:
        await super().clear()
        fsync_dir(self.root)
        self.folder.forget()

    def read(self, key: str, byte_range: ByteRequest | None = None) -> bytes | None:
        """The bytes of ``key`` (None where nothing is there), as its folder reads them: never through a link nor
        from a special file, without blocking."""
        return self.folder.read(key, **_range(byte_range))

    async def get(
        self, key: str, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if not self._is_open:
            await self._open()
        data = await asyncio.to_thread(self.read, key, byte_range)
        return None if data is None else (prototype or default_buffer_prototype()).buffer.from_bytes(data)

    def get_sync(
        self, key: str, *, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._ensure_open_sync()
        data = self.read(key, byte_range)
        return None if data is None else (prototype or default_buffer_prototype()).buffer.from_bytes(data)

    def set_sync(self, key: str, value: Buffer) -> None:
        self._check_writable()
        write_durably(self.folder.path(key, create=True), value.to_bytes())

    def delete_sync(self, key: str) -> None:
        self._check_writable()
        self._remove(self.folder.path(key))

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Any
    ) -> list[Buffer | None]:
        """Each read as :meth:`get` reads it (a missing key is None); the first failure raised once all have ended,
        so that none is left unretrieved."""
        found = await asyncio.gather(*(self.get(key, prototype, part) for key, part in key_ranges),
                                     return_exceptions=True)  # fmt: skip
        failed = next((f for f in found if isinstance(f, BaseException)), None)
        if failed is not None:
            raise failed
        return found  # type: ignore[return-value]  # no exception among them

    async def _set(self, key: str, value: Buffer, exclusive: bool = False) -> None:
        """Durably (``atomic_write``: the temp file fsynced before it is renamed over the key, then its folder),
        never through a link; ``exclusive`` leaves a key that exists alone."""
        if not self._is_open:
            await self._open()
        self._check_writable()
        path = self.folder.path(key, create=True)
        if exclusive and (path.exists() or path.is_symlink()):
            raise FileExistsError(path)
        await asyncio.to_thread(write_durably, path, value.to_bytes())

    async def delete(self, key: str) -> None:
        """The folder fsynced after, so that the removal survives a crash."""
        self._check_writable()
        self._remove(self.folder.path(key))

    @staticmethod
    def _remove(path: Path) -> None:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.is_file() or path.is_symlink():
            path.unlink()
        else:
            return
        fsync_dir(path.parent)

    async def delete_dir(self, prefix: str) -> None:
        self._check_writable()
        path = self.folder.path(prefix)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
            fsync_dir(path.parent)
        elif path.is_file():
            raise ValueError(f"delete_dir was passed a {prefix=!r} that is a file")

    async def exists(self, key: str) -> bool:
        return self.folder.is_file(key)

    async def getsize(self, key: str) -> int:
        return self.folder.file(key).stat().st_size

    async def list(self) -> AsyncIterator[str]:
        for key in self.folder.keys_under():
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in self.folder.keys_under(prefix.rstrip("/")):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        for name in self.folder.names_under(prefix):
            yield name
