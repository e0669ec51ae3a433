"""Where an output lives: a zarr store plus the durability, locking and cleanup it allows.

A local directory gets fsync, an exclusive lock and temp-file cleanup; any other zarr
store (an fsspec URL, memory) counts a write as durable once the store call returns,
since an object-store PUT is atomic, and has no lock.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore, LocalStore

from ._errors import InputError, StoreError
from ._files import FileLock, atomic_write, fsync_dir, fsync_file, remove_partials

__all__ = ["BOOKKEEPING", "Target", "open_target"]

BOOKKEEPING = "_streamacc"
"""Prefix of the keys streamacc keeps beside the arrays (manifest, block records, lock)."""


class Target:
    """One output location: its zarr store and the bookkeeping operations it supports."""

    def __init__(self, store: Store, root: Path | None, label: str) -> None:
        self.store = store
        self.root = root
        self.label = label
        self.fsync = True  # off only to measure what durability costs
        self._durable_dirs: set[Path] = set()

    def exists(self) -> bool:
        """Whether anything at all is stored here."""
        if self.root is not None:
            return self.root.exists() and (not self.root.is_dir() or any(self.root.iterdir()))
        return not sync(self.store.is_empty(""))

    def read(self, key: str) -> bytes | None:
        """The bytes at ``key``, or None when absent."""
        if self.root is not None:
            path = self.root / key
            return path.read_bytes() if path.is_file() else None
        buf = sync(self.store.get(key, prototype=default_buffer_prototype()))
        return None if buf is None else buf.to_bytes()

    def has(self, key: str) -> bool:
        """Whether ``key`` is stored."""
        if self.root is not None:
            return (self.root / key).is_file()
        return sync(self.store.exists(key))

    def size(self, key: str) -> int:
        """Bytes stored at ``key`` (0 when absent)."""
        if self.root is not None:
            path = self.root / key
            return path.stat().st_size if path.is_file() else 0
        return sync(self.store.getsize(key)) if self.has(key) else 0

    def write(self, key: str, data: bytes) -> None:
        """Store ``data`` at ``key`` atomically and durably."""
        if self.root is not None:
            atomic_write(self.root / key, data, sync=self.fsync)
            if self.fsync:
                self._note_dir((self.root / key).parent)
        else:
            sync(self.store.set(key, default_buffer_prototype().buffer.from_bytes(data)))

    def make_durable(self, keys: list[str]) -> None:
        """fsync the files at ``keys`` and the directories naming them (local disk only)."""
        if self.root is None or not self.fsync:
            return
        dirs = set()
        for key in keys:
            path = self.root / key
            fsync_file(path)
            dirs.add(path.parent)
        for directory in dirs:
            fsync_dir(directory)
            self._note_dir(directory)

    def _note_dir(self, directory: Path) -> None:
        """The first time a directory is seen, make its own entry durable up to the root."""
        while directory != self.root and directory not in self._durable_dirs:
            self._durable_dirs.add(directory)
            fsync_dir(directory.parent)
            directory = directory.parent

    def clear(self) -> None:
        """Delete everything stored here except the lock (for ``overwrite``).

        The manifest goes first, durably, so that a crash part way through leaves an
        output that no longer claims the blocks being deleted.
        """
        if self.root is not None:
            manifest = self.root / BOOKKEEPING / "manifest.json"
            if manifest.exists():
                manifest.unlink()
                fsync_dir(manifest.parent)
            for child in self.root.iterdir():
                if child.name != BOOKKEEPING:
                    _remove(child)
            for child in (self.root / BOOKKEEPING).iterdir():
                if child.name != "lock":
                    _remove(child)
            fsync_dir(self.root)
        else:
            sync(self.store.delete(f"{BOOKKEEPING}/manifest.json"))
            sync(self.store.delete_dir(""))

    def only_bookkeeping(self) -> bool:
        """Whether everything stored here is streamacc's own (a run killed before it wrote anything).

        Only a local directory can be in that state: it is the lock, taken before the
        first manifest exists, that creates it.
        """
        if self.root is None or not self.root.is_dir():
            return False
        return all(child.name == BOOKKEEPING for child in self.root.iterdir())

    def is_output(self) -> bool:
        """Whether this looks like something streamacc or zarr wrote (safe to replace)."""
        return self.has("zarr.json") or self.has(f"{BOOKKEEPING}/manifest.json") or self.only_bookkeeping()

    def clean_partials(self) -> list[str]:
        """Remove temp files a killed writer left behind; return their keys."""
        if self.root is None:
            return []
        return [str(p.relative_to(self.root)) for p in remove_partials(self.root)]

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the exclusive writer lock while the block runs (local disk only)."""
        if self.root is None:
            yield
            return
        (self.root / BOOKKEEPING).mkdir(parents=True, exist_ok=True)
        with FileLock(self.root / BOOKKEEPING / "lock", self.label):
            yield


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def open_target(store: Any, *, storage_options: dict | None = None) -> Target:
    """Resolve a local path, an fsspec URL or a zarr store object into a :class:`Target`."""
    if isinstance(store, Store):
        root = Path(store.root) if isinstance(store, LocalStore) else None
        return Target(store, root, str(store))
    if not isinstance(store, (str, os.PathLike)):
        raise InputError(f"store must be a path, a URL or a zarr store, got {type(store).__name__}")
    text = os.fspath(store)
    if text.startswith("file://"):
        text = text[len("file://") :]
    if "://" in text:
        try:
            zstore = FsspecStore.from_url(text, storage_options=storage_options)
        except (ImportError, ValueError) as exc:
            raise StoreError(f"cannot open {text!r}: {exc}; install the fsspec backend it needs (e.g. s3fs)") from None
        return Target(zstore, None, text)
    root = Path(text).expanduser().absolute()
    if root.exists() and not root.is_dir():
        raise StoreError(f"{text} exists and is not a directory; choose another output path")
    return Target(LocalStore(root), root, text)


def open_group(target: Target, mode: str) -> zarr.Group:
    """Open the output's root group (``mode`` as in zarr.open_group)."""
    return zarr.open_group(target.store, mode=mode)
