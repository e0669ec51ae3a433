"""A virtual run without summaries: the carry pass alone, on this process.

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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import jax
import numpy as np

from ...engine import HostLeaf, Plan, carry_pass, compute_block, from_host, same_leaves, to_host
from ...store import Target
from ..output import BlockResult, Output
from ..threads import check_stop, on_own_thread

__all__ = ["CARRIES_AHEAD", "CARRIES_AHEAD_BYTES", "CarryExecutor"]

CARRIES_AHEAD = 256
"""Blocks whose carries the carry pass computes at most ahead of the commits: a second and more of
the headline recurrence's (blocks of 2**22 steps, about 5 ms each), longer than a commit takes."""

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
            carry_pass(plan, carry=carry, first_block=output.first_block, exact=exact), ahead=_ahead(plan)
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
