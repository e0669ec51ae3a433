"""The store ``streamacc.open`` reads through: a committed chunk is returned only if it is the one committed.

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

A shard (a block's rows stored as one object of inner chunks, ``store.Sharding``) is read in
parts, as zarr reads it: its index (checked against the CRC-32C its record keeps of it, and
kept for the shard's next reads), then the byte range of each inner chunk a read needs
(checked against its own recorded CRC-32C): a small read fetches and checks one inner chunk,
never the block. A read of a whole shard checks every inner chunk and the index.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

import numpy as np
from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, RangeByteRequest, Store, SuffixByteRequest
from zarr.buffer import default_buffer_prototype

from ..base import rows_in
from ..errors import VerifyError, arg
from ..store import (
    MISSING,
    ChunkWriter,
    StateSharingWrapper,
    plain_document,
    settle_at_exit,
    shard_problem,
    stored_crc32c,
    temp_file_of,
)
from ._ledger import Ledger
from ._manifest import RECORDS_ATTR, SEGMENT, Manifest, node_attribute

__all__ = ["KEPT_INDEXES", "KEPT_SEGMENTS", "CheckedStore", "ranged"]


KEPT_SEGMENTS = 16
"""Record segments a reader keeps parsed (each the start, stop and checksums of 64 blocks)."""

KEPT_INDEXES = 256
"""Shard indexes a reader keeps, checked (a few KiB each at most): a shard's next reads need no index read."""

_Records = list[tuple[Any, Any, Any]]
"""A segment's records as a reader keeps them: each block's first step, its stop and its chunks' CRC-32Cs."""


def ranged(buf: Buffer, byte_range: ByteRequest, prototype: BufferPrototype) -> Buffer:
    """The part of ``buf`` that ``byte_range`` asks for, as a store returns it."""
    from zarr.abc.store import OffsetByteRequest

    data = buf.to_bytes()
    if isinstance(byte_range, RangeByteRequest):
        data = data[byte_range.start : byte_range.end]
    elif isinstance(byte_range, OffsetByteRequest):
        data = data[byte_range.offset :]
    elif isinstance(byte_range, SuffixByteRequest):
        data = data[-byte_range.suffix :]
    return prototype.buffer.from_bytes(data)


class CheckedStore(StateSharingWrapper):
    """``store`` (an output's, read-only) with each committed chunk of the run's arrays checked on read."""

    FORWARDED = frozenset({"set", "set_if_not_exists", "_set_many", "delete", "delete_dir", "clear", "exists",
                           "is_empty", "list", "list_prefix"})  # fmt: skip
    """What it leaves to the store inside: it checks what is read of chunks, and lists a folder without a writer's
    temp files (:meth:`list_dir`), and nothing else."""

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
        self._indexes: collections.OrderedDict[str, tuple[bytes, np.ndarray]] = collections.OrderedDict()

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
                records = [
                    (r.get("start"), r.get("stop"), r.get("crc32c")) if isinstance(r, dict) else (-1, -1, {})
                    for r in parsed
                ]
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

    async def _record(self, k: int) -> tuple[Any, Any, Any]:
        seg, pos = divmod(k, SEGMENT)
        records = await self._segment(seg)
        return records[pos] if pos < len(records) else (None, None, None)

    async def _recorded(self, name: str, k: int, tile: int, row_chunk: int) -> tuple[list[int], int] | None:
        """The CRC-32Cs block ``k``'s record keeps of a chunk of ``name`` (a shard's: each stored inner chunk's,
        then its index's) and the chunk's rows that hold data; None where the record says nothing of it."""
        start, stop, crcs = await self._record(k)
        writer = self._writers[name]
        assert writer is not None
        try:
            rows = rows_in(start, stop, self._save_every)  # records count steps, chunks hold rows
            place = (row_chunk - rows[0] // writer.chunk) * len(writer.tiles) + tile
            per_key = writer.split_record(*rows, crcs[name])
            if per_key is None or place < 0 or not all(isinstance(c, int) for c in per_key[place]):
                return None
            return per_key[place], writer.held_rows(*rows)[place]
        except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError):
            return None

    def _refused(self, key: str, k: int, what: str) -> VerifyError:
        return VerifyError(
            f"chunk {key} of {self.label} {what}, so it is not returned; run `streamacc verify` on it, and rewrite the "
            "output if it confirms the damage"
        )

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        where = await self._where(key)
        if where is None:
            return await self._store.get(key, prototype, byte_range)
        name, k, tile, row_chunk = where
        recorded = await self._recorded(name, k, tile, row_chunk)
        writer = self._writers[name]
        assert writer is not None
        if writer.sharding is not None and recorded is not None and byte_range is not None:
            part = await self._shard_part(key, k, writer, recorded, prototype, byte_range)
            if part is not None:
                return part
        buf = await self._store.get(key, prototype)  # whole: a part of a chunk is returned once the chunk passed
        if buf is None:  # zarr would return the fill value (NaN, 0) as data
            raise VerifyError(
                f"chunk {key} of {self.label} is missing, though block {k} committed it, so its values cannot be "
                f"read; rewrite the output with {arg('mode', 'overwrite')} (or restore the chunk from a copy)"
            )
        raw = buf.to_bytes()
        if writer.sharding is not None and recorded is not None:
            problem = shard_problem(writer.sharding, raw, *recorded)
            if problem is not None:
                raise self._refused(key, k, f"is a shard that {problem} (block {k})")
        elif recorded is None or len(recorded[0]) != 1 or int.from_bytes(raw[-4:], "little") != recorded[0][0]:
            raise self._refused(key, k, f"is not the chunk committed for block {k} (its CRC-32C differs from the "
                                        "block's record)")  # fmt: skip
        elif stored_crc32c(raw) is None:  # zarr would say so too, in words of its own
            raise self._refused(key, k, f"is damaged (its bytes do not give the CRC-32C it ends with, which its block "
                                        f"{k} recorded)")  # fmt: skip
        return buf if byte_range is None else ranged(buf, byte_range, prototype)

    async def _index(self, key: str, k: int, writer: ChunkWriter, recorded: list[int]) -> tuple[bytes, np.ndarray]:
        """Shard ``key``'s index as stored and parsed, read once (its CRC-32C the one recorded) and kept for the
        shard's next reads."""
        if key in self._indexes:
            self._indexes.move_to_end(key)
            return self._indexes[key]
        sharding = writer.sharding
        assert sharding is not None
        buf = await self._store.get(key, default_buffer_prototype(), SuffixByteRequest(sharding.index_nbytes))
        if buf is None:
            raise VerifyError(
                f"chunk {key} of {self.label} is missing, though block {k} committed it, so its values cannot be "
                f"read; rewrite the output with {arg('mode', 'overwrite')} (or restore the chunk from a copy)"
            )
        raw = buf.to_bytes()
        found = sharding.read_index(raw)
        if found is None:
            raise self._refused(key, k, "is a shard whose index is damaged (its bytes do not give its CRC-32C)")
        if found[1] != recorded[-1]:
            raise self._refused(key, k, f"is not the shard committed for block {k} (its index's CRC-32C differs "
                                        "from the block's record)")  # fmt: skip
        self._indexes[key] = (raw, found[0])
        while len(self._indexes) > KEPT_INDEXES:
            self._indexes.popitem(last=False)
        return raw, found[0]

    async def _shard_part(
        self, key: str, k: int, writer: ChunkWriter, recorded: tuple[list[int], int], prototype: BufferPrototype,
        byte_range: ByteRequest,
    ) -> Buffer | None:  # fmt: skip
        """The part of shard ``key`` that zarr's sharding codec asks for: its index, or one of its inner chunks,
        each checked against its record; None for any other part (then read and checked whole)."""
        sharding = writer.sharding
        assert sharding is not None
        crcs, rows = recorded
        if len(crcs) != sharding.checksums(rows):
            return None
        if isinstance(byte_range, SuffixByteRequest) and byte_range.suffix == sharding.index_nbytes:
            return prototype.buffer.from_bytes((await self._index(key, k, writer, crcs))[0])
        if not isinstance(byte_range, RangeByteRequest):
            return None
        index = (await self._index(key, k, writer, crcs))[1]
        wanted = (byte_range.start, byte_range.end - byte_range.start)
        for position, coords in enumerate(sharding.present(rows)):
            offset, nbytes = (int(v) for v in index[coords])
            if (offset, nbytes) != wanted or offset == MISSING:
                continue
            buf = await self._store.get(key, prototype, byte_range)
            raw = b"" if buf is None else buf.to_bytes()
            if len(raw) != nbytes or int.from_bytes(raw[-4:], "little") != crcs[position]:
                raise self._refused(key, k, f"holds an inner chunk {coords} that is not the one committed for block "
                                            f"{k} (its CRC-32C differs from the block's record)")  # fmt: skip
            if stored_crc32c(raw) is None:
                raise self._refused(key, k, f"holds an inner chunk {coords} that is damaged (its bytes do not give "
                                            "the CRC-32C it ends with)")  # fmt: skip
            return buf
        return None

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(key, prototype, part) for key, part in key_ranges)))

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """The folder's entries, but a writer's temp files (a root being replaced as a run commits): zarr, listing
        a group's members, would warn of each as an object it does not recognise."""
        async for name in self._store.list_dir(prefix):
            if not temp_file_of(name):
                yield name

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
        return {
            **self.__dict__, "_segments": collections.OrderedDict(), "_parsing": {}, "_writers": {},
            "_indexes": collections.OrderedDict(),
        }  # fmt: skip
