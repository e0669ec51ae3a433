"""Deterministic recurrences: the geometric progression, the affine map and the logistic map.

Every recurrence has output length ``size`` with ``x[0] = x0``: the step emits the carry
before updating it, ``f(c, _) = (next(c), c)``. ``gp`` and ``affine`` also run on a
compensated carry (``compensated=True``, see ``_compensated``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..base import ACCELERATOR_COMPENSATED_UNROLL
from ..errors import InputError, arg
from ._base import (
    COMPENSATED,
    Job,
    Param,
    Recipe,
    Step,
    check_degenerate,
    check_dtype,
    check_overflow,
    check_size,
    in_dtype,
    recipe_attrs,
    resolve_params,
)

__all__ = ["AFFINE", "GP", "LOGISTIC", "Affine", "Geometric", "Logistic"]


def _job(recipe: Recipe, f: Step, x0: float, size: int, dtype: str, params: dict[str, Any], unroll: int) -> Job:
    """The job of a progression whose unroll on a CPU is ``unroll``."""
    import numpy as np

    from ._compensated import initial

    attrs = recipe_attrs(recipe, params)
    init = initial(x0, dtype) if params.get("compensated") else np.asarray(x0, dtype=dtype)
    return Job(f=f, init=init, xs=None, length=size, names=("x",), cpu_unroll=unroll, attrs=attrs,
               accelerator_unroll=ACCELERATOR_COMPENSATED_UNROLL if params.get("compensated") else None)


# --- gp ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Geometric(Step):
    """``x -> x * ratio`` in ``dtype``, each product rounded on its own whatever the unroll.

    Unrolled, XLA's algebraic simplifier would fold ``(x * r) * r`` into ``x * (r * r)``,
    which changes the bits; the optimization barrier keeps every step's product separate,
    so unroll 8 gives exactly ``numpy.multiply.accumulate`` and keeps the speed of unrolling.
    """

    ratio: float
    dtype: str

    def __call__(self, carry: Any, x: Any) -> tuple[Any, Any]:
        import jax.numpy as jnp
        from jax import lax

        return lax.optimization_barrier(carry * jnp.asarray(self.ratio, self.dtype)), carry


GP_PARAMS = (
    Param("x0", "float", 1.0, "first value x[0]"),
    Param("ratio", "float", 1.0 + 1e-8, "common ratio: x[i] = x[i-1] * ratio"),
    COMPENSATED,
)


def _check_gp(p: dict[str, float], dtype: str) -> None:
    check_overflow(p, ("x0", "ratio"), dtype)
    check_degenerate(p, "x0", dtype, 0.0, "every value would be 0", "an x0 farther from 0")
    check_degenerate(p, "ratio", dtype, 1.0, "every value would equal x0", "a ratio farther from 1")
    alternate = "the values would alternate between x0 and -x0"
    check_degenerate(p, "ratio", dtype, -1.0, alternate, "a ratio farther from -1")
    check_degenerate(p, "ratio", dtype, 0.0, "every value after x0 would be 0", "a ratio farther from 0")


def _build_gp(size: int | None = None, dtype: str = "float64", **params: Any) -> Job:
    p = resolve_params("gp", GP_PARAMS, params)
    size, dtype = check_size(size, "gp"), check_dtype(dtype)
    _check_gp(p, dtype)
    if p["compensated"]:
        from ._compensated import UNROLL, CompensatedGeometric

        return _job(GP, CompensatedGeometric(p["ratio"], dtype), p["x0"], size, dtype, p, unroll=UNROLL)
    return _job(GP, Geometric(p["ratio"], dtype), p["x0"], size, dtype, p, unroll=8)


GP = Recipe(
    name="gp",
    description="geometric progression x[i] = x[i-1] * ratio, x[0] = x0 "
    "(plain: bit-identical to numpy.multiply.accumulate)",
    params=GP_PARAMS,
    build=_build_gp,
)


# --- affine -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Affine(Step):
    """``x -> a * x + b`` in ``dtype`` (XLA may contract it into one FMA)."""

    a: float
    b: float
    dtype: str

    def __call__(self, carry: Any, x: Any) -> tuple[Any, Any]:
        import jax.numpy as jnp

        return jnp.asarray(self.a, self.dtype) * carry + jnp.asarray(self.b, self.dtype), carry


AFFINE_PARAMS = (
    Param("x0", "float", 0.0, "first value x[0]"),
    Param("a", "float", 0.5, "multiplier: x[i] = a * x[i-1] + b"),
    Param("b", "float", 1.0, "offset: x[i] = a * x[i-1] + b"),
    COMPENSATED,
)


def _check_affine(p: dict[str, float], dtype: str) -> None:
    check_overflow(p, ("x0", "a", "b"), dtype)
    check_degenerate(p, "a", dtype, 0.0, "every value after x0 would equal b", "an a farther from 0")
    alternate = "the values would alternate between x0 and b - x0"
    check_degenerate(p, "a", dtype, -1.0, alternate, "an a farther from -1")
    identity = "the map would be x -> x and every value would equal x0"
    pair = bool(p.get("compensated"))
    held = {name: in_dtype(p[name], dtype, pair=pair) for name in ("a", "b")}
    if held == {"a": 1.0, "b": 0.0}:  # blame what rounding changed, if anything, else b
        if held["a"] != p["a"]:
            check_degenerate(p, "a", dtype, 1.0, identity, "an a farther from 1")
        check_degenerate(p, "b", dtype, 0.0, identity, "a b farther from 0")


def _build_affine(size: int | None = None, dtype: str = "float64", **params: Any) -> Job:
    p = resolve_params("affine", AFFINE_PARAMS, params)
    size, dtype = check_size(size, "affine"), check_dtype(dtype)
    _check_affine(p, dtype)
    if p["compensated"]:
        from ._compensated import UNROLL, CompensatedAffine

        return _job(AFFINE, CompensatedAffine(p["a"], p["b"], dtype), p["x0"], size, dtype, p, unroll=UNROLL)
    return _job(AFFINE, Affine(p["a"], p["b"], dtype), p["x0"], size, dtype, p, unroll=1)


AFFINE = Recipe(
    name="affine",
    description="affine recurrence x[i] = a * x[i-1] + b, x[0] = x0",
    params=AFFINE_PARAMS,
    build=_build_affine,
)


# --- logistic ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Logistic(Step):
    """``x -> r * x * (1 - x)`` applied ``inner`` times, in ``dtype``."""

    r: float
    inner: int
    dtype: str

    def __call__(self, carry: Any, x: Any) -> tuple[Any, Any]:
        import jax.numpy as jnp
        from jax import lax

        r, one = jnp.asarray(self.r, self.dtype), jnp.asarray(1.0, self.dtype)

        def once(v: Any) -> Any:
            return r * v * (one - v)

        new = once(carry) if self.inner == 1 else lax.fori_loop(0, self.inner, lambda _, v: once(v), carry)
        return new, carry


LOGISTIC_PARAMS = (
    Param("x0", "float", 0.5, "first value x[0], in [0, 1]"),
    Param("r", "float", 3.7, "growth rate in (0, 4]: x[i] = r * x[i-1] * (1 - x[i-1])"),
    Param("inner", "int", 1, "map applications per output value (e.g. 32 for a compute-heavy benchmark)"),
)


LOGISTIC_REFUSED = (
    (
        "compensated",
        "its step r * x * (1 - x) is not a sum or a product whose rounding error a hi + lo carry can hold exactly "
        "(compensation covers gp, affine, cumsum and cumprod)",
    ),
)


def _build_logistic(size: int | None = None, dtype: str = "float64", **params: Any) -> Job:
    p = resolve_params("logistic", LOGISTIC_PARAMS, params, LOGISTIC_REFUSED)
    if not 0.0 < p["r"] <= 4.0:
        raise InputError(
            f"{arg('r')} must be in (0, 4] for the logistic map, got {p['r']!r}; pass e.g. {arg('r', 3.7)}"
        )
    if not 0.0 <= p["x0"] <= 1.0:
        raise InputError(
            f"{arg('x0')} must be in [0, 1] for the logistic map (outside it diverges), got {p['x0']!r}; "
            f"pass e.g. {arg('x0', 0.5)}"
        )
    if p["inner"] < 1:
        raise InputError(f"{arg('inner')} must be >= 1, got {p['inner']}; pass e.g. {arg('inner', 1)}")
    size, dtype = check_size(size, "logistic"), check_dtype(dtype)
    check_degenerate(p, "r", dtype, 0.0, "every value after x0 would be 0", "an r farther from 0")
    check_degenerate(p, "x0", dtype, 0.0, "every value would be 0 (a fixed point of the map)", "an x0 farther from 0")
    check_degenerate(p, "x0", dtype, 1.0, "every value after x0 would be 0", "an x0 farther from 1")
    return _job(LOGISTIC, Logistic(p["r"], p["inner"], dtype), p["x0"], size, dtype, p, unroll=1)


LOGISTIC = Recipe(
    name="logistic",
    description="logistic map x[i] = r * x[i-1] * (1 - x[i-1]), applied --inner times per value, x[0] = x0",
    params=LOGISTIC_PARAMS,
    build=_build_logistic,
    refused=LOGISTIC_REFUSED,
)
