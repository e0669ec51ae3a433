"""The block engine: a long ``lax.scan`` run as a chain of short, cached, jitted scans.

The engine is pure computation. It slices the inputs one block at a time, runs one
compiled scan per block with the carry flowing from block to block, and hands each
finished block to the caller as host arrays. It knows nothing of files or progress.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._checks import as_count, check_x64, resolve_length, step_shapes
from ._defaults import DEFAULT_BLOCK_SIZE
from ._errors import InputError, spell
from ._layout import block_bounds, block_count

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "Block",
    "Plan",
    "block_bounds",
    "block_count",
    "carry_pass",
    "compute_block",
    "iter_blocks",
    "make_plan",
    "run_plan",
    "scan",
]


@dataclasses.dataclass(frozen=True)
class Block:
    """One finished block of a blocked scan.

    Attributes:
        start, stop: the block covers steps ``[start, stop)`` of the whole scan.
        ys: pytree of host numpy arrays, each with leading axis ``stop - start``.
        carry: pytree of (small) JAX arrays, the carry after the block's last step in
            scan order, i.e. the carry that enters the next block.
    """

    start: int
    stop: int
    ys: Any
    carry: Any

    def __len__(self) -> int:
        return self.stop - self.start


@dataclasses.dataclass(frozen=True)
class Plan:
    """A validated blocked scan: everything needed to run it, and the shape of its output."""

    f: Callable
    init: Any
    xs: Any
    length: int
    block_size: int
    unroll: int
    reverse: bool
    y_struct: Any

    @property
    def block_count(self) -> int:
        """How many blocks the scan runs."""
        return block_count(self.length, self.block_size, self.unroll)

    def bounds(self, first: int = 0) -> Iterator[tuple[int, int]]:
        """The ``[start, stop)`` of each block in scan order from block ``first``."""
        return block_bounds(self.length, self.block_size, self.reverse, first, self.unroll)


def _as_unroll(unroll: Any) -> int | bool:
    if isinstance(unroll, bool):
        return unroll
    return as_count("unroll", unroll, minimum=1)


def _check_grouping(length: int, block_size: int, unroll: int | bool, reverse: bool) -> None:
    """Refuse blocks that cannot reproduce ``lax.scan``'s grouping of steps under ``unroll``.

    ``lax.scan(unroll=u)`` runs groups of u steps per loop trip, and XLA may reassociate
    floating-point work within a group, so blocks must line up with the whole scan's
    groups (and run their loop at least twice) to give the same bits.
    """
    if length <= block_size or unroll is False or (unroll == 1 and unroll is not True):
        return
    if unroll is True:
        raise InputError(
            f"{spell('unroll', True)} unrolls each block completely, which regroups steps unlike one lax.scan; "
            f"pass an integer unroll such as {spell('unroll', 8)}"
        )
    if block_size % unroll or block_size < 2 * unroll:
        good = max(2 * unroll, block_size - block_size % unroll)
        raise InputError(
            f"{spell('block_size', block_size)} must be a multiple of the scan's unroll ({unroll}) and at least "
            f"{2 * unroll}, so that blocks line up with lax.scan's unrolled groups; "
            f"pass e.g. {spell('block_size', good)}"
        )
    if reverse and length % unroll:
        raise InputError(
            f"with {spell('reverse', True)}, {spell('length', length)} must be a multiple of the scan's unroll "
            f"({unroll}), as lax.scan runs its remainder steps first; pass {spell('unroll', 1)} or a length divisible "
            "by the unroll"
        )


def make_plan(
    f: Callable,
    init: Any,
    xs: Any = None,
    *,
    length: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    unroll: int | bool = 1,
    reverse: bool = False,
) -> Plan:
    """Validate the arguments of a blocked scan, raising :class:`InputError` on any problem."""
    n = resolve_length(xs, length)
    block_size = as_count("block_size", block_size, minimum=1)
    unroll = _as_unroll(unroll)
    if not isinstance(reverse, (bool, np.bool_)):
        raise InputError(f"{spell('reverse')} must be True or False, got {reverse!r}")
    _check_grouping(n, block_size, unroll, bool(reverse))
    check_x64(init=init, xs=xs)
    carry_struct, y_struct = step_shapes(f, init, xs)
    init = jax.tree_util.tree_map(lambda leaf, s: jnp.asarray(leaf, dtype=s.dtype), init, carry_struct)
    return Plan(f, init, xs, n, block_size, unroll, bool(reverse), y_struct)


@functools.lru_cache(maxsize=256)
def _scan_fn(f: Callable, length: int, unroll: int | bool, reverse: bool) -> Callable:
    def run(carry: Any, xs: Any) -> tuple[Any, Any]:
        return lax.scan(f, carry, xs, length=length, unroll=unroll, reverse=reverse)

    return jax.jit(run)


def _block_fn(f: Callable, length: int, unroll: int | bool, reverse: bool) -> Callable:
    try:
        return _scan_fn(f, length, unroll, reverse)
    except TypeError:  # an unhashable step function cannot be cached; compile per call
        return _scan_fn.__wrapped__(f, length, unroll, reverse)


@functools.lru_cache(maxsize=64)
def _slicer(length: int) -> Callable:
    return jax.jit(lambda a, start: lax.dynamic_slice_in_dim(a, start, length))


def _take(leaf: Any, start: int, stop: int) -> Any:
    """Rows ``[start, stop)`` of one xs leaf, reading nothing else."""
    if isinstance(leaf, jax.Array):
        return _slicer(stop - start)(leaf, start)  # a traced start: one compile per block length
    return np.asarray(leaf[start:stop])


def _dispatch(plan: Plan, carry: Any, start: int, stop: int) -> tuple[Any, Any]:
    xs = jax.tree_util.tree_map(lambda leaf: _take(leaf, start, stop), plan.xs)
    return _block_fn(plan.f, stop - start, plan.unroll, plan.reverse)(carry, xs)


@functools.lru_cache(maxsize=256)
def _carry_scan_fn(f: Callable, length: int, unroll: int | bool, reverse: bool) -> Callable:
    def step(carry: Any, x: Any) -> tuple[Any, None]:
        # y stays computed (behind the barrier), so XLA sees the step it sees in the full block and
        # makes the same fusion and contraction choices for the carry; it is just never stored
        carry, _ = lax.optimization_barrier(f(carry, x))
        return carry, None

    def run(carry: Any, xs: Any) -> Any:
        return lax.scan(step, carry, xs, length=length, unroll=unroll, reverse=reverse)[0]

    return jax.jit(run)


def _carry_block_fn(f: Callable, length: int, unroll: int | bool, reverse: bool) -> Callable:
    try:
        return _carry_scan_fn(f, length, unroll, reverse)
    except TypeError:  # an unhashable step function cannot be cached; compile per call
        return _carry_scan_fn.__wrapped__(f, length, unroll, reverse)


def carry_pass(plan: Plan, *, carry: Any = None, first_block: int = 0) -> Iterator[tuple[int, int, Any]]:
    """The carry after each block from ``first_block`` on, without materialising any ys.

    Yields ``(start, stop, carry)`` in scan order, ``carry`` leaving the block. Each block
    runs a carry-only scan of the same step, so this is the cheap sequential part of a
    blocked scan: with the carry entering every block known, the blocks themselves can
    be recomputed anywhere, in parallel. A step whose carry depends on how XLA compiles
    it alongside its ys would differ here; callers compare with the full block.
    """
    carry = plan.init if carry is None else carry
    for start, stop in plan.bounds(first_block):
        xs = jax.tree_util.tree_map(lambda leaf, a=start, b=stop: _take(leaf, a, b), plan.xs)
        carry = _carry_block_fn(plan.f, stop - start, plan.unroll, plan.reverse)(carry, xs)
        yield start, stop, carry


def _to_host(tree: Any) -> Any:
    return jax.tree_util.tree_map(np.asarray, tree)


def compute_block(plan: Plan, carry: Any, start: int, stop: int) -> Block:
    """Compute the single block ``[start, stop)`` from the carry entering it (to check a stored block)."""
    carry, ys = _dispatch(plan, carry, start, stop)
    return Block(start, stop, _to_host(ys), carry)


def run_plan(plan: Plan, *, carry: Any = None, first_block: int = 0) -> Iterator[Block]:
    """Run ``plan`` from block ``first_block`` (in scan order) with ``carry`` entering it.

    Block k+1 is dispatched before block k is handed over, so that with JAX's
    asynchronous dispatch an accelerator computes while the caller consumes. (XLA's CPU
    client was measured to return only once such a block is computed: on CPU the overlap
    comes from the caller's own threads, as in :func:`streamacc.write`.) The engine
    holds only those two blocks; a block the caller keeps stays alive too (on CPU its
    host arrays share the device buffer).
    """
    carry = plan.init if carry is None else carry
    pending = None
    for start, stop in plan.bounds(first_block):
        carry, ys = _dispatch(plan, carry, start, stop)
        if pending is not None:
            yield Block(pending[0], pending[1], _to_host(pending[2]), pending[3])
        pending = (start, stop, ys, carry)
    if pending is not None:
        yield Block(pending[0], pending[1], _to_host(pending[2]), pending[3])


def iter_blocks(
    f: Callable,
    init: Any,
    xs: Any = None,
    *,
    length: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    unroll: int | bool = 1,
    reverse: bool = False,
) -> Iterator[Block]:
    """Run ``lax.scan(f, init, xs, length, unroll=unroll, reverse=reverse)`` block by block.

    Yields :class:`Block` s in scan order (from the end when ``reverse``), so memory
    stays at a few blocks whatever the length. ``xs`` may be any pytree of arrays that
    slice along axis 0 (numpy, memmap, JAX or Zarr arrays); only the current block's
    rows are read. Concatenating the blocks' ``ys`` in step order, and taking the last
    block's ``carry``, gives bit for bit what one ``lax.scan`` over the whole length
    gives (with ``unroll`` > 1, block sizes that would regroup the unrolled steps are
    refused). Arguments are checked now, not at the first ``next()``.
    """
    plan = make_plan(f, init, xs, length=length, block_size=block_size, unroll=unroll, reverse=reverse)
    return run_plan(plan)


def scan(
    f: Callable,
    init: Any,
    xs: Any = None,
    *,
    length: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    unroll: int | bool = 1,
    reverse: bool = False,
) -> tuple[Any, Any]:
    """Blocked ``lax.scan`` returning ``(carry, ys)`` with ``ys`` assembled in host memory.

    The result equals ``jax.lax.scan`` bit for bit; use it when the output fits in RAM
    but one device-side scan of the whole length would not compile or fit.
    """
    plan = make_plan(f, init, xs, length=length, block_size=block_size, unroll=unroll, reverse=reverse)

    def empty(s: jax.ShapeDtypeStruct) -> np.ndarray:
        return np.empty((plan.length, *s.shape), dtype=s.dtype)

    ys = jax.tree_util.tree_map(empty, plan.y_struct)
    carry = plan.init
    for block in run_plan(plan):
        jax.tree_util.tree_map(lambda out, y, b=block: out.__setitem__(slice(b.start, b.stop), y), ys, block.ys)
        carry = block.carry
    return carry, ys
