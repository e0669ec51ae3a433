"""The recipes by name: the table the command line lists and builds from."""

from __future__ import annotations

from ..errors import InputError
from ._base import Recipe
from ._cumulative import CUMPROD, CUMSUM
from ._random import RANDOMWALK
from ._recurrences import AFFINE, GP, LOGISTIC, LORENZ

__all__ = ["RECIPES", "get_recipe"]

RECIPES: dict[str, Recipe] = {r.name: r for r in (GP, AFFINE, LOGISTIC, RANDOMWALK, LORENZ, CUMSUM, CUMPROD)}
"""Every recipe by name, in the order ``streamacc recipes`` lists them."""


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name``, or an :class:`InputError` listing the choices."""
    recipe = RECIPES.get(name) if isinstance(name, str) else None
    if recipe is None:
        raise InputError(f"unknown recipe {name!r}; choose one of: {', '.join(RECIPES)} (see `streamacc recipes`)")
    return recipe
