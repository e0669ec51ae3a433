"""Durable local-file primitives: atomic replace, fsync, an exclusive lock, temp cleanup.

A write counts as done only once it would survive a power cut, so every helper here
fsyncs the file and then the directory that names it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ._errors import LockedError

__all__ = ["FileLock", "atomic_write", "fsync_dir", "fsync_file", "remove_partials"]

PARTIAL_SUFFIXES = (".partial", ".streamacc-tmp")


def fsync_file(path: Path) -> None:
    """Flush one file's data to stable storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries, making creations and renames in it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves either the old or the new file.

    With ``sync`` the new file is also durable when this returns.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".streamacc-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:  # a full disk or an interrupt: leave the old file, and no temp file
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_dir(path.parent)


def remove_partials(root: Path) -> list[Path]:
    """Delete temp files a killed writer left under ``root``; return what was removed."""
    removed = []
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            if name.endswith(PARTIAL_SUFFIXES):
                path = Path(dirpath, name)
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


class FileLock:
    """An exclusive advisory lock (``flock``) on a file.

    The kernel drops the lock when its holder dies, so a lock left by a killed process
    never blocks a resume, while a live writer always blocks a second one.
    """

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> FileLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise LockedError(
                f"{self.what} is being written by {holder}; wait for it to finish or stop it, then use --resume"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> FileLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()
