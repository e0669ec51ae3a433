"""The host side of a Stream: the callbacks' ends, a bounded hand-over, and writer threads that commit in order.

Each callback runs on a thread of XLA's while the program waits for it, and does host work
only (numpy, the store), never a JAX computation. The block callback waits for one of
``inflight`` slots, copies the block's ys into that slot's buffers (the arrays it is handed
may be views of the program's own buffers, valid only during the call; the slots' buffers
are reused block after block, so their pages are faulted in once) and queues the block; a
writer thread runs the queue through :func:`~streamacc.run.threads.run_ordered` with
``execute.write_block``, as :func:`streamacc.write` does, so blocks are encoded and written
on ``inflight`` threads and committed in scan order. A slow store therefore slows the
program, and memory holds ``inflight`` blocks whatever the length.

A failure anywhere on the host (a full disk, a removed output, a lost lease, Ctrl-C) is
recorded; the callback that finds it raises :class:`Stopped`, XLA ends the program with
its own error, and the Stream raises the recorded one (see ``_stream``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

import numpy as np

from ..base import STOP, HostLeaf, Interrupted, Site, rows_in, run_from, run_ordered
from ..engine import Block, Plan
from ..errors import InputError, ResumeError, arg, one_line
from ..record import RunIdentity
from ..run import (
    BlockResult,
    Continuation,
    Output,
    OutputSpec,
    Progress,
    RunSession,
    carry_digest,
    check_recomputed,
    digest_kind,
    input_values,
    write_block,
)
from ..store import Target
from ._program import CrossingLeaf

__all__ = ["CALLBACK_LOGGER", "POLL_SECONDS", "Stopped", "StreamHost"]


POLL_SECONDS = 0.1
"""How often a callback waiting for a slot, or for the writers, looks for a failure or a stop."""

CALLBACK_LOGGER = "jax._src.callback"
"""The logger JAX reports a failed callback on (its traceback, before XLA's error says it again)."""

P = ParamSpec("P")
R = TypeVar("R")


class Stopped(Exception):
    """Raised in a callback once the stream has stopped: XLA then ends the program with its own error."""


class _Rows:
    """Host buffers for the ys of ``inflight`` blocks, reused: a set per block being written, by the ys' shapes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[tuple[tuple[tuple[int, ...], np.dtype[Any]], ...], list[list[np.ndarray]]] = {}

    def copy(self, ys: list[list[Any]]) -> tuple[list[np.ndarray], Callable[[], None]]:
        """Copies of the ys leaves, each given as pieces of consecutive rows, in a free set of buffers, and the
        function that frees the set again."""
        leaves = [[np.asarray(piece) for piece in leaf] for leaf in ys]
        key = tuple(((sum(p.shape[0] for p in leaf), *leaf[0].shape[1:]), leaf[0].dtype) for leaf in leaves)
        with self._lock:
            free = self._free.setdefault(key, [])
            rows = free.pop() if free else [np.empty(shape, dtype) for shape, dtype in key]
        for row, leaf in zip(rows, leaves, strict=True):
            at = 0
            for piece in leaf:
                np.copyto(row[at : at + piece.shape[0]], piece)
                at += piece.shape[0]

        def give_back() -> None:
            with self._lock:
                self._free[key].append(rows)

        return rows, give_back


@dataclasses.dataclass
class _HandedBlock:
    """A block handed over by the program, as the writers take it."""

    index: int
    start: int
    stop: int
    ys: list[Any]
    carry_in: list[HostLeaf]
    carry_out: list[HostLeaf]
    release: Callable[[], None]
    ended: bool = False  # the run's condition held in the block, after its step stop - 1


def _host_leaves(leaves: tuple[CrossingLeaf, ...], values: tuple[Any, ...]) -> list[HostLeaf]:
    """Carry leaves that crossed, as ``engine.to_host`` gives them: numpy copies tagged with their key's impl."""
    return [(np.array(v, dtype=leaf.dtype, copy=True), leaf.impl) for leaf, v in zip(leaves, values, strict=True)]


def _guarded(method: Callable[P, R]) -> Callable[P, R]:
    """A callback's end: it raises :class:`Stopped` once anything failed, and records its own failure."""

    @functools.wraps(method)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        host: StreamHost = args[0]  # type: ignore[assignment]  # a method's self
        with run_from(host.site):
            host.check_running()
            try:
                return method(*args, **kwargs)
            except Stopped:
                raise
            except BaseException as exc:
                host.fail(exc)
                raise host.stopped() from None

    return call


class StreamHost:
    """One run of a Stream's program, as the host sees it: its output, its writers and its failure.

    Its ``session`` holds the output's lock, its progress bar and the output itself: opened
    before the program runs where the run continues a stored one (where its checks may
    compute), else by :meth:`start`, once the program's initial carry is known, since the
    run's identity holds its digest.

    Attributes
    ----------
    failure : BaseException or None
        The first failure, on any thread.
    started, finished : bool
        Whether the program's start callback ran, and its finish callback returned.
    """

    def __init__(
        self,
        *,
        session: RunSession,
        spec: OutputSpec,
        plan: Plan,
        carry: tuple[CrossingLeaf, ...],
        index_dtype: np.dtype[Any],
        inflight: int,
        site: Site | None,
        check: list[tuple[int, int, int]] | None = None,
        stored: RunIdentity | None = None,
    ) -> None:
        self.session, self.spec, self.plan = session, spec, plan
        self.stored = stored
        """The identity of the run this one continues (None: a new run): its inputs' values are checked at the start."""
        self.carry, self.index_dtype = carry, index_dtype
        self.inflight, self.site = inflight, site
        self.check_chain = check
        """The committed blocks the program recomputes before its first new one (a resumed run's last, and those
        since the carry kept before it): ``(index, start, stop)`` in scan order; None when it recomputes none."""
        self.pending: Continuation | None = None
        """The stored run this one continues, checked as the program was traced and not yet changed: applied once
        the program has checked its inputs' values and recomputed its blocks (:attr:`check_chain`)."""
        self._values: list[str] | None = None  # the digests of the inputs' values, once the program started
        self.failure: BaseException | None = None
        self.first_block: int | None = None  # the block the program computes first (once it started)
        self.last_block: int | None = None  # the last block the program handed over
        self.started = False
        self.finished = False
        self.closed = False
        self._lock = threading.Lock()
        self._slots = threading.Semaphore(inflight)
        self._rows = _Rows()
        self._queue: queue.SimpleQueue[_HandedBlock | None] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None

    # --- state -------------------------------------------------------------------------------

    @property
    def target(self) -> Target:
        return self.session.target

    @property
    def bar(self) -> Progress:
        return self.session.bar

    @property
    def output(self) -> Output | None:
        """The output being written, once opened."""
        return self.session.output

    @property
    def running(self) -> bool:
        """Whether the program is between its start and finish callbacks, and nothing failed."""
        return self.started and not self.finished and self.failure is None

    def failing_block(self) -> tuple[int, int] | None:
        """The steps ``(start, stop)`` of the block the program was computing when it failed: the one after the last
        it handed over (None before it started, or after its last)."""
        if self.first_block is None:
            return None
        k = self.first_block if self.last_block is None else self.last_block + 1
        return next(self.plan.bounds(k), None) if k < self.plan.block_count else None

    def fail(self, exc: BaseException) -> None:
        """Record ``exc`` (the first failure wins) and let the writers and every waiting callback go."""
        with self._lock:
            if self.failure is None:
                self.failure = exc
        self._queue.put(None)

    def stopped(self) -> Stopped:
        failure = self.failure
        why = "it was interrupted" if isinstance(failure, Interrupted) or failure is None else one_line(failure)
        return Stopped(f"the stream to {self.target.label} stopped: {why}")

    def check_running(self) -> None:
        """Raise :class:`Stopped` once anything failed, or a stop was asked for."""
        if self.failure is None and STOP.is_set():
            self.fail(Interrupted())
        if self.failure is None and self.closed:
            self.fail(InputError("the program ran after its Stream was closed; run it inside the `with` block"))
        if self.failure is not None:
            raise self.stopped()

    def _check_values(self, kept: list[str]) -> None:
        """Refuse a continued run whose inputs' values differ from the stored run's over the steps it holds (``kept``:
        theirs now), before any block runs and before anything is written."""
        assert self.stored is not None
        stored = self.stored.to_json().get("xs_values")
        if stored is None:
            return  # written before the values were recorded: its inputs are known by their shapes alone
        if stored != kept:
            extends = self.stored.blocking.length < self.plan.length
            raise ResumeError(
                f"cannot {'extend' if extends else 'resume'} {self.target.label}: it was written by a different run "
                f"(xs_values: stored {stored!r}, now {kept!r}: the values of the inputs of its "
                f"{self.stored.blocking.length} steps differ); rerun with the original inputs, or use "
                f"{arg('mode', 'overwrite')} to start afresh{'; the output is left as it was' if extends else ''}"
            )

    def _kept(self) -> Output:
        """The output as the program continues it: applied, or the stored run as checked before it is."""
        if self.output is not None:
            return self.output
        assert self.pending is not None and self.pending.checked is not None
        return self.pending.checked

    def _apply(self) -> Output:
        """Make the output the run's (the first byte it changes) and begin the run: its writers start."""
        assert self.pending is not None
        output = self.session.apply(self.pending, self._values)
        self.pending = None
        self._begin(output)
        return output

    def _begin(self, output: Output) -> None:
        if output.complete:
            with contextlib.suppress(Exception):  # a warning made an error must not end the program
                self.session.already_complete()
        self.session.begin()
        if not output.complete:
            self._writer = threading.Thread(target=self._write, name="streamacc-stream", daemon=True)
            self._writer.start()

    # --- the callbacks -----------------------------------------------------------------------

    @_guarded
    def start(self, *arrays: Any) -> tuple[Any, ...]:
        """The program begins: open a new output with its initial carry and its inputs' values (``arrays``: the
        carry's leaves, then the inputs'), or check a resumed one's inputs; return the first block and its carry."""
        carry, xs = arrays[: len(self.carry)], arrays[len(self.carry) :]
        held = None if self.stored is None else self.stored.blocking.length  # the steps the stored run holds
        digests = (input_values([np.asarray(x) for x in xs], [self.plan.length, held or 0], digest_kind(self.stored))
                   if xs else None)
        values = None if digests is None else digests[self.plan.length]
        if self.started:
            raise InputError(
                "the program streamed once already: a Stream streams one run of its program; open a new Stream (with "
                "mode='resume' or 'extend' to continue the output) for another"
            )
        self.started = True
        if self.pending is None:
            init = _host_leaves(self.carry, carry)
            identity = self.spec.identity.with_init(carry_digest(init)).with_values(values)
            output = self.session.open_output(dataclasses.replace(self.spec, identity=identity), init=init,
                                              check_resumable=_changed_meanwhile)  # fmt: skip
            self._begin(output)
        else:  # a stored run continued: its inputs judged before anything is written
            if digests is not None and held is not None:
                self._check_values(digests[held])
            self._values = values
            if self.pending.checked is None or self.check_chain is None:
                self._apply()  # else once the blocks the program recomputes are judged (see check)
        output = self._kept()
        first = self.plan.block_count if output.complete or output.ended else output.first_block
        self.first_block = first
        if self.check_chain is None:
            entering = before = [a for a, _ in output.carry]
        else:  # the program recomputes the blocks from the carry kept before them, and goes on from there
            kept = output.ledger.carry(output.manifest, self.check_chain[0][0])
            assert kept is not None
            entering = before = [a for a, _ in kept]
        return (np.asarray(first, dtype=self.index_dtype), *entering, *before)

    @_guarded
    def check(self, token: Any, index: Any, *arrays: Any) -> Any:
        """A committed block (``index``, in scan order) recomputed by the program, after the callback that made
        ``token``: judged against what is stored; a token."""
        assert self.check_chain is not None
        names = len(self.spec.names)
        arrays, held = self._held(arrays)
        ys, after = arrays[:names], arrays[names:]
        k = int(index)
        _, start, stop = next(bounds for bounds in self.check_chain if bounds[0] == k)
        stop, rows = self._cut(start, stop, held, [np.asarray(y) for y in ys])
        block = Block(start, stop, rows, None, save_every=self.plan.save_every, ended=held >= 0)
        check_recomputed(self._kept(), self.plan, k, block, _host_leaves(self.carry, tuple(after)))
        if k == self.check_chain[-1][0] and self.pending is not None:
            self._apply()  # every check passed: the first byte changes now
        return np.asarray(0, dtype=self.index_dtype)

    @_guarded
    def block(self, counts: tuple[int, ...], index: Any, *arrays: Any) -> None:
        """Block ``index`` computed, each ys leaf as ``counts[i]`` pieces: queue it for the writers once a slot is
        free."""
        n = len(self.carry)
        arrays, held = self._held(arrays)
        carry_in, carry_out = arrays[:n], arrays[len(arrays) - n :]
        ends = np.cumsum((n, *counts)).tolist()
        ys = [list(arrays[a:b]) for a, b in itertools.pairwise(ends)]
        k = int(index)
        self.last_block = k
        start, stop = next(self.plan.bounds(k))
        if held >= 0:  # the rows up to the step where the condition held, no more
            stop = start + held + 1
            ys = [_first_rows(leaf, len(range(*rows_in(start, stop, self.plan.save_every)))) for leaf in ys]
        while not self._slots.acquire(timeout=POLL_SECONDS):
            self.check_running()
        rows, give_back = self._rows.copy(ys)
        released = threading.Event()

        def release() -> None:
            if not released.is_set():
                released.set()
                give_back()
                self._slots.release()

        carries = _host_leaves(self.carry, carry_in), _host_leaves(self.carry, carry_out)
        item = _HandedBlock(k, start, stop, rows, *carries, release, held >= 0)
        self._queue.put(item)

    def _held(self, arrays: tuple[Any, ...]) -> tuple[tuple[Any, ...], int]:
        """The arrays a callback got, without the step where the condition held (last, with a condition), and
        that step (-1: none, or no condition)."""
        if self.plan.until is None:
            return arrays, -1
        return arrays[:-1], int(np.asarray(arrays[-1]))

    def _cut(self, start: int, stop: int, held: int, ys: list[np.ndarray]) -> tuple[int, list[np.ndarray]]:
        """A block's stop and ys, cut after the step where the condition held in it (if it did)."""
        if held < 0:
            return stop, ys
        stop = start + held + 1
        kept = len(range(*rows_in(start, stop, self.plan.save_every)))
        return stop, [y[:kept] for y in ys]

    @_guarded
    def finish(self, token: Any, *carry: Any) -> tuple[Any, ...]:
        """The last block is computed: once every block is committed, mark the run complete; return the carry."""
        assert self.output is not None
        self._end_writer()
        self.check_running()
        self.session.finish()
        self.finished = True
        return tuple(np.asarray(c) for c in carry)

    # --- the writers ---------------------------------------------------------------------------

    def _items(self) -> Iterator[_HandedBlock]:
        while True:
            item = self._queue.get()
            if item is None or self.failure is not None:
                return
            yield item

    def _write(self) -> None:
        output = self.output
        assert output is not None
        names = output.spec.names

        def work(item: _HandedBlock) -> BlockResult:
            ys, item.ys = item.ys, []  # held by this write alone until its block is durable and released
            block = Block(item.start, item.stop, ys, None, item.release, save_every=self.plan.save_every,
                          ended=item.ended)  # fmt: skip
            try:
                return write_block(output.data_sink, names, item.index, block, item.carry_in, item.carry_out,
                                   output.summary_plan, reverse=self.plan.reverse)  # fmt: skip
            except BaseException as exc:
                # known at once, not when the pipeline next looks at this block: the program may be waiting
                # for the slots of blocks that failed, and the pipeline for the program's next block
                self.fail(exc)
                raise
            finally:
                item.release()  # a failed block's slot too: nothing will write it

        def commit(item: _HandedBlock, result: BlockResult) -> None:
            try:
                output.commit(result)
            except BaseException as exc:
                self.fail(exc)
                raise

        try:
            with run_from(self.site):
                run_ordered(self._items(), work, commit, depth=self.inflight, workers=self.inflight)
        except BaseException as exc:
            self.fail(exc)

    def _end_writer(self) -> None:
        """Let the writers write and commit every block queued, and wait for them."""
        writer = self._writer
        if writer is None:
            return
        self._queue.put(None)
        while writer.is_alive():
            writer.join(POLL_SECONDS)
            if STOP.is_set() and self.failure is None:
                self.fail(Interrupted())

    def close(self) -> None:
        """The Stream ends: no callback runs any more; wait for the writers; let the output's background writes
        end (before the writer lock is released)."""
        self.closed = True
        self._end_writer()
        if self.output is not None:
            self.output.close()


def _first_rows(pieces: list[Any], rows: int) -> list[Any]:
    """The first ``rows`` rows of a ys leaf handed over as pieces of consecutive rows."""
    kept, left = [], rows
    for piece in pieces:
        if left <= 0:
            break
        kept.append(piece[:left])
        left -= piece.shape[0]
    return kept or [pieces[0][:0]]


def _changed_meanwhile(output: Output) -> None:
    raise InputError(
        f"{output.target.label} was written by another run between the program's tracing and its start; open a "
        "new Stream with mode='resume' to continue it"
    )
