"""Named, parameterised step functions for the CLI, in the style of optax.

Each :class:`Recipe` has a ``build(size, dtype, **params) -> Job`` that validates its
arguments (raising :class:`~streamacc.InputError` with one line that names the argument
as the caller spells it) and returns a :class:`Job`: a step function hashable by value,
its initial carry, its inputs, its length and output names, the recommended unroll, and
JSON metadata::

    job = get_recipe("gp").build(10**9, "float64", ratio=1 + 1e-8)
    for block in streamacc.iter_blocks(job.f, job.init, job.xs, length=job.length, unroll=job.unroll):
        ...

Importing the recipes loads neither numpy nor JAX (a step imports them as it is built or
run), so their names, parameters and descriptions cost the command line nothing.
"""

from ..errors import InputError
from ._base import DEGENERATE_RULE, Job, Param, Recipe, check_dtype, option, refusal
from ._compensated import fast_two_sum, split, split_constant, two_prod, two_sum
from ._cumulative import CUMPROD, CUMSUM
from ._input import InputRows, zstd_margin
from ._random import RANDOMWALK
from ._recurrences import AFFINE, GP, LOGISTIC, LORENZ

__all__ = [
    "DEGENERATE_RULE",
    "RECIPES",
    "InputRows",
    "Job",
    "Param",
    "Recipe",
    "check_dtype",
    "fast_two_sum",
    "get_recipe",
    "option",
    "refusal",
    "split",
    "split_constant",
    "two_prod",
    "two_sum",
    "zstd_margin",
]

RECIPES: dict[str, Recipe] = {r.name: r for r in (GP, AFFINE, LOGISTIC, RANDOMWALK, LORENZ, CUMSUM, CUMPROD)}
"""Every recipe by name, in the order ``streamacc recipes`` lists them."""


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name``, or an :class:`InputError` listing the choices."""
    recipe = RECIPES.get(name) if isinstance(name, str) else None
    if recipe is None:
        raise InputError(f"unknown recipe {name!r}; choose one of: {', '.join(RECIPES)} (see `streamacc recipes`)")
    return recipe
