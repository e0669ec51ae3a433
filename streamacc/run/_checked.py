"""The store ``streamacc.open`` reads through: a committed chunk is returned only if it is the one committed.

Every stored chunk ends with its CRC-32C (zarr's ``crc32c`` codec, last in every
streamacc array), and the block records keep the value each chunk had when its block was
committed. Zarr checks that a chunk agrees with its own trailer; this store also checks
that the trailer is the recorded one, as it hands each chunk to Zarr, so a chunk copied
from another output, or written late by a writer that had lost its lease, is refused with
an error instead of being returned as data. It costs a comparison per chunk read and one
read of a record segment per 64 blocks; nothing else. Only whole-chunk reads of the run's
arrays within the committed blocks are checked (``open`` reads nothing else of them).
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import WrapperStore

from .._errors import VerifyError
from ..engine import block_count
from ._manifest import RECORDS_ATTR, SEGMENT, Ledger, Manifest, node_attribute

__all__ = ["CheckedStore"]


@dataclasses.dataclass(frozen=True)
class _Grid:
    """How an array's chunk keys map to row chunks and to their place within a block's record."""

    rows: int  # rows per chunk along step
    counts: tuple[int, ...]  # chunks along each trailing axis
    separator: str

    @classmethod
    def of(cls, meta: dict) -> _Grid | None:
        try:
            shape, chunks = meta["shape"], meta["chunk_grid"]["configuration"]["chunk_shape"]
            encoding = meta.get("chunk_key_encoding", {})
            separator = encoding.get("configuration", {}).get("separator", "/")
            if encoding.get("name", "default") != "default" or len(shape) != len(chunks) or not shape:
                return None
            counts = tuple(-(-int(n) // int(c)) for n, c in zip(shape[1:], chunks[1:], strict=True))
            return cls(int(chunks[0]), counts, separator)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    @property
    def tiles(self) -> int:
        """Chunks per row chunk: one per tile of the trailing axes."""
        return math.prod(self.counts)

    def index(self, rest: str) -> tuple[int, int] | None:
        """(row chunk, tile in C order) of the chunk key whose part after ``c/`` is ``rest``, else None."""
        parts = rest.split(self.separator)
        if len(parts) != 1 + len(self.counts) or not all(p.isascii() and p.isdigit() for p in parts):
            return None
        first, *others = (int(p) for p in parts)
        if any(i >= n for i, n in zip(others, self.counts, strict=True)):
            return None
        tile = 0
        for i, n in zip(others, self.counts, strict=True):
            tile = tile * n + i
        return first, tile


class CheckedStore(WrapperStore[Store]):
    """``store`` (an output's, read-only) with each committed chunk of the run's arrays checked on read."""

    def __init__(self, store: Store, label: str, manifest: Manifest) -> None:
        super().__init__(store)
        self.label = label
        ident = manifest.identity
        self._names = set(ident["arrays"])
        self._blocks = block_count(ident["length"], ident["block_size"], ident["unroll"])
        self._save_every = ident.get("save_every", 1)
        self._block_rows = ident["block_size"] // self._save_every
        self._reverse = bool(ident["reverse"])
        self._committed = manifest.committed_blocks
        self._segments: dict[int, list[dict]] = {}
        self._grids: dict[str, _Grid | None] = {}

    def _with_store(self, store: Store) -> CheckedStore:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__, _store=store)
        return clone

    async def _grid(self, name: str) -> _Grid | None:
        """Array ``name``'s chunk grid, from its own metadata (read once), or None where it has none."""
        if name not in self._grids:
            buf = await self._store.get(f"{name}/zarr.json", default_buffer_prototype())
            try:
                self._grids[name] = _Grid.of(json.loads(buf.to_bytes())) if buf is not None else None
            except ValueError:  # unreadable metadata: zarr refuses the array before any chunk is read
                self._grids[name] = None
        return self._grids[name]

    async def _where(self, key: str) -> tuple[str, int, int, int] | None:
        """(array, committed block in scan order, tile of the trailing axes, row chunk) of a chunk's key.

        None for any key that is not a chunk of a committed block of the run's arrays.
        """
        name, sep, rest = key.partition("/c/")
        if not sep or name not in self._names:
            return None
        grid = await self._grid(name)
        index = None if grid is None else grid.index(rest)
        if grid is None or index is None:
            return None
        row_chunk, tile = index
        position = min(row_chunk * grid.rows // self._block_rows, self._blocks - 1)
        k = self._blocks - 1 - position if self._reverse else position
        return (name, k, tile, row_chunk) if k < self._committed else None

    async def _record(self, k: int) -> dict:
        seg, pos = divmod(k, SEGMENT)
        if seg not in self._segments:
            buf = await self._store.get(Ledger.segment_key(seg), default_buffer_prototype())
            try:
                self._segments[seg] = json.loads(node_attribute(buf.to_bytes() if buf else b"", RECORDS_ATTR))
            except ValueError:
                self._segments[seg] = []
        records = self._segments[seg]
        return records[pos] if pos < len(records) else {}

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        buf = await self._store.get(key, prototype, byte_range)
        where = await self._where(key) if byte_range is None and buf is not None else None
        if where is None:
            return buf
        name, k, tile, row_chunk = where
        rec = await self._record(k)
        grid = self._grids[name]
        assert grid is not None
        try:
            first = rec["start"] // self._save_every // grid.rows  # records count steps, chunks hold rows
            place = (row_chunk - first) * grid.tiles + tile
            recorded = rec["crc32c"][name][place] if place >= 0 else None
        except (KeyError, IndexError, TypeError):
            recorded = None
        raw = buf.to_bytes()[-4:]
        if recorded is None or int.from_bytes(raw, "little") != recorded:
            raise VerifyError(
                f"chunk {key} of {self.label} is not the chunk committed for block {k} (its CRC-32C differs from "
                f"the block's record), so it is not returned; run `streamacc verify` on it, and rewrite the output "
                "if it confirms the damage"
            )
        return buf

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
        return {**self.__dict__, "_segments": {}}
