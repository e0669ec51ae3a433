"""The compiled block functions: ``lax.scan`` itself per block (thinned, or the carry alone, or testing the scan's
condition after each step), cached per step function and block length."""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Any, Protocol, TypeVar

import jax
import jax.numpy as jnp
from jax import lax

from ..base import unrolled
from ._checks import Predicate, Step

__all__ = [
    "PROBED",
    "block_function",
    "cached",
    "carry_scan_fn",
    "probe_fn",
    "scan_fn",
    "until_block_functions",
    "until_fn",
    "x0",
]


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


PROBED = -2
"""What a block's probe (:func:`probe_fn`) gives where the condition held in it: after some step, which
:func:`until_fn` finds (-1: after none)."""


def _probing(f: Step, until: Predicate) -> Step:
    """``f`` on a state that also says whether ``until`` held after any of the block's steps: ``(carry, held)``.

    The carry runs on as ``f`` makes it, and the test runs beside it: one comparison and an
    ``or`` a step, where finding the step too, its carry held there (:func:`_testing`), cost
    the fastest step (the headline's, unrolled 8 times) a fifth more time, and this about a
    hundredth.
    """

    def step(state: tuple[Any, jax.Array], x: Any) -> tuple[tuple[Any, jax.Array], Any]:
        carry, held = state
        carry, y = f(carry, x)
        return (carry, jnp.logical_or(held, until(carry, y))), y

    return step


def _probing_from(f: Step, until: Predicate, armed: jax.Array) -> Step:
    """:func:`_probing`, testing from the block's step ``armed`` on (the state counts the steps too)."""

    def step(state: tuple[Any, jax.Array, jax.Array], x: Any) -> tuple[tuple[Any, jax.Array, jax.Array], Any]:
        carry, i, held = state
        carry, y = f(carry, x)
        return (carry, i + 1, jnp.logical_or(held, jnp.logical_and(i >= armed, until(carry, y)))), y

    return step


def _testing(f: Step, until: Predicate, armed: jax.Array) -> Step:
    """``f`` on a state that also counts the block's steps and keeps the first (from ``armed`` on) where ``until``
    held: ``(carry, step, first)``, ``first`` -1 while it has not held. From the step after it on, the carry is held
    as that step left it (the steps still run, and their ys are never kept)."""

    def step(state: tuple[Any, jax.Array, jax.Array], x: Any) -> tuple[tuple[Any, jax.Array, jax.Array], Any]:
        carry, i, first = state
        new, y = f(carry, x)
        held = first >= 0
        hit = jnp.logical_and(jnp.logical_and(jnp.logical_not(held), i >= armed), until(new, y))
        carry = jax.tree_util.tree_map(lambda old, now: jnp.where(held, old, now), carry, new)
        return (carry, i + 1, jnp.where(hit, i, first)), y

    return step


def _scan(step: Step, state: Any, xs: Any, length: int, unroll: int | bool, every: int) -> tuple[Any, list[jax.Array]]:
    """``lax.scan`` of ``step`` over a block (thinned to every ``every``-th y): its state and ys leaves."""
    if every == 1:
        state, ys = lax.scan(step, state, xs, length=length, unroll=unroll)
    else:
        state, ys = _thinned_scan(step, state, xs, length, unroll, False, every)
    return state, jax.tree_util.tree_leaves(ys)


def _into(run: Callable[..., tuple[Any, list[jax.Array], Any]]) -> Callable[..., tuple[Any, list[jax.Array], Any]]:
    """``run`` with its ys written into the donated buffers ``out``, its last argument (as :func:`scan_fn`'s)."""

    def run_into(*args: Any) -> tuple[Any, list[jax.Array], Any]:
        *given, out = args
        carry, ys, found = run(*given)
        return carry, [lax.dynamic_update_slice_in_dim(o, y, 0, 0) for o, y in zip(out, ys, strict=True)], found

    return run_into


@functools.lru_cache(maxsize=256)
def probe_fn(
    f: Step, until: Predicate, length: int, unroll: int | bool, into: bool, every: int = 1, armed: bool = False
) -> Callable[..., tuple[Any, list[jax.Array], jax.Array]]:
    """One block of a scan with a condition: ``(carry, xs[, armed][, out]) -> (carry, ys leaves, found)``.

    ``lax.scan`` (or its thinned form) of the step that also tests ``until`` after each step
    (with ``armed``, from the block's step given as ``armed`` on: an extended run's first
    block); its ys and last carry are the block's, and ``found`` is -1 where the condition held
    after none of its steps, else :data:`PROBED` (:func:`until_fn` then finds the step and its
    carry). With ``into``, the ys are written into the donated buffers ``out``.
    """

    def run(carry: Any, xs: Any, *tested_from: jax.Array) -> tuple[Any, list[jax.Array], jax.Array]:
        if tested_from:
            state = (carry, jnp.int32(0), jnp.bool_(False))
            (carry, _, held), ys = _scan(_probing_from(f, until, tested_from[0]), state, xs, length, unroll, every)
        else:
            (carry, held), ys = _scan(_probing(f, until), (carry, jnp.bool_(False)), xs, length, unroll, every)
        return carry, ys, jnp.where(held, jnp.int32(PROBED), jnp.int32(-1))

    if into:
        return jax.jit(_into(run), donate_argnums=3 if armed else 2)
    return jax.jit(run)


@functools.lru_cache(maxsize=256)
def until_fn(
    f: Step, until: Predicate, length: int, unroll: int | bool, into: bool, every: int = 1
) -> Callable[..., tuple[Any, list[jax.Array], jax.Array]]:
    """A block of a scan with a condition run again to find where it held: ``(carry, xs, armed[, out]) -> (carry,
    ys leaves, first)``.

    ``lax.scan`` (or its thinned form) of the step that tests ``until`` after each step from
    the block's step ``armed`` on and holds the carry from the first where it held; ``first`` is
    that step (-1: none), and ``carry`` the carry it left (the block's last, where none). Its ys
    are computed and returned so that XLA compiles the steps as a block's; the block keeps its
    probe's (with ``unroll`` > 1 the two programs' last bits can differ, and every block's ys
    are then the probe's, alike in every block size). With ``into``, the ys are written into
    the donated buffers ``out``.
    """

    def run(carry: Any, xs: Any, armed: jax.Array) -> tuple[Any, list[jax.Array], jax.Array]:
        state = (carry, jnp.int32(0), jnp.int32(-1))
        (carry, _, first), ys = _scan(_testing(f, until, armed), state, xs, length, unroll, every)
        return carry, ys, first

    return jax.jit(_into(run), donate_argnums=3) if into else jax.jit(run)


Tested = Callable[..., tuple[Any, list[jax.Array], jax.Array]]
"""A block function of a scan with a condition: its carry, its ys leaves, and where the condition held."""


def until_block_functions(
    f: Step, until: Predicate, length: int, unroll: int | bool, save_every: int = 1
) -> tuple[Tested, Tested, Tested]:
    """:func:`block_function` for a scan with a condition: its probe ``(carry, xs) -> (carry, ys leaves, found)``,
    the probe testing from a step ``(carry, xs, armed) -> ...`` and the finder ``(carry, xs, armed) -> (carry, ys
    leaves, first)`` (:func:`probe_fn`, :func:`until_fn`)."""
    return (
        cached(probe_fn, f, until, length, unroll, False, save_every),
        cached(probe_fn, f, until, length, unroll, False, save_every, True),
        cached(until_fn, f, until, length, unroll, False, save_every),
    )
