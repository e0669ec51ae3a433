"""An output in a local folder: its keys are files, read and written here, never through a link.

A local folder gets fsync, a ``flock`` on the folder itself and temp-file cleanup. Its
keys are read, written, listed and deleted here rather than through zarr's ``LocalStore``
(which holds its arrays, and is made, importing Zarr, only once asked for): ``LocalStore``
follows symbolic links and never fsyncs, and a reader of the folder (``overview``,
``plot``) imports no Zarr. Nothing inside an output is ever followed through a link.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import OutputExistsError, StoreError
from ._files import (
    DirLock,
    atomic_write,
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
    from zarr.abc.store import Store

__all__ = ["LocalTarget"]


def _linked(path: Path) -> StoreError:
    return StoreError(f"{path} is a link; streamacc never reads through links inside an output: remove it")


class LocalTarget(Target):
    """An output in a local directory.

    Every key method is its own (see the module's docstring): the files are reached only
    through folders checked not to be links, written durably, and read without Zarr.
    """

    def __init__(self, root: Path, label: str, *, read_only: bool = False) -> None:
        self.root = root
        self.label = label
        self._read_only = read_only
        self._store: Store | None = None
        self._real_dirs: set[Path] = set()
        self._durable_dirs: set[Path] = set()

    @property
    def store(self) -> Store:  # type: ignore[override]  # an attribute elsewhere, made on first use here
        """The zarr store of the folder, made (importing Zarr) when first asked for."""
        if self._store is None:
            from zarr.storage import LocalStore

            self._store = LocalStore(self.root, read_only=self._read_only)
        return self._store

    @property
    def read_only(self) -> bool:
        return self._read_only

    def _path(self, key: str, *, create: bool = False) -> Path:
        """The path of ``key``, after checking that no folder on the way is a link."""
        path = self.root / key
        for parent in reversed(path.relative_to(self.root).parents[:-1]):
            directory = self.root / parent
            if directory in self._real_dirs:
                continue
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

    def read(self, key: str) -> bytes | None:
        """The file's bytes, refusing a link (``LocalStore`` would follow it), without importing Zarr."""
        path = self._path(key)
        if path.is_symlink():
            raise _linked(path)
        return path.read_bytes() if path.is_file() else None

    def read_reused(self, key: str) -> Any:
        """Read into this thread's reused buffer (no fresh memory per chunk), the file's pages then dropped from the
        page cache; a file that shrank while read gives what it held, and its checksum refuses it."""
        path = self._path(key)
        try:
            return read_into(
                path, lambda size: scratch("read", size)[:size], follow=False, whole=False, drop_cache=True
            )
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _linked(path) from None
            raise

    def write(self, key: str, data: bytes) -> None:
        """Durably (``atomic_write``: the temp file fsynced before it is renamed over the key, then its folder),
        where ``LocalStore`` never fsyncs, and never through a link."""
        atomic_write(self._path(key, create=True), data)

    def delete(self, key: str) -> None:
        """The folder fsynced after, so that the removal survives a crash (``LocalStore`` never fsyncs)."""
        path = self._path(key)
        if path.is_file() or path.is_symlink():
            path.unlink()
            fsync_dir(path.parent)

    def list_keys(self, prefix: str = "") -> list[str]:
        """The folder walked without Zarr, never through a linked folder."""
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        found = []
        for dirpath, _, filenames in os.walk(base):
            found += [Path(dirpath, name).relative_to(self.root).as_posix() for name in filenames]
        return sorted(found)

    def list_dir(self, prefix: str = "") -> list[str]:
        """The folder listed without Zarr."""
        base = self._path(prefix) if prefix else self.root
        return sorted(os.listdir(base)) if base.is_dir() else []

    def size(self, key: str) -> int:
        """The file's size, without Zarr."""
        path = self._path(key)
        return path.stat().st_size if path.is_file() else 0

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """One walk of the folder, each size from its listing (no call per file), never through a link."""
        base = self._path(prefix) if prefix else self.root
        found: dict[str, int] = {}
        pending = [base] if base.is_dir() and not base.is_symlink() else []
        while pending:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(Path(entry.path))
                    elif entry.is_file(follow_symlinks=False):
                        found[Path(entry.path).relative_to(self.root).as_posix()] = entry.stat().st_size
        return found

    def exists(self) -> bool:
        """Without Zarr: a folder with anything in it, or a file (not a folder at all)."""
        return self.root.exists() and (not self.root.is_dir() or any(self.root.iterdir()))

    def absence(self) -> str:
        return "is an empty folder, not a streamacc output" if self.root.is_dir() else "does not exist"

    def missing(self, key: str) -> str:
        path = self._path(key)
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
        self._real_dirs.clear()  # the folders removed are made again, and made durable, as keys are written
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
