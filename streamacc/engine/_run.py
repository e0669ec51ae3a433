"""Running a plan block by block: dispatch into the pool's buffers, hand over the :class:`Block`, the carry pass.

A plan with a condition (``until``) runs each block as ``_until`` says for the way the condition
is tested, and hands over the block where it held with its ys cut after the step where it
first held, with the carry that step left; no block follows it.

A carry is a pytree of small JAX arrays, possibly typed PRNG keys; as plain host data (a list
of (numpy array, key implementation or None) leaves, and back, exactly) it is recorded and
continued elsewhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

from ..base import HostLeaf, pool_size, rows_in
from ..errors import StepError
from ._config import compute_platform
from ._kernels import cached, carry_scan_fn, scan_fn
from ._memory import POOL_MIN_BYTES, BlockPool, _Lease, block_xs, fresh_buffers, let_go, spent_rows
from ._plan import Plan
from ._until import Tested, run_tested, tested_block

__all__ = [
    "Block", "BlockFailed", "carry_pass", "compute_block", "computes_ahead", "from_host", "run_block",
    "run_plan", "runtime_failure", "same_leaves", "to_host",
]




def _leaf_to_host(leaf: Any) -> HostLeaf:
    leaf = jnp.asarray(leaf)
    if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(leaf)), str(jax.random.key_impl(leaf))
    return np.asarray(leaf), None


def to_host(carry: Any) -> list[HostLeaf]:
    """The leaves of ``carry`` as host arrays, each tagged with its PRNG key implementation."""
    return [_leaf_to_host(leaf) for leaf in jax.tree_util.tree_leaves(carry)]


def _placed(array: npt.NDArray[Any], like: Any) -> jax.Array:
    """``array`` on the device, sharded as ``like`` where that is a ``jax.Array`` sharded over several devices."""
    sharding = getattr(like, "sharding", None) if isinstance(like, jax.Array) else None
    if sharding is None or len(sharding.device_set) < 2:
        return jnp.asarray(array)
    placed: jax.Array = jax.device_put(array, sharding)
    return placed


def from_host(leaves: list[HostLeaf], like: Any) -> Any:
    """Rebuild a carry with the tree structure of ``like`` from :func:`to_host` leaves.

    A leaf whose counterpart in ``like`` is sharded over several devices (an ensemble's members
    spread over the devices of a mesh) is sharded so again; any other goes to the default device.
    """
    treedef = jax.tree_util.tree_structure(like)
    arrays = []
    for (a, impl), model in zip(leaves, jax.tree_util.tree_leaves(like), strict=True):
        if impl:
            data = model if not isinstance(model, jax.Array) else jax.random.key_data(model)
            arrays.append(jax.random.wrap_key_data(_placed(a, data), impl=impl))
        else:
            arrays.append(_placed(a, model))
    return jax.tree_util.tree_unflatten(treedef, arrays)


def same_leaves(a: list[HostLeaf], b: list[HostLeaf]) -> bool:
    """Whether two host carries are the same bit for bit (dtypes, shapes, bytes and key implementations)."""
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() and i == j
        for (x, i), (y, j) in zip(a, b, strict=True)
    )


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
    ended : bool
        Whether the scan's condition (``until``) held in this block: the block ends after
        the step where it first held (``stop - 1``), its ``carry`` is the carry that step
        left, and no block follows.

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
    ended: bool = False

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def rows(self) -> range:
        """The output rows this block's ys fill: ``range(start, stop)``, or the kept rows when thinned.

        Output row ``r`` holds the y of step ``r * save_every + save_every - 1``.
        """
        return range(*rows_in(self.start, self.stop, self.save_every))

    def __reduce__(self) -> tuple[Callable[..., Block], tuple[int, int, Any, Any, int, bool]]:
        # a copy holds no buffer of the pool
        return _rebuild_block, (self.start, self.stop, self.ys, self.carry, self.save_every, self.ended)

    def release(self) -> None:
        """Give this block's buffers back for reuse by a later block; ``ys`` must not be read after.

        Optional: without it a buffer is reused once every reference to ``ys`` is gone.
        Call it where references linger after the last read, e.g. in a writer, once the
        block's chunks are durable. Calling it again does nothing.
        """
        if self._release is not None:
            self._release()


def _rebuild_block(start: int, stop: int, ys: Any, carry: Any, save_every: int, ended: bool = False) -> Block:
    return Block(start, stop, ys, carry, save_every=save_every, ended=ended)


class BlockFailed(StepError, jax.errors.JaxRuntimeError):  # type: ignore[misc]  # jaxlib's class comes without types
    """The computation of the block of steps ``[start, stop)`` failed at run time: the step raised there (an
    exception in a host callback, a runtime check such as equinox's ``error_if``, diffrax's ``max_steps``), or the
    device did (out of memory). A :class:`~streamacc.errors.StepError` (a writer raises its own, saying what is
    committed), and still a ``JaxRuntimeError``, as a caller of ``iter_blocks`` caught before; JAX's error is its
    ``__cause__``, ``error`` its one line. It survives pickling (a cluster's block task)."""

    def __init__(self, start: int, stop: int, error: str) -> None:
        super().__init__(
            f"the step failed at run time in the block of steps {start} to {stop} ({error}): fix the cause (JAX's "
            "error is chained as this error's __cause__) and run again"
        )
        self.start, self.stop, self.error = start, stop, error

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.start, self.stop, self.error))

    @classmethod
    def of(cls, start: int, stop: int, exc: BaseException) -> BlockFailed:
        """The failure ``exc`` of the block of steps ``[start, stop)``."""
        return cls(start, stop, _what_failed(str(exc)))


_STATUSES = (
    "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
)
_STATUS_PREFIXES = tuple(f"{status}: " for status in _STATUSES)


def runtime_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a computation failing at run time: a ``JaxRuntimeError``, or the ``ValueError`` with an
    XLA status (``INTERNAL: CpuCallback error ...``) that JAX raises instead when a compiled function already run
    once fails (its cached call), not one raised while a step is traced."""
    if isinstance(exc, jax.errors.JaxRuntimeError):
        return True
    return type(exc) is ValueError and str(exc).startswith(_STATUS_PREFIXES)


@contextlib.contextmanager
def _failing(start: int, stop: int) -> Iterator[None]:
    """Raise a run-time failure of the block of steps ``[start, stop)`` as :class:`BlockFailed`, naming its steps,
    whether JAX raised it as a ``JaxRuntimeError`` (a function's first call) or a ``ValueError`` (a cached one)."""
    try:
        yield
    except BlockFailed:
        raise
    except (jax.errors.JaxRuntimeError, ValueError) as exc:
        if not runtime_failure(exc):
            raise
        raise BlockFailed.of(start, stop, exc) from exc


def _what_failed(text: str) -> str:
    """The one line that says what failed in a ``JaxRuntimeError``'s text: where a callback raised, the last line of
    its traceback (``ValueError: diverged``), not XLA's preamble and the frames; else its first line."""
    lines = text.split("\n--------------------")[0].splitlines()
    if "Traceback (most recent call last):" in text:
        last = [line.strip() for line in lines if line.strip() and not line.startswith((" ", "\t"))]
        if last:
            return last[-1][:500]
    return (lines[0].strip() if lines else "")[:500]


CALLER_HELD = 1
"""Blocks a plain ``for block in iter_blocks(...)`` loop holds while asking for the next."""


@dataclasses.dataclass(frozen=True)
class _Computed:
    """A dispatched block: its device outputs, and the pool slot they live in (if any)."""

    start: int
    stop: int
    out: list[jax.Array]
    carry: Any
    lease: _Lease | None  # its pool slot's lease (dropped unseen, it gives the slot back); None when XLA allocated out
    rows: tuple[weakref.ref[Any], ...]  # its host rows, let go of once its values are ready
    tested: Tested | None = None  # with a condition: where it held (see run_block)


def _dispatch(plan: Plan, pool: BlockPool, carry: Any, start: int, stop: int) -> _Computed:
    stop = _runs_to(plan, start, stop)
    xs = block_xs(plan, start, stop)
    lease = pool.acquire() if stop - start == plan.block_size else None  # only full blocks share buffers
    buffers = pool.buffers(lease, plan.out_structs(stop - start))
    with _failing(start, stop):
        carry, out, tested = run_block(plan, carry, xs, stop - start, buffers, start=start)
    return _Computed(start, stop, out, carry, lease, spent_rows(plan, xs, stop - start), tested)


def _runs_to(plan: Plan, start: int, stop: int) -> int:
    """Where the block beginning at ``start`` ends as it runs: ``stop``, or, with a condition (a block cut where
    it held included), where the layout of the whole length ends it: the condition cuts it again."""
    return stop if plan.blocking.end is None and plan.until is None else plan.blocking.layout_stop(start)


def run_block(
    plan: Plan, carry: Any, xs: Any, length: int, out: list[jax.Array] | None, *, start: int = 0
) -> tuple[Any, list[jax.Array], Tested | None]:
    """One block of ``length`` steps from ``carry`` (beginning at step ``start``): its carry and ys, written into
    the donated ``out``, and with a condition what :func:`found` finds where it held from; None without one.

    ``out`` is None only for ys without zero buffers (a PRNG key's); XLA allocates those.
    """
    if plan.until is not None:
        armed = _armed(plan, start, length)
        return run_tested(plan.f, plan.until, plan.y_struct, carry, xs, length, plan.unroll, plan.save_every, armed,
                          out)  # fmt: skip
    shape = (plan.f, length, plan.unroll, plan.reverse)
    if out is None:
        return *cached(scan_fn, *shape, False, plan.save_every)(carry, xs), None
    return *cached(scan_fn, *shape, True, plan.save_every)(carry, xs, out), None


def _armed(plan: Plan, start: int, length: int) -> int:
    """The first step of the block beginning at ``start`` that its condition is tested on (0 but in an extension)."""
    assert plan.until is not None
    return min(max(plan.until.armed - start, 0), length)


def found(
    plan: Plan, tested: Tested | None, ys: list[jax.Array], carry: Any, start: int, stop: int
) -> tuple[int | None, Any]:
    """The block's step where the condition first held (None: none, or no condition), and the carry that step
    left, from what :func:`run_block` gave: its ``tested``, its device ``ys`` and the ``carry`` leaving it (its rows
    of the inputs read again where the block runs again)."""
    if tested is None:
        return None, None
    assert plan.until is not None  # only a plan with a condition is tested
    n = stop - start
    return tested_block(plan.f, plan.until, tested, ys, carry, lambda: block_xs(plan, start, stop), n, plan.unroll,
                        plan.save_every, _armed(plan, start, n))  # fmt: skip


def _hand_over(plan: Plan, pool: BlockPool, done: _Computed) -> Block:
    with _failing(done.start, done.stop):  # a device computes asynchronously: its failure shows here
        k, held = found(plan, done.tested, done.out, done.carry, done.start, done.stop)
        hosts = pool.hand_over(done.lease, done.out)
    let_go(done.rows)
    stop, carry = done.stop, done.carry
    if k is not None:  # cut after the step where the condition held: its rows, no more, and its carry
        stop, carry = done.start + k + 1, held
        kept = len(range(*rows_in(done.start, stop, plan.save_every)))
        hosts = [host[:kept] for host in hosts]
    ys = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(plan.y_struct), hosts)
    release = None if done.lease is None else done.lease.release
    return Block(done.start, stop, ys, carry, release, save_every=plan.save_every, ended=k is not None)


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
    of the full block by construction, at the cost of one block's ys at a time; so does a
    plan with a condition, whose pass ends with the block where it held (cut there).
    """
    carry = plan.init if carry is None else carry
    spare: dict[int, list[jax.Array] | None] = {}  # per block length: ys buffers, donated from block to block
    for start, stop in plan.bounds(first_block):
        stop = _runs_to(plan, start, stop)
        xs = block_xs(plan, start, stop)
        k = None
        with _failing(start, stop):
            if plan.save_every == 1 and not exact and plan.until is None:
                carry = cached(carry_scan_fn, plan.f, stop - start, plan.unroll, plan.reverse)(carry, xs)
            else:  # the block function itself (its kept rows are few): the carry has its bits by construction
                n = stop - start
                out = spare[n] if n in spare else fresh_buffers(plan.out_structs(n))
                carry, ys, tested = run_block(plan, carry, xs, n, out, start=start)
                spare[n] = ys
                k, held = found(plan, tested, ys, carry, start, stop)
                if k is not None:
                    carry = held
        yield start, stop if k is None else start + k + 1, carry
        if k is not None:
            return


def compute_block(plan: Plan, carry: Any, start: int, stop: int, *, pool: BlockPool | None = None) -> Block:
    """Compute the single block ``[start, stop)`` from the carry entering it (a block task, or a check).

    With ``pool`` the block is computed into one of its buffers; release the block when done.
    With a condition, the block runs to where the layout of the whole length ends it, and is
    cut after the step where the condition held in it, if it did (``Block.ended``).
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
    the block is computed (the dispatch takes the block's whole computation, the hand-over
    a sliver of it), so on a CPU computing ahead overlaps nothing: each ``next()`` still
    waits for one block's computation, the caller merely gets the block before the one
    just computed, and the pool needs a buffer more (a whole block of the write's ys). On a
    CPU the overlap comes from the caller's own threads instead, as in :func:`streamacc.write`.
    """
    return compute_platform() != "cpu"


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
            carry, ended = block.carry, block.ended
            yield block
            # dropped before the next block is computed: a block the caller dropped
            # unreleased must give its buffer back before the next one takes a slot
            del block
            if ended:
                return
        return
    pending = None
    for start, stop in plan.bounds(first_block):
        done = _dispatch(plan, pool, carry, start, stop)
        carry = done.carry
        if pending is not None:
            block = _hand_over(plan, pool, pending)
            ended = block.ended
            yield block
            # dropped before the next block is dispatched: the generator must not keep the block's
            # views alive while it computes the next one, or its buffer could not be reused
            del block
            if ended:
                return  # the block dispatched after the one where the condition held is dropped unseen
        pending = done
    if pending is not None:
        yield _hand_over(plan, pool, pending)
