"""A Gaussian random walk whose noise is keyed by the global step index, alone or as an ensemble.

``x[0] = x0`` and ``x[i+1] = x[i] + d[i]`` with the increment ``d[i] = sigma * z[i+1]``
and ``z[k] = jax.random.normal(jax.random.fold_in(jax.random.key(seed), k))``, so the
output does not depend on how the scan is cut into blocks, nor on where a resumed run
restarts. With ``paths=M > 1``, M independent walks run in one vectorised scan: column p
draws ``z_p[k] = normal(fold_in(fold_in(key(seed), p), k))``, and the output has shape
``(size, M)`` on dimensions ``("step", "path")``.

The draws depend on the index alone, not on the walk, so they are made for a whole block
at once, vectorised (:class:`Increments`, the job's ``xs``), and the scan only adds: drawn
one step at a time inside the scan, the same walk runs many times slower on CPU, where XLA
executes a loop body's dozens of small operations one by one for every step.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from typing import Any

from ..errors import InputError, arg
from ._base import (
    Job,
    Param,
    Recipe,
    Step,
    check_degenerate,
    check_dtype,
    check_overflow,
    check_size,
    recipe_attrs,
    resolve_params,
)

__all__ = ["MAX_PATHS", "MAX_SIZE", "RANDOMWALK", "Increments", "RandomWalk"]

MAX_SIZE = 2**32
"""``jax.random.fold_in`` folds in a 32-bit integer, so indices past 2**32 - 1 would repeat the noise."""

MAX_SEED = 2**63 - 1

MAX_PATHS = 2**32
"""``fold_in`` folds in a 32-bit path index too."""

PIECE = 2**18
"""Increments drawn per call, so that the draws' temporaries stay a fraction of a block."""


@dataclasses.dataclass(frozen=True, eq=False)
class RandomWalk(Step):
    """``(x, d) -> (x + d, x)``: one step of the walk, ``d`` its increment from :class:`Increments`.

    The fields name the walk (they are part of the run's identity); the increments carry
    the noise, so that the scan is a plain running sum, one rounding per step.
    """

    sigma: float
    seed: int
    dtype: str

    def __call__(self, carry: Any, x: Any) -> tuple[Any, Any]:
        return carry + x, carry


@functools.lru_cache(maxsize=64)
def _key_data(seed: int) -> Any:
    import jax

    from ..engine import x64_scope

    with x64_scope(True):  # a seed past 2**31 would be truncated to 32 bits without it
        return jax.random.key_data(jax.random.key(seed))


@functools.lru_cache(maxsize=64)
def _draw(length: int, dtype: str, paths: int = 0) -> Any:
    """The jitted increments of ``length`` steps: ``(key data, sigma, first index) -> sigma * z``.

    With ``paths`` > 0, the increments of that many walks, shape ``(length, paths)``, path p
    keyed by ``fold_in(key, p)``; else those of the single walk, shape ``(length,)``.
    """
    import jax
    import jax.numpy as jnp
    from jax import lax

    def column(key: Any, index: Any) -> Any:
        return jax.vmap(lambda i: jax.random.normal(jax.random.fold_in(key, i), dtype=dtype))(index)

    def draw(key_data: Any, sigma: Any, first: Any) -> Any:
        key = jax.random.wrap_key_data(key_data)
        index = first + jnp.arange(length, dtype=jnp.uint32)  # wraps at 2**32 as fold_in's uint32 does
        if paths:
            keys = jax.vmap(lambda p: jax.random.fold_in(key, p))(jnp.arange(paths, dtype=jnp.uint32))
            z = jax.vmap(column, in_axes=(0, None), out_axes=1)(keys, index)
        else:
            z = column(key, index)
        return sigma * lax.optimization_barrier(z)  # one rounded product: XLA may not fold sigma into z

    return jax.jit(draw)


class Increments:
    """The walk's increments ``d[i] = sigma * z[i + 1]`` as a lazy array, drawn when sliced.

    Like a Zarr array, it has a shape and a dtype and computes only the rows asked for, so
    the engine slices one block of noise at a time; ``source`` names it in the run's identity.
    With ``paths`` > 0 its rows hold the increments of that many walks.
    """

    __slots__ = ("dtype_name", "n", "paths", "seed", "sigma")

    def __init__(self, sigma: float, seed: int, dtype: str, n: int, paths: int = 0) -> None:
        self.sigma, self.seed, self.dtype_name, self.n, self.paths = sigma, seed, dtype, n, paths

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.n, self.paths) if self.paths else (self.n,)

    @property
    def dtype(self) -> Any:
        import numpy as np

        return np.dtype(self.dtype_name)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def source(self) -> str:
        if self.paths:
            return f"sigma * normal(fold_in(fold_in(key({self.seed}), p), i + 1)), sigma={self.sigma!r}"
        return f"sigma * normal(fold_in(key({self.seed}), i + 1)), sigma={self.sigma!r}"

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        paths = f", paths={self.paths}" if self.paths else ""
        return f"Increments(sigma={self.sigma!r}, seed={self.seed}, dtype={self.dtype_name!r}, n={self.n}{paths})"

    def _rows(self, start: int, stop: int) -> Any:
        import numpy as np

        key, sigma = _key_data(self.seed), np.asarray(self.sigma, self.dtype_name)
        out = np.empty((stop - start, *self.shape[1:]), self.dtype_name)
        piece = max(1, PIECE // max(self.paths, 1))  # so that the draws' temporaries stay small
        for low in range(start, stop, piece):
            high = min(low + piece, stop)
            out[low - start : high - start] = _draw(high - low, self.dtype_name, self.paths)(
                key, sigma, np.uint32((low + 1) % 2**32)
            )
        return out

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(self.n)
            if step > 0:
                return self._rows(start, max(start, stop))[::step]
            rows = range(start, stop, step)
            return self._rows(rows[-1], rows[0] + 1)[::step] if rows else self._rows(0, 0)
        index = operator.index(key)
        if not -self.n <= index < self.n:
            raise IndexError(f"index {index} is out of bounds for {self.n} rows")
        return self._rows(index % self.n, index % self.n + 1)[0]


RANDOMWALK_PARAMS = (
    Param("x0", "float", 0.0, "first value x[0]"),
    Param("sigma", "float", 1.0, "standard deviation of each step, >= 0"),
    Param("seed", "int", 0, "random seed, 0 <= seed < 2**63; the step-i draw uses fold_in(key(seed), i)"),
    Param(
        "paths",
        "int",
        1,
        "independent walks in one vectorised scan (an ensemble): output (size, paths) on dims (step, path), "
        "walk p drawing from fold_in(fold_in(key(seed), p), i)",
    ),
)


RANDOMWALK_REFUSED = (
    (
        "compensated",
        "its increments sigma * N(0, 1) are drawn already rounded to the dtype, so there is no exact sum "
        "for a hi + lo carry to hold (compensation covers gp, affine, cumsum and cumprod)",
    ),
)


def _build_randomwalk(size: int | None = None, dtype: str = "float64", **params: Any) -> Job:
    import numpy as np

    p = resolve_params("randomwalk", RANDOMWALK_PARAMS, params, RANDOMWALK_REFUSED)
    if p["sigma"] < 0:
        raise InputError(
            f"{arg('sigma')} must be >= 0, got {p['sigma']!r}; pass a standard deviation such as "
            f"{arg('sigma', 1.0)}"
        )
    if not 0 <= p["seed"] <= MAX_SEED:
        raise InputError(f"{arg('seed')} must be in [0, 2**63 - 1], got {p['seed']}; pass e.g. {arg('seed', 0)}")
    size, dtype = check_size(size, "randomwalk"), check_dtype(dtype)
    if size > MAX_SIZE:
        raise InputError(
            f"{arg('size')} must be <= {MAX_SIZE} for randomwalk, whose noise is keyed by a 32-bit step index, "
            f"got {size}; make several walks with different {arg('seed')} values instead"
        )
    if not 1 <= p["paths"] <= MAX_PATHS:
        raise InputError(
            f"{arg('paths')} must be in [1, 2**32] (walks are keyed by a 32-bit index), got {p['paths']}; pass e.g. "
            f"{arg('paths', 1000)}"
        )
    check_overflow(p, ("x0", "sigma"), dtype)
    check_degenerate(p, "sigma", dtype, 0.0, "every value would equal x0", "a larger sigma")
    paths = p["paths"] if p["paths"] > 1 else 0
    f = RandomWalk(p["sigma"], p["seed"], dtype)
    xs = Increments(p["sigma"], p["seed"], dtype, size, paths)
    init = np.full((paths,), p["x0"], dtype=dtype) if paths else np.asarray(p["x0"], dtype=dtype)
    # one walk is recorded as before ensembles existed, so that its outputs keep resuming
    recorded = {k: v for k, v in p.items() if k != "paths" or paths}
    dims = {"x": ["path"]} if paths else None
    attrs = recipe_attrs(RANDOMWALK, recorded)
    return Job(f=f, init=init, xs=xs, length=size, names=("x",), cpu_unroll=1, attrs=attrs,
               dims=dims)


RANDOMWALK = Recipe(
    name="randomwalk",
    description="Gaussian random walk x[i] = x[i-1] + sigma * N(0, 1), x[0] = x0, the same for any block size; "
    "--paths M runs an ensemble of M independent walks",
    params=RANDOMWALK_PARAMS,
    build=_build_randomwalk,
    refused=RANDOMWALK_REFUSED,
)
