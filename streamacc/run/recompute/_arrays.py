"""A virtual output's arrays as xarray reads them: recomputed blocks handed over as they lie.

Read through zarr, every chunk of a virtual output is computed into a block buffer and then
copied by zarr into an array of its own, whose fresh pages the kernel zero-fills first:
half of the work of reading a 2**30-step output in full. A dask task that asks for rows
lying in one recomputed block gets a read-only view of the block instead (the buffer goes
back to its pool once the last view of it is gone); anything else (stored blocks, rows
across blocks, fancy indexing) is read through zarr as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import xarray as xr
import zarr
from xarray.backends import BackendArray

# A backend array's indexing (explicit_indexing_adapter, LazilyIndexedArray), as xarray's own backends
# do: the backend API documents it but exports it from no public module.
from xarray.core import indexing

from ...store import register_data_types

if TYPE_CHECKING:
    from ._virtual import RecomputingStore

__all__ = ["recomputed_variables"]


class RecomputedArray(BackendArray):
    """One array of a virtual output: views of recomputed blocks where the rows allow, zarr elsewhere."""

    def __init__(self, store: RecomputingStore, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.store = store
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self._zarr: zarr.Array[Any] | None = None

    def __getitem__(self, key: indexing.ExplicitIndexer) -> Any:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._basic)

    def _basic(self, key: tuple[Any, ...]) -> Any:
        rows = key[0] if key else slice(None)
        if isinstance(rows, slice):
            start, stop, stride = rows.indices(self.shape[0])
            if stride == 1 and stop > start:
                view = self.store.block_rows(self.name, start, stop)
                if view is not None:
                    return view[(slice(None), *key[1:])]
        if self._zarr is None:
            register_data_types()  # also on a dask worker, which unpickled this array without its zarr array
            self._zarr = zarr.open_array(self.store, path=self.name, mode="r", zarr_format=3)
        return self._zarr[key]

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_zarr": None}


def recomputed_variables(ds: xr.Dataset, store: RecomputingStore) -> xr.Dataset:
    """``ds`` (opened lazily from ``store``, without dask) with its arrays read as :class:`RecomputedArray`."""
    variables = {}
    for name in store.names:
        v = ds[name].variable
        lazy = indexing.LazilyIndexedArray(RecomputedArray(store, name, v.shape, v.dtype))
        variables[name] = xr.Variable(v.dims, lazy, v.attrs, v.encoding)
    return ds.assign(variables)
