"""A store that loses a chunk zarr encoded right after it was written: the write fails as a store failure.

With a codec that zarr encodes itself (zstd), the writer reads each chunk's CRC-32C back
from the store. A store that accepted the chunk but no longer has it (an object store
without read-after-write consistency, a faulty store) is the store failing: the write
stops with a StoreError naming the chunk and saying what is kept, not an internal crash.
"""

from __future__ import annotations

import numpy as np
import pytest
from zarr.storage import MemoryStore, WrapperStore

import streamacc
from streamacc.errors import StoreError


class _Forgetful(WrapperStore[MemoryStore]):
    """Accepts every write, but keeps no chunk of array ``y``."""

    async def set(self, key, value):
        if not key.startswith("y/c/"):
            await self._store.set(key, value)

    def _with_store(self, store):
        return type(self)(store)


def _step(carry, x):
    return carry + 1.0, carry


def test_a_chunk_lost_after_its_write_is_a_store_failure():
    with pytest.raises(StoreError, match=r"failed after 0 of 64 steps \(chunk y/c/0 is not in the store right after"):
        streamacc.write(
            _Forgetful(MemoryStore()), _step, np.float64(0.0), length=64, block_size=32, codec="zstd",
            summaries=False, progress=False,
        )  # fmt: skip
