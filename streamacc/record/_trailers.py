"""Every committed chunk is the one its block record names: its 4-byte trailer checked, and each chunk ``open`` reads.

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

A shard (a block's rows stored as one object of inner chunks: ``store.Sharding``) ends with
its index's CRC-32C, and its record keeps each inner chunk's too: a trailer check reads the
shard's index and the last 4 bytes of each inner chunk it stores, and a whole read checks every
inner chunk's bytes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ..base import counted, rows_in
from ..errors import VerifyError
from ..store import Sharding, Target, ZarrSink, shard_problem, stored_checksums_of, stored_crc32c
from ._ledger import Ledger, carry_name
from ._manifest import MANIFEST_KEY, Manifest

if TYPE_CHECKING:
    from ..summaries import Summaries

__all__ = ["BATCH_CHUNKS", "carry_problem", "missing_from_store", "trailer_problem"]


BATCH_CHUNKS = 1024
"""Chunks whose trailers are read in one go (their keys and records held meanwhile)."""

@dataclasses.dataclass(frozen=True)
class _Expected:
    """A stored chunk and what its record keeps of it: its CRC-32C, or a shard's (see ``store.Sharding``)."""

    where: int
    """A block, or a boundary (a kept carry)."""
    key: str
    """The chunk's key; where the record is malformed, what is wrong with it (``recorded`` then empty)."""
    recorded: list[int]
    sharding: Sharding | None = None
    rows: int = 0
    """A shard's rows that hold data."""


def _data_chunks(ledger: Ledger, sink: ZarrSink, blocks: Iterable[int], save_every: int) -> Iterator[_Expected]:
    for k in blocks:
        rec = ledger.block(k)
        rows = rows_in(rec.start, rec.stop, save_every)  # records count steps, chunks hold rows
        for name in sink.arrays:
            writer, recorded = sink.writers[name], rec.crc32c.get(name, [])
            keys, per_key = writer.keys(*rows), writer.split_record(*rows, recorded)
            if per_key is None:
                needed = sum(writer.checksum_counts(*rows))
                has = f"{counted(len(recorded), 'checksum')} for {counted(len(keys), 'chunk')}"
                which = "" if needed == len(keys) else f" (which take {needed})"
                yield _Expected(k, f"its record has {name}: {has}{which}", [])
                continue
            for key, crcs, held in zip(keys, per_key, writer.held_rows(*rows), strict=True):
                yield _Expected(k, key, crcs, writer.sharding, held)


def _carry_chunks(ledger: Ledger, manifest: Manifest, blocks: Iterable[int]) -> Iterator[_Expected]:
    carries = ledger.carries(manifest)
    for k in blocks:
        for boundary in (0, k + 1) if k == 0 else (k + 1,):
            crcs = ledger.carry_checksums(manifest, boundary)
            if crcs is None:
                continue
            keys = carries.keys(boundary)
            if len(crcs) != len(keys):
                has = f"{counted(len(crcs), 'checksum')} for the carry's {counted(len(keys), 'leaf', 'leaves')}"
                yield _Expected(boundary, f"its record has {has}", [])
                continue
            yield from (_Expected(boundary, key, [crc]) for key, crc in zip(keys, crcs, strict=True))


def _chunk_found(target: Target, item: _Expected, tail: bytes | None) -> str | None:
    """What is wrong with an unsharded chunk whose last 4 bytes are ``tail`` (b"": its bytes do not give them)."""
    key, crc = item.key, item.recorded[0]
    if tail == b"":
        return f"the stored bytes of chunk {key} do not match their checksum (damaged in place)"
    if tail is None or len(tail) < 4:
        return f"chunk {key} {target.missing(key)}"
    stored = int.from_bytes(tail, "little")
    if stored != crc:
        return (
            f"chunk {key} is not the chunk it committed (its CRC-32C is {stored:08x}, its record says {crc:08x}): it "
            "was replaced or copied from elsewhere"
        )
    return None


def _shard_found(item: _Expected, stored: list[int] | str) -> str | None:
    """What is wrong with a shard whose stored CRC-32Cs (or what is wrong with it) are ``stored``."""
    if isinstance(stored, str):
        return f"shard {item.key} {stored}"
    if stored[-1] != item.recorded[-1]:
        return (
            f"shard {item.key} is not the shard committed (its index's CRC-32C is {stored[-1]:08x}, its record says "
            f"{item.recorded[-1]:08x}): it was replaced or copied from elsewhere"
        )
    if stored != item.recorded:
        return (
            f"shard {item.key} holds an inner chunk that is not the one committed (its CRC-32C differs from its "
            "record): it was replaced or copied from elsewhere"
        )
    return None


def _problems(target: Target, batch: list[_Expected], whole: bool) -> list[str | None]:
    """What is wrong with each chunk of ``batch`` (None where nothing is), read as :func:`_first_problem` reads."""
    found: list[str | None] = [None] * len(batch)
    plain = [i for i, item in enumerate(batch) if item.recorded and item.sharding is None]
    shards = [i for i, item in enumerate(batch) if item.recorded and item.sharding is not None]
    for i, item in enumerate(batch):
        if not item.recorded:
            found[i] = item.key
    if whole:
        for i in plain + shards:
            item = batch[i]
            raw = target.read_reused(item.key)
            if raw is None:
                found[i] = f"chunk {item.key} {target.missing(item.key)}"
            elif item.sharding is not None:
                problem = shard_problem(item.sharding, raw, item.recorded, item.rows)
                found[i] = None if problem is None else f"shard {item.key} {problem}"
            else:
                tail = None if len(raw) < 4 else b"" if stored_crc32c(raw) is None else bytes(raw[-4:])
                found[i] = _chunk_found(target, item, tail)
        return found
    for i, tail in zip(plain, target.tails([batch[i].key for i in plain]), strict=True):
        found[i] = _chunk_found(target, batch[i], tail)
    by_sharding: dict[Sharding, list[int]] = {}
    for i in shards:
        by_sharding.setdefault(batch[i].sharding, []).append(i)  # type: ignore[arg-type]
    for sharding, indices in by_sharding.items():
        stored = stored_checksums_of(target, sharding, [(batch[i].key, batch[i].rows) for i in indices])
        for i, held in zip(indices, stored, strict=True):
            found[i] = _shard_found(batch[i], held)
    return found


def _first_problem(target: Target, expected: Iterator[_Expected], whole: bool) -> tuple[int, str] | None:
    """The first of ``expected`` whose stored chunk does not end with its recorded CRC-32C (a shard: whose index
    and inner chunks do not): (where, what), or None. With ``whole``, each chunk is read whole and its bytes
    checked against its trailer too (each inner chunk's, and its index's)."""
    batch: list[_Expected] = []

    def check() -> tuple[int, str] | None:
        for item, problem in zip(batch, _problems(target, batch, whole), strict=True):
            if problem is not None:
                return item.where, problem
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


