"""The compiled block functions: ``lax.scan`` itself per block (thinned, or the carry alone), cached per step function
and block length; those of a scan with a condition are ``_until``'s."""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar

import jax
import jax.numpy as jnp
from jax import lax

from ..base import unrolled
from ._checks import Step

__all__ = ["block_function", "cached", "carry_scan_fn", "into", "lax_scan", "scan_fn", "x0"]


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
    differently when their ys are not all stored (a kept y can be an ulp off), so the
    block runs as one plain scan, storing every y, and keeps every ``every``-th: exact, at
    the cost of a block's full ys in memory (blocks sized by bytes count them).
    """
    if unrolled(unroll):
        carry, ys = lax.scan(f, carry, xs, length=length, unroll=unroll, reverse=reverse)
        kept = (length // every) * every
        return carry, jax.tree_util.tree_map(lambda y: y[every - 1 : kept : every], ys)
    rows, rest = divmod(length, every)
    split = rows * every
    head = jax.tree_util.tree_map(lambda a: a[:split].reshape(rows, every, *a.shape[1:]), xs)
    tail = jax.tree_util.tree_map(lambda a: a[split:], xs)
    y_struct = jax.eval_shape(f, carry, x0(xs))[1]
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


def x0(xs: Any) -> Any:
    """An abstract single step's x of ``xs`` (None without xs)."""
    return None if xs is None else jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), xs)


@functools.lru_cache(maxsize=256)
def scan_fn(
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


def cached(build: _Memoized[_Built], f: Step, *args: Hashable) -> _Built:
    """``build(f, *args)`` from its cache; an unhashable step function cannot be cached: built per call."""
    try:
        return build(f, *args)
    except TypeError:
        return build.__wrapped__(f, *args)


def block_function(
    f: Step, length: int, unroll: int | bool, reverse: bool, save_every: int = 1
) -> Callable[[Any, Any], tuple[Any, list[jax.Array]]]:
    """One block of ``length`` steps as every block of a plan runs: ``(carry, xs) -> (carry, ys leaves)``.

    :func:`scan_fn`'s jitted function (``lax.scan`` itself, or its thinned form), from its
    cache; called inside another jitted program (a Stream's), it is traced into it.
    """
    return cached(scan_fn, f, length, unroll, reverse, False, save_every)


@functools.lru_cache(maxsize=256)
def carry_scan_fn(f: Step, length: int, unroll: int | bool, reverse: bool) -> Callable[[Any, Any], Any]:
    step = _carry_only(f)

    def run(carry: Any, xs: Any) -> Any:
        return lax.scan(step, carry, xs, length=length, unroll=unroll, reverse=reverse)[0]

    return jax.jit(run)


def lax_scan(
    step: Step, state: Any, xs: Any, length: int, unroll: int | bool, every: int
) -> tuple[Any, list[jax.Array]]:
    """``lax.scan`` of ``step`` over a block (thinned to every ``every``-th y): its state and ys leaves."""
    if every == 1:
        state, ys = lax.scan(step, state, xs, length=length, unroll=unroll)
    else:
        state, ys = _thinned_scan(step, state, xs, length, unroll, False, every)
    return state, jax.tree_util.tree_leaves(ys)


def into(run: Callable[..., tuple[Any, list[jax.Array], Any]]) -> Callable[..., tuple[Any, list[jax.Array], Any]]:
    """``run`` with its ys (its second result) written into the donated buffers ``out``, its last argument (as
    :func:`scan_fn`'s)."""

    def run_into(*args: Any) -> tuple[Any, list[jax.Array], Any]:
        *given, out = args
        carry, ys, found = run(*given)
        return carry, [lax.dynamic_update_slice_in_dim(o, y, 0, 0) for o, y in zip(out, ys, strict=True)], found

    return run_into
