"""The ledger: an output's manifest, its block records and its kept carries, read and written.

Records live in segments of ``SEGMENT`` blocks (one Zarr group node each); a commit rewrites
one segment (its records are a few hundred bytes each) and the manifest. The carries are
binary arrays (``store.CarryArrays``), a chunk per kept boundary, written once before the
record that names their checksums. Which boundaries keep a carry is the writer's policy
(:func:`carry_every`); a reader learns it from the records, never from arithmetic: the carry
after block ``k`` is kept where ``k``'s record names its checksums (boundary 0, the initial
carry, in the manifest). Segments are parsed once and kept, the last few of them.
"""

from __future__ import annotations

import collections
import json
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..base import CARRIES_EVERY_AT_MOST, CARRY_ALWAYS_KEPT_BELOW, CARRY_SHARE_AT_MOST
from ..errors import NoOutputError, VerifyError, arg
from ..store import BOOKKEEPING, CarryArrays, CarryDamaged, CarryLeaf, Target
from ._manifest import (
    LEGACY_MANIFEST_KEY,
    MANIFEST_KEY,
    RECORDS_ATTR,
    SEGMENT,
    BlockRecord,
    Manifest,
    decode_leaves,
    node_attribute,
    text_node,
)

if TYPE_CHECKING:
    from ..base import HostLeaf

__all__ = ["CACHED_SEGMENTS", "Ledger", "carry_every", "carry_name", "damaged_carry", "load_manifest"]

CACHED_SEGMENTS = 4
"""Parsed record segments a ledger keeps: a resume, a verify or a read walks them in order."""


def carry_every(carry_nbytes: int, block_nbytes: int, *, virtual: bool = False) -> int:
    """Every how many blocks a new run keeps its carry: as often as keeps the carries within
    ``CARRY_SHARE_AT_MOST`` of the data's bytes, at least every ``CARRIES_EVERY_AT_MOST`` blocks,
    and after every block for a carry below ``CARRY_ALWAYS_KEPT_BELOW`` bytes.

    ``carry_nbytes`` and ``block_nbytes`` are the bytes of a carry and of the ys one block stores.
    A virtual run stores no data: its carries are what a reader recomputes its blocks from, so it
    keeps every one.
    """
    if virtual or block_nbytes <= 0 or carry_nbytes < CARRY_ALWAYS_KEPT_BELOW:
        return 1
    return max(1, min(CARRIES_EVERY_AT_MOST, math.ceil(carry_nbytes / (CARRY_SHARE_AT_MOST * block_nbytes))))


class Ledger:
    """Reads and writes a target's manifest, block records and kept carries."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._segments: collections.OrderedDict[int, list[dict[str, Any]]] = collections.OrderedDict()
        self._carries: CarryArrays | None = None

    def load(self) -> Manifest | None:
        """The manifest, or None when there is none (a legacy one is refused with the fix)."""
        raw = self.target.read(MANIFEST_KEY)
        if raw is None:
            if self.target.read(LEGACY_MANIFEST_KEY) is not None:
                raise NoOutputError(
                    f"{self.target.label} was written by streamacc 0.1 (bookkeeping format 1), which this version "
                    f"cannot resume or verify; rewrite it with {arg('mode', 'overwrite')} (its arrays still open "
                    "with xarray)"
                )
            return None
        return Manifest.from_json(raw, self.target.label)

    def save(self, manifest: Manifest) -> None:
        self.target.write(MANIFEST_KEY, manifest.to_json())

    @staticmethod
    def segment_key(seg: int) -> str:
        return f"{BOOKKEEPING}/records_{seg:06d}/zarr.json"

    def _damaged(self, what: str) -> VerifyError:
        return VerifyError(
            f"block records of {self.target.label} are damaged ({what}); rewrite the output with "
            f"{arg('mode', 'overwrite')}"
        )

    def _read_segment(self, seg: int) -> list[dict[str, Any]]:
        if seg in self._segments:
            self._segments.move_to_end(seg)
            return self._segments[seg]
        raw = self.target.read(self.segment_key(seg))
        try:
            records = [] if raw is None else json.loads(node_attribute(raw, RECORDS_ATTR))
            if not isinstance(records, list):
                raise TypeError
        except (ValueError, TypeError):
            raise self._damaged(f"segment {seg}") from None
        self._keep(seg, records)
        return records

    def _keep(self, seg: int, records: list[dict[str, Any]]) -> None:
        self._segments[seg] = records
        self._segments.move_to_end(seg)
        while len(self._segments) > CACHED_SEGMENTS:
            self._segments.popitem(last=False)

    def _write_segments(self, recs: Sequence[BlockRecord], *, replace: bool) -> None:
        for seg in sorted({rec.index // SEGMENT for rec in recs}):
            records = list(self._read_segment(seg))
            for rec in recs:
                pos = rec.index - seg * SEGMENT
                if not 0 <= pos < SEGMENT:
                    continue
                if replace:
                    if pos >= len(records):
                        raise self._damaged(f"block {rec.index} has no record to update")
                    records[pos] = rec.to_json()
                    continue
                if len(records) < pos:
                    raise self._damaged(f"they end at block {seg * SEGMENT + len(records)}, before block {rec.index}")
                records = [*records[:pos], rec.to_json()]  # drops records written past an interrupted commit
            self._keep(seg, records)
            self.target.write(self.segment_key(seg), text_node(RECORDS_ATTR, json.dumps(records)))

    def record(self, *recs: BlockRecord) -> None:
        """Durably store the records of consecutive blocks (in scan order), one write per segment."""
        self._write_segments(recs, replace=False)

    def update(self, *recs: BlockRecord) -> None:
        """Durably replace the records of committed blocks (their stored chunks' checksums), one write per segment."""
        self._write_segments(recs, replace=True)

    def block(self, index: int, manifest: Manifest | None = None) -> BlockRecord:
        """The record of committed block ``index`` (in scan order), of a format 2 output where ``manifest`` says so."""
        seg, pos = divmod(index, SEGMENT)
        records = self._read_segment(seg)
        v2 = manifest.v2 if manifest is not None else bool(pos < len(records) and "carry_in" in records[pos])
        try:
            if index < 0:
                raise IndexError
            rec = BlockRecord.from_json(records[pos], v2)
            if rec.index != index:
                raise ValueError
        except (IndexError, TypeError, ValueError, KeyError):
            raise VerifyError(
                f"the record of block {index} of {self.target.label} is missing or damaged; rewrite the output "
                f"with {arg('mode', 'overwrite')}"
            ) from None
        return rec

    def carries(self, manifest: Manifest) -> CarryArrays:
        """The kept carries of a format 3 output (of the run ``manifest`` describes: its boundaries, its codec)."""
        leaves, codec, boundaries = manifest.carry_leaves, manifest.carries_codec, manifest.carry_boundaries
        known = self._carries
        if known is None or (known.leaves, known.codec, known.boundaries_of_run) != (leaves, codec, boundaries):
            known = self._carries = CarryArrays(self.target, leaves, codec=codec, boundaries=boundaries)
        return known

    def carry_checksums(self, manifest: Manifest, boundary: int) -> list[int] | None:
        """The CRC-32Cs of the carry kept after ``boundary`` committed blocks (format 3), or None where none is."""
        assert manifest.carries is not None
        if boundary == 0:
            return list(manifest.carries["init"])
        return self.block(boundary - 1, manifest).carry

    def kept(self, manifest: Manifest, boundary: int) -> bool:
        """Whether the carry after ``boundary`` committed blocks is stored (every one of a format 2 output is)."""
        return manifest.v2 or self.carry_checksums(manifest, boundary) is not None

    def kept_before(self, manifest: Manifest, boundary: int) -> int:
        """The last boundary at or before ``boundary`` whose carry is stored (0 at the latest: the initial carry).

        A run keeps every K-th (format 3's ``every``), so the search looks no further back than that.
        """
        if manifest.v2:
            return boundary
        assert manifest.carries is not None
        floor = boundary - boundary % manifest.carries["every"]
        while boundary > floor and not self.kept(manifest, boundary):
            boundary -= 1
        if not self.kept(manifest, boundary):
            raise self._damaged(f"no carry is kept after block {boundary - 1}, where its run kept one")
        return boundary

    def carry(self, manifest: Manifest, boundary: int) -> list[HostLeaf] | None:
        """The carry after ``boundary`` committed blocks (the carry entering block ``boundary``), read back and
        checked against its record; None where it is not kept. ``boundary`` is at most the committed blocks."""
        if not 0 <= boundary <= manifest.committed_blocks:
            raise ValueError(f"boundary {boundary} is past the {manifest.committed_blocks} committed blocks")
        if manifest.v2:
            if boundary == manifest.committed_blocks:
                return decode_leaves(manifest.carry or [])
            return decode_leaves(self.block(boundary, manifest).carry_in or [])
        crcs = self.carry_checksums(manifest, boundary)
        if crcs is None:
            return None
        try:
            values = self.carries(manifest).read(boundary, crcs)
        except CarryDamaged as exc:
            raise VerifyError(damaged_carry(self.target.label, boundary, str(exc))) from None
        return [(value, leaf.key) for value, leaf in zip(values, manifest.carry_leaves, strict=True)]

    def kept_carry(self, manifest: Manifest, boundary: int) -> list[HostLeaf]:
        """:meth:`carry` where the run keeps every carry (a virtual run's): an error where it is not kept."""
        carry = self.carry(manifest, boundary)
        if carry is None:
            raise VerifyError(
                f"{self.target.label} keeps no carry after block {boundary - 1}, which a virtual output keeps for "
                f"every block; rewrite the output with {arg('mode', 'overwrite')}"
            )
        return carry

    def write_carry(self, manifest: Manifest, boundary: int, carry: Sequence[HostLeaf]) -> tuple[list[str], list[int]]:
        """Write the carry after ``boundary`` blocks (not yet durable): its keys and each leaf's CRC-32C."""
        return self.carries(manifest).write(boundary, [np.asarray(a) for a, _ in carry])


def carry_name(boundary: int) -> str:
    """The carry at ``boundary`` in words: the initial carry, or the carry kept after block ``boundary - 1``."""
    return "the initial carry" if boundary == 0 else f"the carry kept after block {boundary - 1}"


def damaged_carry(label: str, boundary: int, what: str) -> str:
    """The refusal of a kept carry that is damaged (``what``), and how to rebuild it: it follows from the carry
    kept before it through the blocks between, as ``verify`` recomputes them; the initial carry is the run's own
    (``init`` given to ``verify``, a recipe's recorded values on the command line)."""
    damaged = f"{carry_name(boundary)} of {label} is damaged ({what}), so the blocks after it cannot be recomputed"
    if boundary == 0:
        return (
            f"{damaged} from it; rebuild it with verify and {arg('repair', True)}, which writes the run's initial "
            "carry again once it gives the checksums its record names"
        )
    return (
        f"{damaged} from it; rebuild it from the blocks before it with verify and {arg('repair', True)}, which "
        "recomputes it and checks it against its record before writing it"
    )


def carry_description(init: Sequence[HostLeaf]) -> list[CarryLeaf]:
    """The stored form of a run's carry leaves, from its initial carry as host leaves."""
    return [CarryLeaf.of(np.asarray(a), key) for a, key in init]


def load_manifest(target: Target) -> Manifest:
    """The manifest of ``target``, or an error saying why there is none."""
    manifest = Ledger(target).load()
    if manifest is None:
        if not target.exists():
            raise NoOutputError(f"{target.label} {target.absence()}; check the path")
        raise NoOutputError(f"{target.label} has no streamacc manifest; it was not written by streamacc or is empty")
    return manifest
