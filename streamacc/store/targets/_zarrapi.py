"""The zarr names streamacc uses that zarr 3.1 keeps in private modules, in one place, each with its reason.

Everything else comes from zarr's public modules (``zarr``, ``zarr.abc.store``,
``zarr.abc.buffer``, ``zarr.buffer``, ``zarr.storage``).
"""

from __future__ import annotations

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

# Runs one of a store's coroutines (get, set, list) on zarr's own event loop; zarr.api.synchronous
# wraps whole array and group calls only, and a loop of our own would not be the one its stores use.
from zarr.core.sync import sync

__all__ = [
    "ArrayConfig",
    "ArrayConfigParams",
    "ArrayV3Metadata",
    "GroupMetadata",
    "HasEndianness",
    "HasItemSize",
    "RegularChunkGrid",
    "sync",
]
