"""Shards: a block's rows stored as one object of small chunks, each readable alone (Zarr v3's ``sharding_indexed``).

A shard holds its inner chunks' encoded bytes one after another (each its codecs' output,
``crc32c`` last, as an unsharded chunk is stored), then its index: for each inner chunk, in
C order of the shard's grid of inner chunks, the ``(offset, nbytes)`` of its bytes as two
little-endian uint64 (``2**64 - 1`` twice for a chunk not stored), followed by the index's own
CRC-32C (the spec's default ``index_codecs``: ``bytes``, ``crc32c``; ``index_location`` end).
The inner chunks are laid out in zarr-python's order (Morton order of their grid indices), so
a shard written here is the bytes zarr writes of it. A reader asks for the index (the last
bytes) and then the byte range of each inner chunk it needs: a small read decodes one inner
chunk, never the block.

An inner chunk that holds no row of the array (past its end, in the last shard) is not
stored, as zarr stores none. A block record keeps, for each shard, the CRC-32C of every inner
chunk it stores, in C order, and then its index's: :func:`shard_problem` checks a stored
shard against them.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from typing import Any

import google_crc32c
import numpy as np

from ._target import Target

__all__ = ["MISSING", "Sharding", "shard_problem", "sharding_of", "stored_checksums", "stored_checksums_of"]

MISSING = 2**64 - 1
"""An index entry's offset and size for an inner chunk that is not stored."""

_INDEX_DTYPE = np.dtype("<u8")


@dataclasses.dataclass(frozen=True)
class Sharding:
    """The geometry of an array's shards: a shard's shape (its chunk grid) and an inner chunk's."""

    shard: tuple[int, ...]
    inner: tuple[int, ...]

    @functools.cached_property
    def grid(self) -> tuple[int, ...]:
        """Inner chunks along each axis of a shard."""
        return tuple(s // c for s, c in zip(self.shard, self.inner, strict=True))

    @functools.cached_property
    def count(self) -> int:
        """Inner chunks in a shard."""
        return math.prod(self.grid)

    @property
    def index_nbytes(self) -> int:
        """The bytes of a shard's index, its CRC-32C included: what a reader asks for first."""
        return 16 * self.count + 4

    @functools.cached_property
    def trailing(self) -> list[tuple[int, ...]]:
        """The inner chunks' grid indices along the trailing axes, in C order."""
        return list(itertools.product(*(range(n) for n in self.grid[1:])))

    @functools.cached_property
    def layout(self) -> list[tuple[int, ...]]:
        """Every inner chunk's grid indices in the order their bytes lie in a shard: zarr-python's, the order of
        their compressed Morton codes (each axis's bits interleaved, lowest first, an axis of n chunks taking
        ``(n - 1).bit_length()`` bits)."""
        bits = [(n - 1).bit_length() for n in self.grid]

        def code(coords: tuple[int, ...]) -> int:
            z, at = 0, 0
            for bit in range(max(bits, default=0)):
                for axis, width in enumerate(bits):
                    if bit < width:
                        z |= ((coords[axis] >> bit) & 1) << at
                        at += 1
            return z

        return sorted(itertools.product(*(range(n) for n in self.grid)), key=code)

    def stored_rows(self, rows: int) -> int:
        """The inner chunks along the first axis stored in a shard whose first ``rows`` rows hold data."""
        return min(self.grid[0], -(-rows // self.inner[0]))

    def present(self, rows: int) -> list[tuple[int, ...]]:
        """The grid indices, in C order, of the inner chunks stored in a shard whose first ``rows`` rows hold data."""
        return [(i, *t) for i in range(self.stored_rows(rows)) for t in self.trailing]

    def checksums(self, rows: int) -> int:
        """How many CRC-32Cs a block record keeps for a shard whose first ``rows`` rows hold data: one per inner
        chunk stored, and its index's."""
        return self.stored_rows(rows) * len(self.trailing) + 1

    def encode_index(self, index: np.ndarray) -> tuple[bytes, int]:
        """``index`` (the grid's shape, then 2: offsets and sizes) as stored, and its CRC-32C."""
        body = np.ascontiguousarray(index, dtype=_INDEX_DTYPE).tobytes()
        crc = int(google_crc32c.value(body))
        return body + crc.to_bytes(4, "little"), crc

    def empty_index(self) -> np.ndarray:
        return np.full((*self.grid, 2), MISSING, dtype=_INDEX_DTYPE)

    def read_index(self, tail: Any) -> tuple[np.ndarray, int] | None:
        """The index in a shard's last :attr:`index_nbytes` bytes and its CRC-32C, or None when its bytes do not
        give the checksum they end with (or are too short)."""
        raw = np.frombuffer(tail, dtype=np.uint8)
        if len(raw) != self.index_nbytes:
            return None
        crc = int.from_bytes(raw[-4:].tobytes(), "little")
        if int(google_crc32c.value(raw[:-4])) != crc:
            return None
        return raw[:-4].view(_INDEX_DTYPE).reshape(*self.grid, 2), crc


def sharding_of(metadata: Any) -> tuple[Sharding, list[Any]] | None:
    """The shards of an array (zarr's metadata) and its inner chunks' codecs, where it is sharded as streamacc
    shards (the index at the end, ``bytes`` and ``crc32c`` its codecs); else None."""
    from zarr.codecs import BytesCodec, Crc32cCodec, ShardingCodec

    codecs = list(getattr(metadata, "codecs", ()))
    if len(codecs) != 1 or not isinstance(codecs[0], ShardingCodec):
        return None
    codec = codecs[0]
    index = list(codec.index_codecs)
    if codec.index_location.value != "end" or len(index) != 2:
        return None
    first, last = index
    if not isinstance(first, BytesCodec) or not isinstance(last, Crc32cCodec):
        return None
    if first.endian is not None and first.endian.value != "little":
        return None
    shard = tuple(int(n) for n in metadata.chunk_grid.chunk_shape)
    return Sharding(shard, tuple(int(n) for n in codec.chunk_shape)), list(codec.codecs)


def _crc_of(piece: Any) -> int | None:
    """The CRC-32C an encoded chunk ends with, where its bytes give it; else None."""
    if len(piece) < 4:
        return None
    data = np.frombuffer(piece, dtype=np.uint8)
    value = int.from_bytes(data[-4:].tobytes(), "little")
    return value if int(google_crc32c.value(data[:-4])) == value else None


def shard_problem(sharding: Sharding, raw: Any, recorded: list[int], rows: int) -> str | None:
    """What is wrong with the stored shard ``raw`` (whose first ``rows`` rows hold data) against the checksums
    its record keeps (:meth:`Sharding.checksums` of them: each stored inner chunk's, in C order, then the
    index's), as the end of a sentence naming the shard; None when every inner chunk and the index pass."""
    data = memoryview(raw).cast("B")
    if len(recorded) != sharding.checksums(rows):
        return f"has {len(recorded)} checksums in its record where it stores {sharding.checksums(rows)}"
    if len(data) < sharding.index_nbytes:
        return "is too short to hold its index (damaged, or not this output's)"
    found = sharding.read_index(data[len(data) - sharding.index_nbytes :])
    if found is None:
        return "has an index whose bytes do not match their checksum (damaged in place)"
    index, crc = found
    if crc != recorded[-1]:
        return (
            f"is not the shard committed (its index's CRC-32C is {crc:08x}, its record says {recorded[-1]:08x}): it "
            "was replaced or copied from elsewhere"
        )
    body = len(data) - sharding.index_nbytes
    for coords, expected in zip(sharding.present(rows), recorded, strict=False):
        offset, nbytes = (int(v) for v in index[coords])
        if offset == MISSING or offset + nbytes > body:
            return f"does not hold its inner chunk {coords} (its index says nothing of it, or points past its end)"
        piece = data[offset : offset + nbytes]
        stored = int.from_bytes(bytes(piece[-4:]), "little") if nbytes >= 4 else None
        if stored != expected:
            return (
                f"holds an inner chunk {coords} that is not the one committed (its CRC-32C differs from its record): "
                "it was replaced or copied from elsewhere"
            )
        if _crc_of(piece) is None:
            return f"holds an inner chunk {coords} whose bytes do not match their checksum (damaged in place)"
    return None


def stored_checksums_of(target: Target, sharding: Sharding, shards: list[tuple[str, int]]) -> list[list[int] | str]:
    """For each shard ``(key, rows)`` (its first ``rows`` rows holding data), the CRC-32Cs it holds as its record
    keeps them (each stored inner chunk's trailer, in C order, then its index's), read cheaply: its index, then
    the last 4 bytes of each inner chunk, concurrently where the store can; or what is wrong with it, as the end
    of a sentence naming it. The inner chunks' bytes are not checked against their trailers (see
    :func:`shard_problem`)."""
    tails = target.tails([key for key, _ in shards], sharding.index_nbytes)
    found: list[list[int] | str] = []
    wanted: list[tuple[str, int, int]] = []
    for (key, rows), tail in zip(shards, tails, strict=True):
        index = None if tail is None or len(tail) < sharding.index_nbytes else sharding.read_index(tail)
        if index is None:
            damaged = "has an index whose bytes do not match their checksum"
            found.append(target.missing(key) if tail is None else damaged)
            continue
        entries = [tuple(int(v) for v in index[0][coords]) for coords in sharding.present(rows)]
        if any(offset == MISSING or nbytes < 4 for offset, nbytes in entries):
            found.append("does not hold all its inner chunks (its index says nothing of one)")
            continue
        wanted += [(key, offset + nbytes - 4, offset + nbytes) for offset, nbytes in entries]
        found.append([index[1]])  # the index's, after the inner chunks' (added below)
    parts = iter(target.ranges(wanted))
    for i, ((_, rows), entry) in enumerate(zip(shards, found, strict=True)):
        if isinstance(entry, str):
            continue
        inner = [next(parts) for _ in sharding.present(rows)]
        if any(part is None or len(part) != 4 for part in inner):
            found[i] = "is shorter than its index says (damaged, or cut short)"
            continue
        found[i] = [*(int.from_bytes(part, "little") for part in inner if part is not None), *entry]
    return found


def stored_checksums(target: Target, key: str, sharding: Sharding, rows: int) -> list[int] | str:
    """:func:`stored_checksums_of` one shard."""
    return stored_checksums_of(target, sharding, [(key, rows)])[0]
