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

import json
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import WrapperStore

from .._errors import VerifyError
from ..engine import block_count
from ._manifest import RECORDS_ATTR, SEGMENT, Ledger, Manifest, node_attribute

__all__ = ["CheckedStore"]


class CheckedStore(WrapperStore[Store]):
    """``store`` (an output's, read-only) with each committed chunk of the run's arrays checked on read."""

    def __init__(self, store: Store, label: str, manifest: Manifest) -> None:
        super().__init__(store)
        self.label = label
        ident = manifest.identity
        self._names = set(ident["arrays"])
        self._layout = (ident["length"], ident["block_size"], ident["reverse"], ident["unroll"], ident["chunk"])
        self._committed = manifest.committed_blocks
        self._segments: dict[int, list[dict]] = {}

    def _with_store(self, store: Store) -> CheckedStore:
        clone = object.__new__(type(self))
        clone.__dict__.update(self.__dict__, _store=store)
        return clone

    def _where(self, key: str) -> tuple[str, int, int] | None:
        """(array, chunk index, committed block in scan order) of a committed chunk's key, else None."""
        name, sep, rest = key.partition("/c/")
        if not sep or name not in self._names:
            return None
        try:
            index = int(rest.split("/")[0])
        except ValueError:
            return None
        length, block_size, reverse, unroll, chunk = self._layout
        count = block_count(length, block_size, unroll)
        position = min(index * chunk // block_size, count - 1)
        k = count - 1 - position if reverse else position
        return (name, index, k) if k < self._committed else None

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
        where = self._where(key) if byte_range is None and buf is not None else None
        if where is None:
            return buf
        name, index, k = where
        rec = await self._record(k)
        try:
            recorded = rec["crc32c"][name][index - rec["start"] // self._layout[4]]
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
