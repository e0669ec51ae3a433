"""The Lorenz-63 system integrated with the classical fourth-order Runge-Kutta method.

``dx/dt = sigma (y - x)``, ``dy/dt = x (rho - z) - y``, ``dz/dt = x y - beta z``, one RK4
step of ``dt`` per scan step, from ``(x0, y0, z0)``. The outputs ``x``, ``y`` and ``z`` hold
the state entering each step (so step ``s`` is time ``s * dt``), the usual shape of a long
simulation of which one keeps every k-th state (``--save-every``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import InputError, arg
from ._base import Job, Param, Recipe, Step, check_dtype, check_overflow, check_size, recipe_attrs, resolve_params

__all__ = ["LORENZ", "Lorenz"]


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
