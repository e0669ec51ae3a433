"""Where blocks run: the seam between a driver that commits in scan order and whoever computes.

An executor computes and writes the blocks of a plan from the output's first uncommitted
block and hands each durable block to ``output.commit`` strictly in scan order. It is not
part of a run's identity: every executor writes the same bytes, so a run started by one
can be resumed by another. :class:`LocalExecutor` computes on a thread of its own (the
caller's thread stays free to take signals) and encodes and writes on a few threads;
``run/_dask.py`` runs block tasks on a cluster.

A virtual run without summaries: the carry pass alone, on this process.

Nothing but the carry entering each block is kept, so each block runs a carry-only scan
(``engine.carry_pass``), no ys exist and nothing is encoded or written but the commits.
The carries must be those a stored run records, since readers recompute each block from
them; a carry-only scan compiles the step as a full block does (see ``engine._carry_only``),
and the first block is computed in full as well and its carry compared: where XLA compiled
the two programs to other bits, the run goes on with the block function itself. Readers
check every block they recompute against the carry recorded after it.

With no ys computed, what is checked for NaNs and infinities is the carry leaving each
block: a run records the end of the first block whose carry holds one.

The carry pass runs ahead of the commits, by up to ``CARRIES_AHEAD_BYTES`` of carries (at
most ``CARRIES_AHEAD`` blocks), on a thread of its own: a commit waits for the disk (its
block records and manifest fsynced) while the next blocks' carries are computed, where the
pass used to stand still until each commit was done. Nothing is committed earlier for it:
a block is committed, in order, only once the commit before it is durable.

Where a write's blocks run, as the caller says it: :class:`Local` or :class:`Dask`, and the executor for each.

The keywords :func:`streamacc.write` takes alone, each routed to the object it belongs to.

``write(path, f, init, length=n, names="x", client=c)`` is ``write(path, f, init,
length=n, layout=Layout(names="x"), executor=Dask(c))``: the scan's keywords go to its
:class:`~streamacc.ScanSpec`, the layout's to a :class:`Layout`, ``client`` and
``inflight`` to where the blocks run. Which keyword goes where is read from those
objects' fields, so a new option is declared once, where it belongs. Every writer that takes
``write``'s keywords (``write`` itself, :class:`~streamacc.Stream`) routes them here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Protocol, cast

import jax
import numpy as np

from ..base import (
    BLOCK_KEYWORDS,
    DEFAULT_INFLIGHT,
    LAYOUT_FIELDS,
    BlockKeywords,
    HostLeaf,
    Layout,
    as_count,
    check_stop,
    on_own_thread,
    pool_size,
    row_step,
    run_ordered,
)
from ..engine import (
    Block,
    BlockPool,
    Plan,
    caller_scopes,
    carry_pass,
    compute_block,
    computes_ahead,
    from_host,
    run_plan,
    same_leaves,
    to_host,
)
from ..errors import InputError, arg
from ..store import Target, ZarrSink
from ..summaries import SummaryPlan
from ._commit import BlockResult, Output

__all__ = [
    "CARRIES_AHEAD",
    "CARRIES_AHEAD_BYTES",
    "EXECUTOR_FIELDS",
    "CarryExecutor",
    "Dask",
    "Executor",
    "Local",
    "LocalExecutor",
    "WriteKeywords",
    "first_nonfinite",
    "split_keywords",
    "write_block",
]


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
class _ComputedBlock:
    index: int
    block: Block
    carry_in: list[HostLeaf]
    carry_out: list[HostLeaf]


def _items(blocks: Iterator[Block], first: int, carry_in: list[HostLeaf]) -> Iterator[_ComputedBlock]:
    for index, block in enumerate(blocks, start=first):
        carry_out = to_host(block.carry)
        yield _ComputedBlock(index, block, carry_in, carry_out)
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
        blocks = on_own_thread(
            run_plan(plan, carry=carry, first_block=output.first_block, pool=pool, ahead=ahead), scopes=caller_scopes
        )

        def work(item: _ComputedBlock) -> BlockResult:
            return write_block(
                output.data_sink, names, item.index, item.block, item.carry_in, item.carry_out, output.summary_plan,
                reverse=plan.reverse,
            )  # fmt: skip

        def commit(item: _ComputedBlock, result: BlockResult) -> None:
            output.commit(result)

        items = _items(blocks, output.first_block, output.carry)
        try:
            run_ordered(items, work, commit, depth=self.inflight, workers=self.inflight)
        finally:
            blocks.close()


CARRIES_AHEAD = 256
"""Blocks whose carries the carry pass computes at most ahead of the commits: more of the headline recurrence's
cheap blocks (a carry pass computes no ys) than a commit's time takes."""

CARRIES_AHEAD_BYTES = 8 * 2**20
"""Bytes of carries computed ahead at most (a large state computes fewer blocks ahead)."""


def _block_bytes(plan: Plan, start: int, stop: int) -> int:
    """Bytes of ys a block of steps ``[start, stop)`` holds (what the progress bar counts as output)."""
    return sum(s.dtype.itemsize * int(s.size) for s in plan.out_structs(stop - start))


@dataclasses.dataclass(frozen=True)
class CarryExecutor:
    """The blocks of a virtual run without summaries: their carries, from a carry pass on a thread of its own."""

    def check(self, target: Target) -> None:
        """Any target will do."""

    def blocks_held(self) -> int:
        """One: the first block is computed in full to compare its carry with the carry-only scan's."""
        return 1

    def run(self, plan: Plan, output: Output) -> None:
        exact = not _carry_pass_agrees(plan, output)
        carry = from_host(output.carry, plan.init)
        carries = on_own_thread(
            carry_pass(plan, carry=carry, first_block=output.first_block, exact=exact),
            ahead=_ahead(plan),
            scopes=caller_scopes,
        )
        try:
            for result in _results(plan, carries, output.first_block, output.carry):
                output.commit(result)
        finally:
            carries.close()


def _ahead(plan: Plan) -> int:
    """Blocks the carry pass may compute ahead of the commits: ``CARRIES_AHEAD``, fewer for a large carry."""
    leaves = jax.tree_util.tree_leaves(plan.init)
    nbytes = sum(int(leaf.nbytes) for leaf in leaves if not jax.numpy.issubdtype(leaf.dtype, jax.dtypes.extended))
    return max(1, min(CARRIES_AHEAD, CARRIES_AHEAD_BYTES // max(nbytes, 1)))


def _finite(carry: list[HostLeaf]) -> bool:
    """Whether every float leaf of a carry holds finite values (no NaN, no infinity)."""
    return all(bool(np.isfinite(a).all()) for a, _ in carry if jax.numpy.issubdtype(a.dtype, jax.numpy.inexact))


def _results(
    plan: Plan, carries: Iterator[tuple[int, int, object]], first: int, carry_in: list[HostLeaf]
) -> Iterator[BlockResult]:
    """The blocks' results; no ys are computed, so the carry leaving each block is what is checked for NaNs."""
    for index, (start, stop, carry) in enumerate(carries, start=first):
        check_stop()
        carry_out = to_host(carry)
        last = start if plan.reverse else stop - 1  # the step after which the carry leaves the block
        nonfinite = None if _finite(carry_out) else (last, None)
        nbytes = _block_bytes(plan, start, stop)
        yield BlockResult(index, start, stop, carry_in, carry_out, {}, nbytes, 0, None, nonfinite)
        carry_in = carry_out


def _carry_pass_agrees(plan: Plan, output: Output) -> bool:
    """Whether the carry-only scan ends the next block with the bits of the full block (computed here)."""
    bounds = next(plan.bounds(output.first_block), None)
    if bounds is None:
        return True
    carry = from_host(output.carry, plan.init)
    block = compute_block(plan, carry, *bounds)
    full = to_host(block.carry)
    block.release()
    _, _, passed = next(carry_pass(plan, carry=carry, first_block=output.first_block))
    return same_leaves(full, to_host(passed))


def _inflight(inflight: int | None) -> int | None:
    return None if inflight is None else as_count("inflight", inflight, minimum=1, example=3)


@dataclasses.dataclass(frozen=True)
class Local:
    """Blocks computed in this process, on a thread of their own, and written by a few writer threads.

    The default of :func:`~streamacc.write`. Memory holds ``inflight`` blocks being
    written, and the one being computed.

    Parameters
    ----------
    inflight : int, optional
        Blocks being encoded and written at once: by default 3, or 2 for a virtual write,
        which only summarises them.

    Attributes
    ----------
    inflight : int or None
        Blocks written at once, checked; None leaves it to the write.

    Raises
    ------
    streamacc.errors.InputError
        ``inflight`` is not a positive integer.

    Examples
    --------
    >>> import streamacc
    >>> streamacc.Local(inflight=4)
    Local(inflight=4)
    """

    inflight: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "inflight", _inflight(self.inflight))


@dataclasses.dataclass(frozen=True)
class Dask:
    """Blocks recomputed as tasks on the dask cluster behind ``client``; the bytes written are the same.

    The driver runs the carries from block to block and commits in scan order; the
    workers compute, encode and write the blocks' chunks straight to the output, which
    must be a path every worker reaches or an object-store URL.

    Parameters
    ----------
    client : distributed.Client
        The cluster's client.
    inflight : int, optional
        Block tasks submitted and not yet committed: by default twice the workers, plus one.

    Attributes
    ----------
    client : distributed.Client
        The cluster's client.
    inflight : int or None
        Block tasks in flight, checked; None leaves it to the write.

    Raises
    ------
    streamacc.errors.InputError
        ``client`` is not a ``distributed.Client`` (or dask.distributed is not installed),
        or ``inflight`` is not a positive integer.

    Examples
    --------
    >>> import streamacc
    >>> from distributed import Client
    >>> with Client(processes=False, dashboard_address=None) as client:  # doctest: +SKIP
    ...     streamacc.write("out.zarr", step, init, length=2**30, executor=streamacc.Dask(client))
    """

    client: Any
    inflight: int | None = None

    def __post_init__(self) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise InputError(f"{arg('client')} needs dask.distributed: pip install 'streamacc[dist]'") from None
        if not isinstance(self.client, Client):
            raise InputError(f"{arg('client')} must be a distributed.Client, got {type(self.client).__name__}")
        object.__setattr__(self, "inflight", _inflight(self.inflight))


EXECUTOR_FIELDS: tuple[str, ...] = ("client", "inflight")
"""The keywords of :class:`Local` and :class:`Dask`, which :func:`streamacc.write` also takes alone."""


class WriteKeywords(BlockKeywords, total=False):
    """The keywords ``write`` takes alone: those of ``ScanSpec``, ``Layout``, ``Local`` and ``Dask``."""

    names: Sequence[str] | Mapping[str, str] | str | None
    dims: Mapping[str, Sequence[str]] | None
    chunks: Any
    codec: str
    attrs: Mapping[str, Any] | None
    array_attrs: Mapping[str, Mapping[str, Any]] | None
    time: Mapping[str, Any] | None
    summaries: bool | Sequence[int]
    virtual: bool
    client: Any
    inflight: int | None


def _given_twice(names: list[str], option: str, kind: str) -> InputError:
    given = ", ".join(arg(name) for name in names)
    return InputError(f"{given} and {arg(option)} both say {kind}: pass {given} inside {arg(option)}, or leave "
                      f"{arg(option)} out")  # fmt: skip


def split_keywords(
    layout: Layout | None, executor: Local | Dask | None, keywords: Mapping[str, Any], *, who: str = "write"
) -> tuple[BlockKeywords, Layout, Local | Dask]:
    """The scan's keywords, the layout and where the blocks run, from ``write``'s keywords.

    Raises a ``TypeError`` for a keyword no object takes, as Python does, and an
    :class:`InputError` for one given both alone and in its object.
    """
    unknown = sorted(set(keywords) - {*BLOCK_KEYWORDS, *LAYOUT_FIELDS, *EXECUTOR_FIELDS})
    if unknown:
        raise TypeError(
            f"{who}() got an unexpected keyword argument {unknown[0]!r}; it takes the keywords of ScanSpec "
            f"({', '.join(BLOCK_KEYWORDS)}), Layout ({', '.join(LAYOUT_FIELDS)}) and {', '.join(EXECUTOR_FIELDS)}"
        )
    scan = cast(BlockKeywords, {name: keywords[name] for name in BLOCK_KEYWORDS if name in keywords})
    laid = {name: keywords[name] for name in LAYOUT_FIELDS if name in keywords}
    where = {name: keywords[name] for name in EXECUTOR_FIELDS if name in keywords}
    if layout is not None and laid:
        raise _given_twice(list(laid), "layout", "how the output is laid out")
    if executor is not None and where:
        raise _given_twice(list(where), "executor", "where the blocks run")
    if layout is not None and not isinstance(layout, Layout):
        raise InputError(f"{arg('layout')} must be a streamacc.Layout, got {type(layout).__name__}; pass e.g. "
                         "layout=streamacc.Layout(names='x')")  # fmt: skip
    if executor is not None and not isinstance(executor, (Local, Dask)):
        raise InputError(f"{arg('executor')} must be streamacc.Local(...) or streamacc.Dask(client), got "
                         f"{type(executor).__name__}")  # fmt: skip
    if layout is None:
        layout = Layout(**laid)
    if executor is None:
        client = where.get("client")
        executor = Local(where.get("inflight")) if client is None else Dask(client, where.get("inflight"))
    return scan, layout, executor
