"""Every committed chunk is the one its block record names: a check that reads 4 bytes per chunk.

Each stored chunk ends with the CRC-32C of its bytes (zarr's ``crc32c`` codec, which
streamacc always puts last), and the block records keep those values from the moment
each block was committed. Comparing the trailers with the records finds a chunk copied
from another run, one missing, or one rewritten since its commit, with no decoding and
no recomputation: a resume checks every committed chunk this way, and ``verify`` every
chunk of the blocks it does not recompute (those it recomputes get every byte checked).
The chunks of the carries kept after the blocks are checked the same way. What it cannot
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

from ...engine import rows_in
from ...errors import VerifyError
from ...store import CarryStore, Target, ZarrSink, stored_crc32c
from ._ledger import Ledger
from ._manifest import MANIFEST_KEY, Manifest

if TYPE_CHECKING:
    from ...summaries import Summaries

__all__ = ["BATCH_CHUNKS", "missing_from_store", "trailer_problem"]

BATCH_CHUNKS = 1024
"""Chunks whose trailers are read in one go (their keys and records held meanwhile)."""


def _expected(
    ledger: Ledger, sink: ZarrSink, blocks: Iterable[int], save_every: int, carries: CarryStore | None
) -> Iterator[tuple[int, int, int, str, int]]:
    """(block, start, stop, chunk key, recorded CRC-32C) for every chunk of ``blocks``, in order, and of the
    carry kept after each (with ``carries``)."""
    for k in blocks:
        rec = ledger.block(k)
        if carries is not None and rec.carry is not None:
            keys = carries.keys(k + 1)
            if len(rec.carry) != len(keys):
                yield k, rec.start, rec.stop, f"{len(rec.carry)} checksums for the {len(keys)} leaves of its carry", -1
            else:
                yield from ((k, rec.start, rec.stop, key, crc) for key, crc in zip(keys, rec.carry, strict=True))
        rows = rows_in(rec.start, rec.stop, save_every)  # records count steps, chunks hold rows
        for name in sink.arrays:
            keys, recorded = sink.chunk_keys(name, *rows), rec.crc32c.get(name, [])
            if len(recorded) != len(keys):
                yield k, rec.start, rec.stop, f"{name}: {len(recorded)} checksums for {len(keys)} chunks", -1
                continue
            for key, crc in zip(keys, recorded, strict=True):
                yield k, rec.start, rec.stop, key, crc


Problem = tuple[int, int, int, str]
"""(block, its first step, its stop, what is wrong)."""


def trailer_problem(
    target: Target,
    ledger: Ledger,
    sink: ZarrSink,
    blocks: Iterable[int],
    save_every: int = 1,
    manifest: Manifest | None = None,
    *,
    whole: bool = False,
) -> Problem | None:
    """The first chunk of ``blocks`` (in the order given) whose trailer is not its recorded CRC-32C.

    With the output's ``manifest``, the chunks of the carries kept after those blocks too. With
    ``whole``, each chunk is read whole and its bytes checked against its trailer too (a chunk
    damaged in place behind an intact trailer is found): what a resume does, since it keeps
    them. None when every chunk passes.
    """
    carries = None if manifest is None or manifest.v2 else ledger.carries(manifest)
    batch: list[tuple[int, int, int, str, int]] = []

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

    def check() -> Problem | None:
        tails = last_bytes([key for *_, key, crc in batch if crc >= 0])
        found = iter(tails)
        for k, start, stop, key, crc in batch:
            if crc < 0:
                return k, start, stop, f"its record has {key}"
            tail = next(found)
            if tail == b"":
                return k, start, stop, f"the stored bytes of chunk {key} do not match their checksum (corrupted chunk)"
            if tail is None or len(tail) < 4:
                return k, start, stop, f"chunk {key} is missing"
            stored = int.from_bytes(tail, "little")
            if stored != crc:
                return (
                    k,
                    start,
                    stop,
                    (
                        f"chunk {key} is not the chunk it committed (its CRC-32C is {stored:08x}, its record says "
                        f"{crc:08x}): it was replaced or copied from elsewhere"
                    ),
                )
        return None

    for item in _expected(ledger, sink, blocks, save_every, carries):
        batch.append(item)
        if len(batch) >= BATCH_CHUNKS:
            problem = check()
            if problem is not None:
                return problem
            batch.clear()
    return check() if batch else None


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
    blocks = sorted({k for k in (0, last) if k >= 0 and manifest.stores(k)})
    if not blocks:
        return None
    try:
        problem = trailer_problem(target, ledger, sink, blocks, manifest.identity.blocking.save_every, manifest)
    except VerifyError:  # a block's record, gone with the rest
        return f"the records of blocks {', '.join(map(str, blocks))} are missing or damaged"
    if problem is None:
        return None
    k, start, stop, what = problem
    return f"block {k} (steps {start}-{stop}): {what}"
