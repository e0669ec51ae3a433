"""The checks of one output against its manifest (its records, its chunks' checksums, its blocks recomputed), and
kept carries rebuilt by recomputation.

:class:`Checker` holds them for ``verify`` and for the check a resume makes first: the
manifest agrees with itself and the arrays' metadata, the committed chunks exist and match
their CRC-32C trailers, and chosen blocks recomputed from the carries kept before them
(in order, a bounded number at a time) reproduce their stored bytes and kept carries.

Kept carries rebuilt by recomputation: what ``verify`` does with ``repair=True``.

A kept carry is what the blocks before it computed, so one that is damaged (missing,
rewritten, its metadata changed) follows again from the carry kept before it (the run's
``init`` for the first) through the blocks between. Those blocks are recomputed as
``verify`` recomputes them, each judged against its stored chunks (a virtual block has
none), and a carry is written again only once its chunks, encoded, give exactly the
CRC-32Cs its record kept from the run that wrote it: the repair writes back what was there,
or nothing. What the carries cannot mend (damaged data chunks, records or manifest) is
refused as ``verify`` refuses it. The caller holds the writer lock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np

from ..base import DEFAULT_INFLIGHT, HostLeaf, counted, on_own_thread, pool_size, rows_in, run_ordered
from ..engine import Block, BlockPool, Plan, caller_scopes, compute_block, from_host, same_leaves, to_host
from ..errors import VerifyError, arg, one_line
from ..record import (
    BlockRecord,
    Ledger,
    Manifest,
    arrays_problem,
    carries_misdescribed,
    carries_problem,
    carry_description,
    carry_name,
    carry_problem,
    contradicts_itself,
    damaged_carry,
    trailer_problem,
)
from ..store import CarryDamaged, Target, ZarrSink, compare_chunks
from ..summaries import BlockPieces, SummaryPlan
from ._identity import carry_digest

__all__ = ["Checker", "Repaired", "repair_carries"]


class Checker:
    """The checks of one output against its manifest and a plan that recomputes its blocks."""

    def __init__(self, target: Target, manifest: Manifest, plan: Plan, sink: ZarrSink | None = None) -> None:
        self.target = target
        self.manifest = manifest
        self.plan = plan
        self.ledger = Ledger(target)
        self._sink = sink
        self.summary: SummaryPlan | None = None  # cut each checked block's summary pieces, for ``seen``
        # each checked block's pieces, in scan order
        self.seen: Callable[[int, dict[str, BlockPieces]], None] | None = None
        self.ended: dict[int, list[HostLeaf]] = {}  # the carry each block checked ended with
        self.rebuild: set[int] = set()  # boundaries whose kept carries are damaged: recomputed, never read

    def fail(self, what: str) -> VerifyError:
        return VerifyError(f"{self.target.label}: {what}; rewrite the output with {arg('mode', 'overwrite')}")

    def bad_block(self, k: int, start: int, stop: int, what: str) -> VerifyError:
        return VerifyError(
            f"block {k} (steps {start}-{stop}) of {self.target.label} is bad: {what}; rewrite the output with "
            f"{arg('mode', 'overwrite')}"
        )

    def not_recomputed(self, k: int, start: int, stop: int, what: str) -> VerifyError:
        """A block whose recomputation from the carry kept before it does not give what is stored.

        Either the step function (or a value it uses) is not the one that wrote the output,
        or the stored block is damaged; the data may well be fine, so nothing here says to
        delete it.
        """
        return VerifyError(
            f"block {k} (steps {start}-{stop}) of {self.target.label} does not recompute to what is stored ({what}): "
            "either f, or a value it uses, is not that of the run that wrote it, or the block is damaged; run with "
            "the original f and its values, and check the output with streamacc.verify (`streamacc verify` for a "
            "recipe) to tell which"
        )

    def manifest_agrees(self) -> None:
        """The manifest's counts agree with each other and with the plan's layout."""
        problem = self.manifest.inconsistency()
        if problem is None and self.manifest.total_blocks != self.plan.block_count:
            problem = f"it counts {self.manifest.total_blocks} blocks where the layout has {self.plan.block_count}"
        if problem is not None:
            raise VerifyError(contradicts_itself(self.target.label, problem))

    def arrays_unchanged(self, *, declared: bool = True) -> None:
        """Each of the run's arrays has exactly the metadata it was created with (see ``array_document``); without
        ``declared``, whether they are declared virtual is not asked (see ``arrays_problem``)."""
        problem = arrays_problem(self.target, self.manifest, declared=declared)
        if problem is not None:
            raise self.fail(problem)

    def carries_agree(self) -> None:
        """The kept carries' arrays have the metadata the manifest makes them, and the records keep a carry
        exactly where the manifest's spacing does (see ``carries_problem``)."""
        problem = carries_problem(self.target, self.manifest, self.ledger)
        if problem is not None and not self.manifest.v2:
            # their metadata is not the manifest's: the init may tell which of the two is damaged
            told = init_problem(self.manifest, to_host(self.plan.init))
            problem = told if told is not None else problem
        if problem is not None:
            raise VerifyError(f"{self.target.label}: {problem}")

    @property
    def sink(self) -> ZarrSink:
        if self._sink is None:
            names = self.manifest.identity.names
            self._sink = ZarrSink.open(self.target, names)
        return self._sink

    def stored_blocks(self, blocks: Iterable[int]) -> list[int]:
        """Those of ``blocks`` whose data chunks are stored (all but a virtual output's unmaterialized ones)."""
        return [k for k in blocks if self.manifest.stores(k)]

    def chunks_present(self) -> None:
        """Every chunk of every committed block that stores its data is there (one listing per array)."""
        stored = {name: set(self.target.list_keys(f"{name}/")) for name in self.sink.arrays}
        bounds = self.plan.bounds()
        for k in range(self.manifest.committed_blocks):
            start, stop = next(bounds)
            if not self.manifest.stores(k):
                continue
            rows = rows_in(start, stop, self.plan.save_every)
            for name in self.sink.arrays:
                missing = [key for key in self.sink.chunk_keys(name, *rows) if key not in stored[name]]
                if missing:
                    raise self.bad_block(k, start, stop, f"chunk {missing[0]} is missing")

    def trailers_match(self, blocks: Iterable[int], *, whole: bool = False) -> None:
        """Every chunk of ``blocks`` (those storing data), and of the carries kept after them (and the initial
        carry, with block 0), ends with the CRC-32C its record names; with ``whole``, read whole, its bytes give
        that checksum too."""
        blocks = list(blocks)
        problem = trailer_problem(
            self.target, self.ledger, self.sink, self.stored_blocks(blocks), self.plan.save_every, whole=whole
        )
        if problem is not None:
            raise self.bad_block(*problem)
        carry = carry_problem(self.target, self.ledger, self.manifest, blocks, whole=whole)
        if carry is not None:
            raise VerifyError(damaged_carry(self.target.label, *carry))

    def _record(self, k: int) -> BlockRecord:
        """Block ``k``'s record, checked against the layout."""
        rec = self.ledger.block(k, self.manifest)
        bounds = next(self.plan.bounds(k))
        if (rec.start, rec.stop) != bounds:
            raise self.bad_block(
                k, rec.start, rec.stop, f"its record says steps {rec.start}-{rec.stop}, the layout {bounds}"
            )
        rows = rows_in(rec.start, rec.stop, self.plan.save_every)
        for name in self.sink.arrays if self.manifest.stores(k) else ():  # a virtual block's record may hold none
            writer, recorded = self.sink.writers[name], rec.crc32c.get(name, [])
            if not isinstance(recorded, list) or writer.split_record(*rows, recorded) is None:
                held = len(recorded) if isinstance(recorded, list) else 0
                has = f"{counted(held, 'checksum')} for {name!r}'s {counted(len(writer.keys(*rows)), 'chunk')}"
                what = f"its record has {has}"
                raise self.bad_block(k, rec.start, rec.stop, what)
        return rec

    def chain(self, chosen: Iterable[int]) -> list[int]:
        """The blocks to recompute to check ``chosen``: each with the blocks since the last carry kept before it.

        A run keeps its carry after every block, or every few for a large carry (see
        ``record.carry_every``), so a block is recomputed from the nearest kept carry before
        it, through the blocks between, which are then checked too.
        """
        out: set[int] = set()
        for k in chosen:
            start = self.ledger.kept_before(self.manifest, k)
            while start in self.rebuild and start > 0:  # from the kept carry before it
                start = self.ledger.kept_before(self.manifest, start - 1)
            out.update(range(start, k + 1))
        return sorted(out)

    def _recomputed(self, chosen: Iterable[int], pool: BlockPool) -> Iterator[_Recomputed]:
        """Each chosen block (and those it is recomputed through) recomputed, in scan order.

        A block starts from the carry kept before it, or from the carry the block before it
        just ended with. A block whose record fails travels as its error, so that it is
        raised in scan order after the blocks before it are judged; nothing after it is
        recomputed.
        """
        plan, m = self.plan, self.manifest
        previous: tuple[int, Any] | None = None  # the block recomputed last, and the carry it ended with
        for k in self.chain(chosen):
            try:
                rec = self._record(k)
                kept = None if k in self.rebuild else self.ledger.carry(m, k)
                if kept is not None:
                    carry = from_host(kept, plan.init)
                else:
                    assert previous is not None and previous[0] == k - 1  # the chain holds the blocks since a kept one
                    carry = previous[1]
                after = None if k + 1 in self.rebuild else self.ledger.carry(m, k + 1)
                block = compute_block(plan, carry, rec.start, rec.stop, pool=pool)
                previous = (k, block.carry)
                yield _Recomputed(k, rec, after, block)
            except VerifyError as exc:
                yield _Recomputed(k, None, None, None, exc)
                return

    def judge(self, k: int, block: Block, carry: list[HostLeaf], after: list[HostLeaf] | None) -> None:
        """Judge block ``k`` recomputed elsewhere: ``block``, leaving with ``carry``, against the store
        and ``after``, the carry kept after it (None where none is)."""
        self._compare(_Recomputed(k, self._record(k), after, block, carry=carry))

    def _compare(self, item: _Recomputed) -> dict[str, BlockPieces] | None:
        """Judge one recomputed block against its stored chunks, checksums and the carry after it.

        Returns the block's summary pieces (cut from the data now proven to be the stored data).
        """
        if item.error is not None:
            raise item.error
        rec, block = item.rec, item.block
        assert rec is not None and block is not None
        try:
            if block.stop != rec.stop:  # the condition ended it elsewhere
                what = f"its condition (until) ends it after step {block.stop - 1}, its record after {rec.stop - 1}"
                raise self.not_recomputed(item.index, rec.start, rec.stop, what)
            rows = rows_in(rec.start, rec.stop, self.plan.save_every)
            ys = dict(zip(self.sink.arrays, jax.tree_util.tree_leaves(block.ys), strict=True))
            stored = self.manifest.stores(item.index)  # a virtual block's data are its recomputation
            found = {
                name: compare_chunks(
                    self.sink.writers[name], self.target, rows[0], ys[name], rec.crc32c[name], end=block.ended
                )
                for name in self.sink.arrays
                if stored
            }
            for check in found.values():
                if check.problem is not None:
                    key, kind = check.problem
                    what = (
                        f"chunk {key} is missing"
                        if kind == "missing"
                        else f"the stored bytes of chunk {key} do not match their checksum (damaged in place)"
                    )
                    raise self.bad_block(item.index, rec.start, rec.stop, what)
            for name, check in found.items():
                for i in check.differing:
                    self._compare_values(item.index, rec, name, i, ys[name])
            ended = to_host(block.carry) if item.carry is None else item.carry
            if item.after is not None and not same_leaves(ended, item.after):
                what = "its final carry is not the carry recorded after it"
                raise self.not_recomputed(item.index, rec.start, rec.stop, what)
            self.ended[item.index] = ended
            return None if self.summary is None else self.summary.pieces(rows[0], ys)
        finally:
            block.release()

    def _compare_values(self, k: int, rec: BlockRecord, name: str, i: int, ys: np.ndarray) -> None:
        """Decode chunk ``i`` of the block (its bytes are not the writer's encoding) and compare its values."""
        first, last = rows_in(rec.start, rec.stop, self.plan.save_every)
        region = self.sink.writers[name].region(first, last, i)
        stored_region = (slice(first + region[0].start, first + region[0].stop), *region[1:])
        try:
            stored = self.sink.arrays[name][stored_region]
        except Exception as exc:  # a damaged compressed chunk fails in its codec, with the codec's own error
            what = f"its chunks cannot be decoded ({type(exc).__name__}: {one_line(exc)})"
            raise self.bad_block(k, rec.start, rec.stop, what) from None
        if np.ascontiguousarray(ys[region]).tobytes() != np.asarray(stored).tobytes():
            raise self.not_recomputed(k, rec.start, rec.stop, f"{name!r} differs")

    def blocks(self, chosen: Iterable[int], *, depth: int = DEFAULT_INFLIGHT) -> None:
        """Check the committed blocks ``chosen`` (in scan order) bit for bit; raise on the first bad one.

        As a write runs: blocks are recomputed on a thread of their own into a pool of recycled
        buffers while ``depth`` threads compare earlier ones with their stored chunks.
        """
        pool = BlockPool(pool_size(depth))
        # Ctrl-C need not wait for a block
        recomputed = on_own_thread(self._recomputed(chosen, pool), scopes=caller_scopes)
        try:
            run_ordered(recomputed, self._compare, self._judged, depth=depth, workers=depth)
        finally:
            recomputed.close()

    def _judged(self, item: _Recomputed, pieces: dict[str, BlockPieces] | None) -> None:
        if self.seen is not None and pieces is not None and item.rec is not None:
            self.seen(rows_in(item.rec.start, item.rec.stop, self.plan.save_every)[0], pieces)

    def block(self, k: int) -> None:
        """Check committed block ``k`` (in scan order) bit for bit."""
        self.blocks([k], depth=1)


@dataclasses.dataclass(frozen=True)
class _Recomputed:
    """A block recomputed from its record, or the error its record raised."""

    index: int
    rec: BlockRecord | None
    after: list[HostLeaf] | None  # the carry kept after the block, if one is
    block: Block | None
    error: VerifyError | None = None
    carry: list[HostLeaf] | None = None  # the carry leaving the block as host leaves, where already known


@dataclasses.dataclass(frozen=True)
class Repaired:
    """What :func:`repair_carries` rewrote: the boundaries whose kept carries it rebuilt, and the keys of the
    carries' metadata documents it wrote again as the manifest says."""

    boundaries: list[int]
    metadata: list[str]


def repair_carries(target: Target, manifest: Manifest, plan: Plan) -> Repaired:
    """Rebuild the damaged kept carries of ``target`` (its lock held) by recomputation; what it rewrote.

    Raises VerifyError where a carry cannot be rebuilt: the records and the manifest disagree
    on which carries are kept, the manifest's description of the carries is not what wrote
    them, ``init`` is not the run's, a block before it does not recompute to its stored
    chunks, or the carry recomputed is not the one recorded; all but the last two before
    anything is written.
    """
    if manifest.v2:  # its carries are in its records, checked with them
        return Repaired([], [])
    checker = Checker(target, manifest, plan)
    checker.manifest_agrees()
    carries = checker.ledger.carries(manifest)
    label = target.label
    problem = carries_problem(target, manifest, checker.ledger, metadata=False)
    if problem is not None:
        raise VerifyError(f"{label}: {problem}")
    _check_init(target, manifest, to_host(plan.init))
    mend = carries.metadata_problem(manifest.committed_blocks) is not None
    if mend:  # rewritten only as the manifest describes the carries its run wrote
        misdescribed = carries_misdescribed(manifest, checker.ledger)
        if misdescribed is not None:
            raise VerifyError(f"{label}: {misdescribed}")
    damaged = _damaged(target, manifest, checker, carries)  # read as the manifest describes them
    metadata: list[str] = []
    if mend:
        target.check_lock()
        metadata = carries.mend_metadata(manifest.committed_blocks)  # the documents the run's carries must have
    if damaged and damaged[0] == 0:
        _rewrite(target, manifest, checker, 0, to_host(plan.init), "the init given")
    rest = [b for b in damaged if b > 0]
    checker.rebuild = set(rest)
    checker.blocks([b - 1 for b in rest])
    for boundary in rest:
        _rewrite(target, manifest, checker, boundary, checker.ended[boundary - 1], "the carry recomputed")
    return Repaired(damaged, metadata)


def init_problem(manifest: Manifest, init: list[HostLeaf]) -> str | None:
    """Where ``init`` has another structure than the carry the manifest's ``carries`` describes, which of the two is
    wrong, in words with the fix; None where they agree.

    The run's identity records its initial carry's digest (its dtypes, shapes and bytes): an
    ``init`` that gives it is the run's, and a manifest describing another carry is damaged.
    """
    given, kept = carry_description(init), manifest.carry_leaves
    if given == kept:
        return None
    if manifest.identity.to_json().get("init") == carry_digest(init):
        return (
            f"its manifest's record of the kept carries (carries) describes leaves {_leaves(kept)}, and the carry "
            f"its run began with (recorded in its identity) has {_leaves(given)}, so the manifest is damaged and "
            f"its carries cannot be read; rewrite the output with {arg('mode', 'overwrite')}"
        )
    return (
        f"the init given has leaves {_leaves(given)}, and its run's carry {_leaves(kept)}; pass the init the output "
        "was written with"
    )


def _check_init(target: Target, manifest: Manifest, init: list[HostLeaf]) -> None:
    """Refuse, before anything is written, an ``init`` of another structure than the run's carry (which would
    rebuild no carry it kept), or a manifest that describes another carry than its run's."""
    problem = init_problem(manifest, init)
    if problem is not None:
        raise VerifyError(f"{target.label}: {problem}")


def _leaves(leaves: list[Any]) -> str:
    return "[" + ", ".join(f"{leaf.dtype}{list(leaf.shape)}" for leaf in leaves) + "]"


def _damaged(target: Target, manifest: Manifest, checker: Checker, carries: Any) -> list[int]:
    """The boundaries whose kept carries do not read back as recorded; VerifyError where something stands where a
    chunk of one belongs that a write would not replace."""
    label = target.label
    damaged = []
    for boundary in range(manifest.committed_blocks + 1):
        crcs = checker.ledger.carry_checksums(manifest, boundary)
        if crcs is None:
            continue
        try:
            carries.read(boundary, crcs)
        except CarryDamaged:
            damaged.append(boundary)
    for boundary in damaged:
        for key in carries.keys(boundary):
            found = target.missing(key)
            if found != "is missing":  # something stands where the chunk belongs that a write would not replace
                raise VerifyError(
                    f"{label}: chunk {key} of {carry_name(boundary)} {found}, then run verify with "
                    f"{arg('repair', True)} again"
                )
    return damaged


def _rewrite(
    target: Target, manifest: Manifest, checker: Checker, boundary: int, carry: list[HostLeaf], what: str
) -> None:
    """Write ``carry`` as the carry kept at ``boundary``, durably, once its chunks give the CRC-32Cs recorded."""
    carries = checker.ledger.carries(manifest)
    values = [a for a, _ in carry]
    recorded = checker.ledger.carry_checksums(manifest, boundary)
    if carries.checksums(values) != recorded:
        fix = (
            "pass the init the output was written with" if boundary == 0
            else f"the record is damaged too: rewrite the output with {arg('mode', 'overwrite')}"
        )  # fmt: skip
        raise VerifyError(
            f"{target.label}: {what} for {carry_name(boundary)} is not the carry its run kept there (its chunks' "
            f"CRC-32Cs differ from the record), so it is not written; {fix}"
        )
    target.check_lock()
    keys, _ = carries.write(boundary, values)
    target.make_durable(keys)
