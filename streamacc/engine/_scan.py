"""The block engine: a long ``lax.scan`` run as a chain of short, cached, jitted scans.

The engine is pure computation. It slices the inputs one block at a time, runs one
compiled scan per block with the carry flowing from block to block, and hands each
finished block to the caller as host arrays. It knows nothing of files or progress.

Each block's ys are written into a recycled buffer from a :class:`BlockPool` (donated
to the block function), so that a long run touches the same few buffers over and over
instead of page-faulting a fresh one per block.
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

from .._defaults import DEFAULT_BLOCK_SIZE
from .._errors import InputError, spell
from ._checks import as_count, check_x64, resolve_length, step_shapes
from ._layout import block_bounds, block_count, check_grouping
from ._pool import BlockPool, pool_size

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "Block",
    "BlockPool",
    "Plan",
    "block_bounds",
    "block_count",
    "carry_pass",
    "compute_block",
    "iter_blocks",
    "make_plan",
    "pool_size",
    "run_plan",
    "scan",
]

CALLER_HELD = 1
"""Blocks a plain ``for block in iter_blocks(...)`` loop holds while asking for the next."""

POOL_MIN_BYTES = 4 * 2**20
"""Smallest block (bytes of ys) that the default pool recycles. glibc's heap already
reuses freed buffers of up to a few MiB without page faults (measured: 2**16 to 2**18
float64 steps per block), and there the pool's own cost, about 10 us per block, would
exceed what it saves; from 8 MiB on, fresh buffers page-fault."""


@dataclasses.dataclass(frozen=True)
class Block:
    """One finished block of a blocked scan.

    Attributes:
        start, stop: the block covers steps ``[start, stop)`` of the whole scan.
        ys: pytree of host numpy arrays, each with leading axis ``stop - start``
            (read-only; on CPU, views of the engine's recycled buffers).
        carry: pytree of (small) JAX arrays, the carry after the block's last step in
            scan order, i.e. the carry that enters the next block.
    """

    start: int
    stop: int
    ys: Any
    carry: Any
    _release: Callable[[], None] | None = dataclasses.field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return self.stop - self.start

    def __reduce__(self) -> tuple:
        return Block, (self.start, self.stop, self.ys, self.carry)  # a copy holds no buffer of the pool

    def release(self) -> None:
        """Give this block's buffers back for reuse by a later block; ``ys`` must not be read after.

        Optional: without it a buffer is reused once every reference to ``ys`` is gone.
        Call it where references linger after the last read, e.g. in a writer, once the
        block's chunks are durable. Calling it again does nothing.
        """
        if self._release is not None:
            self._release()


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
    def block_nbytes(self) -> int:
        """Bytes of ys in one full block: the size of each buffer of a :class:`BlockPool`."""
        return sum(s.dtype.itemsize * int(np.prod(s.shape)) for s in self._full_block)

    def out_structs(self, length: int) -> list[jax.ShapeDtypeStruct]:
        """Shape and dtype of each ys leaf of a block of ``length`` steps."""
        if length == self.block_size:
            return self._full_block
        return [jax.ShapeDtypeStruct((length, *s.shape), s.dtype) for s in jax.tree_util.tree_leaves(self.y_struct)]

    @functools.cached_property
    def _full_block(self) -> list[jax.ShapeDtypeStruct]:
        leaves = jax.tree_util.tree_leaves(self.y_struct)
        return [jax.ShapeDtypeStruct((self.block_size, *s.shape), s.dtype) for s in leaves]

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
    check_grouping(n, block_size, unroll, bool(reverse))
    check_x64(init=init, xs=xs)
    carry_struct, y_struct = step_shapes(f, init, xs)
    init = jax.tree_util.tree_map(lambda leaf, s: jnp.asarray(leaf, dtype=s.dtype), init, carry_struct)
    return Plan(f, init, xs, n, block_size, unroll, bool(reverse), y_struct)


@functools.lru_cache(maxsize=256)
def _scan_fn(f: Callable, length: int, unroll: int | bool, reverse: bool, into: bool) -> Callable:
    """One block: ``lax.scan`` itself, returning ``(carry, ys leaves)``.

    With ``into``, the ys are written into the donated buffers ``out``: the update
    covers all of ``out``, so XLA drops it and lets the scan's own ys buffer be
    ``out``'s memory. Both forms are one ``lax.scan``'s bits by construction; without
    ``into`` XLA allocates the ys, which is how a buffer first enters a pool.
    """

    def run(carry: Any, xs: Any) -> tuple[Any, list]:
        carry, ys = lax.scan(f, carry, xs, length=length, unroll=unroll, reverse=reverse)
        return carry, jax.tree_util.tree_leaves(ys)

    def run_into(carry: Any, xs: Any, out: list) -> tuple[Any, list]:
        carry, ys = run(carry, xs)
        return carry, [lax.dynamic_update_slice_in_dim(o, y, 0, 0) for o, y in zip(out, ys, strict=True)]

    return jax.jit(run_into, donate_argnums=2) if into else jax.jit(run)


def _cached(build: Callable, f: Callable, *args: Any) -> Callable:
    """``build(f, *args)`` from its cache; an unhashable step function cannot be cached: built per call."""
    try:
        return build(f, *args)
    except TypeError:
        return build.__wrapped__(f, *args)


@functools.lru_cache(maxsize=64)
def _slicer(length: int) -> Callable:
    return jax.jit(lambda a, start: lax.dynamic_slice_in_dim(a, start, length))


def _take(leaf: Any, start: int, stop: int) -> Any:
    """Rows ``[start, stop)`` of one xs leaf, reading nothing else."""
    if isinstance(leaf, jax.Array):
        return _slicer(stop - start)(leaf, start)  # a traced start: one compile per block length
    return np.asarray(leaf[start:stop])


@dataclasses.dataclass(frozen=True)
class _Computed:
    """A dispatched block: its device outputs, and the pool slot they live in (if any)."""

    start: int
    stop: int
    out: list
    carry: Any
    lease: Any  # its pool slot's lease (dropped unseen, it gives the slot back); None when XLA allocated out


def _block_xs(plan: Plan, start: int, stop: int) -> Any:
    """The rows ``[start, stop)`` of every xs leaf (None without xs)."""
    return None if plan.xs is None else jax.tree_util.tree_map(lambda leaf: _take(leaf, start, stop), plan.xs)


def _dispatch(plan: Plan, pool: BlockPool, carry: Any, start: int, stop: int) -> _Computed:
    xs = _block_xs(plan, start, stop)
    lease = pool.acquire() if stop - start == plan.block_size else None  # only full blocks share buffers
    out = pool.buffers(lease, plan.out_structs(stop - start))
    if out is None:
        carry, out = _cached(_scan_fn, plan.f, stop - start, plan.unroll, plan.reverse, False)(carry, xs)
    else:
        carry, out = _cached(_scan_fn, plan.f, stop - start, plan.unroll, plan.reverse, True)(carry, xs, out)
    return _Computed(start, stop, out, carry, lease)


def _hand_over(plan: Plan, pool: BlockPool, done: _Computed) -> Block:
    hosts = pool.hand_over(done.lease, done.out)
    ys = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(plan.y_struct), hosts)
    return Block(done.start, done.stop, ys, done.carry, None if done.lease is None else done.lease.release)


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
        carry = _cached(_carry_scan_fn, plan.f, stop - start, plan.unroll, plan.reverse)(
            carry, _block_xs(plan, start, stop)
        )
        yield start, stop, carry


def compute_block(plan: Plan, carry: Any, start: int, stop: int, *, pool: BlockPool | None = None) -> Block:
    """Compute the single block ``[start, stop)`` from the carry entering it (a block task, or a check).

    With ``pool`` the block is computed into one of its buffers; release the block when done.
    """
    pool = BlockPool(0) if pool is None else pool
    return _hand_over(plan, pool, _dispatch(plan, pool, carry, start, stop))


def run_plan(plan: Plan, *, carry: Any = None, first_block: int = 0, pool: BlockPool | None = None) -> Iterator[Block]:
    """Run ``plan`` from block ``first_block`` (in scan order) with ``carry`` entering it.

    Block k+1 is dispatched before block k is handed over, so that with JAX's
    asynchronous dispatch an accelerator computes while the caller consumes. (XLA's CPU
    client was measured to return only once such a block is computed: on CPU the overlap
    comes from the caller's own threads, as in :func:`streamacc.write`.)

    Full blocks are computed into the buffers of ``pool``; by default a pool sized for a
    caller that holds one block at a time (none for blocks under ``POOL_MIN_BYTES``). A
    caller that keeps ``depth`` blocks in flight passes ``BlockPool(pool_size(depth))``
    and calls :meth:`Block.release` on each block once done with it; memory then stays at
    that many blocks of ``plan.block_nbytes``. A caller that keeps more blocks stays
    correct: the extra blocks get buffers of their own.
    """
    if pool is None:
        pool = BlockPool(pool_size(CALLER_HELD) if plan.block_nbytes >= POOL_MIN_BYTES else 0)
    carry = plan.init if carry is None else carry
    pending = None
    for start, stop in plan.bounds(first_block):
        done = _dispatch(plan, pool, carry, start, stop)
        carry = done.carry
        if pending is not None:
            # handed over without a local name: the generator must not keep the block's
            # views alive while it computes the next one, or its buffer could not be reused
            yield _hand_over(plan, pool, pending)
        pending = done
    if pending is not None:
        yield _hand_over(plan, pool, pending)


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
        block.release()
    return carry, ys
