"""The Zarr sink: one Zarr v3 group per run, one array per output leaf.

Arrays are chunked along ``step`` so that every block covers whole chunks (no
read-modify-write, no two writers on one chunk), filled with NaN where floating so
that unwritten steps read as missing, and named by dimension for xarray. The sink
takes host arrays; it knows nothing of JAX.
"""

from __future__ import annotations

import warnings
import zlib
from collections.abc import Mapping

import numpy as np
import zarr

from ._codecs import compressors_for
from ._errors import StoreError
from ._target import Target

__all__ = ["ArraySpec", "ZarrSink"]

ArraySpec = tuple[tuple[int, ...], np.dtype]
"""(shape, dtype) of one output array."""


def _fill_value(dtype: np.dtype) -> object:
    if dtype.kind in "fc":
        return np.nan
    return False if dtype.kind == "b" else 0


def checksum(data: np.ndarray) -> int:
    """CRC-32 of an array's bytes in C order (zlib's, which releases the GIL)."""
    return zlib.crc32(memoryview(np.ascontiguousarray(data)).cast("B"))


class ZarrSink:
    """Writes blocks of named host arrays into a Zarr group, durably."""

    def __init__(self, target: Target, group: zarr.Group, chunk: int) -> None:
        self.target = target
        self.group = group
        self.chunk = chunk
        self.arrays = {name: arr for name, arr in group.arrays()}

    @classmethod
    def create(cls, target: Target, specs: Mapping[str, ArraySpec], *, chunk: int, codec: str, attrs: dict) -> ZarrSink:
        """Create the group and its arrays (the target must be empty or cleared)."""
        compressors = compressors_for(codec)
        group = zarr.open_group(target.store, mode="a", attributes=attrs)
        for name, (shape, dtype) in specs.items():
            group.create_array(
                name,
                shape=shape,
                chunks=(max(1, min(chunk, shape[0])), *shape[1:]),
                dtype=dtype,
                fill_value=_fill_value(np.dtype(dtype)),
                compressors=compressors,
                dimension_names=["step", *(f"dim_{i}" for i in range(1, len(shape)))],
                config={"write_empty_chunks": True},  # every committed chunk exists on disk
            )
        with warnings.catch_warnings():  # our own bookkeeping folder, and v3 consolidation's caveat
            warnings.simplefilter("ignore")
            zarr.consolidate_metadata(target.store)
        return cls(target, zarr.open_group(target.store, mode="r+"), chunk)

    @classmethod
    def open(cls, target: Target, chunk: int) -> ZarrSink:
        """Open an existing output for resuming or verifying."""
        try:
            group = zarr.open_group(target.store, mode="r+" if target.store.supports_writes else "r")
        except (FileNotFoundError, ValueError, KeyError) as exc:
            raise StoreError(f"{target.label} is not a streamacc output ({exc}); check the path") from None
        return cls(target, group, chunk)

    def chunk_keys(self, name: str, start: int, stop: int) -> list[str]:
        arr = self.arrays[name]
        rest = (0,) * (arr.ndim - 1)
        encode = arr.metadata.encode_chunk_key
        return [f"{name}/{encode((i, *rest))}" for i in range(start // self.chunk, -(-stop // self.chunk))]

    def write(self, start: int, stop: int, ys: Mapping[str, np.ndarray]) -> dict[str, int]:
        """Write steps ``[start, stop)`` of every array and make them durable; return CRCs."""
        keys = []
        for name, data in ys.items():
            self.arrays[name][start:stop] = data
            keys += self.chunk_keys(name, start, stop)
        self.target.make_durable(keys)
        return {name: checksum(data) for name, data in ys.items()}

    def read(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Read back steps ``[start, stop)`` of every array."""
        return {name: arr[start:stop] for name, arr in self.arrays.items()}
