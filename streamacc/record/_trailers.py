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

The store ``streamacc.open`` reads through: a committed chunk is returned only if it is the one committed.

Every stored chunk ends with its CRC-32C (zarr's ``crc32c`` codec, last in every
streamacc array), and the block records keep the value each chunk had when its block was
committed. Zarr checks that a chunk agrees with its own trailer; this store also checks
that the trailer is the recorded one and that the chunk's bytes give it, as it hands each
chunk to Zarr, so a chunk copied from another output, written late by a writer that had
lost its lease, or damaged in place, is refused with streamacc's error naming it instead of
being returned as data (or failing in zarr's codec), and a committed chunk that is missing is an
error too, never the fill value. It costs a CRC-32C per chunk read (zarr computes one more) and one
read of a record segment per 64 blocks, each parsed once however many chunks are read at once
(the last few segments are kept); nothing else. Every read of a chunk of the run's arrays
within the committed blocks is checked, however zarr asks for it (``get``, a part of a chunk,
``get_partial_values``, ``_get_many``): a part is returned once its whole chunk passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from ..base import counted, rows_in
from ..errors import VerifyError
from ..store import Target, ZarrSink, stored_crc32c
from ._ledger import Ledger, carry_name
from ._manifest import MANIFEST_KEY, Manifest

if TYPE_CHECKING:
    from ..summaries import Summaries
import asyncio
import collections
import contextlib
import json
from typing import Any

from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, Store
from zarr.buffer import default_buffer_prototype
from zarr.storage import WrapperStore

from ..errors import arg
from ..store import ChunkWriter, plain_document, settle_at_exit
from ._manifest import RECORDS_ATTR, SEGMENT, node_attribute

__all__ = ["BATCH_CHUNKS", "CheckedStore", "carry_problem", "missing_from_store", "ranged", "trailer_problem"]


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
                has = f"{counted(len(recorded), 'checksum')} for {counted(len(keys), 'chunk')}"
                yield k, f"its record has {name}: {has}", -1
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
                has = f"{counted(len(crcs), 'checksum')} for the carry's {counted(len(keys), 'leaf', 'leaves')}"
                yield boundary, f"its record has {has}", -1
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
                return where, f"the stored bytes of chunk {key} do not match their checksum (damaged in place)"
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


KEPT_SEGMENTS = 16
"""Record segments a reader keeps parsed (each the start and checksums of 64 blocks)."""

_Records = list[tuple[Any, Any]]
"""A segment's records as a reader keeps them: each block's first step and its chunks' CRC-32Cs."""


def ranged(buf: Buffer, byte_range: ByteRequest, prototype: BufferPrototype) -> Buffer:
    """The part of ``buf`` that ``byte_range`` asks for, as a store returns it."""
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    data = buf.to_bytes()
    if isinstance(byte_range, RangeByteRequest):
        data = data[byte_range.start : byte_range.end]
    elif isinstance(byte_range, OffsetByteRequest):
        data = data[byte_range.offset :]
    elif isinstance(byte_range, SuffixByteRequest):
        data = data[-byte_range.suffix :]
    return prototype.buffer.from_bytes(data)


class CheckedStore(WrapperStore[Store]):
    """``store`` (an output's, read-only) with each committed chunk of the run's arrays checked on read."""

    FORWARDED = frozenset({"set", "set_if_not_exists", "_set_many", "delete", "delete_dir", "clear", "exists",
                           "is_empty", "list", "list_prefix", "list_dir"})  # fmt: skip
    """What it leaves to the store inside: it checks what is read of chunks, and nothing else."""

    def __init__(self, store: Store, label: str, manifest: Manifest) -> None:
        super().__init__(store)
        settle_at_exit()  # a chunk refused leaves the reads zarr gathered with it running: they end before exit
        self.label = label
        blocking = manifest.identity.blocking
        self._names = set(manifest.identity.names)
        self._blocks = blocking.block_count
        self._save_every = blocking.save_every
        self._block_rows = blocking.block_rows
        self._reverse = bool(blocking.reverse)
        self._committed = manifest.committed_blocks
        self._segments: collections.OrderedDict[int, _Records] = collections.OrderedDict()
        self._parsing: dict[int, asyncio.Future[_Records]] = {}
        self._writers: dict[str, ChunkWriter | None] = {}

    def _with_store(self, store: Store) -> CheckedStore:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__, _store=store)
        return clone

    @classmethod
    async def open(cls, store_cls: type[Store], *args: Any, **kwargs: Any) -> CheckedStore:
        """``store_cls(*args, **kwargs)`` opened, its chunks checked as the keyword arguments ``label`` and
        ``manifest`` say (as zarr's ``WrapperStore.open`` opens a wrapper, which builds it from the store alone)."""
        label, manifest = kwargs.pop("label"), kwargs.pop("manifest")
        store = store_cls(*args, **kwargs)
        await store._open()
        return cls(store, label, manifest)

    async def _writer(self, name: str) -> ChunkWriter | None:
        """Array ``name``'s chunk layout, from its own metadata (read once), or None where it has none."""
        if name not in self._writers:
            buf = await self._store.get(f"{name}/zarr.json", default_buffer_prototype())
            writer = None  # none, or unreadable: zarr refuses the array
            if buf is not None:
                with contextlib.suppress(AttributeError, ValueError, TypeError, KeyError):
                    document = plain_document(json.loads(buf.to_bytes()))[0]  # a virtual array's chunks are its own
                    writer = ChunkWriter.of_document(self._store, name, document)
            self._writers[name] = writer
        return self._writers[name]

    async def _where(self, key: str) -> tuple[str, int, int, int] | None:
        """(array, committed block in scan order, tile of the trailing axes, row chunk) of a chunk's key.

        None for any key that is not a chunk of a committed block of the run's arrays.
        """
        name = key.partition("/")[0]
        if name not in self._names:
            return None
        writer = await self._writer(name)
        place = None if writer is None else writer.place(key)
        if writer is None or place is None:
            return None
        row_chunk, tile = place
        position = min(row_chunk * writer.chunk // self._block_rows, self._blocks - 1)
        k = self._blocks - 1 - position if self._reverse else position
        return (name, k, tile, row_chunk) if k < self._committed else None

    async def _segment(self, seg: int) -> _Records:
        """Segment ``seg``'s records, read and parsed once: a read of many chunks at once waits for one parse."""
        if seg in self._segments:
            self._segments.move_to_end(seg)
            return self._segments[seg]
        if seg in self._parsing:
            return await asyncio.shield(self._parsing[seg])
        parsing = self._parsing[seg] = asyncio.get_running_loop().create_future()
        try:
            buf = await self._store.get(Ledger.segment_key(seg), default_buffer_prototype())
            records: _Records = []
            with contextlib.suppress(ValueError, TypeError, KeyError):
                parsed = json.loads(node_attribute(buf.to_bytes() if buf else b"", RECORDS_ATTR))
                records = [(r.get("start"), r.get("crc32c")) if isinstance(r, dict) else (-1, {}) for r in parsed]
            self._segments[seg] = records
            while len(self._segments) > KEPT_SEGMENTS:
                self._segments.popitem(last=False)
            parsing.set_result(records)
            return records
        except BaseException as exc:
            parsing.set_exception(exc)
            parsing.exception()  # retrieved: a waiter re-raises it, none is needed
            raise
        finally:
            del self._parsing[seg]

    async def _record(self, k: int) -> tuple[Any, Any]:
        seg, pos = divmod(k, SEGMENT)
        records = await self._segment(seg)
        return records[pos] if pos < len(records) else (None, None)

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        where = await self._where(key)
        if where is None:
            return await self._store.get(key, prototype, byte_range)
        buf = await self._store.get(key, prototype)  # whole: a part of a chunk is returned once the chunk passed
        name, k, tile, row_chunk = where
        if buf is None:  # zarr would return the fill value (NaN, 0) as data
            raise VerifyError(
                f"chunk {key} of {self.label} is missing, though block {k} committed it, so its values cannot be "
                f"read; rewrite the output with {arg('mode', 'overwrite')} (or restore the chunk from a copy)"
            )
        start, crcs = await self._record(k)
        writer = self._writers[name]
        assert writer is not None
        try:
            first = start // self._save_every // writer.chunk  # records count steps, chunks hold rows
            place = (row_chunk - first) * len(writer.tiles) + tile
            recorded = crcs[name][place] if place >= 0 else None
        except (KeyError, IndexError, TypeError):
            recorded = None
        raw = buf.to_bytes()
        if recorded is None or int.from_bytes(raw[-4:], "little") != recorded:
            raise VerifyError(
                f"chunk {key} of {self.label} is not the chunk committed for block {k} (its CRC-32C differs from "
                f"the block's record), so it is not returned; run `streamacc verify` on it, and rewrite the output "
                "if it confirms the damage"
            )
        if stored_crc32c(raw) is None:  # zarr would say so too, in words of its own
            raise VerifyError(
                f"chunk {key} of {self.label} is damaged (its bytes do not give the CRC-32C it ends with, which its "
                f"block {k} recorded), so it is not returned; run `streamacc verify` on it, and rewrite the output "
                "if it confirms the damage"
            )
        return buf if byte_range is None else ranged(buf, byte_range, prototype)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(key, prototype, part) for key, part in key_ranges)))

    _get_many = Store._get_many  # each request through this store's own get

    def __repr__(self) -> str:
        return f"CheckedStore({self._store!r})"

    def __str__(self) -> str:
        return str(self._store)

    def __eq__(self, value: object) -> bool:
        return isinstance(value, CheckedStore) and self._store == value._store

    def __hash__(self) -> int:
        return hash(id(self))

    async def getsize(self, key: str) -> int:
        return await self._store.getsize(key)

    def __getstate__(self) -> dict[str, Any]:
        # read again where it is unpickled
        return {**self.__dict__, "_segments": collections.OrderedDict(), "_parsing": {}, "_writers": {}}
