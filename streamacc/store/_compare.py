"""Stored chunks compared with recomputed rows, through the encoder that wrote them.

Checking a block means showing that its stored chunks hold exactly the values a
recomputation gives. Decoding every stored chunk (zarr's read) maps and zero-fills a fresh
buffer per chunk, and comparing copies of both sides maps more; a check then costs several
times the write. Instead each recomputed chunk (or shard) is encoded as the writer encoded
it (the same c-blosc call, into this thread's reused buffer) and compared byte for byte with
the stored one, itself read into a reused buffer: equal bytes are equal values, and the
comparison allocates nothing. Bytes may differ while the values agree (an output whose
chunks zarr encoded itself, or another c-blosc version): the caller decodes and compares
those chunks by value.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from ._chunks import ChunkWriter
from ._documents import stored_crc32c
from ._files import scratch
from ._shards import shard_problem
from ._target import Target

__all__ = ["ChunkCheck", "compare_chunks", "same_bytes"]


def same_bytes(a: npt.NDArray[np.uint8], b: bytes | npt.NDArray[np.uint8]) -> bool:
    """Whether the uint8 array ``a`` and the bytes-like ``b`` hold the same bytes (no allocation)."""
    other = np.frombuffer(b, dtype=np.uint8)
    if a.nbytes != other.nbytes:
        return False
    whole = a.nbytes - a.nbytes % 8
    if whole:
        equal = scratch("equal", whole // 8).view(np.bool_)[: whole // 8]
        np.equal(a[:whole].view(np.uint64), other[:whole].view(np.uint64), out=equal)
        if not equal.all():
            return False
    return bool(np.array_equal(a[whole:], other[whole:]))


@dataclasses.dataclass(frozen=True)
class ChunkCheck:
    """What comparing a block's stored chunks found.

    ``problem`` is the first chunk that is missing or fails its recorded checksums, as
    ``(key, 'missing' or 'checksum')``; ``differing`` the chunks (their positions among the
    block's chunk keys, ``ChunkWriter.keys``) whose stored bytes are not the writer's encoding
    of the rows, to compare by value (``ChunkWriter.region`` says where each lies).
    """

    problem: tuple[str, str] | None
    differing: list[int]


def _passes(writer: ChunkWriter, stored: bytes, recorded: list[int], rows: int) -> bool:
    """Whether a stored chunk's bytes give the CRC-32Cs its record keeps (a shard's: each inner chunk's and its
    index's, see ``shard_problem``)."""
    if writer.sharding is not None:
        return shard_problem(writer.sharding, stored, recorded, rows) is None
    return len(recorded) == 1 and stored_crc32c(stored) == recorded[0]


def compare_chunks(
    writer: ChunkWriter, target: Target, start: int, rows: np.ndarray, recorded: list[int], *, end: bool = False
) -> ChunkCheck:
    """Compare the stored chunks of rows ``[start, start + len(rows))`` with ``rows`` and their recorded CRC-32Cs
    (the block record's list for the array: see ``ChunkWriter.split_record``).

    With ``end``, the rows are the last of a run that ended on its condition (see ``ChunkWriter.write``)."""
    stop = start + len(rows)
    keys = writer.keys(start, stop)
    per_key = writer.split_record(start, stop, recorded)
    if per_key is None:
        return ChunkCheck((keys[0], "checksum"), [])
    mine = writer.encoded(start, rows) if writer.encodes(start, rows, end=end) else None
    differing = []
    for i, (key, crcs, held) in enumerate(zip(keys, per_key, writer.held_rows(start, stop), strict=True)):
        encoded = next(mine) if mine is not None else None
        stored = target.read_reused(key)
        if stored is None:
            return ChunkCheck((key, "missing"), [])
        if encoded is not None and encoded[2] == crcs and same_bytes(encoded[1], stored):
            continue  # the writer's bytes, whose checksums are the recorded ones
        if not _passes(writer, stored, crcs, held):
            return ChunkCheck((key, "checksum"), [])
        differing.append(i)
    return ChunkCheck(None, differing)
