"""Every committed chunk is the one its block record names: a check that reads 4 bytes per chunk.

Each stored chunk ends with the CRC-32C of its bytes (zarr's ``crc32c`` codec, which
streamacc always puts last), and the block records keep those values from the moment
each block was committed. Comparing the trailers with the records finds a chunk copied
from another run, one missing, or one rewritten since its commit, with no decoding and
no recomputation: a resume checks every committed chunk this way, and ``verify`` every
chunk of the blocks it does not recompute (those it recomputes get every byte checked).
The chunks of the carries kept after the blocks (and of the initial carry) are checked the
same way, apart (:func:`carry_problem`): the data can rebuild a damaged carry. What it cannot
see is a chunk damaged in place behind an intact trailer; that is what the full checksum
and the recomputation of ``verify`` are for.

Whether the store still holds what a run committed is asked the same way, cheaply, before
the run is marked complete and before a failed run is told that its steps are safely
committed (:func:`missing_from_store`). An output folder removed (or emptied) while a run
writes is not always noticed by the writes that follow: a chunk's write makes its folders
again, and a manifest written after the removal counts the blocks written before it. So
the store is asked for what every reader needs first: the manifest, each array's and each
summary level's metadata, the kept carries' arrays, and the chunks of the first and the
last committed block and of the carries kept after them (4 bytes each, against their records).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ...base import rows_in
from ...errors import VerifyError
from ...store import Target, ZarrSink, stored_crc32c
from ._ledger import Ledger, carry_name
from ._manifest import MANIFEST_KEY, Manifest

if TYPE_CHECKING:
    from ...summaries import Summaries

__all__ = ["BATCH_CHUNKS", "carry_problem", "missing_from_store", "trailer_problem"]

BATCH_CHUNKS = 1024
"""Chunks whose trailers are read in one go (their keys and records held meanwhile)."""

_Expected = tuple[int, str, int]
"""(where: a block or a boundary, chunk key, recorded CRC-32C, or -1 where the record is malformed: the key is then
what is wrong with it)."""


def _data_chunks(ledger: Ledger, sink: ZarrSink, blocks: Iterable[int], save_every: int) -> Iterator[_Expected]:
    for k in blocks:
        rec = ledger.block(k)
        rows = rows_in(rec.start, rec.stop, save_every)  # records count steps, chunks hold rows
        for name in sink.arrays:
            keys, recorded = sink.chunk_keys(name, *rows), rec.crc32c.get(name, [])
            if len(recorded) != len(keys):
                yield k, f"its record has {name}: {len(recorded)} checksums for {len(keys)} chunks", -1
                continue
            for key, crc in zip(keys, recorded, strict=True):
                yield k, key, crc


def _carry_chunks(ledger: Ledger, manifest: Manifest, blocks: Iterable[int]) -> Iterator[_Expected]:
    carries = ledger.carries(manifest)
    for k in blocks:
        for boundary in (0, k + 1) if k == 0 else (k + 1,):
            crcs = ledger.carry_checksums(manifest, boundary)
            if crcs is None:
                continue
            keys = carries.keys(boundary)
            if len(crcs) != len(keys):
                yield boundary, f"its record has {len(crcs)} checksums for the {len(keys)} leaves of the carry", -1
                continue
            yield from ((boundary, key, crc) for key, crc in zip(keys, crcs, strict=True))


def _first_problem(target: Target, expected: Iterator[_Expected], whole: bool) -> tuple[int, str] | None:
    """The first of ``expected`` whose stored chunk does not end with its recorded CRC-32C: (where, what), or
    None. With ``whole``, each chunk is read whole and its bytes checked against its trailer too."""
    batch: list[_Expected] = []

    def last_bytes(keys: list[str]) -> list[bytes | None]:
        if not whole:
            return target.tails(keys)
        out: list[bytes | None] = []
        for key in keys:
            raw = target.read_reused(key)
            if raw is None or len(raw) < 4:
                out.append(None)
            elif stored_crc32c(raw) is None:  # its bytes do not give the checksum they end with
                out.append(b"")
            else:
                out.append(bytes(raw[-4:]))
        return out

    def check() -> tuple[int, str] | None:
        found = iter(last_bytes([key for _, key, crc in batch if crc >= 0]))
        for where, key, crc in batch:
            if crc < 0:
                return where, key
            tail = next(found)
            if tail == b"":
                return where, f"the stored bytes of chunk {key} do not match their checksum (corrupted chunk)"
            if tail is None or len(tail) < 4:
                return where, f"chunk {key} {target.missing(key)}"
            stored = int.from_bytes(tail, "little")
            if stored != crc:
                return where, (
                    f"chunk {key} is not the chunk it committed (its CRC-32C is {stored:08x}, its record says "
                    f"{crc:08x}): it was replaced or copied from elsewhere"
                )
        return None

    for item in expected:
        batch.append(item)
        if len(batch) >= BATCH_CHUNKS:
            problem = check()
            if problem is not None:
                return problem
            batch.clear()
    return check() if batch else None


Problem = tuple[int, int, int, str]
"""(block, its first step, its stop, what is wrong)."""


def trailer_problem(
    target: Target, ledger: Ledger, sink: ZarrSink, blocks: Iterable[int], save_every: int = 1, *, whole: bool = False
) -> Problem | None:
    """The first data chunk of ``blocks`` (in the order given) whose trailer is not its recorded CRC-32C.

    With ``whole``, each chunk is read whole and its bytes checked against its trailer too (a
    chunk damaged in place behind an intact trailer is found): what a resume does, since it
    keeps them. None when every chunk passes.
    """
    problem = _first_problem(target, _data_chunks(ledger, sink, blocks, save_every), whole)
    if problem is None:
        return None
    k, what = problem
    rec = ledger.block(k)
    return k, rec.start, rec.stop, what


def carry_problem(
    target: Target, ledger: Ledger, manifest: Manifest, blocks: Iterable[int], *, whole: bool = False
) -> tuple[int, str] | None:
    """The first carry kept after one of ``blocks`` (and the initial carry, with block 0) whose chunks do not end
    with their recorded CRC-32Cs (with ``whole``, read whole, or whose bytes do not give them): (its boundary,
    what is wrong), or None. Nothing for a format 2 output, whose carries are in its records."""
    if manifest.v2:
        return None
    return _first_problem(target, _carry_chunks(ledger, manifest, blocks), whole)


def missing_from_store(target: Target, manifest: Manifest, sink: ZarrSink, summaries: Summaries | None) -> str | None:
    """What of the committed output ``manifest`` describes the store no longer holds, in words; None when it
    holds all that was asked."""
    ledger = Ledger(target)
    keys = [MANIFEST_KEY, *(f"{name}/zarr.json" for name in sink.arrays)]
    if not manifest.v2:  # the kept carries' arrays, which a resume starts from
        carries = ledger.carries(manifest)
        keys += [f"{carries.path(i)}/zarr.json" for i in range(len(carries.leaves))]
    if summaries is not None:
        keys += summaries.store.metadata_keys()
    for key in keys:
        if target.read(key) is None:
            return f"{key} is missing"
    last = manifest.committed_blocks - 1
    blocks = sorted({k for k in (0, last) if k >= 0})
    if not blocks:
        return None
    try:
        problem = trailer_problem(
            target, ledger, sink, [k for k in blocks if manifest.stores(k)], manifest.identity.blocking.save_every
        )
        carry = None if problem is not None else carry_problem(target, ledger, manifest, blocks)
    except VerifyError:  # a block's record, gone with the rest
        return f"the records of blocks {', '.join(map(str, blocks))} are missing or damaged"
    if problem is not None:
        k, start, stop, found = problem
        return f"block {k} (steps {start}-{stop}): {found}"
    if carry is not None:
        return f"{carry_name(carry[0])}: {carry[1]}"
    return None
