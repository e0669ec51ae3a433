"""The zarr names streamacc uses that zarr 3.1 keeps in private modules, in one place, each with its reason.

Everything else comes from zarr's public modules (``zarr``, ``zarr.abc.store``,
``zarr.abc.buffer``, ``zarr.buffer``, ``zarr.storage``).
"""

from __future__ import annotations

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


def settle_event_loop(timeout: float = SETTLE_SECONDS) -> None:
    """Stop zarr's event loop and close it once its thread has ended, waiting up to ``timeout`` seconds.

    zarr's exit handler asks the loop to stop, waits 0.2 s for its thread, and then closes the
    loop whether it stopped or not: on a busy machine the thread is not scheduled in time, and
    the process prints "Thread did not finish cleanly; forcefully closing the event loop" and a
    traceback ("Cannot close a running event loop") after the command's last line. Run at exit
    before zarr's handler, this leaves that handler nothing to do. A loop that does not stop in
    time is left to it.
    """
    loop, thread = _sync_module.loop[0], _sync_module.iothread[0]
    if loop is None or thread is None or loop.is_closed():
        return
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout)
    if thread.is_alive():
        return
    loop.close()
    _sync_module.loop[0] = None
    _sync_module.iothread[0] = None


__all__ = [
    "ArrayConfig",
    "ArrayConfigParams",
    "ArrayV3Metadata",
    "GroupMetadata",
    "HasEndianness",
    "HasItemSize",
    "RegularChunkGrid",
    "settle_event_loop",
    "sync",
]
