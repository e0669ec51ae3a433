"""Durable, link-safe local-file primitives: atomic replace, fsync, reads that never block, a directory lock, cleanup.

A write counts as done only once it would survive a power cut, so every helper here
fsyncs the file and then the directory that names it. Outputs get copied, synced and
extracted from archives, so their contents are untrusted: nothing here follows a
symbolic link found inside an output, and deletion never descends through one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import re
import shutil
import stat
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "PAGE",
    "DirLock",
    "SpecialFile",
    "aligned_empty",
    "atomic_write",
    "find_misplaced",
    "flock_holder",
    "fsync_dir",
    "fsync_file",
    "read_file",
    "read_into",
    "remove_temp_files",
    "remove_tree_contents",
    "scratch",
    "special_kind",
    "temp_file_of",
    "write_new",
]

_TEMP = ".streamacc-tmp"  # atomic_write's: NAME.streamacc-tmp
_ZARR_TEMP = re.compile(r"^(?P<stem>.+)\.[0-9a-f]{32}\.partial$")  # zarr's LocalStore: STEM.<uuid4 hex>.partial


class SpecialFile(OSError):
    """A named pipe, a socket or a device where a file is read: refused, never read (a named pipe would block)."""

    def __init__(self, path: str | Path, mode: int) -> None:
        super().__init__(errno.EINVAL, f"{special_kind(mode)} stands where a file belongs", str(path))
        self.kind = special_kind(mode)


def special_kind(mode: int) -> str:
    """What a file of ``mode`` (``st_mode``) that is neither a regular file, a folder nor a link is, in words."""
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a special file"


_READ = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
"""How a file is opened to be read: never blocking (a named pipe put where a file belongs opens at once, and is then
refused by its type), never taking a terminal."""


def _open_to_read(path: str | Path, *, follow: bool) -> int | None:
    """A descriptor of ``path`` opened to be read, or None where nothing is there."""
    try:
        return os.open(path, _READ | (0 if follow else os.O_NOFOLLOW))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a device without its driver
            raise SpecialFile(path, os.lstat(path).st_mode) from None
        raise


def read_file(
    path: str | Path, *, offset: int = 0, length: int | None = None, suffix: int | None = None
) -> bytes | None:
    """The bytes of the regular file at ``path`` (from ``offset``, ``length`` of them; or its last ``suffix``), or
    None where nothing is there or a folder is (a folder reads as absent, as zarr's ``LocalStore`` reads it).

    Never follows a link (``OSError``, ``ELOOP``) and never blocks: a named pipe, a socket or a
    device raises :class:`SpecialFile`.
    """
    fd = _open_to_read(path, follow=False)
    if fd is None:
        return None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            return None
        if not stat.S_ISREG(info.st_mode):
            raise SpecialFile(path, info.st_mode)
        size = info.st_size
        start = max(0, size - suffix) if suffix is not None else min(offset, size)
        stop = size if length is None or suffix is not None else min(size, start + length)
        parts, at = [], start
        while at < stop and (got := os.pread(fd, stop - at, at)):
            parts.append(got)
            at += len(got)
        return b"".join(parts)
    finally:
        os.close(fd)


def fsync_file(path: Path, *, drop_cache: bool = False) -> None:
    """Flush one file's data to stable storage (never through a link).

    With ``drop_cache`` its now clean pages also leave the page cache: streamed output
    is not read back soon, and reclaiming gigabytes of cached pages later costs the
    kernel more system time than dropping them here.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
        if drop_cache and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries, making creations and renames in it durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


PAGE = 4096
"""What a buffer's address and a direct write's length are aligned to (a multiple of any disk's logical block)."""

_DIRECT = getattr(os, "O_DIRECT", 0)


def aligned_empty(nbytes: int, alignment: int) -> npt.NDArray[np.uint8]:
    """An uninitialised buffer of ``nbytes`` bytes whose first byte lies on a multiple of ``alignment``."""
    import numpy as np

    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    skip = -raw.ctypes.data % alignment
    return raw[skip : skip + nbytes]


_SCRATCH = threading.local()  # per thread: "pad" (a partial last chunk), "read", "equal": each caller's own


def scratch(name: str, nbytes: int) -> npt.NDArray[np.uint8]:
    """This thread's reusable buffer ``name`` of at least ``nbytes``, starting on a page boundary.

    Page-aligned so that the encoded chunks written from it may bypass the page cache
    (see ``write_new``).
    """
    buf = getattr(_SCRATCH, name, None)
    if buf is None or buf.nbytes < nbytes:
        buf = aligned_empty(nbytes, PAGE)
        setattr(_SCRATCH, name, buf)
    return buf


def read_into(
    path: str | Path,
    buffer: Callable[[int], Any],
    *,
    follow: bool = True,
    whole: bool = True,
    drop_cache: bool = False,
) -> Any:
    """The bytes of the file at ``path`` (a chunk's stored bytes), read into a buffer the caller chooses.

    ``buffer(size)`` is called once the file is open, with its size, and returns a writable
    buffer of exactly ``size`` bytes (a numpy ``uint8`` array or a memoryview), or None where
    the caller has no room for them. Returns that buffer, filled; None where no file is
    there or the caller had no room. A memoryview ``buffer`` made is released when reading
    fails, since the caller never gets it back.

    Parameters
    ----------
    follow : bool
        Whether a link at ``path`` is followed: False for a file inside an output (its
        contents are untrusted), where a link raises ``OSError`` (``ELOOP``), a folder reads
        as absent and a named pipe, a socket or a device raises :class:`SpecialFile`. Either
        way a named pipe is never waited on.
    whole : bool
        A file that ends before the size it had when opened (it shrank while read) raises
        ``OSError`` (``PATH ended after N of M bytes``); with False, the part read is
        returned, shorter, for a checksum to refuse.
    drop_cache : bool
        Whether the file's pages leave the page cache once read (a chunk read once).
    """
    fd = _open_to_read(path, follow=follow)
    if fd is None:
        return None
    try:
        info = os.fstat(fd)
        if not (follow or stat.S_ISREG(info.st_mode)):
            if stat.S_ISDIR(info.st_mode):
                return None
            raise SpecialFile(path, info.st_mode)
        size = info.st_size
        into = buffer(size)
        if into is None:
            return None
        try:
            done = 0
            with memoryview(into) as view:
                while done < size and (got := os.readv(fd, [view[done:]])):
                    done += got
            if done < size and whole:
                raise OSError(f"{path} ended after {done} of {size} bytes")
        except BaseException:
            if isinstance(into, memoryview):
                into.release()
            raise
        if drop_cache:
            with contextlib.suppress(OSError, AttributeError):  # read once: keep it out of the page cache
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return into if done == size else into[:done]
    finally:
        os.close(fd)


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


def write_new(path: Path, data: memoryview) -> None:
    """Store ``data`` at ``path`` as zarr's LocalStore does: into a temp file renamed over it (not made durable).

    The temp file is named as zarr names its own (``STEM.<32 hex digits>.partial``), so the
    debris of a killed writer is recognised and cleaned the same way. The file's whole
    pages are written past the page cache (``O_DIRECT``) when ``data`` starts on a page
    boundary and the file system allows it: streamed output is not read back soon, and
    copying it into the cache cost the kernel more CPU than the disk's own transfer. The
    last partial page, and everything on a file system that refuses direct writes (tmpfs),
    goes through the page cache as before.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{uuid.uuid4().hex}.partial")
    whole = len(data) // PAGE * PAGE if _DIRECT else 0
    try:
        fd = -1
        if whole:
            with contextlib.suppress(OSError):  # EINVAL: no direct I/O on this file system
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _DIRECT, 0o644)
        if fd < 0:
            whole = 0
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            if whole:
                try:
                    _write_all(fd, data[:whole])
                except OSError:  # refused after all (an unaligned buffer, a file system's own limits)
                    os.lseek(fd, 0, os.SEEK_SET)
                    whole = 0
                fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~_DIRECT)
            _write_all(fd, data[whole:])
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` durably, so that a crash leaves either the old or the new file.

    The temp file is opened without following links and renamed over ``path`` (a rename
    replaces a link rather than writing through it). The caller makes sure the parent
    directory is real.
    """
    tmp = path.with_name(path.name + ".streamacc-tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        try:
            _write_all(fd, memoryview(data))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:  # a full disk or an interrupt: leave the old file, and no temp file
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def find_misplaced(root: Path, *, folders: bool = True) -> tuple[Path, str] | None:
    """The first entry inside ``root`` that streamacc must not act on, and what it is, in words (``a link``, ``a
    named pipe``, ``a socket``, ``a device``, ``a folder where a file belongs``); None where there is none.

    A folder belongs nowhere a file does: named ``zarr.json``, or at a chunk's place in a Zarr
    array's ``c/`` folder (as many levels down as the array has dimensions, read from its own
    ``zarr.json``), where a writer would fail to write the file, and a reader take the chunk
    for missing. Reads each folder once; the entries' types come with the listing, so a large
    output costs no system call per file. A folder that cannot be listed raises its ``OSError``.
    Without ``folders``, a folder where a file belongs is not asked for (a clearing removes it).
    """
    pending: list[tuple[Path, int | None]] = [(root, None)]  # a folder, and the levels of chunk keys below it
    while pending:
        folder, levels = pending.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except FileNotFoundError:  # removed by a writer since its parent was listed
            continue
        chunk_levels = _chunk_levels(folder) if levels is None and any(e.name == "c" for e in entries) else None
        for entry in entries:
            path = Path(entry.path)
            if entry.is_symlink():
                return path, "a link"
            if entry.is_dir(follow_symlinks=False):
                below = levels - 1 if levels is not None else chunk_levels if entry.name == "c" else None
                if folders and (entry.name == "zarr.json" or below == 0):
                    return path, "a folder where a file belongs"
                pending.append((path, below))
            elif not entry.is_file(follow_symlinks=False):
                return path, special_kind(entry.stat(follow_symlinks=False).st_mode)
    return None


def _chunk_levels(folder: Path) -> int | None:
    """How many levels of folders below ``c/`` the chunk keys of the Zarr array in ``folder`` go (its dimensions,
    with zarr's default chunk key encoding), the last of them files; None where ``folder`` holds no such array."""
    try:
        raw = read_file(folder / "zarr.json")
        doc = json.loads(raw) if raw is not None else None
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("node_type") != "array" or not isinstance(doc.get("shape"), list):
        return None
    encoding = doc.get("chunk_key_encoding")
    default = {"name": "default", "configuration": {"separator": "/"}}
    if encoding is not None and (not isinstance(encoding, dict) or {**default, **encoding} != default):
        return None  # another encoding: its chunk keys are not folders below c/
    return len(doc["shape"])


def temp_file_of(name: str) -> tuple[str, ...]:
    """The file names a temp file of this name may be writing: none when it is not a writer's temp file.

    ``atomic_write`` writes ``NAME`` through ``NAME.streamacc-tmp``; zarr's LocalStore writes
    ``STEM`` or ``STEM.SUFFIX`` through ``STEM.<32 hex digits>.partial`` (it replaces the suffix).
    """
    if name.endswith(_TEMP) and len(name) > len(_TEMP):
        return (name[: -len(_TEMP)],)
    match = _ZARR_TEMP.match(name)
    return (match["stem"], f"{match['stem']}.json") if match else ()


def remove_temp_files(root: Path, owned: Callable[[str], bool]) -> list[Path]:
    """Delete the temp files a killed writer left under ``root`` while writing keys for which ``owned`` holds.

    ``owned`` gets '/'-separated keys relative to ``root``. Any other file is left alone,
    whatever its name (a user's ``thesis.partial`` is not a temp file of ours). Never
    descends through a link. Returns what was removed.
    """
    removed = []
    for dirpath, _, filenames in os.walk(root):
        folder = Path(dirpath).relative_to(root)
        for name in filenames:
            if any(owned((folder / real).as_posix()) for real in temp_file_of(name)):
                path = Path(dirpath, name)
                path.unlink(missing_ok=True)
                removed.append(path)
    return removed


def remove_tree_contents(root: Path, keep: set[Path]) -> None:
    """Delete everything under ``root`` except the files in ``keep`` and the folders holding them.

    Links are removed, never followed (``shutil.rmtree`` does not follow them either).
    """
    keep_dirs = {parent for path in keep for parent in path.parents}
    for child in sorted(root.iterdir()):
        if child in keep:
            continue
        if child in keep_dirs and not child.is_symlink():
            remove_tree_contents(child, keep)
        elif child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _flock_holder(fd: int) -> str:
    """Who holds the flock on ``fd``'s file, from /proc/locks (Linux), else 'another process'."""
    inode = os.fstat(fd).st_ino
    with contextlib.suppress(OSError):
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
                return f"pid {fields[4]}"
    return "another process"


def flock_holder(path: Path) -> str | None:
    """Who holds a ``flock`` on ``path`` now ('pid N'), read from /proc/locks without taking it; None for nobody, or
    where the system does not say (no /proc)."""
    try:
        found = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    node = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}:{found.st_ino}"
    for line in lines:
        fields = line.split()  # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:5678 0 EOF"; a waiter's has "->" after "1:"
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == node:
            return f"pid {fields[4]}"
    return None


class DirLock:
    """An exclusive advisory lock (``flock``) on a directory itself.

    Locking the output directory needs no lock file, so there is nothing a link could
    redirect and nothing for other tools to trip over. The kernel drops the lock when its
    holder dies, so a killed writer never blocks a resume, while a live writer always
    blocks a second one. ``acquire`` returns the holder's description when the lock is
    taken by someone else, None once it is ours.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self) -> str | None:
        fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _flock_holder(fd)
            os.close(fd)
            return holder
        self._fd = fd
        return None

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None
