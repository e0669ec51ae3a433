"""A block of a scan with a condition: its compiled functions, and where the condition held in it.

Each way of testing the condition (``_condition``) runs a block so:

- ``OUTSIDE``: the block is the plain scan's own program (``scan_fn``, the same compiled
  function as the run without the condition), and :func:`held_fn` then tests the condition on
  its outputs, every step's at once: the stored values and the block's carry are the run's
  without the condition, by construction. Where it held after step ``k``, the carry after
  ``k`` is read from the outputs, and its leaves that they do not hold are computed by
  :func:`holding_fn`, the block run again with the carry held from the step after ``k``.
- ``INSIDE``: :func:`tester_fn` runs the step with the condition tested after each step and the
  carry held from the first step where it held (its ys are the block's with ``unroll=1``);
  with ``unroll`` > 1 the block's ys and carry are the plain scan's, a probe of the steps
  with the condition tested inside them (:func:`probed_fn`, its ys left out) says whether it
  held, and in the block where it did, the tester (its ys not kept) finds the step and the
  carry there.
- ``PROBED_WAY`` (outputs written by 1.1.0): the block's ys are those of a program testing the
  condition after each step (:func:`probe_fn`), and the block where it held runs again with
  the tester to find the step.

Every function here is cached per step function, condition and block length, as the plain
block's is.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from ..base import unrolled
from ._checks import Predicate, Step
from ._condition import INSIDE, OUTSIDE, Source, Until
from ._kernels import cached, into, lax_scan, scan_fn

__all__ = [
    "PROBED", "Tested", "carry_at", "first_fn", "held_fn", "holding_fn", "probe_fn", "probed_fn", "run_tested",
    "tested_block", "tester_fn", "until_block",
]

PROBED = -2
"""What a block's probe (:func:`probe_fn`, 1.1.0's way) gives where the condition held in it, after some step."""


def _probing(f: Step, until: Predicate, armed: jax.Array) -> Step:
    """``f`` on a state that also counts the block's steps and says whether ``until`` held after any from ``armed``
    on: ``(carry, step, held)`` (1.1.0's probe)."""

    def step(state: tuple[Any, jax.Array, jax.Array], x: Any) -> tuple[tuple[Any, jax.Array, jax.Array], Any]:
        carry, i, held = state
        carry, y = f(carry, x)
        return (carry, i + 1, jnp.logical_or(held, jnp.logical_and(i >= armed, until(carry, y)))), y

    return step


def _plain_probing(f: Step, until: Predicate) -> Step:
    """:func:`_probing` testing every step: ``(carry, held)`` (1.1.0's probe of a block it tests whole)."""

    def step(state: tuple[Any, jax.Array], x: Any) -> tuple[tuple[Any, jax.Array], Any]:
        carry, held = state
        carry, y = f(carry, x)
        return (carry, jnp.logical_or(held, until(carry, y))), y

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


def _holding(f: Step, last: jax.Array) -> Step:
    """``f`` on a state that also counts the block's steps, the carry held from the step after ``last`` on."""

    def step(state: tuple[Any, jax.Array], x: Any) -> tuple[tuple[Any, jax.Array], Any]:
        carry, i = state
        new, y = f(carry, x)
        carry = jax.tree_util.tree_map(lambda old, now: jnp.where(i <= last, now, old), carry, new)
        return (carry, i + 1), y

    return step


@functools.lru_cache(maxsize=256)
def probe_fn(
    f: Step, until: Predicate, length: int, unroll: int | bool, into_out: bool, every: int = 1, armed: bool = False
) -> Callable[..., tuple[Any, list[jax.Array], jax.Array]]:
    """1.1.0's block of a scan with a condition: ``(carry, xs[, armed][, out]) -> (carry, ys leaves, found)``, the ys
    those of ``lax.scan`` of the step that also tests the condition (from the block's step ``armed`` on, with
    ``armed``); ``found`` :data:`PROBED` where it held after some step, else -1."""

    def run(carry: Any, xs: Any, *tested_from: jax.Array) -> tuple[Any, list[jax.Array], jax.Array]:
        if tested_from:
            state = (carry, jnp.int32(0), jnp.bool_(False))
            (carry, _, held), ys = lax_scan(_probing(f, until, tested_from[0]), state, xs, length, unroll, every)
        else:
            (carry, held), ys = lax_scan(_plain_probing(f, until), (carry, jnp.bool_(False)), xs, length, unroll,
                                         every)  # fmt: skip
        return carry, ys, jnp.where(held, jnp.int32(PROBED), jnp.int32(-1))

    if into_out:
        return jax.jit(into(run), donate_argnums=3 if armed else 2)
    return jax.jit(run)


@functools.lru_cache(maxsize=256)
def probed_fn(
    f: Step, until: Predicate, length: int, unroll: int | bool, every: int = 1, armed: bool = False
) -> Callable[..., jax.Array]:
    """Whether the condition held after any of a block's steps (from the block's step ``armed`` on, with ``armed``:
    an extension's first block), tested inside the steps: ``(carry, xs, armed) -> held``. Its ys are never kept
    (XLA leaves them out): a block of the plain scan keeps the block's own, and this tells only whether
    :func:`tester_fn` must find the step. Without ``armed`` the steps count nothing: one comparison and an ``or``
    a step beside the step's own (a TPU v5e ran 1.1.0's such probe of a cheap unrolled step at 1.5 times the step's
    plain scan, and one that also counted the steps at 29 to 31 times)."""

    def run(carry: Any, xs: Any, tested_from: jax.Array) -> jax.Array:
        if armed:
            state = (carry, jnp.int32(0), jnp.bool_(False))
            (_, _, held), _ = lax_scan(_probing(f, until, tested_from), state, xs, length, unroll, every)
        else:
            (_, held), _ = lax_scan(_plain_probing(f, until), (carry, jnp.bool_(False)), xs, length, unroll, every)
        return jnp.asarray(held)

    return jax.jit(run)


@functools.lru_cache(maxsize=256)
def tester_fn(
    f: Step, until: Predicate, length: int, unroll: int | bool, into_out: bool, every: int = 1, ys_kept: bool = True
) -> Callable[..., Any]:
    """A block with its condition tested inside its steps: ``(carry, xs, armed[, out]) -> (carry, ys leaves, first)``.

    ``lax.scan`` (or its thinned form) of the step that tests ``until`` after each step from
    the block's step ``armed`` on and holds the carry from the first where it held; ``first``
    is that step (-1: none), and ``carry`` the carry it left (the block's last, where none).
    With ``into_out``, the ys are written into the donated buffers ``out``; without
    ``ys_kept``, they are not returned: ``(carry, first)``.
    """

    def run(carry: Any, xs: Any, armed: jax.Array) -> Any:
        state = (carry, jnp.int32(0), jnp.int32(-1))
        (carry, _, first), ys = lax_scan(_testing(f, until, armed), state, xs, length, unroll, every)
        return (carry, ys, first) if ys_kept else (carry, first)

    return jax.jit(into(run), donate_argnums=3) if into_out else jax.jit(run)


@functools.lru_cache(maxsize=256)
def holding_fn(f: Step, length: int, unroll: int | bool) -> Callable[[Any, Any, Any], tuple[Any, list[jax.Array]]]:
    """The block run again to step ``last``: ``(carry, xs, last) -> (carry after step last, ys leaves)``; its ys
    computed as the block's are (XLA compiles the steps alike), the carry held from the step after ``last`` on."""

    def run(carry: Any, xs: Any, last: jax.Array) -> tuple[Any, list[jax.Array]]:
        (carry, _), ys = lax_scan(_holding(f, last), (carry, jnp.int32(0)), xs, length, unroll, 1)
        return carry, ys

    return jax.jit(run)


def _tested_rows(
    until: Predicate, sources: tuple[Source, ...], y_tree: Any, length: int, masked: bool
) -> Callable[[Any, list[jax.Array], Any, jax.Array], tuple[jax.Array, jax.Array]]:
    """``(carry_in, ys leaves, carry_out, armed) -> (held, last)``: whether ``until`` held after each of a block's
    ``length`` steps but its last (from step ``armed`` on, where ``masked``; else ``armed`` is 0), and after its
    last; each step's carry read as ``sources`` say (a leaf of the next step's y after the last step: the block's
    carry)."""

    def test(carry: list[Any], y: list[Any], tree: Any) -> jax.Array:
        return jnp.asarray(until(jax.tree_util.tree_unflatten(tree, carry), jax.tree_util.tree_unflatten(y_tree, y)))

    def rows(carry_in: Any, ys: list[jax.Array], carry_out: Any, armed: jax.Array) -> tuple[jax.Array, jax.Array]:
        tree = jax.tree_util.tree_structure(carry_out)
        entering, leaving = jax.tree_util.tree_leaves(carry_in), jax.tree_util.tree_leaves(carry_out)
        before, after, axes = [], [], []  # each carry leaf over the steps but the last, and after the last
        for s, was, left in zip(sources, entering, leaving, strict=True):
            if s.kind == "y":
                before.append(ys[s.index][:-1])
                after.append(ys[s.index][-1])
            elif s.kind == "next":
                before.append(ys[s.index][1:])
                after.append(left)
            else:  # the same for every step: it never changes, or the condition never reads it (then the last)
                before.append(was if s.kind == "entering" else left)
                after.append(was if s.kind == "entering" else left)
            axes.append(0 if s.kind in ("y", "next") else None)
        held = jax.vmap(lambda c, y: test(c, y, tree), in_axes=(axes, 0), axis_size=length - 1)(
            before, [y[:-1] for y in ys])  # fmt: skip
        if masked:
            held = jnp.logical_and(held, jnp.arange(length - 1, dtype=jnp.int32) >= armed)
        last = jnp.logical_and(test(after, [y[-1] for y in ys], tree), armed <= length - 1)
        return held, last

    return rows


@functools.lru_cache(maxsize=256)
def held_fn(
    until: Predicate, sources: tuple[Source, ...], y_tree: Any, length: int, masked: bool = False
) -> Callable[..., jax.Array]:
    """Whether the condition held after any of a block's ``length`` steps from ``armed`` on (where ``masked``: the
    first block of an extension), tested on the block's outputs: ``(carry_in, ys leaves, carry_out, armed) ->
    held``. One pass over the outputs, as bytes (XLA reduces a byte's maximum several times faster than booleans'
    ``any``)."""
    rows = _tested_rows(until, sources, y_tree, length, masked)

    def run(carry_in: Any, ys: list[jax.Array], carry_out: Any, armed: jax.Array) -> jax.Array:
        held, last = rows(carry_in, ys, carry_out, armed)
        return jnp.logical_or(jnp.max(held.astype(jnp.uint8), initial=0) > 0, last)

    return jax.jit(run)


@functools.lru_cache(maxsize=256)
def first_fn(until: Predicate, sources: tuple[Source, ...], y_tree: Any, length: int) -> Callable[..., jax.Array]:
    """The first of a block's ``length`` steps from ``armed`` on after which the condition held (-1: none), tested
    on the block's outputs: ``(carry_in, ys leaves, carry_out, armed) -> first``."""
    rows = _tested_rows(until, sources, y_tree, length, True)

    def run(carry_in: Any, ys: list[jax.Array], carry_out: Any, armed: jax.Array) -> jax.Array:
        held, last = rows(carry_in, ys, carry_out, armed)
        k = jnp.argmax(held).astype(jnp.int32) if length > 1 else jnp.int32(0)
        found = held[k] if length > 1 else jnp.bool_(False)
        return jnp.where(found, k, jnp.where(last, jnp.int32(length - 1), jnp.int32(-1)))

    return jax.jit(run)


def carry_at(sources: tuple[Source, ...], k: Any, ys: list[Any], carry_in: Any, carry_out: Any, held: Any) -> Any:
    """The carry after the block's step ``k``: each leaf where ``sources`` find it among the block's outputs, else
    ``held``'s (the block run again to ``k``: :func:`holding_fn`; None where no leaf needs it)."""
    tree = jax.tree_util.tree_structure(carry_out)
    entering, leaving = jax.tree_util.tree_leaves(carry_in), jax.tree_util.tree_leaves(carry_out)
    again = None if held is None else jax.tree_util.tree_leaves(held)
    leaves = []
    for i, s in enumerate(sources):
        if s.kind == "y":
            leaves.append(lax.dynamic_index_in_dim(ys[s.index], k, keepdims=False))
        elif s.kind == "next":
            n = ys[s.index].shape[0]
            row = lax.dynamic_index_in_dim(ys[s.index], jnp.minimum(k + 1, n - 1), keepdims=False)
            leaves.append(jnp.where(k + 1 < n, row, leaving[i]))
        elif s.kind == "entering":
            leaves.append(entering[i])
        else:
            assert again is not None
            leaves.append(again[i])
    return jax.tree_util.tree_unflatten(tree, leaves)


_carry_at = jax.jit(carry_at, static_argnums=0)


@dataclasses.dataclass(frozen=True)
class Tested:
    """What a block with a condition leaves to find where it held: ``first``, the step (-1: none; :data:`PROBED`:
    some, to find again; a boolean: whether it held, tested on the block's outputs, ``OUTSIDE``), the carry entering
    the block, and the carry after ``first`` where it is known."""

    first: jax.Array
    carry_in: Any
    held: Any = None
    armed: int = 0
    y_tree: Any = None


def _needs_holding(until: Until) -> bool:
    return any(s.kind == "held" for s in until.sources)


def run_tested(
    f: Step, until: Until, y_struct: Any, carry: Any, xs: Any, length: int, unroll: int | bool, every: int,
    armed: int, out: list[jax.Array] | None,
) -> tuple[Any, list[jax.Array], Tested]:  # fmt: skip
    """One block of ``length`` steps of ``f`` (its y shaped as ``y_struct``) with the condition ``until``, tested
    from the block's step ``armed`` on: the
    carry leaving it (where the condition did not hold), its ys (written into the donated ``out``), and what
    :func:`tested_block` finds where it held from."""
    into_out = out is not None
    given = () if out is None else (out,)
    if until.way == OUTSIDE:
        after, ys = cached(scan_fn, f, length, unroll, False, into_out, every)(carry, xs, *given)
        y_tree = jax.tree_util.tree_structure(y_struct)
        held = cached(held_fn, until.predicate, until.sources, y_tree, length, armed > 0)(carry, ys, after,
                                                                                          jnp.int32(armed))
        return after, ys, Tested(held, carry, armed=armed, y_tree=y_tree)
    if until.way == INSIDE:
        if not unrolled(unroll):
            held, ys, first = cached(tester_fn, f, until.predicate, length, unroll, into_out, every)(
                carry, xs, jnp.int32(armed), *given)  # fmt: skip
            return held, ys, Tested(first, carry, held)
        after, ys = cached(scan_fn, f, length, unroll, False, into_out, every)(carry, xs, *given)
        held = cached(probed_fn, f, until.predicate, length, unroll, every, armed > 0)(carry, xs, jnp.int32(armed))
        return after, ys, Tested(held, carry, armed=armed)
    probe = cached(probe_fn, f, until.predicate, length, unroll, into_out, every, bool(armed))
    tested_from = (jnp.int32(armed),) if armed else ()
    after, ys, found = probe(carry, xs, *tested_from, *given)
    return after, ys, Tested(found, carry)


def tested_block(
    f: Step, until: Until, tested: Tested, ys: list[jax.Array], carry_out: Any, xs: Callable[[], Any],
    length: int, unroll: int | bool, every: int, armed: int,
) -> tuple[int | None, Any]:  # fmt: skip
    """The block's step where its condition first held (None: none) and the carry that step left, from what
    :func:`run_tested` gave (``ys`` the block's device ys, ``carry_out`` the carry leaving it); ``xs()`` gives the
    block's rows of the inputs again, where the block must run again to find the step or the carry."""
    probed = until.way == INSIDE and unrolled(unroll)  # a probe said whether it held: the tester finds where
    if (until.way == OUTSIDE or probed) and not bool(tested.first):
        return None, None
    if until.way == OUTSIDE:
        first = cached(first_fn, until.predicate, until.sources, tested.y_tree, length)
        k = int(first(tested.carry_in, ys, carry_out, jnp.int32(armed)))
    elif probed:
        held, found = cached(tester_fn, f, until.predicate, length, unroll, False, every, False)(
            tested.carry_in, xs(), jnp.int32(armed))  # fmt: skip
        k = int(found)
        return (k, held) if k >= 0 else (None, None)
    else:
        k = int(tested.first)
    if k == PROBED:  # 1.1.0's way: the block runs again to find the step where it held
        finder = cached(tester_fn, f, until.predicate, length, unroll, False, every)
        held, _, first = finder(tested.carry_in, xs(), jnp.int32(armed))
        k = int(first)
        return (k, held) if k >= 0 else (None, None)
    if k < 0:
        return None, None
    if tested.held is not None:
        return k, tested.held
    again = None
    if _needs_holding(until):
        again = cached(holding_fn, f, length, unroll)(tested.carry_in, xs(), jnp.int32(k))[0]
    return k, _carry_at(until.sources, jnp.int32(k), list(ys), tested.carry_in, carry_out, again)


def until_block(
    f: Step, until: Until, y_struct: Any, length: int, unroll: int | bool, every: int
) -> Callable[[Any, Any, Any], tuple[Any, list[jax.Array], jax.Array]]:
    """A block of ``length`` steps with the condition ``until``, as a function traced into another program (a
    Stream's): ``(carry, xs, armed) -> (carry, ys leaves, first)``, ``armed`` the block's step the condition is
    tested from (traced or not), ``first`` the step where it first held (-1: none) and ``carry`` the carry that
    step left (the block's last, where none), all as :func:`run_tested` and :func:`tested_block` give them."""
    plain = cached(scan_fn, f, length, unroll, False, False, every)
    y_tree = jax.tree_util.tree_structure(y_struct)

    def outside(carry: Any, xs: Any, armed: jax.Array) -> tuple[Any, list[jax.Array], jax.Array]:
        after, ys = plain(carry, xs)
        kept, leaving = lax.optimization_barrier((ys, after))  # the test's arithmetic apart from the steps'
        tested = (until.predicate, until.sources, y_tree, length)
        held = cached(held_fn, *tested, bool(until.armed))(carry, kept, leaving, armed)
        first = lax.cond(held, lambda: cached(first_fn, *tested)(carry, kept, leaving, armed), lambda: jnp.int32(-1))

        def at(first: jax.Array) -> Any:
            again = cached(holding_fn, f, length, unroll)(carry, xs, first)[0] if _needs_holding(until) else None
            return carry_at(until.sources, first, kept, carry, leaving, again)

        return lax.cond(first >= 0, at, lambda first: leaving, first), ys, first

    def inside(carry: Any, xs: Any, armed: jax.Array) -> tuple[Any, list[jax.Array], jax.Array]:
        if not unrolled(unroll):
            held, ys, first = cached(tester_fn, f, until.predicate, length, unroll, False, every)(carry, xs, armed)
            return held, ys, first
        after, ys = plain(carry, xs)
        probed = cached(probed_fn, f, until.predicate, length, unroll, every, bool(until.armed))(carry, xs, armed)
        tester = cached(tester_fn, f, until.predicate, length, unroll, False, every, False)

        def found(armed: jax.Array) -> tuple[Any, jax.Array]:
            held, first = tester(carry, xs, armed)
            chosen = jax.tree_util.tree_map(lambda h, a: jnp.where(first >= 0, h, a), held, after)
            return chosen, first

        chosen, first = lax.cond(probed, found, lambda armed: (after, jnp.int32(-1)), armed)
        return chosen, ys, first

    def probed(carry: Any, xs: Any, armed: jax.Array) -> tuple[Any, list[jax.Array], jax.Array]:
        if until.armed:  # an extension's blocks, each tested from its step armed (as 1.1.0's Stream ran them)
            from_armed = cached(probe_fn, f, until.predicate, length, unroll, False, every, True)
            after, ys, found = from_armed(carry, xs, armed)
        else:
            after, ys, found = cached(probe_fn, f, until.predicate, length, unroll, False, every)(carry, xs)
        finder = cached(tester_fn, f, until.predicate, length, unroll, False, every)

        def again(armed: jax.Array) -> tuple[Any, jax.Array]:
            held, found_ys, first = finder(carry, xs, armed)
            held = lax.optimization_barrier((held, found_ys))[0]  # its ys computed, as the finder computes them
            chosen: tuple[Any, jax.Array] = lax.cond(first >= 0, lambda: (held, first), lambda: (after, jnp.int32(-1)))
            return chosen

        carry, first = lax.cond(found == PROBED, again, lambda armed: (after, jnp.int32(-1)), armed)
        return carry, ys, first

    run = {OUTSIDE: outside, INSIDE: inside}.get(until.way, probed)

    def block(carry: Any, xs: Any, armed: Any) -> tuple[Any, list[jax.Array], jax.Array]:
        return run(carry, xs, jnp.asarray(armed, jnp.int32))

    return block
