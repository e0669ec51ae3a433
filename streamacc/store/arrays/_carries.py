"""The carries kept at block boundaries: one Zarr v3 array per carry leaf, one chunk per kept boundary.

A run keeps the carry entering some of its blocks (every block's for a narrow carry, every
few blocks' for a wide one: the run's bookkeeping decides) so that any block can be
recomputed from the nearest carry before it. Each leaf is an array
``_streamacc/carries/leaf_{i}`` of shape ``[boundaries, *leaf shape]`` whose chunk ``b``
holds the carry after ``b`` blocks (in scan order), written once, uncompressed, with its
CRC-32C trailer (zarr's ``crc32c`` codec), so that a checker reads four bytes to compare a
carry with its record and any Zarr reader reads the carries as a checkpoint series
(boundaries not kept read as the fill value). A dtype Zarr cannot store (bfloat16 and the
other ml_dtypes types) is stored as the unsigned integers of its bits, with its name in the
array's ``streamacc_dtype`` attribute; a PRNG key leaf is stored as its key data, with its
implementation in ``streamacc_key``. Host arrays in, host arrays out: no JAX.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import google_crc32c
import numpy as np

from ...base import dtype_from_name, dtype_name
from ..targets import BOOKKEEPING, Target
from ._documents import stored_crc32c

__all__ = ["CARRIES", "CarryDamaged", "CarryLeaf", "CarryStore"]

CARRIES = f"{BOOKKEEPING}/carries"
"""The group of the kept carries."""

_NATIVE_KINDS = "biufc"  # what Zarr v3 stores under the dtype's own name


@dataclasses.dataclass(frozen=True)
class CarryLeaf:
    """One leaf of a run's carry as it is stored: its dtype, its shape, its PRNG key implementation (or None)."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    key: str | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def chunk_nbytes(self) -> int:
        """The bytes of its chunk before the checksum: an axis of length 0 is stored as one fill value."""
        return int(np.prod([max(1, n) for n in self.shape], dtype=np.int64)) * self.stored_dtype.itemsize

    @property
    def stored_dtype(self) -> np.dtype[Any]:
        """The dtype of its Zarr array: its own, or unsigned integers of its width for a dtype Zarr lacks."""
        return self.dtype if self.dtype.kind in _NATIVE_KINDS else np.dtype(f"u{self.dtype.itemsize}")

    def to_json(self) -> dict[str, Any]:
        return {"dtype": dtype_name(self.dtype), "shape": list(self.shape), "key": self.key}

    @classmethod
    def from_json(cls, doc: Any) -> CarryLeaf:
        """The leaf a manifest describes; ValueError, KeyError or TypeError when it describes none."""
        shape = doc["shape"]
        if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError(f"bad shape {shape!r}")
        key = doc.get("key")
        if key is not None and not isinstance(key, str):
            raise ValueError(f"bad key {key!r}")
        return cls(dtype_from_name(doc["dtype"]), tuple(shape), key)

    @classmethod
    def of(cls, array: np.ndarray, key: str | None) -> CarryLeaf:
        return cls(array.dtype, tuple(array.shape), key)


class CarryDamaged(ValueError):
    """A kept carry that is missing, or not the one its record names."""


def _fill(dtype: np.dtype[Any]) -> Any:
    return np.nan if dtype.kind in "fc" else (False if dtype.kind == "b" else 0)


class CarryStore:
    """The kept carries of one output: written chunk by chunk as blocks commit, read back checked."""

    def __init__(self, target: Target, leaves: Sequence[CarryLeaf]) -> None:
        self.target = target
        self.leaves = list(leaves)
        self._writers: list[Any] | None = None

    @staticmethod
    def path(i: int) -> str:
        return f"{CARRIES}/leaf_{i}"

    def key(self, i: int, boundary: int) -> str:
        """The key of leaf ``i``'s chunk at ``boundary``."""
        leaf = self.leaves[i]
        return f"{self.path(i)}/c/{boundary}" + "/0" * len(leaf.shape)

    def keys(self, boundary: int) -> list[str]:
        return [self.key(i, boundary) for i in range(len(self.leaves))]

    def create(self, boundaries: int, *, every: int) -> None:
        """Create the group and its arrays for ``boundaries`` boundaries (the run's blocks plus one), durably."""
        import zarr
        from zarr.codecs import BytesCodec, Crc32cCodec

        group = zarr.open_group(
            self.target.store,
            path=CARRIES,
            mode="a",
            attributes={
                "description": "the carry entering a block, kept at every few block boundaries (see the manifest)",
                "every": every,
            },
        )
        for i, leaf in enumerate(self.leaves):
            attributes: dict[str, Any] = {}
            if leaf.stored_dtype != leaf.dtype:
                attributes["streamacc_dtype"] = dtype_name(leaf.dtype)
            if leaf.key is not None:
                attributes["streamacc_key"] = leaf.key
            group.create_array(
                f"leaf_{i}",
                shape=(boundaries, *leaf.shape),
                chunks=(1, *(max(1, n) for n in leaf.shape)),
                dtype=leaf.stored_dtype,
                fill_value=_fill(leaf.stored_dtype),
                serializer=BytesCodec(),
                compressors=[Crc32cCodec()],
                dimension_names=["boundary", *(f"leaf_{i}_dim_{d + 1}" for d in range(len(leaf.shape)))],
                attributes=attributes,
                config={"write_empty_chunks": True},
                overwrite=True,
            )
        documents = [f"{self.path(i)}/zarr.json" for i in range(len(self.leaves))]
        self.target.make_durable([f"{CARRIES}/zarr.json", *documents])
        self._writers = None

    def resize(self, boundaries: int) -> None:
        """Give every leaf's array ``boundaries`` boundaries (an extended run), durably."""
        import zarr

        for i, leaf in enumerate(self.leaves):
            zarr.open_array(self.target.store, path=self.path(i), mode="r+", zarr_format=3).resize(
                (boundaries, *leaf.shape)
            )
        self.target.make_durable([f"{self.path(i)}/zarr.json" for i in range(len(self.leaves))])
        self._writers = None

    def boundaries(self) -> int:
        """How many boundaries each leaf's array has (its first axis), as stored; 0 when it is missing."""
        raw = self.target.read(f"{self.path(0)}/zarr.json") if self.leaves else None
        try:
            return int(json.loads(raw)["shape"][0]) if raw is not None else 0
        except (ValueError, KeyError, TypeError, IndexError):
            return 0

    def remove_past(self, boundary: int) -> list[str]:
        """Remove every stored carry chunk after ``boundary`` (a killed writer's, or an extended run's last, which
        the longer run recomputes); the keys removed."""
        removed = []
        for i in range(len(self.leaves)):
            prefix = f"{self.path(i)}/c/"
            for key in self.target.list_keys(f"{self.path(i)}/"):  # an array's prefix: Icechunk lists no other
                head = key[len(prefix) :].partition("/")[0] if key.startswith(prefix) else ""
                if head.isdigit() and head.isascii() and int(head) > boundary:
                    self.target.delete(key)
                    removed.append(key)
        return removed

    def _chunk_writers(self) -> list[Any]:
        if self._writers is None:
            from ._chunks import ChunkWriter

            writers = []
            for i in range(len(self.leaves)):
                raw = self.target.read(f"{self.path(i)}/zarr.json")
                if raw is None:
                    raise FileNotFoundError(f"{self.path(i)}/zarr.json is missing")
                writers.append(ChunkWriter.of_document(self.target.store, self.path(i), json.loads(raw)))
            self._writers = writers
        return self._writers

    def write(self, boundary: int, values: Sequence[np.ndarray]) -> tuple[list[str], list[int]]:
        """Write the carry at ``boundary`` (one host array per leaf, not yet durable); its keys and CRC-32Cs."""
        keys, crcs = [], []
        for writer, leaf, value in zip(self._chunk_writers(), self.leaves, values, strict=True):
            data = np.ascontiguousarray(value).reshape(leaf.shape).view(leaf.stored_dtype)[None]
            (chunk,) = writer.write(boundary, data)
            crc = chunk.crc32c
            if crc is None:  # zarr encoded it itself
                raw = self.target.read(chunk.key)
                crc = None if raw is None else stored_crc32c(raw)
                if crc is None:
                    raise FileNotFoundError(f"carry chunk {chunk.key} is not in the store right after it was written")
            keys.append(chunk.key)
            crcs.append(int(crc))
        return keys, crcs

    def checksums(self, values: Sequence[np.ndarray]) -> list[int]:
        """The CRC-32C each leaf's chunk of the carry ``values`` gets when written, computed without writing it."""
        out = []
        for leaf, value in zip(self.leaves, values, strict=True):
            chunk = np.full([max(1, n) for n in leaf.shape], _fill(leaf.stored_dtype), dtype=leaf.stored_dtype)
            data = np.asarray(value).reshape(leaf.shape).view(leaf.stored_dtype)
            chunk[tuple(slice(0, n) for n in leaf.shape)] = data
            out.append(int(google_crc32c.value(chunk.tobytes())))
        return out

    def read(self, boundary: int, crcs: Sequence[int]) -> list[np.ndarray]:
        """The carry at ``boundary``, each leaf's chunk checked against its recorded CRC-32C.

        Raises :class:`CarryDamaged` naming the chunk when one is missing or not the one recorded.
        """
        if len(crcs) != len(self.leaves):
            raise CarryDamaged(f"{len(crcs)} checksums recorded for the {len(self.leaves)} leaves of the carry")
        out = []
        for i, (leaf, crc) in enumerate(zip(self.leaves, crcs, strict=True)):
            key = self.key(i, boundary)
            raw = self.target.read(key)
            if raw is None:
                raise CarryDamaged(f"carry chunk {key} is missing")
            if len(raw) != leaf.chunk_nbytes + 4 or stored_crc32c(raw) != crc:
                raise CarryDamaged(f"carry chunk {key} is not the one recorded (its bytes or CRC-32C differ)")
            body = np.frombuffer(raw, dtype=leaf.stored_dtype, count=int(np.prod(leaf.shape, dtype=np.int64)))
            out.append(body.view(leaf.dtype).reshape(leaf.shape).copy())
        return out
