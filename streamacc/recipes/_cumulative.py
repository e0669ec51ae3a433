"""Running sums and products of a 1-D Zarr array, read block by block.

``y[i] = input[0] op ... op input[i]`` (inclusive), computed sequentially in the output
dtype, hence bit-identical to ``np.cumsum`` / ``np.cumprod`` of the input cast to it; or,
with ``compensated=True``, on a compensated carry (see ``_compensated``).
"""

from __future__ import annotations

import dataclasses
import errno
import os
from typing import Any

from ..base import ACCELERATOR_COMPENSATED_UNROLL
from ..errors import InputError, arg
from ._base import COMPENSATED, Job, Param, Recipe, Step, check_dtype, check_size, recipe_attrs, resolve_params
from ._input import InputRows

__all__ = ["CUMPROD", "CUMSUM", "Cumulative", "InputRows", "open_input"]

_NUMERIC_KINDS = frozenset("biuf")


def open_input(path: str, storage_options: dict[str, Any] | None = None) -> Any:
    """Open ``path`` (a local path or a URL, with fsspec ``storage_options``) read-only as a 1-D numeric Zarr array."""
    import numpy as np
    import zarr

    options = storage_options if "://" in path else None
    try:
        array = zarr.open_array(path, mode="r", storage_options=options)
    except Exception as error:
        if options is None and _loops(path):
            raise InputError(
                f"{arg('input', path)} runs into a loop of symbolic links (following them leads back to where they "
                "start), so no array is there; remove or correct the link, or pass the path of a 1-D zarr array"
            ) from None
        members = _group_arrays(path, options)
        if members is not None:
            example = arg("input", f"{path.rstrip('/')}/{members[0]}" if members else f"{path.rstrip('/')}/NAME")
            listed = f" (its arrays: {', '.join(members)})" if members else ""
            raise InputError(
                f"{arg('input', path)} is a zarr group, not an array{listed}; pass one of its arrays, e.g. {example}"
            ) from None
        reason = " ".join(str(error).split()) or type(error).__name__
        raise InputError(
            f"{arg('input', path)} is not a zarr array ({reason}); pass the path of a 1-D zarr array"
        ) from None
    if len(array.shape) != 1:
        raise InputError(
            f"{arg('input')} must be a 1-D zarr array, got shape {tuple(array.shape)} at {path!r}; "
            "pass a 1-D array (one value per step)"
        )
    try:
        kind: str = np.dtype(array.dtype).kind
    except TypeError:
        kind = "?"
    if kind not in _NUMERIC_KINDS:
        raise InputError(
            f"{arg('input')} must hold real numbers, got dtype {array.dtype} at {path!r}; "
            "pass a float, int or bool array"
        )
    return array


def _loops(path: str) -> bool:
    """Whether local ``path`` runs into a loop of symbolic links (it, or a folder on its way)."""
    try:
        os.stat(path.removeprefix("file://"))
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


def _group_arrays(path: str, storage_options: dict[str, Any] | None) -> list[str] | None:
    """The names of the arrays in the zarr group at ``path``, or None when there is no group there."""
    import zarr

    try:
        group = zarr.open_group(path, mode="r", storage_options=storage_options)
        return sorted(name for name, _ in group.arrays())
    except Exception:
        return None


@dataclasses.dataclass(frozen=True, eq=False)
class Cumulative(Step):
    """``(c, x) -> (c op x, c op x)`` with ``x`` cast to ``dtype`` first; ``op`` is ``'add'`` or ``'mul'``."""

    op: str
    dtype: str

    def __call__(self, carry: Any, x: Any) -> tuple[Any, Any]:
        x = x.astype(self.dtype)
        new = carry + x if self.op == "add" else carry * x
        return new, new


INPUT_PARAMS = (
    Param("input", "path", None, "path of a 1-D zarr array to accumulate, read block by block"),
    COMPENSATED,
)


def _build(
    recipe: Recipe,
    op: str,
    identity: int,
    size: Any,
    dtype: Any,
    params: dict[str, Any],
    storage_options: dict[str, Any] | None,
) -> Job:
    import numpy as np

    p = resolve_params(recipe.name, INPUT_PARAMS, params)
    dtype = check_dtype(dtype)
    if size is not None:
        size = check_size(size, recipe.name)
    array = open_input(p["input"], storage_options)
    n = int(array.shape[0])
    if n == 0:
        raise InputError(f"{arg('input', p['input'])} is empty; pass a zarr array with at least one value")
    if size is None:
        size = n
    if size > n:
        raise InputError(
            f"{arg('size', size)} exceeds the {n} values of {arg('input', p['input'])}; "
            f"pass {arg('size', n)} or less, or omit it"
        )
    xs = InputRows(array, size)
    units = array.attrs.get("units", "") if op == "add" else ""
    attrs = recipe_attrs(recipe, p, units if isinstance(units, str) else "")
    f: Step
    init: np.ndarray | tuple[np.ndarray, ...]
    if p["compensated"]:
        from ._compensated import UNROLL, CompensatedCumulative, initial

        f, init, unroll = CompensatedCumulative(op, dtype), initial(identity, dtype), UNROLL
    else:
        f, init, unroll = Cumulative(op, dtype), np.asarray(identity, dtype=dtype), 8
    return Job(f=f, init=init, xs=xs, length=size, names=("y",), cpu_unroll=unroll, attrs=attrs,
               accelerator_unroll=ACCELERATOR_COMPENSATED_UNROLL if p["compensated"] else None)


def _build_cumsum(
    size: int | None = None, dtype: str = "float64", *, storage_options: dict[str, Any] | None = None, **params: Any
) -> Job:
    return _build(CUMSUM, "add", 0, size, dtype, params, storage_options)


def _build_cumprod(
    size: int | None = None, dtype: str = "float64", *, storage_options: dict[str, Any] | None = None, **params: Any
) -> Job:
    return _build(CUMPROD, "mul", 1, size, dtype, params, storage_options)


CUMSUM = Recipe(
    name="cumsum",
    description="running sum y[i] = input[0] + ... + input[i] of a 1-D zarr array (plain: as numpy.cumsum)",
    params=INPUT_PARAMS,
    build=_build_cumsum,
)

CUMPROD = Recipe(
    name="cumprod",
    description="running product y[i] = input[0] * ... * input[i] of a 1-D zarr array (plain: as numpy.cumprod)",
    params=INPUT_PARAMS,
    build=_build_cumprod,
)
