"""An output in a local folder: a zarr ``LocalStore`` made durable and link-safe, and what a store lacks.

zarr's ``LocalStore`` follows symbolic links and never fsyncs. :class:`DurableLocalStore` is one
that does neither: every key it sets is written through a temp file fsynced before it is
renamed over the key (then its folder fsynced), a key it deletes leaves its folder fsynced, and
no key is read, written, listed or deleted through a link (an error names it instead), so that
zarr's own store tests run over it like over any zarr store. :class:`LocalTarget` holds the
folder through it, and adds what a store lacks: a ``flock`` on the folder, fsync of the files
written beside the store (a block's chunks, see ``_chunks``), temp-file cleanup, clearing, and
reads into reused memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from zarr.abc.store import ByteRequest, Store
from zarr.storage import LocalStore

from ..errors import OutputExistsError, StoreError
from ._files import (
    DirLock,
    atomic_write,
    atomic_write as write_durably,
    find_link,
    flock_holder,
    fsync_dir,
    fsync_file,
    read_into,
    remove_temp_files,
    remove_tree_contents,
    scratch,
)
from ._target import Target, being_written

if TYPE_CHECKING:
    from zarr.abc.buffer import Buffer, BufferPrototype

__all__ = ["DurableLocalStore", "LocalTarget"]


def _linked(path: Path) -> StoreError:
    return StoreError(f"{path} is a link; streamacc never reads through links inside an output: remove it")


class DurableLocalStore(LocalStore):
    """zarr's ``LocalStore`` of a folder, whose writes and deletions are durable and which never goes through a link.

    Parameters
    ----------
    root : str or Path
        The folder.
    read_only : bool
        Whether the store is read-only.
    label : str, optional
        The output's name in errors (the folder's path by default).
    """

    def __init__(self, root: Path | str, *, read_only: bool = False, label: str | None = None) -> None:
        super().__init__(root, read_only=read_only)
        self.label = str(self.root) if label is None else label
        self._real_dirs: set[Path] = set()

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
        self.forget_folders()

    def forget_folders(self) -> None:
        """Check every folder again on its next use (the output was cleared: its folders are made again)."""
        self._real_dirs.clear()

    def path(self, key: str, *, create: bool = False) -> Path:
        """The path of ``key``, after checking that no folder on the way is a link (made, durably, with ``create``).

        A file where a folder would be means that no such key is there, to a reader (a reader
        listing the output's root as a writer replaces its metadata sees the temp file of that
        replacement, and zarr asks for the ``zarr.json`` of each entry); a writer is refused.
        """
        path = self.root / key
        for parent in reversed(path.relative_to(self.root).parents[:-1]):
            directory = self.root / parent
            if directory in self._real_dirs:
                continue
            if not create and not directory.is_symlink() and directory.exists() and not directory.is_dir():
                return path  # a file on the way (a writer's temp file that a reader listed as a member): no such key
            if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
                raise StoreError(
                    f"{directory} inside {self.label} is a link or not a folder; streamacc never reads or writes "
                    "through links inside an output: remove it, or start afresh in a new output path"
                )
            if not directory.exists():
                if not create:
                    return path
                directory.mkdir()
                fsync_dir(directory.parent)
            self._real_dirs.add(directory)
        return path

    def _file(self, key: str) -> Path:
        """The path of ``key`` to read: a link there is refused (``LocalStore`` would follow it)."""
        path = self.path(key)
        if path.is_symlink():
            raise _linked(path)
        return path

    async def get(
        self, key: str, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._file(key)
        return await super().get(key, prototype, byte_range)

    def get_sync(
        self, key: str, *, prototype: BufferPrototype | None = None, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self._file(key)
        return super().get_sync(key, prototype=prototype, byte_range=byte_range)

    def set_sync(self, key: str, value: Buffer) -> None:
        self._check_writable()
        write_durably(self.path(key, create=True), value.to_bytes())

    def delete_sync(self, key: str) -> None:
        self._check_writable()
        self._remove(self.path(key))

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Any
    ) -> list[Buffer | None]:
        key_ranges = list(key_ranges)
        for key, _ in key_ranges:
            self._file(key)
        return await super().get_partial_values(prototype, key_ranges)

    async def _set(self, key: str, value: Buffer, exclusive: bool = False) -> None:
        """Durably (``atomic_write``: the temp file fsynced before it is renamed over the key, then its folder),
        never through a link; ``exclusive`` leaves a key that exists alone."""
        if not self._is_open:
            await self._open()
        self._check_writable()
        path = self.path(key, create=True)
        if exclusive and (path.exists() or path.is_symlink()):
            raise FileExistsError(path)
        await asyncio.to_thread(write_durably, path, value.to_bytes())

    async def delete(self, key: str) -> None:
        """The folder fsynced after, so that the removal survives a crash."""
        self._check_writable()
        self._remove(self.path(key))

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
        path = self.path(prefix)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
            fsync_dir(path.parent)
        elif path.is_file():
            raise ValueError(f"delete_dir was passed a {prefix=!r} that is a file")

    async def exists(self, key: str) -> bool:
        path = self.path(key)
        return path.is_file() and not path.is_symlink()

    async def getsize(self, key: str) -> int:
        return self._file(key).stat().st_size

    def keys_under(self, prefix: str = "") -> Iterator[str]:
        """Every key under ``prefix``, the folder walked without following a linked folder."""
        base = self.path(prefix) if prefix else self.root  # the root itself may be a link, as to any folder
        if base.is_dir() and (base == self.root or not base.is_symlink()):
            for dirpath, _, filenames in os.walk(base):
                for name in filenames:
                    yield Path(dirpath, name).relative_to(self.root).as_posix()

    async def list(self) -> AsyncIterator[str]:
        for key in self.keys_under():
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in self.keys_under(prefix.rstrip("/")):
            yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        base = self.path(prefix) if prefix else self.root
        if base.is_dir() and (base == self.root or not base.is_symlink()):
            for name in sorted(os.listdir(base)):
                yield name


class LocalTarget(Target):
    """An output in a local directory: its keys through a :class:`DurableLocalStore`, and what a store lacks."""

    store: DurableLocalStore

    def __init__(self, root: Path, label: str, *, read_only: bool = False) -> None:
        self.root = root
        self.label = label
        self.store = DurableLocalStore(root, read_only=read_only, label=label)
        self._durable_dirs: set[Path] = set()

    def read_reused(self, key: str) -> Any:
        """Read into this thread's reused buffer (no fresh memory per chunk), the file's pages then dropped from the
        page cache; a file that shrank while read gives what it held, and its checksum refuses it."""
        path = self.store.path(key)
        try:
            return read_into(
                path, lambda size: scratch("read", size)[:size], follow=False, whole=False, drop_cache=True
            )
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _linked(path) from None
            raise

    def ranges(self, requests: list[tuple[str, int, int]]) -> list[bytes | None]:
        """Each part read here, on this thread, never through a link: zarr's LocalStore hands every request to a thread
        of its event loop's executor, and a check of many shards' inner chunks would fill it with threads (each with
        its own memory arena) for reads of four bytes."""
        found: list[bytes | None] = []
        for key, start, stop in requests:
            path = self.store.path(key)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
            except (FileNotFoundError, NotADirectoryError):
                found.append(None)
                continue
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _linked(path) from None
                raise
            try:
                found.append(os.pread(fd, stop - start, start))
            finally:
                os.close(fd)
        return found

    def write(self, key: str, data: bytes) -> None:
        """Durably, as the store writes (``atomic_write``), but called here: a key the target writes itself (a
        manifest, a record) is the ``store.atomic_write`` seam, apart from the keys zarr writes through the store."""
        atomic_write(self.store.path(key, create=True), data)

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """One walk of the folder, each size from its listing (no call per file), never through a link."""
        base = self.store.path(prefix) if prefix else self.root
        found: dict[str, int] = {}
        pending = [base] if base.is_dir() and not base.is_symlink() else []
        while pending:
            try:
                entries = list(os.scandir(pending.pop()))
            except FileNotFoundError:  # a folder a writer removed since its parent was listed
                continue
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    try:
                        size = entry.stat(follow_symlinks=False).st_size
                    except FileNotFoundError:  # a writer's temporary file, renamed since it was listed
                        continue
                    found[Path(entry.path).relative_to(self.root).as_posix()] = size
        return found

    def exists(self) -> bool:
        """Without Zarr: a folder with anything in it, or a file (not a folder at all)."""
        return self.root.exists() and (not self.root.is_dir() or any(self.root.iterdir()))

    def absence(self) -> str:
        return "is an empty folder, not a streamacc output" if self.root.is_dir() else "does not exist"

    def missing(self, key: str) -> str:
        path = self.store.path(key)
        return (
            "is a folder where a file belongs: remove it" if path.is_dir() and not path.is_symlink() else "is missing"
        )

    def make_durable(self, keys: list[str], *, drop_cache: bool = False) -> None:
        dirs = set()
        for key in keys:
            path = self.root / key
            fsync_file(path, drop_cache=drop_cache)
            dirs.add(path.parent)
        for directory in dirs:
            fsync_dir(directory)
            while directory != self.root and directory not in self._durable_dirs:
                self._durable_dirs.add(directory)  # the first time: its own entry, up to the root
                fsync_dir(directory.parent)
                directory = directory.parent

    def clean_partials(self, owned: Callable[[str], bool]) -> list[str]:
        return [p.relative_to(self.root).as_posix() for p in remove_temp_files(self.root, owned)]

    def check_clearable(self) -> None:
        """Never delete through a link at OUT itself, nor the current directory or a folder holding it."""
        if self.root.is_symlink():
            real = os.path.realpath(self.root)
            raise OutputExistsError(
                f"{self.label} is a link to {real}; streamacc never deletes through a link: name {real} itself"
            )
        here, real = os.path.realpath(os.getcwd()), os.path.realpath(self.root)
        if here == real or here.startswith(real.rstrip("/") + "/"):
            raise OutputExistsError(
                f"{self.label} is the current directory or holds it, and streamacc never deletes the folder it "
                f"runs in; run the command from outside {real}"
            )

    def check_contents(self) -> None:
        link = find_link(self.root) if self.root.is_dir() else None
        if link is not None:
            raise StoreError(
                f"{link} inside {self.label} is a link or a special file; streamacc never acts through links "
                "inside an output: remove it, or choose another output path"
            )

    def clear(self, keep: set[str]) -> None:
        self.check_contents()
        self.delete("zarr.json")  # first: readers stop seeing the old group at once
        remove_tree_contents(self.root, {self.root / key for key in keep})
        fsync_dir(self.root)
        self.store.forget_folders()  # the folders removed are made again, and made durable, as keys are written
        self._durable_dirs.clear()

    def writer(self) -> str | None:
        return flock_holder(self.root) if self.root.is_dir() else None

    @contextlib.contextmanager
    def lock(self, command: str) -> Iterator[None]:
        created = list(itertools.takewhile(lambda d: not d.exists(), (self.root, *self.root.parents)))
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {self.label} ({exc.strerror or exc}); check the path") from None
        lock = DirLock(self.root)
        holder: str | None = None
        try:
            try:
                holder = lock.acquire()
            except OSError as exc:
                raise StoreError(f"cannot lock {self.label} ({exc.strerror or exc}); check the path") from None
            if holder is not None:
                raise being_written(self.label, holder, command)
            yield
        finally:
            lock.release()
            if created and holder is None:  # never remove the folder another writer holds
                with contextlib.suppress(OSError):
                    for directory in created:  # the output's folder, then the parents made for it
                        directory.rmdir()  # a command that wrote nothing leaves nothing behind
