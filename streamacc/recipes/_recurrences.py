"""Deterministic recurrences: the geometric progression, the affine map, the logistic map and Lorenz-63.

Every recurrence has output length ``size`` with ``x[0] = x0``: the step emits the carry
before updating it, ``f(c, _) = (next(c), c)``. ``gp`` and ``affine`` also run on a
compensated carry (``compensated=True``, see ``_compensated``).

The Lorenz-63 system integrated with the classical fourth-order Runge-Kutta method.

``dx/dt = sigma (y - x)``, ``dy/dt = x (rho - z) - y``, ``dz/dt = x y - beta z``, one RK4
step of ``dt`` per scan step, from ``(x0, y0, z0)``. The outputs ``x``, ``y`` and ``z`` hold
the state entering each step (so step ``s`` is time ``s * dt``), the usual shape of a long
simulation of which one keeps every k-th state (``--save-every``).
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

__all__ = ["AFFINE", "GP", "LOGISTIC", "LORENZ", "Affine", "Geometric", "Logistic", "Lorenz"]


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


@dataclasses.dataclass(frozen=True, eq=False)
class Lorenz(Step):
    """One RK4 step of the Lorenz-63 system on the carry ``u = [x, y, z]``; emits ``u`` before the step."""

    sigma: float
    rho: float
    beta: float
    dt: float
    dtype: str

    def __call__(self, carry: Any, x: Any) -> tuple[Any, Any]:
        import jax.numpy as jnp

        sigma, rho, beta, h = (jnp.asarray(v, self.dtype) for v in (self.sigma, self.rho, self.beta, self.dt))
        half, sixth, two = (jnp.asarray(v, self.dtype) for v in (0.5, 1.0 / 6.0, 2.0))

        def field(u: Any) -> Any:
            return jnp.stack([sigma * (u[1] - u[0]), u[0] * (rho - u[2]) - u[1], u[0] * u[1] - beta * u[2]])

        k1 = field(carry)
        k2 = field(carry + half * h * k1)
        k3 = field(carry + half * h * k2)
        k4 = field(carry + h * k3)
        new = carry + sixth * h * (k1 + two * k2 + two * k3 + k4)
        return new, {"x": carry[0], "y": carry[1], "z": carry[2]}


LORENZ_PARAMS = (
    Param("x0", "float", 1.0, "initial x"),
    Param("y0", "float", 1.0, "initial y"),
    Param("z0", "float", 1.0, "initial z"),
    Param("sigma", "float", 10.0, "Prandtl number sigma: dx/dt = sigma (y - x)"),
    Param("rho", "float", 28.0, "Rayleigh number rho: dy/dt = x (rho - z) - y"),
    Param("beta", "float", 8.0 / 3.0, "geometric factor beta: dz/dt = x y - beta z"),
    Param("dt", "float", 0.001, "time step of each RK4 step, > 0"),
)

LORENZ_REFUSED = (
    (
        "compensated",
        "an RK4 step is not a sum or a product whose rounding error a hi + lo carry can hold "
        "(compensation covers gp, affine, cumsum and cumprod)",
    ),
)


def _build_lorenz(size: int | None = None, dtype: str = "float64", **params: Any) -> Job:
    import numpy as np

    p = resolve_params("lorenz", LORENZ_PARAMS, params, LORENZ_REFUSED)
    if not p["dt"] > 0:
        raise InputError(f"{arg('dt')} must be > 0, got {p['dt']!r}; pass a time step such as {arg('dt', 0.001)}")
    size, dtype = check_size(size, "lorenz"), check_dtype(dtype)
    check_overflow(p, tuple(p), dtype)
    f = Lorenz(p["sigma"], p["rho"], p["beta"], p["dt"], dtype)
    init = np.asarray([p["x0"], p["y0"], p["z0"]], dtype=dtype)
    attrs = recipe_attrs(LORENZ, p)
    return Job(f=f, init=init, xs=None, length=size, names=("x", "y", "z"), cpu_unroll=1, attrs=attrs,
               accelerator_unroll=1)  # an RK4 step: as fast at 1 on a TPU, and compiled far sooner


LORENZ = Recipe(
    name="lorenz",
    description="Lorenz-63 system (sigma, rho, beta) integrated by RK4 steps of dt from (x0, y0, z0); "
    "outputs x, y, z, the state entering each step (step s at time s * dt)",
    params=LORENZ_PARAMS,
    build=_build_lorenz,
    refused=LORENZ_REFUSED,
    time_step="dt",
)
