"""Where blocks run: the seam between a driver that commits in scan order and whoever computes.

An executor computes and writes the blocks of a plan from the output's first uncommitted
block and hands each durable block to ``output.commit`` strictly in scan order. It is not
part of a run's identity: every executor writes the same bytes, so a run started by one
can be resumed by another. :class:`LocalExecutor` computes on a thread of its own (the
caller's thread stays free to take signals) and encodes and writes on a few threads;
``run/_dask.py`` runs block tasks on a cluster.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Protocol

import jax
import numpy as np

from ...base import DEFAULT_INFLIGHT, pool_size, row_step
from ...engine import Block, BlockPool, HostLeaf, Plan, computes_ahead, from_host, run_plan, to_host
from ...store import Target, ZarrSink
from ...summaries import SummaryPlan
from ..output import BlockResult, Output
from ..threads import check_stop, on_own_thread, run_ordered

__all__ = ["Executor", "LocalExecutor", "first_nonfinite", "write_block"]


class Executor(Protocol):
    """Runs the remaining blocks of ``plan`` into ``output``, committing each in scan order."""

    def check(self, target: Target) -> None:
        """Refuse, before anything is written, a target this executor cannot write to."""

    def blocks_held(self) -> int:
        """Block buffers this executor holds on this machine at once, at most."""

    def run(self, plan: Plan, output: Output) -> None: ...


def first_nonfinite(
    ys: dict[str, np.ndarray], first_row: int, suspects: dict[str, list[tuple[int, int]]], reverse: bool
) -> tuple[int, str] | None:
    """The first row of a block in scan order whose y holds a NaN or an infinity, and its output; None if none.

    ``suspects`` gives, per summarised output, the rows its summary pieces found holding
    one (the only rows looked at); an output without summaries is looked at whole, one
    vectorised ``np.isfinite`` over the block, a small cost beside encoding the same rows.
    In scan order: the lowest row, or the highest in a reverse scan; a tie
    goes to the output named first.
    """
    found: tuple[int, str] | None = None
    for name, data in ys.items():
        if not jax.numpy.issubdtype(data.dtype, jax.numpy.inexact):
            continue
        ranges = suspects.get(name, [(first_row, first_row + len(data))])
        for start, stop in reversed(ranges) if reverse else ranges:
            finite = np.isfinite(data[start - first_row : stop - first_row])
            if finite.all():
                continue
            bad = ~finite if finite.ndim == 1 else ~finite.reshape(len(finite), -1).all(axis=1)
            row = start + (len(bad) - 1 - int(np.argmax(bad[::-1])) if reverse else int(np.argmax(bad)))
            if found is None or (row > found[0] if reverse else row < found[0]):
                found = (row, name)
            break
    return found


def write_block(
    sink: ZarrSink | None,
    names: list[str],
    index: int,
    block: Block,
    carry_in: list[HostLeaf],
    carry_out: list[HostLeaf],
    summary: SummaryPlan | None = None,
    *,
    reverse: bool = False,
) -> BlockResult:
    """Cut a computed block's summary pieces, write it durably, give its buffer back, describe it for its commit.

    The pieces come first, while the block is fresh from the computation (in the last-level
    cache unless something evicted it), and the encoder follows on the block they just read.
    Without a ``sink`` (a virtual run) nothing is written: the block is computed for its
    summaries. The block's first step (in scan order) whose y holds a NaN or an infinity,
    if any, is found from the pieces where there are some (see :func:`first_nonfinite`).
    """
    check_stop()  # after Ctrl-C or SIGTERM no new block is written
    leaves = jax.tree_util.tree_leaves(block.ys)
    nbytes = sum(y.nbytes for y in leaves)
    ys = dict(zip(names, leaves, strict=True))
    pieces = None if summary is None else summary.pieces(block.rows.start, ys)  # summaries count rows
    suspects = {} if summary is None or pieces is None else summary.nonfinite(pieces, ys)
    bad = first_nonfinite(ys, block.rows.start, suspects, reverse)
    nonfinite = None if bad is None else (row_step(bad[0], block.save_every), bad[1])
    crcs: dict[str, list[int]]
    if sink is None:
        crcs, stored = {}, 0
    elif block.ended:  # the run's last rows: its arrays end after them
        crcs, stored = sink.write(block.rows.start, block.rows.stop, ys, end=True)
    else:
        crcs, stored = sink.write(block.rows.start, block.rows.stop, ys)
    block.release()  # durable: its buffer may take a later block
    return BlockResult(
        index, block.start, block.stop, carry_in, carry_out, crcs, nbytes, stored, pieces, nonfinite, block.ended
    )


@dataclasses.dataclass(frozen=True)
class _Item:
    index: int
    block: Block
    carry_in: list[HostLeaf]
    carry_out: list[HostLeaf]


def _items(blocks: Iterator[Block], first: int, carry_in: list[HostLeaf]) -> Iterator[_Item]:
    for index, block in enumerate(blocks, start=first):
        carry_out = to_host(block.carry)
        yield _Item(index, block, carry_in, carry_out)
        carry_in = carry_out


@dataclasses.dataclass(frozen=True)
class LocalExecutor:
    """Blocks computed in order on a thread of their own, written and committed by ``inflight`` threads.

    At most ``inflight`` blocks are being written at once, and they are computed into a
    fixed pool of buffers that a block returns once durable, so memory is known in
    advance and stays flat whatever the length; commits run on the writer threads, each
    after the one before it, so the computing thread never waits for a commit.
    """

    inflight: int = DEFAULT_INFLIGHT

    def check(self, target: Target) -> None:
        """Any target will do."""

    def blocks_held(self) -> int:
        """The pool's buffers: the blocks in flight and the one computing (and one ahead, on an accelerator)."""
        return pool_size(self.inflight, ahead=computes_ahead())

    def run(self, plan: Plan, output: Output) -> None:
        names = output.spec.names
        ahead = computes_ahead()  # not on a CPU: there it would hold a block buffer more for nothing
        pool = BlockPool(pool_size(self.inflight, ahead=ahead))
        carry = from_host(output.carry, plan.init)
        blocks = on_own_thread(run_plan(plan, carry=carry, first_block=output.first_block, pool=pool, ahead=ahead))

        def work(item: _Item) -> BlockResult:
            return write_block(
                output.data_sink, names, item.index, item.block, item.carry_in, item.carry_out, output.summary_plan,
                reverse=plan.reverse,
            )  # fmt: skip

        def commit(item: _Item, result: BlockResult) -> None:
            output.commit(result)

        items = _items(blocks, output.first_block, output.carry)
        try:
            run_ordered(items, work, commit, depth=self.inflight, workers=self.inflight)
        finally:
            blocks.close()
