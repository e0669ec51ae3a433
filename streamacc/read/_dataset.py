"""``streamacc.open``: an output as an xarray Dataset holding only the steps its manifest commits.

A run still writing, or one that was killed, has chunks past its last commit that any
plain Zarr reader would show as data. This reader takes the manifest's committed span at
the moment it opens and returns exactly those steps, lazily (dask), with a ``step``
coordinate that costs no memory whatever the length (the steps whose output each row
holds: every step, or every ``save_every``-th), and a ``time`` coordinate beside it
where the run has a time axis. Both select by label (``sel``, ``.loc``, slices, ``where``
with ``drop=True``, ``concat`` along ``step``) by arithmetic; see ``_index``.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..record import CheckedStore, trusted_manifest
from ..store import PROGRESS_ATTRS, open_target, progress_attrs, register_data_types

if TYPE_CHECKING:
    import xarray

__all__ = ["open"]


def open(
    store: Any,
    f: Any = None,
    init: Any = None,
    xs: Any = None,
    *,
    storage_options: dict[str, Any] | None = None,
    chunks: Any = "auto",
) -> xarray.Dataset:
    """Open a streamacc output as an xarray Dataset of its committed steps only.

    A run still writing, or one that was killed, has chunks past its last commit that a
    plain Zarr reader shows as data; this reader reads the manifest first and returns
    exactly the steps it commits (a prefix, or the end of a reverse scan), lazily through
    dask. Each chunk is checked as it is read: one whose CRC-32C trailer is not the one its
    block record names is refused, and so is a committed chunk that is missing. Rows are
    labelled by a ``step`` coordinate (and a ``time`` coordinate where the run has a time
    axis) that costs no memory at any length and selects by label: ``ds.sel(step=100)``,
    slices (both ends included), lists, ``method="nearest"``, ``.loc``, ``where(...,
    drop=True)``, ``xr.concat`` along ``step``. Only the run's own arrays are included.
    Imports no JAX, but for a virtual output (written with ``virtual=True``), whose chunks
    that are not stored are recomputed, lazily, from the carries it records: bit for bit
    what a stored write holds, blocks of different chunks in parallel (dask's threads, or a
    ``distributed`` client); a dask task whose rows lie in one recomputed block is handed
    them as a read-only view of the block, not a copy.

    Parameters
    ----------
    store : str, os.PathLike or zarr store
        The output: a local path, an fsspec URL (with ``storage_options``) or a zarr
        store. Read-only stores work.
    f : callable or ScanSpec, optional
        The step function of a virtual output written from Python (or a
        :class:`~streamacc.ScanSpec` holding it with ``init`` and ``xs``), which its data are
        recomputed with; checked against the one the output records. A recipe's output
        (``streamacc write``) recomputes from its recorded recipe and needs none. Given
        for a stored output, it is only checked.
    init : pytree of arrays, optional
        With ``f``, a carry of the run's structure, needed where it has more than one leaf
        (its values are taken from the record).
    xs : pytree of arrays, optional
        With ``f``, the inputs the run was written with.
    storage_options : dict, optional
        fsspec options for a URL ``store`` (endpoint, credentials); for an Icechunk
        repository, ``ref``: the branch, tag or snapshot id to read (``"branch:NAME"`` or
        ``"tag:NAME"`` where a name is both).
    chunks : "auto", int, tuple, dict or None, default "auto"
        dask chunks, as ``xarray.open_zarr`` takes them. ``"auto"`` gives whole stored
        chunks near dask's preferred size (for a virtual output, a block per dask chunk,
        each computed once); None gives lazy arrays without dask. Only the committed steps
        are chunked, so any length opens at once.

    Returns
    -------
    xarray.Dataset
        The committed steps of every output array, with coordinates ``step`` (and
        ``time``; for a step that returns no ``y``, the committed steps with no data
        variable: its run keeps only its carries), and the run's attributes (``attrs``: a recipe's, the caller's
        ``attrs=``, ``streamacc_version``...). What was committed when it was opened is
        about the store, not the data, so it is in ``encoding`` (where xarray keeps what
        it knows of a dataset's source; ``isel`` and ``sel`` keep it, ``to_netcdf`` and
        ``to_zarr`` do not write it): ``streamacc_complete`` (1 or 0),
        ``streamacc_committed_start``, ``streamacc_committed_steps``,
        ``streamacc_total_steps``, ``streamacc_status`` (a sentence), and
        ``streamacc_virtual`` (1) for a virtual output.

    Raises
    ------
    streamacc.errors.InputError
        xarray is not installed (``pip install 'streamacc[xarray]'``); or a virtual output
        written from Python opened without its ``f`` (or, for a carry of several leaves,
        without ``init``).
    streamacc.errors.NoOutputError
        Nothing is there, or no streamacc output.
    streamacc.errors.VerifyError
        The output's structure cannot be trusted: a link or special file inside it, an
        array whose metadata changed since it was written, root metadata that
        contradicts the manifest, or (when read) a chunk that is not the one committed or is
        missing; ``f``
        is not the step function the output records, or (when read) a recomputed block does
        not end with the carry recorded after it.

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> jax.config.update("jax_enable_x64", True)
    >>> def step(x, _):
    ...     x = x * 2.0
    ...     return x, x
    >>> _ = streamacc.write("doubling.zarr", step, np.float64(1.0), length=64, names="x",
    ...                     time={"step": 0.5, "units": "s"}, progress=False)
    >>> ds = streamacc.open("doubling.zarr")
    >>> ds.x.sel(step=[0, 1, 63]).values.tolist()
    [2.0, 4.0, 1.8446744073709552e+19]
    >>> float(ds.time.sel(step=10)), ds.encoding["streamacc_committed_steps"], ds.encoding["streamacc_complete"]
    (5.0, 64, 1)
    """
    if f is not None:  # JAX only for a step function: reading a stored output imports none
        from ..engine import step_of

        f, init, xs = step_of(f, init, xs)
    try:
        import xarray as xr

        from .._xarray import step_coordinates
    except ImportError:
        raise InputError("streamacc.open needs xarray: pip install 'streamacc[xarray]'") from None
    target = open_target(store, storage_options=storage_options, read_only=True)
    manifest = trusted_manifest(target)  # what verify refuses is not read either
    ident = manifest.identity
    first, last = manifest.rows()
    names = ident.names
    # sliced before dask sees it, so that its chunks (and graph) follow the committed rows, not the length
    if manifest.recomputes:  # a virtual output: what is not stored is recomputed (with JAX)
        from ..run import recomputing_store

        source: Any = recomputing_store(target, manifest, f=f, init=init, xs=xs, storage_options=storage_options)
    else:
        source = CheckedStore(target.store, target.label, manifest)  # each chunk read must be the one committed
        if f is not None:
            from ..run import check_function

            check_function(manifest, f, target.label)
    register_data_types()  # a bfloat16 array reads as bfloat16
    ds = _arrays(xr, source, names)
    if manifest.recomputes:
        ds = source.recomputed_variables(ds)
    if names:  # a step that returns no y stores no array: its committed steps are the coordinate alone
        ds = ds.isel(step=slice(first, last))
    if manifest.recomputes and isinstance(chunks, str) and chunks == "auto":
        # a block per dask chunk: each block is computed once, by one task, which holds one block's memory
        rows = ident.blocking.block_rows
        chunks = {dim: rows if dim == "step" else -1 for dim in ds.dims}
    if chunks is not None and names:
        ds = ds.chunk(_dask_chunks(ds, chunks))
    ds = ds.assign_coords(step_coordinates(first, last, ident.blocking.save_every, ident.time))
    progress = progress_attrs(manifest.span(), manifest.length, manifest.complete, virtual=manifest.recomputes)
    ds.attrs = {k: v for k, v in ds.attrs.items() if k not in PROGRESS_ATTRS}  # the root's copy, which may lag
    ds.encoding.update(progress)  # about the store, not the data: a slice written elsewhere does not carry them
    return ds


def _dask_chunks(ds: xarray.Dataset, chunks: Any) -> Any:
    """The dask chunks ``xr.open_zarr(chunks=chunks)`` would choose: whole stored chunks, on every axis.

    'auto' gives each dimension the smallest of the sizes dask prefers for the arrays on it,
    each a whole number of the array's stored chunks: of its shards where it is sharded (a
    block's rows of inner chunks), so that a task reads whole shards, each once.
    """
    stored = {
        name: tuple(v.encoding.get("shards") or v.encoding.get("chunks") or v.shape) for name, v in ds.data_vars.items()
    }
    if chunks != "auto":
        along = {"step": min((c[0] for c in stored.values()), default=1)}
        return {**along, **chunks} if isinstance(chunks, dict) else chunks
    from dask.array.core import normalize_chunks

    sizes: dict[Hashable, int] = {}
    for name, v in ds.data_vars.items():
        auto = normalize_chunks("auto", v.shape, dtype=v.dtype, previous_chunks=stored[name])
        for dim, dim_chunks in zip(v.dims, auto, strict=True):
            if dim_chunks and dim_chunks[0]:
                sizes[dim] = min(sizes.get(dim, dim_chunks[0]), dim_chunks[0])
    return sizes


def _arrays(xr: Any, source: Any, names: list[str]) -> xarray.Dataset:
    """The run's arrays ``names`` as one Dataset. Where their lengths differ (a run that ended on its condition cuts
    them one by one after its last step; a reader meanwhile reads a root that lags, see ``record._trust``), each is
    opened alone and all are cut to the shortest, which holds every committed row."""
    try:
        opened: xarray.Dataset = xr.open_zarr(source, consolidated=False, zarr_format=3, chunks=None)[names]
        return opened
    except ValueError:
        if len(names) < 2:
            raise
    import zarr

    members = list(zarr.open_group(source, mode="r", use_consolidated=False).array_keys())
    parts = [
        xr.open_zarr(source, consolidated=False, zarr_format=3, chunks=None,
                     drop_variables=[other for other in members if other != name])[[name]]
        for name in names
    ]  # fmt: skip
    rows = min(part.sizes["step"] for part in parts)
    merged: xarray.Dataset = xr.merge([part.isel(step=slice(0, rows)) for part in parts], combine_attrs="override")
    return merged
