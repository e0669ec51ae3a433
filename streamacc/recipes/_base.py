"""The recipe interface: parameters, built jobs, recipes, and the shared argument checks.

A :class:`Recipe` is a named factory in the style of optax: its ``build`` closes over the
configuration and returns a :class:`Job`, whose step function is a small frozen dataclass
compared and hashed by value, so that two builds with the same parameters share the
engine's compile cache.

Recipe modules import numpy and JAX inside their functions, not at import time, so that
the command line can list recipes and check arguments without loading them.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import operator
import os
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, NoReturn

from ..errors import InputError, arg

__all__ = [
    "COMPENSATED",
    "DEGENERATE_RULE",
    "DTYPES",
    "KINDS",
    "Job",
    "Param",
    "Recipe",
    "Step",
    "check_degenerate",
    "check_dtype",
    "check_overflow",
    "check_size",
    "in_dtype",
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
        cpu_unroll: the ``lax.scan`` unroll the recipe recommends on a CPU (1, 2 or 8).
        attrs: JSON-serialisable metadata ``{'recipe', 'params', 'description', 'units'}``.
        dims: the names of the axes after ``step`` of each output that has any
            (``{"x": ["path"]}`` for an ensemble), or None.
        accelerator_unroll: the unroll it recommends on a TPU or GPU, or None for ``_defaults.ACCELERATOR_UNROLL``
            (a step of a few operations; a compensated one takes ``ACCELERATOR_COMPENSATED_UNROLL``).
        unroll: the unroll it recommends on the platform JAX computes on (asking imports JAX); part of the
            result's identity.
    """

    f: Step
    init: Any
    xs: Any
    length: int
    names: tuple[str, ...]
    cpu_unroll: int
    attrs: dict[str, Any]
    dims: dict[str, list[str]] | None = None
    accelerator_unroll: int | None = None

    @property
    def unroll(self) -> int:
        from ..base import ACCELERATOR_UNROLL, recipe_unroll
        from ..engine import compute_platform

        return recipe_unroll(self.cpu_unroll, compute_platform(), self.accelerator_unroll or ACCELERATOR_UNROLL)


@dataclasses.dataclass(frozen=True)
class Recipe:
    """A named, parameterised step function.

    ``build(size, dtype, **params) -> Job`` validates everything and raises
    :class:`~streamacc.InputError` with a one-line message naming the argument as the
    caller spells it (``ratio=2.0`` from Python, ``--ratio 2.0`` from the CLI); ``size``
    may be None only where the recipe can infer it (cumsum and cumprod, from the input).
    A recipe with a path parameter also takes ``storage_options=`` for an input URL.
    ``refused`` names options that other recipes take and this one refuses when set, each
    with the reason, e.g. ``(("compensated", "its step is not a sum or a product ..."),)``.
    """

    name: str
    description: str
    params: tuple[Param, ...]
    build: Callable[..., Job]
    refused: tuple[tuple[str, str], ...] = ()
    time_step: str | None = None
    """The parameter that is the time one step takes (lorenz's ``dt``), which a time axis must agree with."""

    def make(
        self, size: Any, dtype: Any, params: Mapping[str, Any], storage_options: dict[str, Any] | None = None
    ) -> Job:
        """:attr:`build` with ``params``, handing ``storage_options`` to a recipe that reads an input."""
        reads = any(p.kind == "path" for p in self.params)
        return self.build(size, dtype, **params, **({"storage_options": storage_options} if reads else {}))


COMPENSATED = Param(
    "compensated",
    "flag",
    False,
    "carry each value as an unevaluated sum hi + lo (error-free transformations), so that outputs stay "
    "correctly rounded over long runs; slower",
)
"""The option of the recipes that have a compensated mode (see ``_compensated``)."""


def _value_key(value: Any) -> Any:
    # Floats by their bits, so that 0.0 and -0.0 (equal, same hash) do not share a compiled step.
    return ("float", value.hex()) if isinstance(value, float) else value


class Step:
    """Base of the recipes' step functions: frozen dataclasses equal and hashed by value.

    Subclasses are declared ``@dataclasses.dataclass(frozen=True, eq=False)`` and hold only
    Python scalars and a dtype string, which become compile-time constants when traced.
    """

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]  # declared by each subclass

    def __call__(self, carry: Any, x: Any) -> tuple[Any, Any]:
        """One step: ``(carry, x) -> (new carry, y)``."""
        raise NotImplementedError

    def _key(self) -> tuple[object, ...]:
        return (type(self), *(_value_key(getattr(self, f.name)) for f in dataclasses.fields(self)))

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._key() == other._key()

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
    return f"{arg(name, value)} does not apply to recipe {recipe!r}: {why}; run it without {arg(name, value)}"


def recipe_attrs(recipe: Recipe, params: dict[str, Any], units: str = "") -> dict[str, Any]:
    """The metadata every job carries into its output's attributes."""
    return {"recipe": recipe.name, "params": params, "description": recipe.description, "units": units}


def option(name: str) -> str:
    """The CLI option of a parameter: ``'--' + name.replace('_', '-')``."""
    return "--" + name.replace("_", "-")


def check_dtype(dtype: Any) -> str:
    """Return ``dtype`` as ``'float64'`` or ``'float32'``, or explain the fix."""
    import numpy as np

    name: str | None = None
    if dtype is not None and not isinstance(dtype, bool):
        try:
            name = np.dtype(dtype).name
        except (TypeError, ValueError):
            name = None
    if name is None or name not in DTYPES:
        raise InputError(
            f"{arg('dtype')} must be float64 or float32, got {dtype!r}; pass {arg('dtype', 'float64')} (or float32)"
        )
    return name


def check_size(size: Any, recipe: str) -> int:
    """Return ``size`` as an int >= 1, or explain the fix."""
    example = arg("size", 1000000)
    if size is None:
        raise InputError(f"recipe {recipe!r} needs {arg('size')}, the number of output values; pass e.g. {example}")
    if isinstance(size, bool):
        count = None
    else:
        try:
            count = operator.index(size)
        except TypeError:
            count = None
    if count is None:
        raise InputError(f"{arg('size')} must be a whole number, got {size!r}; pass e.g. {example}")
    if count < 1:
        raise InputError(f"{arg('size')} must be >= 1, got {count}; pass the number of output values, e.g. {example}")
    return count


def in_dtype(value: float, dtype: str, *, pair: bool = False) -> float:
    """``value`` rounded to ``dtype`` as the step functions round it (``inf`` where it overflows).

    With ``pair`` (compensated recipes), the value of the nearest unevaluated sum
    ``hi + lo`` of two numbers of ``dtype``, which is how those steps hold a parameter.
    """
    import numpy as np

    with np.errstate(over="ignore", under="ignore"):
        hi = float(np.asarray(value, dtype=dtype))
        if not pair or not math.isfinite(hi):
            return hi
        return hi + float(np.asarray(value - hi, dtype=dtype))  # exact: the two parts are far apart


def _refuse(name: str, value: float, dtype: str, consequence: str, fix: str, pair: bool) -> NoReturn:
    raise InputError(
        f"{arg(name, value)} rounds to {in_dtype(value, dtype, pair=pair)!r} in {dtype}, so {consequence}; "
        f"pass {arg('dtype', 'float64')} or {fix}"
    )


DEGENERATE_RULE = (
    "A parameter that makes a recurrence degenerate (every value equal, zero or alternating: a ratio or "
    "multiplier of 0, 1 or -1, a start of 0, a sigma of 0) is refused, whether given so or rounded to it in "
    "--dtype; the Python API computes any recurrence."
)
"""The one rule for degenerate parameters, as ``streamacc recipes`` and the README state it."""


def check_degenerate(
    params: Mapping[str, Any], name: str, dtype: str, special: float, consequence: str, fix: str
) -> None:
    """Refuse parameter ``name`` if the value ``dtype`` holds for it is the degenerate ``special``.

    One rule for every recipe (:data:`DEGENERATE_RULE`): such an output holds nothing worth
    its length in compute and disk, whether the value was given (a ratio of 1) or is what
    rounding made of it (1 + 1e-8 is 1.0 in float32). ``consequence`` says what the output
    would be, ``fix`` the change of parameter that avoids it. A compensated recipe holds the
    parameter as a pair, which rounds to a special value far more rarely.
    """
    value, pair = params[name], bool(params.get("compensated"))
    if in_dtype(value, dtype, pair=pair) != special:
        return
    if value == special:
        raise InputError(f"{arg(name, value)} is degenerate: {consequence}; pass {fix}")
    _refuse(name, value, dtype, consequence, fix, pair)


def check_overflow(params: Mapping[str, Any], names: tuple[str, ...], dtype: str) -> None:
    """Refuse a finite parameter that overflows to infinity in ``dtype`` (say 1e39 in float32)."""
    for name in names:
        if math.isinf(in_dtype(params[name], dtype)):
            _refuse(name, params[name], dtype, "every value would be inf or nan", f"a smaller {name}", False)


def _example(param: Param) -> str:
    if param.kind == "flag":
        return arg(param.name, True)
    if param.kind == "path":
        return arg(param.name, param.default or "in.zarr")
    return arg(param.name, "VALUE" if param.default is None else param.default)


def _coerce(recipe: str, param: Param, value: Any) -> Any:
    opt = arg(param.name)
    if param.kind == "path":
        if isinstance(value, (str, os.PathLike)):
            path = os.fspath(value)
            if isinstance(path, str) and path:
                return path
        raise InputError(f"{opt} must be a path, got {value!r}; pass e.g. {_example(param)}")
    if param.kind == "flag":
        if isinstance(value, bool) or type(value).__name__ == "bool_":  # numpy's, without importing numpy
            return bool(value)
        fix = arg(param.name, True)
        raise InputError(f"{arg(param.name)} must be True or False, got {value!r}; pass e.g. {fix}")
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
        real = None
        if isinstance(value, str):
            try:
                real = float(value.strip())
            except ValueError:
                real = None
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):  # numpy's bool_ is not Real either
            real = float(value)
        if real is None:
            raise InputError(f"{opt} must be a number, got {value!r}; pass e.g. {_example(param)}")
        if not math.isfinite(real):
            raise InputError(f"{opt} must be finite, got {real!r}; pass a finite number, e.g. {_example(param)}")
        return real
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
            choices = ", ".join(arg(p.name) for p in params) or "none"
            raise InputError(
                f"recipe {recipe!r} has no parameter {arg(name)}; its parameters are: {choices} "
                "(see `streamacc recipes`)"
            )
    resolved = {}
    for param in params:
        value = given.get(param.name)
        if value is None:
            value = param.default
        if value is None:
            raise InputError(f"recipe {recipe!r} needs {arg(param.name)} ({param.help}); pass {_example(param)}")
        resolved[param.name] = _coerce(recipe, param, value)
    return resolved
