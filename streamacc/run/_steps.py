"""The ``step`` coordinate of an opened output: a range computed on demand, counted as such.

xarray's ``RangeIndex`` computes its coordinate's values when they are read, but its
variable reports ``size * 8`` bytes, so a Dataset of 2**32 steps would show twice its
data's size in its repr (``Size: 69GB`` for 34 GB of values). Here the coordinate reports
the bytes it holds: none.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import xarray as xr
from xarray.core.indexing import CoordinateTransformIndexingAdapter
from xarray.indexes import RangeIndex

__all__ = ["StepIndex", "step_coordinates"]


class _Computed(CoordinateTransformIndexingAdapter):
    """The coordinate's values, computed from the range whenever they are read."""

    @property
    def nbytes(self) -> int:
        return 0


class StepIndex(RangeIndex):
    """A ``RangeIndex`` whose coordinate counts no bytes, also after slicing."""

    def create_variables(self, variables: Mapping[Any, xr.Variable] | None = None) -> dict[Any, xr.Variable]:
        made = super().create_variables(variables)
        return {
            name: xr.Variable(var.dims, _Computed(self.transform, name, var.dims), attrs=var.attrs)
            for name, var in made.items()
        }

    def isel(self, indexers: Mapping[Any, Any]) -> Any:
        index = super().isel(indexers)
        return StepIndex(index.transform) if type(index) is RangeIndex else index


def step_coordinates(start: int, stop: int) -> xr.Coordinates:
    """The ``step`` coordinate ``start, start + 1, ..., stop - 1`` (int64), costing no memory."""
    return xr.Coordinates.from_xindex(StepIndex.arange(start, stop, 1, dim="step", dtype=np.dtype(np.int64)))
