"""A Gaussian random walk whose noise is keyed by the global step index.

The carry is ``(x, i)`` with ``i`` the index of ``x`` as a uint64; step ``i`` draws
``jax.random.normal(jax.random.fold_in(jax.random.key(seed), i))``, so the output does
not depend on how the scan is cut into blocks, nor on where a resumed run restarts.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import InputError
from ._base import Job, Param, Recipe, Step, check_dtype, check_size, recipe_attrs, resolve_params

__all__ = ["MAX_SIZE", "RANDOMWALK", "RandomWalk"]

MAX_SIZE = 2**32
"""``jax.random.fold_in`` folds in a 32-bit integer, so indices past 2**32 - 1 would repeat the noise."""

MAX_SEED = 2**63 - 1


@dataclasses.dataclass(frozen=True, eq=False)
class RandomWalk(Step):
    """``(x, i) -> (x + sigma * N(0, 1), i + 1)``, the normal drawn from ``fold_in(key(seed), i + 1)``."""

    sigma: float
    seed: int
    dtype: str

    def __call__(self, carry: Any, x: Any) -> tuple[Any, Any]:
        value, index = carry
        index = index + jnp.asarray(1, jnp.uint64)
        key = jax.random.fold_in(jax.random.key(self.seed), index)
        noise = jax.random.normal(key, dtype=self.dtype)
        return (value + jnp.asarray(self.sigma, self.dtype) * noise, index), value


RANDOMWALK_PARAMS = (
    Param("x0", "float", 0.0, "first value x[0]"),
    Param("sigma", "float", 1.0, "standard deviation of each step, >= 0"),
    Param("seed", "int", 0, "random seed, 0 <= seed < 2**63; the step-i draw uses fold_in(key(seed), i)"),
)


RANDOMWALK_REFUSED = (
    (
        "compensated",
        "its increments sigma * N(0, 1) are drawn already rounded to the dtype, so there is no exact sum "
        "for a hi + lo carry to hold (compensation covers gp, affine, cumsum and cumprod)",
    ),
)


def _build_randomwalk(size: int | None = None, dtype: str = "float64", **params: Any) -> Job:
    p = resolve_params("randomwalk", RANDOMWALK_PARAMS, params, RANDOMWALK_REFUSED)
    if p["sigma"] < 0:
        raise InputError(f"--sigma must be >= 0, got {p['sigma']!r}; pass a standard deviation such as --sigma 1.0")
    if not 0 <= p["seed"] <= MAX_SEED:
        raise InputError(f"--seed must be in [0, 2**63 - 1], got {p['seed']}; pass e.g. --seed 0")
    size, dtype = check_size(size, "randomwalk"), check_dtype(dtype)
    if size > MAX_SIZE:
        raise InputError(
            f"--size must be <= {MAX_SIZE} for randomwalk, whose noise is keyed by a 32-bit step index, got {size}; "
            "make several walks with different --seed values instead"
        )
    f = RandomWalk(p["sigma"], p["seed"], dtype)
    init = (np.asarray(p["x0"], dtype=dtype), np.asarray(0, dtype=np.uint64))
    return Job(f=f, init=init, xs=None, length=size, names=("x",), unroll=1, attrs=recipe_attrs(RANDOMWALK, p))


RANDOMWALK = Recipe(
    name="randomwalk",
    description="Gaussian random walk x[i] = x[i-1] + sigma * N(0, 1), x[0] = x0, the same for any block size",
    params=RANDOMWALK_PARAMS,
    build=_build_randomwalk,
    refused=RANDOMWALK_REFUSED,
)
