"""A local output's folder, its keys as paths under it, read without Zarr, never through a link and never blocking.

What a local output's zarr store (``DurableLocalStore``) and its target (``LocalTarget``)
share, so that a reader reads keys as the store would without importing Zarr; and the
refusals of what stands inside an output where a file belongs, each naming the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ..errors import StoreError
from ._files import SpecialFile, fsync_dir, read_file, special_kind

__all__ = ["LocalFolder", "linked", "special", "unreadable"]


def linked(path: Path) -> StoreError:
    """The refusal of a link at ``path`` inside an output."""
    return StoreError(f"{path} is a link; streamacc never reads through links inside an output: remove it")


def special(path: Path, label: str, kind: str) -> StoreError:
    """The refusal of a special file (``kind``: a named pipe, a socket, a device) at ``path`` inside ``label``."""
    return StoreError(
        f"{path} inside {label} is {kind}, a special file, where a file belongs; streamacc never reads one inside an "
        "output (a named pipe would hang the reader): remove it"
    )


def unreadable(path: Path, label: str, exc: OSError) -> StoreError:
    """The refusal of a file at ``path`` inside ``label`` that cannot be read, with the fix."""
    return StoreError(
        f"{path} inside {label} cannot be read ({exc.strerror or exc}); give it read permission (chmod u+r {path}), "
        "or read the output as the user who wrote it"
    )




class LocalFolder:
    """A local output's folder, its keys as paths under it, read without Zarr and never through a link.

    What a local output's zarr store (``DurableLocalStore``) and its target (``LocalTarget``)
    share, so that a reader reads keys as the store would without importing Zarr. A folder on
    a key's way is checked once (a folder, not a link) and remembered until :meth:`forget`.

    Parameters
    ----------
    root : Path
        The folder.
    label : str
        The output's name in errors.
    """

    def __init__(self, root: Path, label: str) -> None:
        self.root = root
        self.label = label
        self._real_dirs: set[Path] = set()

    def forget(self) -> None:
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

    def file(self, key: str) -> Path:
        """The path of ``key`` to read: a link or a special file there is refused (zarr's ``LocalStore`` would follow
        the link, and wait on a named pipe for good)."""
        path = self.path(key)
        try:
            mode = os.lstat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return path
        if stat.S_ISLNK(mode):
            raise linked(path)
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise special(path, self.label, special_kind(mode))
        return path

    def read(
        self, key: str, *, offset: int = 0, length: int | None = None, suffix: int | None = None
    ) -> bytes | None:
        """The bytes of ``key`` (from ``offset``, ``length`` of them; or its last ``suffix``), or None where no file
        is there (a folder reads so, as zarr's ``LocalStore`` reads it): never through a link nor from a special
        file, each refused by name; so is a file that cannot be read."""
        path = self.path(key)
        with self.reading(path):
            return read_file(path, offset=offset, length=length, suffix=suffix)

    @contextlib.contextmanager
    def reading(self, path: Path) -> Iterator[None]:
        """Raise what stands at ``path`` where a file is read (a special file, a link, a file that cannot be read)
        as the refusal that names it."""
        try:
            yield
        except SpecialFile as exc:
            raise special(path, self.label, exc.kind) from None
        except PermissionError as exc:
            raise unreadable(path, self.label, exc) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise linked(path) from None
            raise

    def is_file(self, key: str) -> bool:
        """Whether a file (not a link) is at ``key``."""
        path = self.path(key)
        return path.is_file() and not path.is_symlink()

    def keys_under(self, prefix: str = "") -> Iterator[str]:
        """Every key under ``prefix``, the folder walked without following a linked folder."""
        base = self.path(prefix) if prefix else self.root  # the root itself may be a link, as to any folder
        if base.is_dir() and (base == self.root or not base.is_symlink()):
            for dirpath, _, filenames in os.walk(base):
                for name in filenames:
                    yield Path(dirpath, name).relative_to(self.root).as_posix()

    def names_under(self, prefix: str = "") -> list[str]:
        """The names directly under ``prefix`` ('' for the root), sorted: files and folders."""
        base = self.path(prefix) if prefix else self.root
        return sorted(os.listdir(base)) if base.is_dir() and (base == self.root or not base.is_symlink()) else []
