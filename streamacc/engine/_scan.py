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
import gc
import os
from collections.abc import Callable, Hashable, Iterator
from typing import Any, Protocol, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt
from jax import lax

from .._checks import as_count, as_unroll
from .._defaults import DEFAULT_BLOCK_BYTES, DEFAULT_BLOCK_SIZE
from ..errors import InputError, arg
from ._checks import Carry, Step, check_x64, resolve_length, step_shapes
from ._layout import (
    block_bounds,
    block_count,
    block_size_near,
    block_steps,
    check_grouping,
    check_save_every,
    rows_in,
)
from ._pool import BlockPool, _Lease, fresh_buffers, pool_size
from ._scopes import jax_option

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "DEFAULT_BLOCK_SIZE",
    "Block",
    "BlockPool",
    "Plan",
    "block_bounds",
    "block_count",
    "carry_pass",
    "compute_block",
    "computes_ahead",
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
    """One finished block of a blocked scan, as :func:`iter_blocks` yields it.

    Attributes
    ----------
    start : int
        The first step the block covers (steps ``[start, stop)`` of the whole scan).
    stop : int
        The step after the block's last.
    ys : pytree of numpy.ndarray
        The ys of the block's steps, one host array per leaf of ``y`` with leading axis
        ``len(block.rows)``: every step's y, or every ``save_every``-th. Read-only; on a
        CPU they are views of the engine's recycled buffers (see :meth:`release`).
    carry : pytree of jax.Array
        The carry after the block's last step in scan order: the carry that enters the
        next block (in a reverse scan, the block before it).
    save_every : int
        The block keeps the y of steps ``k-1, 2k-1, ...`` (``k = save_every``); 1 keeps all.

    Examples
    --------
    >>> import numpy as np, streamacc
    >>> def count(c, _):
    ...     return c + 1, c
    >>> block = next(streamacc.iter_blocks(count, np.int32(0), length=10, block_size=4))
    >>> block.start, block.stop, len(block), block.ys, int(block.carry)
    (0, 4, 4, array([0, 1, 2, 3], dtype=int32), 4)
    >>> block.rows
    range(0, 4)
    """

    start: int
    stop: int
    ys: Any
    carry: Any
    _release: Callable[[], None] | None = dataclasses.field(default=None, repr=False, compare=False)
    save_every: int = 1

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def rows(self) -> range:
        """The output rows this block's ys fill: ``range(start, stop)``, or the kept rows when thinned.

        Output row ``r`` holds the y of step ``r * save_every + save_every - 1``.
        """
        return range(*rows_in(self.start, self.stop, self.save_every))

    def __reduce__(self) -> tuple[Callable[..., Block], tuple[int, int, Any, Any, int]]:
        # a copy holds no buffer of the pool
        return _rebuild_block, (self.start, self.stop, self.ys, self.carry, self.save_every)

    def release(self) -> None:
        """Give this block's buffers back for reuse by a later block; ``ys`` must not be read after.

        Optional: without it a buffer is reused once every reference to ``ys`` is gone.
        Call it where references linger after the last read, e.g. in a writer, once the
        block's chunks are durable. Calling it again does nothing.
        """
        if self._release is not None:
            self._release()


def _rebuild_block(start: int, stop: int, ys: Any, carry: Any, save_every: int) -> Block:
    return Block(start, stop, ys, carry, save_every=save_every)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A validated blocked scan: everything needed to run it, and the shape of its output."""

    f: Step
    init: Any
    xs: Any
    length: int
    block_size: int
    unroll: int
    reverse: bool
    y_struct: Any
    save_every: int = 1

    @property
    def block_nbytes(self) -> int:
        """Bytes of ys in one full block: the size of each buffer of a :class:`BlockPool`."""
        return sum(s.dtype.itemsize * int(np.prod(s.shape)) for s in self._full_block)

    @property
    def rows(self) -> int:
        """Output rows of the whole scan: one per step, or per ``save_every`` steps."""
        return self.length // self.save_every

    @property
    def block_rows(self) -> int:
        """Output rows of one full block."""
        return self.block_size // self.save_every

    def out_structs(self, length: int) -> list[jax.ShapeDtypeStruct]:
        """Shape and dtype of each ys leaf of a block of ``length`` steps (starting on a row boundary)."""
        if length == self.block_size:
            return self._full_block
        rows = length // self.save_every
        return [jax.ShapeDtypeStruct((rows, *s.shape), s.dtype) for s in jax.tree_util.tree_leaves(self.y_struct)]

    @functools.cached_property
    def _full_block(self) -> list[jax.ShapeDtypeStruct]:
        leaves = jax.tree_util.tree_leaves(self.y_struct)
        return [jax.ShapeDtypeStruct((self.block_rows, *s.shape), s.dtype) for s in leaves]

    @property
    def block_count(self) -> int:
        """How many blocks the scan runs."""
        return block_count(self.length, self.block_size, self.unroll)

    def bounds(self, first: int = 0) -> Iterator[tuple[int, int]]:
        """The ``[start, stop)`` of each block in scan order from block ``first``."""
        return block_bounds(self.length, self.block_size, self.reverse, first, self.unroll)


def _nbytes(tree: Any, skip: int = 0) -> int:
    """Bytes of one element of every leaf of ``tree`` (its shape past the first ``skip`` axes)."""
    return sum(
        np.dtype(leaf.dtype).itemsize * int(np.prod(leaf.shape[skip:], dtype=np.int64))
        for leaf in jax.tree_util.tree_leaves(tree)
        if not jnp.issubdtype(leaf.dtype, jax.dtypes.extended)
    )


def as_save_every(save_every: Any, length: int) -> int:
    """``save_every`` as a positive int no larger than ``length``, or an :class:`InputError`."""
    k = as_count("save_every", save_every, minimum=1)
    check_save_every(k, length)
    return k


def make_plan(
    f: Step,
    init: Any,
    xs: Any = None,
    *,
    length: int | None = None,
    block_size: int | None = None,
    unroll: int | bool = 1,
    reverse: bool = False,
    save_every: int = 1,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    rows_multiple: int = 1,
) -> Plan:
    """Validate the arguments of a blocked scan, raising :class:`InputError` on any problem.

    ``block_size`` counts steps; None sizes blocks by bytes: about ``block_bytes`` of ys
    (or of xs, if larger) per block, in a whole number of ``rows_multiple`` output rows.
    """
    n = resolve_length(xs, length)
    save_every = as_save_every(save_every, n)
    if block_size is not None:
        block_size = as_count("block_size", block_size, minimum=1)
        if block_size % save_every:
            u = unroll if type(unroll) is int and unroll > 1 and block_size < n else 1  # blocks line up with groups
            good = block_size_near(block_size, u, save_every)
            also = f" and of the scan's unroll ({u})" if u > 1 else ""
            raise InputError(
                f"{arg('block_size', block_size)} must be a multiple of {arg('save_every', save_every)}{also}, so "
                f"that every block keeps whole rows; pass e.g. {arg('block_size', good)}"
            )
    unroll = as_unroll(unroll)
    if not isinstance(reverse, (bool, np.bool_)):
        raise InputError(f"{arg('reverse')} must be True or False, got {reverse!r}")
    check_x64(init=init, xs=xs)
    carry_struct, y_struct = step_shapes(f, init, xs)
    if block_size is None:
        u = unroll if not isinstance(unroll, bool) else 1
        row_bytes = _nbytes(y_struct) * (save_every if _unrolled(unroll) else 1)  # see _thinned_scan
        block_size = block_steps(
            row_bytes, block_bytes, save_every=save_every, xs_bytes=_nbytes(xs, 1), unroll=u,
            rows_multiple=rows_multiple,
        )  # fmt: skip
    check_grouping(n, block_size, unroll, bool(reverse), save_every)
    init = jax.tree_util.tree_map(lambda leaf, s: jnp.asarray(leaf, dtype=s.dtype), init, carry_struct)
    return Plan(f, init, xs, n, block_size, unroll, bool(reverse), y_struct, save_every)


def _carry_only(f: Step) -> Step:
    """``f`` keeping only the carry; y stays computed (behind a barrier) but is never stored.

    So XLA sees the step it sees in a full block and makes the same fusion and contraction
    choices for the carry.
    """

    def step(carry: Any, x: Any) -> tuple[Any, None]:
        carry, _ = lax.optimization_barrier(f(carry, x))
        return carry, None

    return step


def _thinned_scan(
    f: Step, carry: Any, xs: Any, length: int, unroll: int | bool, reverse: bool, every: int
) -> tuple[Any, Any]:
    """``lax.scan(f, carry, xs, length)`` keeping only the ys of steps ``every-1, 2*every-1, ...``.

    An outer scan over the kept rows runs, per row, an inner scan of ``every`` steps that
    carries the latest y along (so no more than one row of ys ever exists per row); steps
    after the last kept row only advance the carry. Every step runs exactly as in one long
    scan, in the same order, so the kept ys and the final carry are its bits, as far as XLA
    compiles the step alike without its other ys (Lorenz-63's RK4 differs by an ulp now and
    then, XLA compiling the two programs differently).

    Unrolled (``unroll`` > 1), XLA fuses the arithmetic of the steps of one unrolled group
    differently when their ys are not all stored (measured: a kept y 1 ulp off), so the
    block runs as one plain scan, storing every y, and keeps every ``every``-th: exact, at
    the cost of a block's full ys in memory (blocks sized by bytes count them).
    """
    if _unrolled(unroll):
        carry, ys = lax.scan(f, carry, xs, length=length, unroll=unroll, reverse=reverse)
        kept = (length // every) * every
        return carry, jax.tree_util.tree_map(lambda y: y[every - 1 : kept : every], ys)
    rows, rest = divmod(length, every)
    split = rows * every
    head = jax.tree_util.tree_map(lambda a: a[:split].reshape(rows, every, *a.shape[1:]), xs)
    tail = jax.tree_util.tree_map(lambda a: a[split:], xs)
    y_struct = jax.eval_shape(f, carry, _x0(xs))[1]
    position = jnp.arange(every, dtype=jnp.int32)

    def inner(state: Any, item: Any) -> tuple[Any, None]:
        (c, kept), (x, i) = state, item
        c, y = f(c, x)
        if reverse:  # the kept step (index every-1 of the row) is the first this row runs
            y = jax.tree_util.tree_map(lambda new, old: jnp.where(i == every - 1, new, old), y, kept)
        return (c, y), None

    def row(c: Any, x: Any) -> tuple[Any, Any]:
        zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), y_struct)
        (c, y), _ = lax.scan(inner, (c, zeros), (x, position), length=every, unroll=unroll, reverse=reverse)
        return c, y

    def leftover(c: Any) -> Any:
        # the steps after the last kept row, run as the rows' steps run (their y carried, then dropped)
        if not rest:
            return c
        zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), y_struct)
        at = jnp.zeros(rest, dtype=jnp.int32)
        return lax.scan(inner, (c, zeros), (tail, at), length=rest, unroll=unroll, reverse=reverse)[0][0]

    if reverse:
        carry = leftover(carry)
    carry, ys = lax.scan(row, carry, head, length=rows, reverse=reverse)
    if not reverse:
        carry = leftover(carry)
    return carry, ys


def _unrolled(unroll: int | bool) -> bool:
    return unroll is True or (not isinstance(unroll, bool) and unroll > 1)


def _x0(xs: Any) -> Any:
    """An abstract single step's x of ``xs`` (None without xs)."""
    return None if xs is None else jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), xs)


@functools.lru_cache(maxsize=256)
def _scan_fn(
    f: Step, length: int, unroll: int | bool, reverse: bool, into: bool, every: int = 1
) -> Callable[..., tuple[Any, list[jax.Array]]]:
    """One block: ``lax.scan`` itself (thinned to every ``every``-th y), returning ``(carry, ys leaves)``.

    With ``into``, the ys are written into the donated buffers ``out``: the update
    covers all of ``out``, so XLA drops it and lets the scan's own ys buffer be
    ``out``'s memory. Both forms are one ``lax.scan``'s bits by construction; without
    ``into`` XLA allocates the ys (only for ys that have no zero buffers, a PRNG key's).
    The loop is ``lax.scan``'s own, never a rewrite of it: a loop that stores each group
    of unrolled steps itself is fused differently by XLA and changes the last bits of
    multiply-add steps.
    """

    def run(carry: Any, xs: Any) -> tuple[Any, list[jax.Array]]:
        if every == 1:
            carry, ys = lax.scan(f, carry, xs, length=length, unroll=unroll, reverse=reverse)
        else:
            carry, ys = _thinned_scan(f, carry, xs, length, unroll, reverse, every)
        return carry, jax.tree_util.tree_leaves(ys)

    def run_into(carry: Any, xs: Any, out: list[jax.Array]) -> tuple[Any, list[jax.Array]]:
        carry, ys = run(carry, xs)
        return carry, [lax.dynamic_update_slice_in_dim(o, y, 0, 0) for o, y in zip(out, ys, strict=True)]

    return jax.jit(run_into, donate_argnums=2) if into else jax.jit(run)


_Built = TypeVar("_Built", covariant=True)


class _Memoized(Protocol[_Built]):
    """A builder behind ``functools.lru_cache``: called through its cache, or past it as ``__wrapped__``."""

    def __call__(self, *args: Hashable) -> _Built: ...

    @property
    def __wrapped__(self) -> Callable[..., _Built]: ...


def _cached(build: _Memoized[_Built], f: Step, *args: Hashable) -> _Built:
    """``build(f, *args)`` from its cache; an unhashable step function cannot be cached: built per call."""
    try:
        return build(f, *args)
    except TypeError:
        return build.__wrapped__(f, *args)


@functools.lru_cache(maxsize=64)
def _slicer(length: int) -> Callable[[jax.Array, int], jax.Array]:
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
    out: list[jax.Array]
    carry: Any
    lease: _Lease | None  # its pool slot's lease (dropped unseen, it gives the slot back); None when XLA allocated out


def _block_xs(plan: Plan, start: int, stop: int) -> Any:
    """The rows ``[start, stop)`` of every xs leaf (None without xs).

    Host rows of the blocks before are let go first (see :func:`_drop_spent_rows`), so
    that a block's rows are read into memory its predecessor's have just freed.
    """
    if plan.xs is None:
        return None
    if _host_rows_nbytes(plan.xs) * (stop - start) >= HOST_ROWS_MIN_BYTES:
        _drop_spent_rows()
    return jax.tree_util.tree_map(lambda leaf: _take(leaf, start, stop), plan.xs)


HOST_ROWS_MIN_BYTES = POOL_MIN_BYTES
"""Smallest block of host rows (bytes) whose predecessors :func:`_block_xs` lets go of
before reading it; smaller rows come from glibc's heap, which reuses them whenever they go."""


def _host_rows_nbytes(xs: Any) -> int:
    """Bytes of one step of the leaves of ``xs`` that live on the host (not JAX arrays)."""
    return sum(
        np.dtype(leaf.dtype).itemsize * int(np.prod(leaf.shape[1:], dtype=np.int64))
        for leaf in jax.tree_util.tree_leaves(xs)
        if not isinstance(leaf, jax.Array)
    )


def _drop_spent_rows() -> None:
    """Free the host rows that XLA has finished computing on, now rather than at Python's next collection.

    XLA computes on an aligned numpy array in place and holds it meanwhile; once done, it
    lets go of it from a thread of its own, where jaxlib, without the GIL, only queues the
    reference for its garbage list, which a gc callback empties at each collection. Until
    then a block's rows outlive it, and a block of 32 MiB input rows was read while the rows
    of the block before (or more) still took their 32 MiB. A young-generation collection
    runs that callback (0.1-0.2 ms, against a block read in tens of milliseconds).
    """
    gc.collect(0)


def _dispatch(plan: Plan, pool: BlockPool, carry: Any, start: int, stop: int) -> _Computed:
    xs = _block_xs(plan, start, stop)
    lease = pool.acquire() if stop - start == plan.block_size else None  # only full blocks share buffers
    carry, out = _run_block(plan, carry, xs, stop - start, pool.buffers(lease, plan.out_structs(stop - start)))
    return _Computed(start, stop, out, carry, lease)


def _run_block(
    plan: Plan, carry: Any, xs: Any, length: int, out: list[jax.Array] | None
) -> tuple[Any, list[jax.Array]]:
    """One block of ``length`` steps from ``carry``: its carry and ys, written into the donated ``out``.

    ``out`` is None only for ys without zero buffers (a PRNG key's); XLA allocates those.
    """
    shape = (plan.f, length, plan.unroll, plan.reverse)
    if out is None:
        return _cached(_scan_fn, *shape, False, plan.save_every)(carry, xs)
    return _cached(_scan_fn, *shape, True, plan.save_every)(carry, xs, out)


def _hand_over(plan: Plan, pool: BlockPool, done: _Computed) -> Block:
    hosts = pool.hand_over(done.lease, done.out)
    ys = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(plan.y_struct), hosts)
    release = None if done.lease is None else done.lease.release
    return Block(done.start, done.stop, ys, done.carry, release, save_every=plan.save_every)


@functools.lru_cache(maxsize=256)
def _carry_scan_fn(f: Step, length: int, unroll: int | bool, reverse: bool) -> Callable[[Any, Any], Any]:
    step = _carry_only(f)

    def run(carry: Any, xs: Any) -> Any:
        return lax.scan(step, carry, xs, length=length, unroll=unroll, reverse=reverse)[0]

    return jax.jit(run)


def carry_pass(
    plan: Plan, *, carry: Any = None, first_block: int = 0, exact: bool = False
) -> Iterator[tuple[int, int, Any]]:
    """The carry after each block from ``first_block`` on, without materialising any ys.

    Yields ``(start, stop, carry)`` in scan order, ``carry`` leaving the block. Each block
    runs a carry-only scan of the same step, so this is the cheap sequential part of a
    blocked scan: with the carry entering every block known, the blocks themselves can
    be recomputed anywhere, in parallel. A step whose carry depends on how XLA compiles
    it alongside its ys would differ here (Lorenz-63's RK4 did, in 1 of its first
    31,000 steps); callers compare with the full
    block. ``exact`` runs the block function itself, its ys computed and dropped: the bits
    of the full block by construction, at the cost of one block's ys at a time.
    """
    carry = plan.init if carry is None else carry
    spare: dict[int, list[jax.Array] | None] = {}  # per block length: ys buffers, donated from block to block
    for start, stop in plan.bounds(first_block):
        xs = _block_xs(plan, start, stop)
        if plan.save_every == 1 and not exact:
            carry = _cached(_carry_scan_fn, plan.f, stop - start, plan.unroll, plan.reverse)(carry, xs)
        else:  # the block function itself (its kept rows are few): the carry has its bits by construction
            n = stop - start
            out = spare[n] if n in spare else fresh_buffers(plan.out_structs(n))
            carry, spare[n] = _run_block(plan, carry, xs, n, out)
        yield start, stop, carry


def compute_block(plan: Plan, carry: Any, start: int, stop: int, *, pool: BlockPool | None = None) -> Block:
    """Compute the single block ``[start, stop)`` from the carry entering it (a block task, or a check).

    With ``pool`` the block is computed into one of its buffers; release the block when done.
    """
    pool = BlockPool(0) if pool is None else pool
    return _hand_over(plan, pool, _dispatch(plan, pool, carry, start, stop))


def computes_ahead() -> bool:
    """Whether :func:`run_plan` computes one block ahead by default: on an accelerator, not on a CPU.

    Decided by the platform of the device that JAX computes on (``jax.default_device``
    included), as seen from the calling thread. Computing ahead dispatches block k+1
    before block k is handed over. On an accelerator JAX's dispatch returns at once, so
    the device computes k+1 while block k is copied to the host and taken by the caller;
    that overlap is worth the pool's one extra buffer. XLA's CPU client returns only once
    the block is computed (measured for a 2**22-step float64 block: the dispatch takes
    the block's whole 21 ms, the hand-over 0.1 ms), so on a CPU computing ahead overlaps
    nothing: each ``next()`` still waits for one block's computation, the caller merely
    gets the block before the one just computed, and the pool needs a buffer more (32 MiB
    for the write's blocks, the difference for the headline's peak memory). On a CPU the
    overlap comes from the caller's own threads instead, as in :func:`streamacc.write`.
    """
    return _platform() != "cpu"


def _platform() -> str:
    device: jax.Device | str | None = jax_option("jax_default_device")
    if device is None:
        return jax.default_backend()
    if isinstance(device, str):  # a platform name
        return device
    platform: str = device.platform  # jaxlib's Device comes without type information
    return platform


def run_plan(
    plan: Plan,
    *,
    carry: Any = None,
    first_block: int = 0,
    pool: BlockPool | None = None,
    ahead: bool | None = None,
) -> Iterator[Block]:
    """Run ``plan`` from block ``first_block`` (in scan order) with ``carry`` entering it.

    With ``ahead`` (by default :func:`computes_ahead`: on an accelerator) block k+1 is
    dispatched before block k is handed over, so that with JAX's asynchronous dispatch
    the device computes while the caller consumes; without it (on a CPU) each block is
    computed when the caller asks for it, and the engine holds one buffer less.

    Full blocks are computed into the buffers of ``pool``; by default a pool sized for a
    caller that holds one block at a time (none for blocks under ``POOL_MIN_BYTES``). A
    caller that keeps ``depth`` blocks in flight passes
    ``BlockPool(pool_size(depth, ahead=ahead))`` and calls :meth:`Block.release` on each
    block once done with it; memory then stays at that many blocks of
    ``plan.block_nbytes``. A caller that keeps more blocks stays correct: the extra
    blocks get buffers of their own.
    """
    if ahead is None:
        ahead = computes_ahead()
    if pool is None:
        pool = BlockPool(pool_size(CALLER_HELD, ahead=ahead) if plan.block_nbytes >= POOL_MIN_BYTES else 0)
    carry = plan.init if carry is None else carry
    if not ahead:
        for start, stop in plan.bounds(first_block):
            block = compute_block(plan, carry, start, stop, pool=pool)
            carry = block.carry
            yield block
            # dropped before the next block is computed: a block the caller dropped
            # unreleased must give its buffer back before the next one takes a slot
            del block
        return
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
    f: Step,
    init: Any,
    xs: Any = None,
    *,
    length: int | None = None,
    block_size: int | None = None,
    unroll: int | bool = 1,
    reverse: bool = False,
    save_every: int = 1,
) -> Iterator[Block]:
    """Run ``lax.scan(f, init, xs, length)`` block by block in bounded memory, yielding each block.

    Concatenating the blocks' ``ys`` in step order, and taking the last block's
    ``carry``, gives bit for bit what one ``lax.scan`` over the whole length gives.
    Memory stays at a few blocks whatever the length. Blocks come in scan order (from
    the end when ``reverse``). On an accelerator the next block computes while the
    caller handles one (:func:`computes_ahead`); on a CPU each block is computed when
    asked for. Arguments are checked when ``iter_blocks`` is called, not at the first
    ``next()``.

    Parameters
    ----------
    f : callable
        The step, ``f(carry, x) -> (carry, y)``, as ``lax.scan`` takes it. It must be
        hashable (a function, or a frozen dataclass), as for ``jax.jit``.
    init : pytree of arrays
        The carry entering the first step.
    xs : pytree of arrays, optional
        Inputs sliced along their first axis, one row per step: numpy arrays, memmaps,
        JAX or Zarr arrays. Only the current block's rows are read.
    length : int, optional
        The number of steps; required without ``xs``, and equal to its length with it.
    block_size : int, optional
        Steps per block. By default a block holds about 8 MiB of ys (or of xs, if
        larger), whatever one step outputs: 2**20 steps of a float64 series.
    unroll : int or bool, default 1
        ``lax.scan``'s unroll. With ``unroll=u > 1`` XLA may regroup floating-point work
        inside an unrolled group, so ``block_size`` must be a multiple of ``u`` and at
        least ``2u`` (and a reverse scan's length a multiple of ``u``).
    reverse : bool, default False
        Scan from the last step to the first, as ``lax.scan(reverse=True)``.
    save_every : int, default 1
        Keep the ys of steps ``k-1, 2k-1, ...`` only (``k = save_every``), that is
        ``lax.scan(...)[1][k-1::k]``; every step still runs.

    Yields
    ------
    Block
        The blocks in scan order, each with its steps' ys on the host and the carry
        after it. A block you keep keeps its buffer; later blocks get other ones.

    Raises
    ------
    streamacc.errors.InputError
        A bad argument (a length, block size, unroll or ``save_every`` that does not fit).
    streamacc.errors.StepFunctionError
        ``f`` breaks the scan contract, e.g. its carry changes shape or dtype.
    streamacc.errors.X64Error
        ``init`` or ``xs`` hold 64-bit data while ``jax_enable_x64`` is off.

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> jax.config.update("jax_enable_x64", True)
    >>> def step(x, _):
    ...     x = x * (1 + 1e-8)
    ...     return x, x
    >>> for block in streamacc.iter_blocks(step, np.float64(1.0), length=10_000, block_size=4096):
    ...     print(block.start, block.stop, block.ys.shape, float(block.carry))
    0 4096 (4096,) 1.0000409608...
    4096 8192 (4096,) 1.0000819233...
    8192 10000 (1808,) 1.0001000049...
    """
    plan = make_plan(
        f, init, xs, length=length, block_size=block_size, unroll=unroll, reverse=reverse, save_every=save_every
    )
    return run_plan(plan)


def scan(
    f: Callable[[Carry, Any], tuple[Carry, Any]],
    init: Carry,
    xs: Any = None,
    *,
    length: int | None = None,
    block_size: int | None = None,
    unroll: int | bool = 1,
    reverse: bool = False,
    save_every: int = 1,
) -> tuple[Carry, Any]:
    """``jax.lax.scan`` computed block by block, with ``ys`` assembled in host memory.

    The result equals one ``lax.scan`` over the whole length bit for bit. Use it when
    the output fits in RAM but one scan of the whole length would not compile or fit on
    the device; to keep memory bounded whatever the length, use :func:`iter_blocks` or
    :func:`write`.

    Parameters
    ----------
    f : callable
        The step, ``f(carry, x) -> (carry, y)``, as ``lax.scan`` takes it; hashable.
    init : pytree of arrays
        The carry entering the first step.
    xs : pytree of arrays, optional
        Inputs sliced along their first axis, one row per step (numpy, memmap, JAX or
        Zarr arrays).
    length : int, optional
        The number of steps; required without ``xs``, and equal to its length with it.
    block_size : int, optional
        Steps per block; by default about 8 MiB of ys per block.
    unroll : int or bool, default 1
        ``lax.scan``'s unroll (see :func:`iter_blocks` for the block sizes it allows).
    reverse : bool, default False
        Scan from the last step to the first, as ``lax.scan(reverse=True)``.
    save_every : int, default 1
        Keep the ys of every ``save_every``-th step only: ``lax.scan(...)[1][k-1::k]``.

    Returns
    -------
    carry : pytree of jax.Array
        The carry after the last step.
    ys : pytree of numpy.ndarray
        The ys of every step (or of every ``save_every``-th), stacked along a leading axis.

    Raises
    ------
    streamacc.errors.InputError
        A bad argument, or ys larger than the machine's memory (stream them with
        :func:`iter_blocks` or :func:`write`).
    streamacc.errors.StepFunctionError
        ``f`` breaks the scan contract.
    streamacc.errors.X64Error
        64-bit inputs while ``jax_enable_x64`` is off.

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> def step(total, x):
    ...     total = total + x
    ...     return total, total
    >>> xs = np.arange(1, 11, dtype=np.float32)
    >>> carry, ys = streamacc.scan(step, np.float32(0), xs, block_size=4)
    >>> ys
    array([ 1.,  3.,  6., 10., 15., 21., 28., 36., 45., 55.], dtype=float32)
    >>> bool((ys == jax.lax.scan(step, np.float32(0), xs)[1]).all())
    True
    """
    plan = make_plan(
        f, init, xs, length=length, block_size=block_size, unroll=unroll, reverse=reverse, save_every=save_every
    )

    def empty(s: jax.ShapeDtypeStruct) -> npt.NDArray[Any]:
        return np.empty((plan.rows, *s.shape), dtype=s.dtype)

    needed = sum(
        plan.rows * int(np.prod(s.shape, dtype=object)) * np.dtype(s.dtype).itemsize
        for s in jax.tree_util.tree_leaves(plan.y_struct)
    )
    memory = _physical_memory()
    if memory is not None and needed > memory:
        raise _too_big(needed, memory, plan.rows)
    try:
        ys = jax.tree_util.tree_map(empty, plan.y_struct)
    except (MemoryError, ValueError):  # numpy: "Unable to allocate ...", "array is too big"
        raise _too_big(needed, memory, plan.rows) from None
    carry = plan.init
    for block in run_plan(plan):
        rows = slice(block.rows.start, block.rows.stop)
        jax.tree_util.tree_map(lambda out, y, rows=rows: out.__setitem__(rows, y), ys, block.ys)
        carry = block.carry
        block.release()
    return carry, ys


def _physical_memory() -> int | None:
    """This machine's memory in bytes, where the system says."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def _bytes(n: int) -> str:
    """``n`` bytes in binary units: ``8.0 TiB``."""
    value, unit = float(n), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024 or unit == "EiB":
            break
        value /= 1024
    return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"


def _too_big(needed: int, memory: int | None, rows: int) -> InputError:
    """The error for ys that do not fit in memory: scan keeps them all there."""
    have = f"more than this machine's {_bytes(memory)} of memory" if memory is not None else "more than memory holds"
    return InputError(
        f"scan keeps every row of ys in memory, and {rows} rows take {_bytes(needed)}, {have}; stream them "
        f"instead with streamacc.iter_blocks (block by block) or streamacc.write (to Zarr on disk), or keep "
        f"fewer rows with {arg('save_every')}"
    )
