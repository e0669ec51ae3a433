"""The zarr names streamacc uses that zarr 3.1 keeps in private modules, in one place, each with its reason.

Everything else comes from zarr's public modules (``zarr``, ``zarr.abc.store``,
``zarr.abc.buffer``, ``zarr.buffer``, ``zarr.storage``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib

# Runs one of a store's coroutines (get, set, list) on zarr's own event loop (``sync``); zarr.api.synchronous
# wraps whole array and group calls only, and a loop of our own would not be the one its stores use. The
# module also holds that loop and its thread (``loop``, ``iothread``), which nothing public stops.
from zarr.core import sync as _sync_module

# The array configuration (write_empty_chunks) given to an array opened from its metadata.
from zarr.core.array_spec import ArrayConfig, ArrayConfigParams

# The only chunk grid zarr 3.1 has: what chunk arithmetic checks a stored array's grid against.
from zarr.core.chunk_grids import RegularChunkGrid

# The mix-ins a data type declares its byte order and item size with: without the first the bytes
# codec drops its "endian", without the second blosc shuffles single bytes (see _datatypes).
from zarr.core.dtype.common import HasEndianness, HasItemSize

# A group's zarr.json validated as zarr would read it, without opening the group.
from zarr.core.group import GroupMetadata

# An array's metadata document parsed and validated, to open an array at a known document without
# reading it back (and to build the codec pipeline of a chunk): zarr.Array exposes it, never its class.
from zarr.core.metadata.v3 import ArrayV3Metadata

sync = _sync_module.sync

SETTLE_SECONDS = 10.0
"""How long a successful command's exit waits for zarr's event loop to stop (zarr's own handler: 0.2 s)."""


DRAIN_SECONDS = 2.0
"""How long the exit waits for the requests still running on zarr's loop (a read that failed leaves its siblings
running) before cancelling them."""


async def _drained(timeout: float) -> None:
    """Let every other task on the running loop end (cancelled after ``timeout`` seconds), each end retrieved."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def settle_event_loop(timeout: float = SETTLE_SECONDS) -> None:
    """Stop zarr's event loop and close it once its thread has ended, waiting up to ``timeout`` seconds.

    zarr's exit handler asks the loop to stop, waits 0.2 s for its thread, and then closes the
    loop whether it stopped or not: on a busy machine the thread is not scheduled in time, and
    the process prints "Thread did not finish cleanly; forcefully closing the event loop" and a
    traceback ("Cannot close a running event loop") after the command's last line. Run at exit
    before zarr's handler, this leaves that handler nothing to do. A loop that does not stop in
    time is left to it. The requests still running on the loop end first (see
    :data:`DRAIN_SECONDS`): a chunk read that failed leaves the reads gathered with it running,
    and a loop closed under them prints "Task was destroyed but it is pending!" for each.
    """
    loop, thread = _sync_module.loop[0], _sync_module.iothread[0]
    if loop is None or thread is None or loop.is_closed():
        return
    with contextlib.suppress(Exception):  # a loop that cannot run it any more: nothing left to end
        asyncio.run_coroutine_threadsafe(_drained(DRAIN_SECONDS), loop).result(DRAIN_SECONDS + timeout)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout)
    if thread.is_alive():
        return
    loop.close()
    _sync_module.loop[0] = None
    _sync_module.iothread[0] = None


_SETTLING: list[bool] = []


def settle_at_exit() -> None:
    """Settle zarr's event loop at the interpreter's exit (:func:`settle_event_loop`), before zarr's own handler
    closes it; registered once per process, by what reads an output's chunks through zarr."""
    if not _SETTLING:
        _SETTLING.append(True)
        atexit.register(settle_event_loop)  # run before zarr's, registered as zarr was imported


__all__ = [
    "ArrayConfig",
    "ArrayConfigParams",
    "ArrayV3Metadata",
    "GroupMetadata",
    "HasEndianness",
    "HasItemSize",
    "RegularChunkGrid",
    "settle_at_exit",
    "settle_event_loop",
    "sync",
]
