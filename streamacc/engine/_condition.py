"""How a scan's condition is tested: on the values the plain scan computed, or inside its steps.

A condition ``until(carry, y)`` is tested after every step. Compiled into the steps, it
changes the program XLA compiles, and with ``unroll`` > 1 XLA then fuses the unrolled steps
otherwise (a constant multiply folded across them, a multiply-add contracted or not): the
stored values would no longer be those of the same run without the condition. So where it
can, the engine tests the condition on the outputs of the very program the run without it
runs (``lax.scan(f)`` of the block, the same compiled function): ``OUTSIDE``. That needs every
value the condition reads among those outputs, each step's:

- a y leaf;
- a carry leaf that the step also returns as a y leaf (the carry after step ``k`` is step
  ``k``'s y), or takes in and returns as a y leaf (step ``k + 1``'s y; the block's own carry
  after its last step), or returns unchanged (the carry entering the block).

These are read off the step's program (its jaxpr), deterministically: the same variable, not
an equal value. A thinned scan keeps only every ``save_every``-th y, so its condition is
tested inside. Where ``OUTSIDE`` cannot hold, the condition is tested ``INSIDE``: a program of
the step that also tests it after each step and holds the carry from the first step where it
held. ``PROBED`` is 1.1.0's way, kept for the outputs it wrote: the block's ys were those of a
program testing the condition after each step (see ``_until``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from ._checks import Predicate, Step

__all__ = ["INSIDE", "OUTSIDE", "PROBED_WAY", "WAYS", "Source", "Until", "condition_way", "recorded_way", "sources"]

OUTSIDE = "outside"
"""The condition tested on the plain scan's own outputs: the stored values are the run's without it, by construction."""
INSIDE = "inside"
"""The condition tested inside the steps, by a program of its own (see ``_until``)."""
PROBED_WAY = "probe"
"""1.1.0's way: the stored ys those of the steps with the condition's test compiled into them."""
WAYS = (OUTSIDE, INSIDE, PROBED_WAY)


@dataclasses.dataclass(frozen=True)
class Source:
    """Where the value of one carry leaf after each step of a block is found among the block's outputs.

    ``kind`` is ``"y"`` (y leaf ``index`` of the same step), ``"next"`` (y leaf ``index`` of the next
    step; after the block's last step, the block's carry), ``"entering"`` (the carry entering the
    block: the leaf never changes) or ``"held"`` (not among the outputs: run the block again to it).
    """

    kind: str
    index: int = -1


@dataclasses.dataclass(frozen=True)
class Until:
    """A scan's condition as its plan holds it: ``predicate``, tested after each step from step ``armed`` on, in
    the way ``way`` (one of :data:`WAYS`), each carry leaf after a step found among a block's outputs as ``sources``
    say.

    ``armed`` is 0 but for an output extended past the step where its condition held: the
    condition given then is tested from the step after that one.
    """

    predicate: Predicate
    armed: int = 0
    way: str = INSIDE
    sources: tuple[Source, ...] = ()


def _is_literal(v: Any) -> bool:
    from jax.extend.core import Literal  # jax.extend imports Pallas: only a run with a condition pays for it

    return isinstance(v, Literal)


def _is_var(v: Any) -> bool:
    from jax.extend.core import Var

    return isinstance(v, Var)


def _origins(jaxpr: Any) -> dict[Any, Any]:
    """Each variable of ``jaxpr`` by what it is: an input (``("in", i)``), or a value an equation made, seen through
    optimization barriers and nested jitted functions (whose outputs that are their inputs are those inputs)."""
    origin: dict[Any, Any] = {v: ("in", i) for i, v in enumerate(jaxpr.invars)}

    def of(v: Any) -> Any:
        return ("literal", repr(v)) if _is_literal(v) else origin.get(v, ("free", id(v)))

    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        inner = eqn.params.get("jaxpr") if name in ("jit", "pjit", "closed_call") else None
        if name == "optimization_barrier":
            for out, into in zip(eqn.outvars, eqn.invars, strict=True):
                origin[out] = of(into)
        elif inner is not None and hasattr(inner, "jaxpr") and len(inner.jaxpr.invars) == len(eqn.invars):
            within = _origins(inner.jaxpr)
            for p, out in enumerate(eqn.outvars):
                made = within.get(inner.jaxpr.outvars[p]) if _is_var(inner.jaxpr.outvars[p]) else None
                if made is not None and made[0] == "in":
                    origin[out] = of(eqn.invars[made[1]])
                else:
                    origin[out] = ("eqn", id(eqn), made if made is not None else p)
        else:
            for p, out in enumerate(eqn.outvars):
                origin[out] = ("eqn", id(eqn), p)
    return origin


def sources(f: Step, carry: Any, x: Any) -> tuple[Source, ...]:
    """Where each carry leaf's value after each step is found among a block's outputs (its ys, the carries around
    it), read off the program of one step ``f(carry, x)`` (shape structs)."""
    closed = jax.make_jaxpr(f)(carry, x)
    jaxpr = closed.jaxpr
    origin = _origins(jaxpr)
    n = len(jax.tree_util.tree_leaves(carry))

    def of(v: Any) -> Any:
        return ("literal", repr(v)) if _is_literal(v) else origin.get(v, ("free", id(v)))

    new, ys = [of(v) for v in jaxpr.outvars[:n]], [of(v) for v in jaxpr.outvars[n:]]
    found = []
    for i in range(n):
        if new[i] == ("in", i):
            found.append(Source("entering"))
        elif new[i][0] not in ("literal", "free") and new[i] in ys:
            found.append(Source("y", ys.index(new[i])))
        elif ("in", i) in ys:
            found.append(Source("next", ys.index(("in", i))))
        else:
            found.append(Source("held"))
    return tuple(found)


def _read(until: Predicate, carry: Any, y: Any) -> tuple[set[int], set[int]]:
    """The carry leaves and the y leaves that ``until(carry, y)`` (shape structs) reads: those its result depends on
    (an equation of nested functions counted whole)."""
    closed = jax.make_jaxpr(until)(carry, y)
    jaxpr = closed.jaxpr
    needed = {v for v in jaxpr.outvars if _is_var(v)}
    for eqn in reversed(jaxpr.eqns):
        if any(v in needed for v in eqn.outvars) or eqn.effects:
            needed.update(v for v in eqn.invars if _is_var(v))
    n = len(jax.tree_util.tree_leaves(carry))
    used = [i for i, v in enumerate(jaxpr.invars) if v in needed]
    return {i for i in used if i < n}, {i - n for i in used if i >= n}


def condition_way(
    f: Step, until: Predicate, carry: Any, x: Any, y: Any, *, save_every: int = 1
) -> tuple[str, tuple[Source, ...]]:
    """How the condition ``until`` of a scan of ``f`` is tested (``OUTSIDE`` or ``INSIDE``), and where each carry
    leaf after a step is found among a block's outputs (``carry``, ``x``, ``y``: one step's shape structs)."""
    found = sources(f, carry, x)
    if save_every != 1:
        return INSIDE, found
    carry_read, _ = _read(until, carry, y)
    if any(found[i].kind == "held" for i in carry_read):
        return INSIDE, found
    return OUTSIDE, found


def recorded_way(until: Until, recorded: Any) -> Until:
    """``until`` tested as a stored run with a condition was, by its record (``until_tested``): absent, 1.1.0's way
    (:data:`PROBED_WAY`), so that a continued or verified run computes the bytes that run stored; else as the step
    and the condition say now (a resume whose way would differ is refused as any change of its identity)."""
    return dataclasses.replace(until, way=PROBED_WAY) if recorded is None else until
