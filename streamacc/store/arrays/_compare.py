"""Stored chunks against recomputed rows, through the writer's own encoder, in reused memory.

Checking a block means showing that its stored chunks hold exactly the values a
recomputation gives. Decoding every stored chunk (zarr's read) maps and zero-fills a fresh
buffer per chunk, and comparing copies of both sides maps more; a check then costs several
times the write. Instead each recomputed chunk is encoded as the writer encoded it (the same
c-blosc call, into this thread's reused buffer) and compared byte for byte with the stored
chunk, itself read into a reused buffer: equal bytes are equal values, and the comparison
allocates nothing. Bytes may differ while the values agree (an output whose chunks zarr
encoded itself, or another c-blosc version): the caller decodes and compares those chunks
by value.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from ..targets import Target, scratch
from ._chunks import ChunkWriter
from ._documents import stored_crc32c

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

    ``problem`` is the first chunk that is missing or fails its recorded checksum, as
    ``(key, 'missing' or 'checksum')``; ``differing`` the chunks (their positions among the
    block's chunk keys, ``ChunkWriter.keys``) whose stored bytes are not the writer's encoding
    of the rows, to compare by value (``ChunkWriter.region`` says where each lies).
    """

    problem: tuple[str, str] | None
    differing: list[int]


def compare_chunks(
    writer: ChunkWriter, target: Target, start: int, rows: np.ndarray, recorded: list[int], *, end: bool = False
) -> ChunkCheck:
    """Compare the stored chunks of rows ``[start, start + len(rows))`` with ``rows`` and their recorded CRC-32Cs.

    With ``end``, the rows are the last of a run that ended on its condition (see ``ChunkWriter.write``)."""
    keys = writer.keys(start, start + len(rows))
    mine = writer.encoded(start, rows) if writer.encodes(start, rows, end=end) else None
    differing = []
    for i, (key, crc) in enumerate(zip(keys, recorded, strict=True)):
        encoded = next(mine) if mine is not None else None
        stored = target.read_reused(key)
        if stored is None:
            return ChunkCheck((key, "missing"), [])
        if encoded is not None and encoded[2] == crc and same_bytes(encoded[1], stored):
            continue  # the writer's bytes, whose checksum is the recorded one
        if stored_crc32c(stored) != crc:
            return ChunkCheck((key, "checksum"), [])
        differing.append(i)
    return ChunkCheck(None, differing)
