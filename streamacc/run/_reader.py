"""``streamacc.open``: an output as an xarray Dataset holding only the steps its manifest commits.

A run still writing, or one that was killed, has chunks past its last commit that any
plain Zarr reader would show as data. This reader takes the manifest's committed span at
the moment it opens and returns exactly those steps, lazily (dask), with a ``step``
coordinate that costs no memory whatever the length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import InputError
from ..store import open_target, progress_attrs
from ._verify import Checker, load_manifest

if TYPE_CHECKING:
    import xarray

__all__ = ["open"]


def open(store: Any, *, storage_options: dict | None = None, chunks: Any = "auto") -> xarray.Dataset:
    """Open a streamacc output as an xarray Dataset of its committed steps only.

    ``store`` is a local path, an fsspec URL (with ``storage_options``) or a zarr store;
    read-only stores work. Works while a run is still writing: the Dataset holds what was
    committed when it was opened, and its ``streamacc_*`` attributes describe exactly that.
    Only the run's own arrays are included. ``chunks`` is passed to ``xarray.open_zarr``
    (dask chunks; None for plain lazy arrays).
    """
    try:
        import xarray as xr
        from xarray.indexes import RangeIndex
    except ImportError:
        raise InputError("streamacc.open needs xarray: pip install 'streamacc[xarray]'") from None
    target = open_target(store, storage_options=storage_options, read_only=True)
    manifest = load_manifest(target)
    Checker(target, manifest, None).structure_trusted()  # what verify refuses is not read either
    start, stop = manifest.span()
    names = list(manifest.identity["arrays"])
    ds = xr.open_zarr(target.store, consolidated=False, chunks=chunks)[names].isel(step=slice(start, stop))
    steps = RangeIndex.arange(start, stop, 1, dim="step", dtype=np.dtype(np.int64))
    ds = ds.assign_coords(xr.Coordinates.from_xindex(steps))
    ds.attrs.update(progress_attrs((start, stop), manifest.length, manifest.complete))
    return ds
