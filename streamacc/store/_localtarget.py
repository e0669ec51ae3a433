"""An output in a local folder: its keys read without Zarr, written through a durable, link-safe zarr store.

:class:`LocalTarget` reads its folder's keys itself (``LocalFolder``: as zarr's ``LocalStore``
reads them, never through a link), so that a reader of a local output (``info``, ``overview``,
``plot``) imports no Zarr; its zarr store (``DurableLocalStore``, imported then) is made when
the output is first written or opened through Zarr. It adds what a store lacks: a ``flock``
on the folder, fsync of the files written beside the store (a block's chunks, see
``_chunks``), temp-file cleanup, clearing, and reads into reused memory.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import OutputExistsError, StoreError
from ._files import (
    DirLock,
    atomic_write,
    find_misplaced,
    flock_holder,
    fsync_dir,
    fsync_file,
    read_into,
    remove_temp_files,
    remove_tree_contents,
    scratch,
)
from ._folder import LocalFolder, special
from ._target import Target, being_written

if TYPE_CHECKING:
    from ._localstore import DurableLocalStore

__all__ = ["LocalTarget"]

_MAKING = threading.Lock()  # a target's store is made once, whichever of its writer threads asks first


class LocalTarget(Target):
    """An output in a local directory: its keys read from its :class:`LocalFolder`, written through a
    ``DurableLocalStore``, and what a store lacks."""

    def __init__(self, root: Path, label: str, *, read_only: bool = False) -> None:
        self.root = root
        self.label = label
        self.folder = LocalFolder(root, label)
        self._read_only = read_only
        self._store: DurableLocalStore | None = None
        self._durable_dirs: set[Path] = set()

    @property
    def store(self) -> DurableLocalStore:  # type: ignore[override]  # an attribute elsewhere, made on first use here
        """The folder's zarr store, made (importing Zarr) when first asked for; it shares the target's folder."""
        if self._store is None:
            from ._localstore import DurableLocalStore

            with _MAKING:
                if self._store is None:
                    self._store = DurableLocalStore(
                        self.root, read_only=self._read_only, label=self.label, folder=self.folder
                    )
        return self._store

    @property
    def read_only(self) -> bool:
        return self._read_only

    # --- keys read without Zarr, as the store reads them ----------------------------------------

    def read(self, key: str) -> bytes | None:
        return self.folder.read(key)

    def list_keys(self, prefix: str = "") -> list[str]:
        return sorted(self.folder.keys_under(prefix.rstrip("/")))

    def list_dir(self, prefix: str = "") -> list[str]:
        return self.folder.names_under(prefix)

    def size(self, key: str) -> int:
        return self.folder.file(key).stat().st_size if self.folder.is_file(key) else 0

    def tails(self, keys: list[str], size: int = 4) -> list[bytes | None]:
        return [self.folder.read(key, suffix=size) for key in keys]

    def ranges(self, requests: list[tuple[str, int, int]]) -> list[bytes | None]:
        """Each part read here, on this thread, as its folder reads a key: zarr's LocalStore hands every request to a
        thread of its event loop's executor, and a check of many shards' inner chunks would fill it with threads
        (each with its own memory arena) for reads of four bytes."""
        return [self.folder.read(key, offset=start, length=stop - start) for key, start, stop in requests]

    def read_reused(self, key: str) -> Any:
        """Read into this thread's reused buffer (no fresh memory per chunk), the file's pages then dropped from the
        page cache; a file that shrank while read gives what it held, and its checksum refuses it."""
        path = self.folder.path(key)
        with self.folder.reading(path):
            return read_into(
                path, lambda size: scratch("read", size)[:size], follow=False, whole=False, drop_cache=True
            )

    def write(self, key: str, data: bytes) -> None:
        """Durably, as the store writes (``atomic_write``), but called here: a key the target writes itself (a
        manifest, a record) is the ``store.atomic_write`` seam, apart from the keys zarr writes through the store."""
        atomic_write(self.folder.path(key, create=True), data)

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """One walk of the folder, each size from its listing (no call per file), never through a link."""
        base = self.folder.path(prefix) if prefix else self.root
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
        path = self.folder.path(key)
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

    def check_contents(self, *, writing: bool = True) -> None:
        """Refuse a link, a special file, or (``writing``) a folder where a file belongs, anywhere inside the output,
        by name."""
        try:
            found = find_misplaced(self.root, folders=writing) if self.root.is_dir() else None
        except OSError as exc:
            where = exc.filename or self.root
            raise StoreError(
                f"{where} inside {self.label} cannot be listed ({exc.strerror or exc}); give it read permission "
                f"(chmod u+rx {where}), or read the output as the user who wrote it"
            ) from None
        if found is None:
            return
        path, what = found
        if what == "a link":
            raise StoreError(
                f"{path} inside {self.label} is a link; streamacc never acts through links inside an output: remove "
                "it, or choose another output path"
            )
        if what.startswith("a folder"):
            raise StoreError(
                f"{self.label}: {path.relative_to(self.root).as_posix()} is a folder where a file belongs: remove it"
            )
        raise special(path, self.label, what)

    def clear(self, keep: set[str]) -> None:
        self.check_contents(writing=False)
        self.delete("zarr.json")  # first: readers stop seeing the old group at once
        remove_tree_contents(self.root, {self.root / key for key in keep})
        fsync_dir(self.root)
        self.folder.forget()  # the folders removed are made again, and made durable, as keys are written
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
