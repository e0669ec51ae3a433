"""Compensated arithmetic: error-free transformations and carries of several numbers.

A compensated recipe carries each value as an unevaluated sum of numbers of the output
dtype, computed in that dtype's own arithmetic: ``(hi, lo)`` in float64 (double-double)
and ``(hi, lo, lo2)`` in float32 (see :data:`TERMS`), and writes the sum rounded to the
dtype. The building blocks are error-free transformations: ``two_sum(a, b) = (s, e)``
with ``s = fl(a + b)`` and ``a + b == s + e`` exactly, and ``two_prod(a, b) = (p, e)``
with ``p = fl(a * b)`` and ``a * b == p + e`` exactly (Dekker's product). They hold only
if every operation is rounded once, as written, and XLA threatens that in two ways:

* FMA contraction. jax has no explicit FMA, and XLA's CPU backend contracts ``a * b +
  c`` into one fused multiply-add where it can, even for a product with several users
  (other backends may too), and XLA copies a cheap value into every fusion that uses
  it, where each copy may be contracted differently. So no product here that is not exact ever
  reaches an addition directly: :func:`rounded_product` adds a zero computed at run
  time, which leaves nothing to contract. :func:`split` rounds a significand with
  integer operations instead of Veltkamp's ``(2**27 + 1) * x`` (whose contraction
  ruins the split, and which overflows near the top of the range), so Dekker's partial
  products are exact and contracting one of them changes nothing.
* Reassociation. jax compiles without fast-math, so XLA keeps these sums in their
  order; its algebraic simplifier does fold a product of constants, which these steps
  never form (each product has a carried number or a split of one as a factor).
  ``lax.optimization_barrier`` would not help: XLA's CPU compiler drops it before
  fusion and code generation.

The tests check the transformations and the recipes against exact integer arithmetic,
never against this module. JAX is imported by the functions that trace, as in every
recipe module, so that building a job (and refusing its arguments) costs no JAX import.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

from ._base import Step

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "TERMS",
    "UNROLL",
    "CompensatedAffine",
    "CompensatedCumulative",
    "CompensatedGeometric",
    "Operand",
    "Pair",
    "constant",
    "fast_two_sum",
    "initial",
    "input_operand",
    "mul_add",
    "rounded_product",
    "split",
    "split_constant",
    "to_pair",
    "two_prod",
    "two_sum",
    "value",
]

Pair = tuple[Any, Any]
"""``(hi, lo)``: the unevaluated sum ``hi + lo``."""

Terms = tuple[Any, ...]
"""A compensated carry: 2 or 3 numbers of its dtype (see :data:`TERMS`), their unevaluated sum its value."""



def _bits(dtype: str) -> tuple[type[np.unsignedinteger[Any]], int]:
    """The unsigned integer of the same width as float ``dtype``, and its significand's precision in bits (numpy is
    imported as a recipe runs, not as the command line lists the recipes)."""
    import numpy as np

    unsigned: dict[str, type[np.unsignedinteger[Any]]] = {"float64": np.uint64, "float32": np.uint32}
    return unsigned[dtype], {"float64": 53, "float32": 24}[dtype]


def two_sum(a: Any, b: Any) -> Pair:
    """Knuth's TwoSum: ``s = fl(a + b)`` and ``e`` with ``a + b == s + e`` exactly, for any ``a``, ``b``."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a: Any, b: Any) -> Pair:
    """Dekker's FastTwoSum: as :func:`two_sum` in three operations, when ``|a| >= |b|`` (or ``a == 0``)."""
    s = a + b
    return s, b - (s - a)


def split(x: Any) -> Pair:
    """Split ``x`` into ``hi + lo == x`` with each part at most half the precision (26/12 bits + sign).

    ``hi`` is ``x`` rounded to its leading 26 (float64) or 12 (float32) significand bits,
    rounding half away from zero on the magnitude: adding half of the dropped range to
    the bit pattern and clearing the dropped bits, so no floating-point multiplication
    is involved (Veltkamp's ``(2**27 + 1) * x`` gives the same kind of split, but XLA
    may contract it into an FMA, and it overflows near the top of the range). ``lo =
    x - hi`` is exact. Valid for finite ``x`` below the largest float's neighbourhood.
    """
    import numpy as np
    from jax import lax

    uint, precision = _bits(x.dtype.name)
    drop = (precision + 1) // 2
    bits = lax.bitcast_convert_type(x, uint)
    half, mask = uint(1 << (drop - 1)), uint(~((1 << drop) - 1) & np.iinfo(uint).max)
    hi = lax.bitcast_convert_type((bits + half) & mask, x.dtype)
    return hi, x - hi


def split_constant(value: float, dtype: str) -> Pair:
    """:func:`split` of a Python float already rounded to ``dtype``, computed on the host."""
    import numpy as np

    uint, precision = _bits(dtype)
    drop = (precision + 1) // 2
    x = np.asarray(value, dtype=dtype)
    bits = int(x.view(uint))
    hi = np.asarray(((bits + (1 << (drop - 1))) >> drop) << drop, dtype=uint).view(dtype)
    return float(hi), float(x - hi)


def rounded_product(a: Any, b: Any, zero: Any) -> Any:
    """``fl(a * b)``, as ``fl(a * b) + zero`` with ``zero`` a zero computed at run time.

    A compiler may contract a product with the sum that uses it into one fused
    multiply-add, and XLA may copy a value into each fusion that uses it and contract
    each copy differently: then two uses of one sum see different numbers, and an
    error-free transformation breaks. Adding a run-time zero leaves nothing to contract
    into the users: ``fl(fl(a * b) + 0)`` and ``fma(a, b, 0)`` both equal ``fl(a * b)``.
    """
    return a * b + zero


def two_prod(a: Any, b: Any, zero: Any, b_split: Pair | None = None) -> Pair:
    """Dekker's TwoProduct: ``p = fl(a * b)`` and ``e`` with ``a * b == p + e`` exactly.

    ``zero`` is a zero computed at run time (see :func:`rounded_product`), so that the
    sums using ``p`` see the rounded product and never a fused ``fma(a, b, .)``.
    ``b_split``, when ``b`` is a constant, is its :func:`split_constant`. Exact unless
    ``e`` underflows (``|a * b|`` below about 2**-969 in float64, 2**-102 in float32).
    """
    import jax.numpy as jnp

    p = rounded_product(a, b, zero)
    ah, al = split(a)
    bh, bl = split(b) if b_split is None else (jnp.asarray(b_split[0], a.dtype), jnp.asarray(b_split[1], a.dtype))
    # Dekker's sum, with the two middle products added first so that they run alongside
    # ``ah * bh - p``; every partial result is exact (each fits in the significand).
    return p, ((ah * bh - p) + (ah * bl + al * bh)) + al * bl


def to_pair(value: float, dtype: str) -> tuple[float, float]:
    """A Python float as the nearest pair ``(hi, lo)`` of ``dtype``: ``hi = fl(value)``, ``lo = fl(value - hi)``.

    Exact for float64; for float32, exact when ``value``'s significand fits in about 48 bits
    (as ``1 + 1e-8`` and ``1 + 2**-23`` do), else within ``2**-48`` relative.
    """
    import numpy as np

    if not math.isfinite(value):
        return value, 0.0
    hi = float(np.asarray(value, dtype=dtype))
    return hi, float(np.asarray(value - hi, dtype=dtype)) if math.isfinite(hi) else 0.0


"""The parameter of every recipe with a compensated mode."""

UNROLL = 2
"""The ``lax.scan`` unroll of every compensated recipe: on CPU, 2 runs fastest, while at 8
XLA no longer compiles the float32 loop into one kernel."""

TERMS = {"float64": 2, "float32": 3}
"""How many numbers of the dtype a compensated carry holds.

A pair keeps about ``2 * 24 + 1`` bits in float32 and rounds each step's result to them,
an error of up to ``2**-49`` relative per step. A smooth recurrence's rounding errors are
correlated from step to step and add up, so that a float32 pair is no longer correctly
rounded at every step of a long geometric progression (the accuracy benchmark's method
``pair``). A third number carries the pair's own rounding error (``2**-72`` per step),
and keeps every sampled step correctly rounded. In float64 a pair errs by ``2**-106`` per step, which
stays far below half an ulp over any feasible length.
"""


@dataclasses.dataclass(frozen=True)
class Operand:
    """A multiplier or addend of :func:`mul_add`: ``hi + lo`` (``lo`` None when zero),
    with ``hi``'s :func:`split` when it is known in advance (a constant)."""

    hi: Any
    lo: Any = None
    split: Pair | None = None


def constant(value: float, dtype: str) -> Operand:
    """A Python float as an :class:`Operand` of ``dtype``: its nearest pair, and the split of its high part."""
    import jax.numpy as jnp

    hi, lo = to_pair(value, dtype)
    return Operand(jnp.asarray(hi, dtype), jnp.asarray(lo, dtype) if lo else None, split_constant(hi, dtype))


def initial(value: float, dtype: str) -> tuple[np.ndarray, ...]:
    """The carry of a compensated recipe that starts at ``value``: its nearest pair, then zeros."""
    import numpy as np

    hi, lo = to_pair(value, dtype)
    return (np.asarray(hi, dtype), np.asarray(lo, dtype)) + (np.asarray(0.0, dtype),) * (TERMS[dtype] - 2)


def _rounded_sum(terms: list[Any]) -> Any:
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def mul_add(x: Terms, a: Operand | None, b: Operand | None) -> Terms:
    """``x * a + b`` (``a`` or ``b`` None: left out) on a carry ``x`` of 2 or 3 terms.

    Terms are gathered by size: ``top``, the exact product of ``x``'s high term (or that
    term itself) plus ``b``; terms of about ``u * |x|`` (``u`` the unit roundoff); terms of
    about ``u**2 * |x|``. A pair rounds the second level into its low term; a triple forms
    it exactly (TwoProduct, TwoSum) and rounds only the third, so that a step errs by
    about ``u**2`` (pair) or ``u**3`` (triple) relative.

    The carry is not renormalised after the step's own error terms: the new high term is
    ``top`` plus the old low term's product (exactly, by an error-free sum), and the step's
    product error joins the low terms, to be folded in one step later. That takes the long
    TwoProduct chain off the path from one high term to the next, and keeps the low terms
    within about one ulp of the high term. The value is the carry's sum: see :func:`value`.
    """
    triple = len(x) == 3
    zero = x[0] - x[0]
    first: list[Any] = []
    second: list[Any] = []
    if a is None:
        top, q = x[0], x[1]
        first.extend(x[2:])
    else:
        top, e = two_prod(x[0], a.hi, zero, a.split)
        first.append(e)
        if triple:
            q, eq = two_prod(x[1], a.hi, zero)
            first.append(rounded_product(x[2], a.hi, zero))
            second.append(eq)
            if a.lo is not None:
                r, er = two_prod(x[0], a.lo, zero)
                first.append(r)
                second += [er, rounded_product(x[1], a.lo, zero)]
        else:
            q = rounded_product(x[1], a.hi, zero)
            if a.lo is not None:
                first.append(rounded_product(x[0], a.lo, zero))
    if b is not None:
        top, f = two_sum(top, b.hi)
        first.append(f)
        if b.lo is not None:
            first.append(b.lo)
    high, g = (fast_two_sum if b is None else two_sum)(top, q)
    first.insert(0, g)
    if not triple:
        return high, _rounded_sum(first)
    mid = first[0]
    for term in first[1:]:
        mid, err = two_sum(mid, term)
        second.append(err)
    return high, mid, _rounded_sum(second)


def value(x: Terms) -> Any:
    """A compensated carry's sum rounded to its dtype: the value a compensated recipe writes.

    ``hi + (lo + lo2)``: exact rounding of the sum except when ``lo + lo2`` rounds onto a
    midpoint between two neighbours of ``hi``, which is off by one ulp at worst.
    """
    return x[0] + _rounded_sum(list(x[:0:-1]))


@dataclasses.dataclass(frozen=True, eq=False)
class CompensatedGeometric(Step):
    """``x -> x * ratio`` on a compensated carry (see :data:`TERMS`), emitting its :func:`value`."""

    ratio: float
    dtype: str

    def __call__(self, carry: Terms, x: Any) -> tuple[Terms, Any]:
        return mul_add(carry, constant(self.ratio, self.dtype), None), value(carry)


@dataclasses.dataclass(frozen=True, eq=False)
class CompensatedAffine(Step):
    """``x -> a * x + b`` on a compensated carry (see :data:`TERMS`), emitting its :func:`value`."""

    a: float
    b: float
    dtype: str

    def __call__(self, carry: Terms, x: Any) -> tuple[Terms, Any]:
        return mul_add(carry, constant(self.a, self.dtype), constant(self.b, self.dtype)), value(carry)


def input_operand(x: Any, dtype: str) -> Operand:
    """An input value as an :class:`Operand` of ``dtype``.

    A float wider than ``dtype`` (float64 into float32) becomes the pair ``fl(x) + fl(x -
    fl(x))``, exact when its significand fits in 48 bits and within ``2**-48`` relative
    otherwise, so that the running result is that of the input as stored; anything else
    is converted as the plain recipe converts it.
    """
    import jax.numpy as jnp
    import numpy as np

    hi = x.astype(dtype)
    if jnp.issubdtype(x.dtype, jnp.floating) and x.dtype.itemsize > np.dtype(dtype).itemsize:
        return Operand(hi, (x - hi.astype(x.dtype)).astype(dtype))
    return Operand(hi)


@dataclasses.dataclass(frozen=True, eq=False)
class CompensatedCumulative(Step):
    """``(c, x) -> (c op x, c op x)`` on a compensated carry, emitting its value; ``op``: ``'add'`` or ``'mul'``."""

    op: str
    dtype: str

    def __call__(self, carry: Terms, x: Any) -> tuple[Terms, Any]:
        operand = input_operand(x, self.dtype)
        new = mul_add(carry, None, operand) if self.op == "add" else mul_add(carry, operand, None)
        return new, value(new)
