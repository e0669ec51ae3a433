"""The recipe interface: parameters, built jobs, recipes, and the shared argument checks.

A :class:`Recipe` is a named factory in the style of optax: its ``build`` closes over the
configuration and returns a :class:`Job`, whose step function is a small frozen dataclass
compared and hashed by value, so that two builds with the same parameters share the
engine's compile cache.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import operator
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._errors import InputError, spell

__all__ = [
    "DTYPES",
    "KINDS",
    "Job",
    "Param",
    "Recipe",
    "Step",
    "check_dtype",
    "check_size",
    "option",
    "recipe_attrs",
    "refusal",
    "resolve_params",
]

DTYPES = ("float64", "float32")
"""The output dtypes every recipe supports."""

KINDS = ("float", "int", "path", "flag")
"""The kinds of :class:`Param`."""


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter of a recipe; the CLI option is ``'--' + name.replace('_', '-')``.

    Attributes:
        name: a Python identifier, e.g. ``'x0'``, ``'ratio'``, ``'seed'``, ``'input'``.
        kind: ``'float'``, ``'int'``, ``'path'`` or ``'flag'`` (True or False; on the command
            line an option without a value).
        default: a value (float, int, str or bool), or None when the parameter is required.
        help: one line for ``--help`` and ``streamacc recipes``.
        units: the parameter's units, '' when dimensionless or not applicable.
    """

    name: str
    kind: str
    default: Any
    help: str
    units: str = ""


@dataclasses.dataclass(frozen=True)
class Job:
    """A built recipe instance, ready for the engine and the writer.

    Attributes:
        f: the step ``f(carry, x) -> (carry, y)``; jit-able and hashable by value.
        init: the initial carry, a pytree of arrays with explicit dtypes.
        xs: None, or a pytree of arrays sliceable along axis 0 (never loaded whole).
        length: the number of steps, which is the output length.
        names: the output array name(s), one per leaf of ``y``.
        unroll: the ``lax.scan`` unroll the recipe recommends (part of the result's identity).
        attrs: JSON-serialisable metadata ``{'recipe', 'params', 'description', 'units'}``.
    """

    f: Callable
    init: Any
    xs: Any
    length: int
    names: tuple[str, ...]
    unroll: int
    attrs: dict


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A named, parameterised step function.

    ``build(size, dtype, **params) -> Job`` validates everything and raises
    :class:`~streamacc.InputError` with a one-line message naming the CLI option; ``size``
    may be None only where the recipe can infer it (cumsum and cumprod, from the input).
    ``refused`` names options that other recipes take and this one refuses when set, each
    with the reason, e.g. ``(("compensated", "its step is not a sum or a product ..."),)``.
    """

    name: str
    description: str
    params: tuple[Param, ...]
    build: Callable[..., Job]
    refused: tuple[tuple[str, str], ...] = ()


def _value_key(value: Any) -> Any:
    # Floats by their bits, so that 0.0 and -0.0 (equal, same hash) do not share a compiled step.
    return ("float", value.hex()) if isinstance(value, float) else value


class Step:
    """Base of the recipes' step functions: frozen dataclasses equal and hashed by value.

    Subclasses are declared ``@dataclasses.dataclass(frozen=True, eq=False)`` and hold only
    Python scalars and a dtype string, which become compile-time constants when traced.
    """

    def _key(self) -> tuple:
        return (type(self), *(_value_key(getattr(self, f.name)) for f in dataclasses.fields(self)))  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() == other._key()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._key())


def refusal(recipe: str, refused: tuple[tuple[str, str], ...], name: str, value: Any) -> str | None:
    """The one-line message refusing option ``name`` set to ``value`` for ``recipe``, or None.

    None when ``name`` is not among ``refused`` (pairs of option name and reason) or when
    ``value`` leaves it off (None or False).
    """
    why = dict(refused).get(name)
    if why is None or value is None or value is False:
        return None
    return f"{spell(name, value)} does not apply to recipe {recipe!r}: {why}; run it without {spell(name, value)}"


def recipe_attrs(recipe: Recipe, params: dict[str, Any], units: str = "") -> dict[str, Any]:
    """The metadata every job carries into its output's attributes."""
    return {"recipe": recipe.name, "params": params, "description": recipe.description, "units": units}


def option(name: str) -> str:
    """The CLI option of a parameter: ``'--' + name.replace('_', '-')``."""
    return "--" + name.replace("_", "-")


def check_dtype(dtype: Any) -> str:
    """Return ``dtype`` as ``'float64'`` or ``'float32'``, or explain the fix."""
    name = None
    if dtype is not None and not isinstance(dtype, bool):
        try:
            name = np.dtype(dtype).name
        except (TypeError, ValueError):
            name = None
    if name not in DTYPES:
        raise InputError(f"--dtype must be float64 or float32, got {dtype!r}; pass --dtype float64 (or float32)")
    return name


def check_size(size: Any, recipe: str) -> int:
    """Return ``size`` as an int >= 1, or explain the fix."""
    if size is None:
        raise InputError(f"recipe {recipe!r} needs --size, the number of output values; pass e.g. --size 1000000")
    if isinstance(size, bool):
        count = None
    else:
        try:
            count = operator.index(size)
        except TypeError:
            count = None
    if count is None:
        raise InputError(f"--size must be a whole number, got {size!r}; pass e.g. --size 1000000")
    if count < 1:
        raise InputError(f"--size must be >= 1, got {count}; pass the number of output values, e.g. --size 1000000")
    return count


def _example(param: Param) -> str:
    if param.kind == "flag":
        return spell(param.name, True)
    if param.default is not None:
        return f"{option(param.name)} {param.default}"
    return f"{option(param.name)} PATH" if param.kind == "path" else f"{option(param.name)} VALUE"


def _coerce(recipe: str, param: Param, value: Any) -> Any:
    opt = option(param.name)
    if param.kind == "path":
        if isinstance(value, (str, os.PathLike)):
            path = os.fspath(value)
            if isinstance(path, str) and path:
                return path
        raise InputError(f"{opt} must be a path, got {value!r}; pass e.g. {_example(param)}")
    if param.kind == "flag":
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        fix = spell(param.name, True)
        raise InputError(f"{spell(param.name)} must be True or False, got {value!r}; pass e.g. {fix}")
    if param.kind == "int":
        number = None
        if isinstance(value, str):
            try:
                number = int(value.strip())
            except ValueError:
                number = None
        elif not isinstance(value, bool):
            try:
                number = operator.index(value)
            except TypeError:
                number = None
        if number is None:
            raise InputError(f"{opt} must be a whole number, got {value!r}; pass e.g. {_example(param)}")
        return int(number)
    if param.kind == "float":
        number = None
        if isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        elif isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
            number = float(value)
        if number is None:
            raise InputError(f"{opt} must be a number, got {value!r}; pass e.g. {_example(param)}")
        if not math.isfinite(number):
            raise InputError(f"{opt} must be finite, got {number!r}; pass a finite number, e.g. {_example(param)}")
        return number
    raise AssertionError(f"recipe {recipe!r}: parameter {param.name!r} has unknown kind {param.kind!r}")


def resolve_params(
    recipe: str, params: tuple[Param, ...], given: Mapping[str, Any], refused: tuple[tuple[str, str], ...] = ()
) -> dict[str, Any]:
    """Fill in defaults, coerce to each kind, refuse unknown, missing and non-finite values.

    A value of None means "not given" (the CLI passes None for an omitted option). An
    option in ``refused`` (see :attr:`Recipe.refused`) is refused with its reason when
    set, and dropped when off (``compensated=False`` for a recipe without that mode).
    """
    known = {p.name for p in params}
    for name, value in given.items():
        message = refusal(recipe, refused, name, value)
        if message is not None:
            raise InputError(message)
    given = {k: v for k, v in given.items() if k in known or k not in dict(refused)}
    for name in given:
        if name not in known:
            choices = ", ".join(option(p.name) for p in params) or "none"
            raise InputError(
                f"recipe {recipe!r} has no option {option(name)}; its options are: {choices} (see `streamacc recipes`)"
            )
    resolved = {}
    for param in params:
        value = given.get(param.name)
        if value is None:
            value = param.default
        if value is None:
            raise InputError(f"recipe {recipe!r} needs {option(param.name)} ({param.help}); pass {_example(param)}")
        resolved[param.name] = _coerce(recipe, param, value)
    return resolved
