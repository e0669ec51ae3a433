"""A full disk injected at one write of the streamacc command line: a test helper.

    python tests/faultrun.py chunk N    write OUT ...   # the N-th chunk the zarr LocalStore writes fails
    python tests/faultrun.py manifest N write OUT ...   # the N-th manifest write fails half way through

Either fault raises ``OSError(ENOSPC, 'No space left on device')`` where a real full disk
would; the process then exits with the command's own exit code. Tests use
:func:`full_disk` in-process, which undoes the fault afterwards.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import sys
from collections.abc import Iterator

from zarr.storage import LocalStore

import streamacc.store._files
import streamacc.store._target
from streamacc.cli._main import main


def _full_disk() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def fail_chunk(at: int) -> None:
    """The ``at``-th chunk (not metadata) written through LocalStore.set raises ENOSPC."""
    real_set = LocalStore.set
    count = itertools.count(1)

    async def set(self, key, value):
        if not key.endswith("zarr.json") and next(count) == at:
            raise _full_disk()
        return await real_set(self, key, value)

    LocalStore.set = set


class _HalfWrite:
    """``os`` as seen by one atomic_write call: the disk fills half way through the data."""

    def __getattr__(self, name: str):
        return getattr(os, name)

    def write(self, fd: int, data) -> int:
        os.write(fd, bytes(data[: len(data) // 2]))
        raise _full_disk()


def fail_manifest(at: int) -> None:
    """The ``at``-th manifest write raises ENOSPC (writes 1 and 2 create the run, k + 3 commits block k)."""
    real_write = streamacc.store._files.atomic_write
    count = itertools.count(1)

    def atomic_write(path, data, *, sync=True):
        if path.parent.name == "_streamacc" and path.name == "zarr.json" and next(count) == at:
            streamacc.store._files.os = _HalfWrite()  # only the committing thread writes manifests
            try:
                return real_write(path, data, sync=sync)
            finally:
                streamacc.store._files.os = os
        return real_write(path, data, sync=sync)

    streamacc.store._target.atomic_write = atomic_write


@contextlib.contextmanager
def full_disk(kind: str, at: int) -> Iterator[None]:
    """Within this block, write number ``at`` of ``kind`` ('chunk' or 'manifest') finds the disk full."""
    saved = LocalStore.set, streamacc.store._target.atomic_write
    {"chunk": fail_chunk, "manifest": fail_manifest}[kind](at)
    try:
        yield
    finally:
        LocalStore.set, streamacc.store._target.atomic_write = saved


if __name__ == "__main__":
    kind, at, *argv = sys.argv[1:]
    with full_disk(kind, int(at)):
        sys.exit(main(argv))
