"""An output open for writing under its lock, and how its blocks commit.

Commits happen strictly in scan order: first the carries the run keeps after the blocks
(made durable), then the blocks' records, then the manifest that counts them; the root
group's public attributes follow at the start, at the end, and every few seconds in between.
How an output is opened (new, overwritten, resumed, extended) is ``_open``'s.

Blocks that commit together: a virtual run's, and a materialize's.

A block that stores no data (a virtual run's) or whose data are already written costs
milliseconds, and a commit two durable writes; committing each such block alone would
make the commits the run's cost. Their blocks wait in a :class:`Batch` and commit together
about once every so many seconds, so a crash costs at most that much of the run.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

import numpy as np

from ..base import HostLeaf, block_size_near, check_stop, origin, run_from, warn
from ..engine import BlockFailed
from ..errors import LockedError, StepError, StoreError, StreamaccError, StreamaccWarning, arg
from ..record import (
    BlockRecord,
    Ledger,
    Manifest,
    bookkeeping_listing,
    carry_every,
    describe_nonfinite,
    encode_leaves,
    missing_from_store,
    remove_partial_writes,
)
from ..store import Target, ZarrSink, describe_store_failure, is_store_failure, progress_attrs
from ..summaries import BlockPieces, Summaries, SummaryPlan
from ._planning import OutputSpec

__all__ = ["COMMIT_SECONDS", "PUBLISH_SECONDS", "Batch", "BlockResult", "Output"]


T = TypeVar("T")


class Batch(Generic[T]):
    """What waits to commit together, and how long since the last commit.

    Attributes
    ----------
    waiting : list
        What waits, in the order added.
    """

    def __init__(self) -> None:
        self.waiting: list[T] = []
        self._since = time.monotonic()

    def add(self, items: Iterable[T]) -> bool:
        """Add ``items``; whether the batch is due: ``COMMIT_SECONDS`` or more since the last commit."""
        self.waiting.extend(items)
        return time.monotonic() - self._since >= COMMIT_SECONDS

    def take(self) -> list[T]:
        """Empty the batch and restart its clock (as its commit begins, or once it is done); what waited."""
        taken, self.waiting = self.waiting, []
        self._since = time.monotonic()
        return taken


log = logging.getLogger("streamacc")

PUBLISH_SECONDS = 5.0
"""How often, at most, the root attributes are refreshed with the committed step count while writing."""

SLOW_BLOCK_SECONDS = 60.0
"""A block that takes longer than this to compute and commit makes the run say so, once: a kill loses a whole block,
and a smaller ``block_size`` commits more often. A run's first block, whose time holds the step's compile, only past
ten times this."""

COMMIT_EVERY_SECONDS = 10.0
"""About how often the ``block_size`` that notice suggests commits."""

COMMIT_SECONDS = 1.0
"""How often blocks that commit together (a :class:`Batch`: a virtual run's, a materialize's) commit. Such a
block costs little beside a commit's two durable writes (a carry pass, a block computed for its summaries, or
one whose data are written already), so they are committed together: a crash costs at most this much of the
run."""


@dataclasses.dataclass(frozen=True)
class BlockResult:
    """A block made durable in the store, ready to commit: what its record needs."""

    index: int
    start: int
    stop: int
    carry_in: list[HostLeaf]
    carry_out: list[HostLeaf]
    crc32c: dict[str, list[int]]
    nbytes: int
    stored: int
    # each summarised output's pieces of the finest windows (see _summaries)
    summary: dict[str, BlockPieces] | None = None
    # the block's first step in scan order holding a NaN or an infinity, and its output (None: the carry after it)
    nonfinite: tuple[int, str | None] | None = None
    # the run's condition held in the block, after its step stop - 1: the run's last block
    ended: bool = False

    def __len__(self) -> int:
        return self.stop - self.start


class Output:
    """An output open for writing under its lock: where the run starts, and its in-order commits."""

    def __init__(
        self,
        target: Target,
        spec: OutputSpec,
        manifest: Manifest,
        sink: ZarrSink,
        summaries: Summaries | None = None,
        on_commit: Callable[[BlockResult], None] | None = None,
    ) -> None:
        self.target = target
        self.spec = spec
        self.manifest = manifest
        self.sink = sink
        self.summaries = summaries
        self.ledger = Ledger(target)
        self.on_commit = on_commit
        self._published = 0.0
        self._first_commit = True  # the first commit publishes at once: a reader sees progress from the start
        self._last_commit = time.monotonic()  # when the block now computed began, about (see _notice_slow_blocks)
        self._slow_said = False
        self._listing: dict[str, dict[str, Any]] | None = None
        self._batch: Batch[BlockResult] = Batch()  # a virtual run's blocks computed and not yet committed
        self._carry: list[HostLeaf] | None = None  # the carry entering the first block, once known
        self._site = origin()  # the caller's line, where the warning of a NaN points from the writer threads
        self.extending = False  # checked before an extension changes the output (see ``_open``)

    @property
    def data_sink(self) -> ZarrSink | None:
        """Where a block's data go: the sink, or None for a virtual run, which stores none."""
        return self.spec.storage.data_sink(self.sink)

    @property
    def first_block(self) -> int:
        """The first block (in scan order) still to compute."""
        return self.manifest.committed_blocks

    @property
    def carry(self) -> list[HostLeaf]:
        """The carry entering :attr:`first_block`, as host leaves.

        Read from the store where it is kept; a continued run whose last commit kept none
        learns it from the blocks its check recomputes (:meth:`resume_from`).
        """
        if self._carry is None:
            self._carry = self.ledger.carry(self.manifest, self.manifest.committed_blocks)
        if self._carry is None:
            raise AssertionError("the carry entering the first block is not kept: recompute it before resuming")
        return self._carry

    def resume_from(self, carry: list[HostLeaf]) -> None:
        """Continue from ``carry``, the carry after the committed blocks as their check recomputed it."""
        self._carry = carry

    def continue_as(self, checked: Output) -> None:
        """Continue from where ``checked`` was found to end: this output's committed blocks, checked by a resume's
        check before an extension made the output the longer run's (its arrays, carries and summaries)."""
        self._carry = checked._carry

    @property
    def complete(self) -> bool:
        return self.manifest.complete

    @property
    def ended(self) -> bool:
        """Whether the run ended on its condition: it has no block left to compute (it may still be to finish)."""
        return self.manifest.ended_at is not None

    @property
    def summary_plan(self) -> SummaryPlan | None:
        """What a block's writer needs to cut its summary pieces (None: the run writes no summaries)."""
        return None if self.summaries is None else self.summaries.plan

    def _save(self, **changes: Any) -> None:
        """Durably save the manifest with ``changes``, then apply them in memory.

        The in-memory manifest changes only once the new one is durable, so that an error
        message never counts a block whose commit failed.
        """
        self.target.check_lock()
        self.ledger.save(dataclasses.replace(self.manifest, **changes))
        for name, value in changes.items():
            setattr(self.manifest, name, value)

    def _notice_slow_blocks(self, results: tuple[BlockResult, ...]) -> None:
        """Say once that blocks take longer than ``SLOW_BLOCK_SECONDS`` each (the time since the commit before, or
        since the output opened), with the ``block_size`` that would commit about every ``COMMIT_EVERY_SECONDS``."""
        now = time.monotonic()
        seconds, self._last_commit = (now - self._last_commit) / len(results), now
        if self._slow_said or seconds <= SLOW_BLOCK_SECONDS * (10 if self._first_commit else 1):
            return
        self._slow_said = True
        blocking = self.manifest.identity.blocking
        steps = max(len(r) for r in results)
        unroll = blocking.unroll if isinstance(blocking.unroll, int) and not isinstance(blocking.unroll, bool) else 1
        size = block_size_near(max(1, int(steps * COMMIT_EVERY_SECONDS / seconds)), unroll, blocking.save_every)
        took = f"{seconds:.{0 if seconds >= 10 else 1}f} s"
        warn(
            f"{self.target.label}: a block of {steps} steps took {took} to compute and commit, so a run killed loses "
            f"up to that much; a new run with {arg('block_size', size)} commits about every "
            f"{COMMIT_EVERY_SECONDS:.0f} s (this output keeps the block size it began with)",
            StreamaccWarning,
        )

    def publish(self, *, force: bool = False, due: bool = False) -> None:
        """Refresh the root attributes with the committed steps: at most every few seconds, unless ``due`` (this
        run's first commit) or forced (which also lists the bookkeeping's nodes again)."""
        now = time.monotonic()
        if force or due or now - self._published >= PUBLISH_SECONDS:
            m = self.manifest
            if force or self._listing is None:  # the bookkeeping's nodes change only between a run's parts
                self._listing = bookkeeping_listing(self.target, m)
            self.sink.publish(progress_attrs(m.span(), m.length, m.complete, virtual=m.recomputes), self._listing)
            self._published = now

    def commit(self, *results: BlockResult) -> None:
        """Commit the next blocks in scan order: their records, then one manifest that counts them all.

        A virtual run's blocks wait and commit together about every ``COMMIT_SECONDS``
        (and at :meth:`finish`).
        """
        check_stop()  # after Ctrl-C or SIGTERM nothing more is committed
        if not self.spec.storage.batched:
            self._commit(results)
            return
        if self.summaries is not None:
            # folded as they come, so that the rows of a batch's summary chunks are durable long
            # before it commits instead of all pending in its manifest's tail (a batch holds up
            # to a second of blocks: hundreds for the headline's recurrence)
            self.summaries.fold(results)
        if self._batch.add(results):
            self._commit(tuple(self._batch.take()))

    def _commit(self, results: tuple[BlockResult, ...]) -> None:
        """Commit ``results`` (folded into the summaries already where the run is virtual)."""
        if not results:
            return
        first = self.manifest.committed_blocks
        if [r.index for r in results] != list(range(first, first + len(results))):
            raise AssertionError(f"blocks {[r.index for r in results]} committed out of order after {first}")
        changes: dict[str, Any] = {}
        every = None if self.manifest.v2 else self._carries_every(results)
        if every is not None and self.manifest.carries is not None and every != self.manifest.carries["every"]:
            changes["carries"] = {**self.manifest.carries, "every": every}
        recs = self._records(results, every)
        if self.summaries is not None and not self.spec.storage.batched:  # a batch was folded as it came
            self.summaries.fold(results)  # starts writing the summary chunks these blocks complete
        found = next((r.nonfinite for r in results if r.nonfinite is not None), None)
        if self.manifest.nonfinite is None and found is not None:
            changes["nonfinite"] = {"step": found[0], "array": found[1]}
        self.ledger.record(*recs)
        if self.summaries is not None:
            # taken after the records are durable, so that the chunks begun above have had that
            # long to become durable too: their rows then leave the tail this manifest records
            changes["summaries"] = self.summaries.tail()
        if self.manifest.v2:
            changes["carry"] = encode_leaves(results[-1].carry_out)
        if results[-1].ended:  # the run's last block: its blocks are those up to it
            changes.update(ended_at=results[-1].stop - 1, total_blocks=results[-1].index + 1)
        self._save(
            committed_blocks=first + len(results),
            committed_steps=self.manifest.committed_steps + sum(len(r) for r in results),
            **changes,
        )
        self._carry = results[-1].carry_out
        if "nonfinite" in changes:
            self.warn_nonfinite()
        self.publish(due=self._first_commit)
        self._notice_slow_blocks(results)
        self._first_commit = False
        self.target.checkpoint(self._progress(), nbytes=sum(r.stored for r in results))
        if self.on_commit is not None:
            for result in results:
                self.on_commit(result)

    def _carries_every(self, results: tuple[BlockResult, ...]) -> int:
        """Every how many blocks the run keeps its carry (format 3): as its manifest says, but at its first commit,
        which judges it against the stored bytes of the first block's data and of the carry after it.

        Both are compressed: a field that is mostly zero stores a few percent of its bytes, its
        carry too, and a carry that compresses worse than the data is kept less often. The
        manifest that commits the first block records it, so a resumed run keeps the carries
        an uninterrupted one keeps.
        """
        m = self.manifest
        assert m.carries is not None
        if m.committed_blocks or m.virtual or m.carries_codec is None:
            every: int = m.carries["every"]
            return every
        first = results[0]
        carry = self.ledger.carries(m).encoded([np.asarray(a) for a, _ in first.carry_out])
        return carry_every(sum(len(chunk) for chunk in carry), first.stored)

    def _records(self, results: tuple[BlockResult, ...], every: int | None) -> list[BlockRecord]:
        """The blocks' records, after writing the carries the run keeps after them (durably), one every ``every``
        blocks (format 3)."""
        m = self.manifest
        if m.v2:
            return [
                BlockRecord(r.index, r.start, r.stop, r.crc32c, carry_in=encode_leaves(r.carry_in)) for r in results
            ]
        recs, keys = [], []
        for r in results:
            crcs = None
            if m.keeps_carry(r.index + 1, every) or r.ended:  # the run's last carry is kept
                written, crcs = self.ledger.write_carry(m, r.index + 1, r.carry_out)
                keys += written
            recs.append(BlockRecord(r.index, r.start, r.stop, r.crc32c, carry=crcs))
        if keys:
            self.target.make_durable(keys)
        return recs

    def warn_nonfinite(self, before: bool = False) -> None:
        """Warn that the output holds a NaN or an infinity (once a run: as it is committed, or as a continued run
        starts with one committed ``before``), pointing at the caller's line."""
        found = self.manifest.nonfinite
        if found is None:
            return
        when = ", found by the run this one continues" if before else ""
        with run_from(self._site):
            warn(
                f"{self.target.label}: {describe_nonfinite(found)}{when}; the run goes on, and info reports it: "
                "check f and its parameters (a time step too large, an overflow, a division by zero)",
                StreamaccWarning,
            )

    def remove_lost_writes(self) -> list[str]:
        """Remove the temp files of writers that died mid-write (a killed cluster worker); return them.

        Their blocks were written again by others, so only the debris is left; the writer
        lock keeps any other run out meanwhile. This run's own summary chunks, written in the
        background, are waited for first: their temp files are no debris.
        """
        if self.summaries is not None:
            self.summaries.wait()
        return remove_partial_writes(self.target, [*self.spec.names, *self.manifest.arrays])

    def finish(self) -> None:
        """Mark the run complete, in the manifest and then in the root attributes.

        A run that ended on its condition first ends its arrays after the step where it held
        (their last chunk was padded as it was written), so that every reader sees its steps alone,
        and its kept carries' arrays after its last block, laid out for its length until then.
        """
        if self._batch.waiting:
            self._commit(tuple(self._batch.take()))
        self._check_kept()
        changes: dict[str, Any] = {}
        if self.ended:
            changes["arrays"] = {**self.manifest.arrays, **self.sink.cut(self.manifest.rows()[1])}
            carries = None if self.manifest.v2 else self.ledger.carries(self.manifest)
            if carries is not None and carries.boundaries() != self.manifest.carry_boundaries:
                carries.resize(self.manifest.carry_boundaries)
        if self.summaries is None:
            self._save(complete=True, **changes)
        else:
            self._save(complete=True, summaries=self.summaries.finish(), **changes)
        self.publish(force=True)
        self.target.checkpoint(self._progress(), final=True, tag=f"{self.manifest.length}-steps")

    def _check_kept(self) -> None:
        """Refuse to call the run complete where the store lost what it committed (the output removed meanwhile)."""
        gone = missing_from_store(self.target, self.manifest, self.sink, self.summaries)
        if gone is not None:
            raise StoreError(
                f"{self.target.label} no longer holds what this run committed ({gone}): the output was removed or "
                f"changed while the run wrote, so it is not marked complete; start afresh with "
                f"{arg('mode', 'overwrite')}"
            )

    def _progress(self) -> str:
        """A commit's message in a transactional store: the steps it commits."""
        m = self.manifest
        done = "complete" if m.complete else "committed"
        return f"streamacc: {m.committed_steps} of {m.length} steps {done}"

    def close(self) -> None:
        """Let background writes end (call before the writer lock is released, whatever happened)."""
        if self.summaries is not None:
            self.summaries.close()

    def step_failure(self, exc: BlockFailed, length: int) -> StepError:
        """The error for the step failing at run time in the block of steps ``[exc.start, exc.stop)``: that block,
        what is committed, and how to continue (the caller chains JAX's error)."""
        blocking = self.manifest.identity.blocking
        index = next((k for k, (a, _) in enumerate(blocking.bounds()) if a == exc.start), None)
        steps = f"steps {exc.start} to {exc.stop}"
        block = steps if index is None else f"block {index} ({steps})"
        committed = self.manifest.committed_steps
        what = f"the step failed at run time in {block} of {self.target.label} ({exc.error})"
        if committed == 0:
            fix = f"fix the cause and rerun with {arg('mode', 'overwrite')}"
            return StepError(f"{what}; nothing is committed yet: {fix}")
        before = committed == exc.start and not blocking.reverse
        kept = f"the {committed} steps before it are" if before else f"{committed} of {length} steps are"
        return StepError(
            f"{what}; {kept} committed: with a cause outside the step fixed (memory, a file it reads), rerun with "
            f"{arg('mode', 'resume')} to continue from there; a step changed to fix it is another run, which "
            f"{arg('mode', 'overwrite')} writes afresh"
        )

    def _kept(self) -> tuple[int, bool] | None:
        """What the store's manifest still commits for this run, read back: its steps, and whether another
        run's manifest replaced it (a writer that took the output over); None when it cannot be read."""
        try:
            stored = Ledger(self.target).load()
        except Exception:
            return None
        if stored is None:
            return 0, False
        if stored.identity != self.manifest.identity:
            return 0, True
        return stored.committed_steps, False

    def failure(self, exc: Exception, length: int) -> StreamaccError | None:
        """The error for a store that failed mid-run, saying what is kept as the store itself now tells.

        Also for a lost lease whose store has lost this run's committed steps (the lease gone with
        the rest of the store, or another writer's output in their place), and for a step that failed
        at run time (:meth:`step_failure`). None for any other exception, which the caller raises as it is.
        """
        if isinstance(exc, BlockFailed):
            return self.step_failure(exc, length)
        store_failed = is_store_failure(exc)
        if not (store_failed or isinstance(exc, LockedError)):
            return None
        committed = self.manifest.committed_steps
        kept = self._kept()
        if not store_failed and (kept is None or kept[0] >= committed):
            return None  # the lease alone was lost: its own message says what to do
        what = f"writing {self.target.label} failed after {committed} of {length} steps ({describe_store_failure(exc)})"
        resume = arg('mode', 'resume')
        if kept is None:
            return StoreError(
                f"{what}, and the store cannot be read to confirm that those steps are kept; once it is reachable, "
                f"rerun with {resume}, which checks them first"
            )
        steps, replaced = kept
        if replaced:
            return StoreError(
                f"{what}, and another run's output now stands there (a writer that took the output over), so none "
                f"of this run's steps are kept and nothing more was written: leave that output, or write this run "
                "to another output path"
            )
        if steps < committed:
            return StoreError(
                f"{what}, and the store no longer holds them (its manifest is gone or commits {steps} steps): the "
                f"output is lost; start afresh with {arg('mode', 'overwrite')}"
            )
        try:
            gone = missing_from_store(self.target, self.manifest, self.sink, self.summaries) if committed else None
        except Exception:  # the store cannot be read now: the resume checks them first
            gone = None
        if gone is not None:
            return StoreError(
                f"{what}, and the store no longer holds them ({gone}): the output is lost; start afresh with "
                f"{arg('mode', 'overwrite')}"
            )
        return StoreError(f"{what}; those steps are safely committed: fix the cause and rerun with {resume}")
