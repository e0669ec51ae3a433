"""Where an output lives: a zarr store plus the durability, locking and cleanup it allows.

A local directory gets fsync, a ``flock`` on the directory itself and temp-file cleanup,
and nothing inside it is ever followed through a symbolic link; it is read without Zarr,
which is imported only once its zarr store is asked for (``overview`` and ``plot`` need
none). Any other zarr store (an fsspec URL such as ``s3://``, memory) is a
``_storetarget.StoreTarget``.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import sys
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

from ..errors import InputError, LockedError, NoOutputError, OutputExistsError, StoreError, arg, one_line
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
from ._probe import backend_missing, check_store

if TYPE_CHECKING:
    from zarr.abc.buffer import BufferPrototype
    from zarr.abc.store import Store

__all__ = ["BOOKKEEPING", "LEASE_KEY", "LocalTarget", "Target", "being_written", "open_target"]

BOOKKEEPING = "_streamacc"
"""The group streamacc keeps beside the arrays (manifest, block records, lease)."""

LEASE_KEY = f"{BOOKKEEPING}/lease/zarr.json"
"""The writer lease on object stores (see ``_lease.py``); kept when an output is cleared."""

TAIL_BATCH = 256
"""Keys whose last bytes are asked for at once (concurrent requests on an object store)."""


T = TypeVar("T")


def sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """zarr's ``sync`` (run ``coroutine`` on zarr's event loop), importing Zarr on first use."""
    from ._zarrapi import sync as run

    return run(coroutine)


def default_buffer_prototype() -> BufferPrototype:
    """zarr's default buffer prototype, importing Zarr on first use."""
    from zarr.buffer import default_buffer_prototype as prototype

    return prototype()


class Target:
    """One output location: its zarr store and the key-level operations streamacc needs.

    Keys are '/'-separated paths relative to the output's root, as in zarr.
    """

    store: Store
    label: str

    @property
    def read_only(self) -> bool:
        return bool(self.store.read_only)

    def read(self, key: str) -> bytes | None:
        """The bytes at ``key``, or None when absent."""
        raise NotImplementedError

    def read_reused(self, key: str) -> Any:
        """The bytes at ``key`` (a bytes-like object), or None when absent; valid until this thread's next call.

        A local file is read into a buffer the thread reuses, so reading many large chunks maps
        no fresh memory; other stores return :meth:`read`'s bytes.
        """
        return self.read(key)

    def write(self, key: str, data: bytes) -> None:
        """Store ``data`` at ``key`` atomically and durably."""
        raise NotImplementedError

    def delete(self, key: str) -> None:
        """Remove ``key`` (nothing when absent)."""
        raise NotImplementedError

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` ('' for all)."""
        raise NotImplementedError

    def list_dir(self, prefix: str = "") -> list[str]:
        """The names directly under ``prefix`` ('' for the root): keys and folders, without walking deeper."""
        raise NotImplementedError

    def size(self, key: str) -> int:
        """Bytes stored at ``key`` (0 when absent)."""
        raise NotImplementedError

    def tails(self, keys: list[str], size: int = 4) -> list[bytes | None]:
        """The last ``size`` bytes stored at each key (None where absent), read concurrently where the store can."""
        from zarr.abc.store import SuffixByteRequest

        found: list[bytes | None] = []
        prototype = default_buffer_prototype()
        for i in range(0, len(keys), TAIL_BATCH):
            requests = [(key, SuffixByteRequest(size)) for key in keys[i : i + TAIL_BATCH]]
            try:
                got = sync(self.store.get_partial_values(prototype, requests))
            except FileNotFoundError:  # zarr's LocalStore raises for a missing key here, where get returns None
                got = [sync(self.store.get(key, prototype, request)) for key, request in requests]
            found += [None if b is None else b.to_bytes() for b in got]
        return found

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """Every key under ``prefix`` with its size in bytes, from one listing where the store allows it."""
        return {key: self.size(key) for key in self.list_keys(prefix)}

    def exists(self) -> bool:
        """Whether anything at all is stored here."""
        raise NotImplementedError

    def absence(self) -> str:
        """What a reader finds here when nothing is stored (:meth:`exists` is False), in words."""
        return "does not exist"

    def elsewhere(self) -> str:
        """Where else a writer refused here (its place holds someone else's data) may write, in words."""
        return "choose another output path"

    def make_durable(self, keys: list[str], *, drop_cache: bool = False) -> None:
        """Make keys written through the zarr store durable (local disk only).

        With ``drop_cache`` their pages also leave the page cache: written data nobody
        reads back soon would otherwise crowd it and cost the kernel time to reclaim.
        """

    def checkpoint(self, message: str, *, nbytes: int = 0, final: bool = False, tag: str | None = None) -> None:
        """The writes so far are a consistent state (a manifest was just saved, ``nbytes`` more of data since the
        last call): a transactional store commits them, at most every few seconds unless ``final``, and tags the
        final commit ``tag``. Other stores made every write durable already."""

    def check_lock(self) -> None:
        """Raise LockedError if the writer lock may be lost (an object store's lease); called before each write."""

    def clean_partials(self, owned: Callable[[str], bool]) -> list[str]:
        """Remove the temp files a killed writer left while writing keys for which ``owned`` holds; return them."""
        return []

    def check_clearable(self) -> None:
        """Refuse, before anything is written, to clear an output that must not be deleted (see LocalTarget)."""

    def check_contents(self) -> None:
        """Refuse contents streamacc must not act on (links inside a local output)."""

    def clear(self, keep: set[str]) -> None:
        """Delete every key except those in ``keep`` (the root group's metadata first)."""
        self.delete("zarr.json")
        for key in self.list_keys():
            if key not in keep:
                self.delete(key)

    @contextlib.contextmanager
    def lock(self, command: str) -> Iterator[None]:
        """Hold the exclusive writer lock while the block runs; ``command`` names the fix."""
        raise NotImplementedError
        yield

    def writer(self) -> str | None:
        """Who holds the writer lock now (a process, as its refusal names it), asked without taking it; None for
        nobody, or where the store cannot tell."""
        return None


def _linked(path: Path) -> StoreError:
    return StoreError(f"{path} is a link; streamacc never reads through links inside an output: remove it")


def being_written(label: str, holder: str, command: str) -> LockedError:
    """The refusal of a second writer of ``label``, which ``holder`` (a process) is writing."""
    return LockedError(
        f"{label} is being written by {holder}; wait for it to finish or stop it, then rerun with {command}"
    )


class LocalTarget(Target):
    """An output in a local directory."""

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
        atomic_write(self._path(key, create=True), data)

    def delete(self, key: str) -> None:
        path = self._path(key)
        if path.is_file() or path.is_symlink():
            path.unlink()
            fsync_dir(path.parent)

    def list_keys(self, prefix: str = "") -> list[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        found = []
        for dirpath, _, filenames in os.walk(base):
            found += [Path(dirpath, name).relative_to(self.root).as_posix() for name in filenames]
        return sorted(found)

    def list_dir(self, prefix: str = "") -> list[str]:
        base = self._path(prefix) if prefix else self.root
        return sorted(os.listdir(base)) if base.is_dir() else []

    def size(self, key: str) -> int:
        path = self._path(key)
        return path.stat().st_size if path.is_file() else 0

    def sizes(self, prefix: str = "") -> dict[str, int]:
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
        return self.root.exists() and (not self.root.is_dir() or any(self.root.iterdir()))

    def absence(self) -> str:
        return "is an empty folder, not a streamacc output" if self.root.is_dir() else "does not exist"

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


def _is_zarr_store(store: object) -> TypeGuard[Store]:
    """Whether ``store`` is a zarr store object, without importing Zarr: no object is one until Zarr is imported."""
    module = sys.modules.get("zarr.abc.store")
    return module is not None and isinstance(store, module.Store)


def _is_icechunk(store: object) -> bool:
    """Whether ``store`` names an Icechunk repository (``icechunk://``, ``icechunk+s3://``) or is one of its objects."""
    if isinstance(store, str):
        return store.startswith(("icechunk://", "icechunk+s3://"))
    return type(store).__module__.split(".", 1)[0] == "icechunk"


def open_target(
    store: Any, *, storage_options: dict[str, Any] | None = None, read_only: bool = False, follow: str | None = None
) -> Target:
    """Resolve a local path, an fsspec URL, an Icechunk repository or a zarr store object into a :class:`Target`.

    ``follow`` is a writer's lease token: the target writes for that writer (a cluster
    worker of a run on an object store), fenced by its lease.
    """
    if _is_icechunk(store):
        from ._icechunk import icechunk_target

        return icechunk_target(store, storage_options=storage_options, read_only=read_only)
    if _is_zarr_store(store):
        from zarr.storage import LocalStore

        if isinstance(store, LocalStore):
            return LocalTarget(Path(store.root), str(store), read_only=read_only or store.read_only)
        from ._storetarget import StoreTarget

        return StoreTarget(store, str(store))
    if not isinstance(store, (str, os.PathLike)):
        raise InputError(f"store must be a path, a URL or a zarr store, got {type(store).__name__}")
    text = os.fspath(store)
    if not text:
        raise InputError(
            "the output path is empty, which would mean the current directory; name a new folder such as out.zarr"
        )
    url = text.startswith("file://")
    if url:
        text = text[len("file://") :]
    if "://" in text:
        if storage_options is not None and not isinstance(storage_options, dict):
            raise InputError(f"{arg('storage_options')} must be a dict, got {type(storage_options).__name__}")
        from zarr.storage import FsspecStore

        try:
            zstore = FsspecStore.from_url(text, storage_options=storage_options, read_only=read_only)
        except ImportError:
            raise backend_missing(text) from None
        except (ValueError, TypeError) as exc:
            raise StoreError(
                f"cannot open {text!r}: {one_line(exc)}; check the URL and {arg('storage_options')}"
            ) from None
        check_store(zstore, text, storage_options)
        from ._storetarget import StoreTarget

        return StoreTarget(zstore, text, storage_options, follow=follow)
    if storage_options:
        raise InputError(f"{arg('storage_options')} apply only to URLs such as s3://bucket/out.zarr, not to {text!r}")
    root = (Path(text).expanduser() if url else Path(text)).absolute()  # a path is taken as open() takes it
    if root.exists() and not root.is_dir():
        if read_only:  # a reader's: the path is wrong, not the output's place
            raise NoOutputError(f"{text} is a file, not a streamacc output (an output is a folder); check the path")
        raise NoOutputError(f"{text} exists and is not a folder; choose another output path")
    return LocalTarget(root, text, read_only=read_only)
