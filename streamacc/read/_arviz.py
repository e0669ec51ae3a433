"""``streamacc.to_arviz``: a sampler's output as ArviZ reads it, an ``xarray.DataTree`` of chains by draws.

ArviZ 1.x works on a DataTree whose groups (``posterior``, ``sample_stats``) hold variables
of dimensions ``(chain, draw, ...)``; ArviZ 0.x turns the same tree into its
``InferenceData`` with ``arviz.from_datatree``. A streamacc output has ``step`` first and
the chains, where a step vmaps a kernel over an ensemble, on a dimension of the caller's
naming: here ``step`` becomes ``draw`` and that dimension ``chain``, lazily, through the
arrays :func:`streamacc.open` gives, so a tree of 10**7 draws opens at once and a
statistic reads only the variables it needs. By default those are xarray's lazy arrays,
not dask's: the statistics of ArviZ 0.23 and 1.3 alike (``summary``, ``ess``, ``rhat``)
refuse dask arrays, and read a lazy one whole when they first need it.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InputError, arg
from ._dataset import open as open_output

if TYPE_CHECKING:
    import xarray

__all__ = ["to_arviz"]

CHAIN, DRAW = "chain", "draw"
FIRST_STEP, SAVE_EVERY = "streamacc_first_step", "streamacc_save_every"
NEEDS = "pip install 'streamacc[arviz]'"


def to_arviz(
    store: Any,
    *,
    chain_dim: str | None = None,
    sample_stats: Sequence[str] | Mapping[str, str] = (),
    var_names: Sequence[str] | None = None,
    storage_options: dict[str, Any] | None = None,
    chunks: Any = None,
) -> xarray.DataTree:
    """An output of a sampler as ArviZ reads it: an ``xarray.DataTree`` with a ``posterior`` group of chains by draws.

    Each output array becomes a variable of dimensions ``(chain, draw, ...)``: its
    ``step`` axis (one row per stored draw, every ``save_every``-th step) becomes
    ``draw``, numbered 0, 1, ..., and the dimension ``chain_dim`` (the ensemble a step
    vmaps its kernel over) becomes ``chain``; without one, the output is a single chain,
    of length 1. The arrays named in ``sample_stats`` (log density, acceptance,
    divergences) go to a ``sample_stats`` group instead, under ArviZ's names where a
    mapping renames them. Nothing is read until a statistic needs it: the variables are
    :func:`streamacc.open`'s lazy arrays, and like it this reads only the committed draws
    of a run still writing or killed. ArviZ 1.x takes the tree directly
    (``arviz.summary(tree)``); ArviZ 0.x makes its ``InferenceData`` of it with
    ``arviz.from_datatree(tree)``.

    Parameters
    ----------
    store : str, os.PathLike, zarr store or xarray.Dataset
        The output: a local path, an fsspec URL (with ``storage_options``) or a zarr
        store; or a Dataset :func:`streamacc.open` returned, to take a selection of its
        steps (``streamacc.open(path, chunks=None).sel(step=slice(10**5, None))`` leaves
        out the first 10**5 steps) or a virtual output opened with its step function
        (``chunks=None`` gives the lazy arrays ArviZ takes).
    chain_dim : str, optional
        The dimension of the output that holds the chains. By default ``"chain"`` where
        the output has a dimension of that name, else none: one chain.
    sample_stats : sequence of str, or dict, default ()
        The arrays that go to the ``sample_stats`` group, by name, or a dict from an
        array's name to the name ArviZ knows it by (``{"logdensity": "lp",
        "is_divergent": "diverging"}``).
    var_names : sequence of str, optional
        The arrays of the ``posterior`` group; by default every array not in
        ``sample_stats``.
    storage_options : dict, optional
        fsspec options for a URL ``store``.
    chunks : None, "auto", int, tuple or dict, default None
        As :func:`streamacc.open` takes them. None gives xarray's lazy arrays, which
        ArviZ's statistics take: each variable is read whole the first time one needs it,
        and kept for the next (its chains' memory, not the output's). dask chunks give
        dask arrays, for computations of your own (ArviZ 0.23's and 1.3's ``summary``
        refuse them). Ignored for a Dataset ``store``.

    Returns
    -------
    xarray.DataTree
        Groups ``posterior`` and, where ``sample_stats`` names arrays, ``sample_stats``,
        each a Dataset on coordinates ``chain`` (0, 1, ...) and ``draw`` (0, 1, ...) with
        the output's attributes, which the tree's root holds too, and two that say which
        step each draw is: ``streamacc_first_step``, the step of draw 0, and
        ``streamacc_save_every``, k where the draws are every k-th step (draw d is step
        ``first + d * k``; absent where k is 1). They describe the draws handed over: a
        selection of every 7th row of an output that kept every 10th step has k = 70;
        where the draws are not evenly spaced forward in steps (a reversed or uneven
        selection) both are left out.
        What was committed when it was read is in each group's ``encoding``, as
        :func:`streamacc.open` puts it.

    Raises
    ------
    streamacc.errors.InputError
        ArviZ or xarray is not installed (``pip install 'streamacc[arviz]'``); an
        array named in ``var_names`` or ``sample_stats`` that the output lacks, or named
        in both; a ``chain_dim`` that is not a dimension of the output or of every
        array; an output dimension already named ``draw`` (or ``chain``, besides
        ``chain_dim``); an array of a group named ``chain`` or ``draw``, its coordinates.
    streamacc.errors.NoOutputError
        Nothing is there, or no streamacc output.
    streamacc.errors.VerifyError
        The output cannot be trusted, as :func:`streamacc.open` refuses it.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, streamacc
    >>> jax.config.update("jax_enable_x64", True)
    >>> def metropolis(carry, _):      # 4 chains of a random-walk Metropolis on a standard normal
    ...     x, key = carry
    ...     key, k1, k2 = jax.random.split(key, 3)
    ...     y = x + 0.8 * jax.random.normal(k1, x.shape)
    ...     accept = jnp.log(jax.random.uniform(k2, x.shape)) < (x**2 - y**2) / 2
    ...     x = jnp.where(accept, y, x)
    ...     return (x, key), {"x": x, "accepted": accept}
    >>> _ = streamacc.write("chains.zarr", metropolis, (jnp.zeros(4), jax.random.key(0)), length=2000,
    ...                     dims={"x": ["chain"], "accepted": ["chain"]}, progress=False)
    >>> tree = streamacc.to_arviz("chains.zarr", sample_stats=["accepted"])
    >>> dict(tree["posterior"].sizes), list(tree["sample_stats"].data_vars)
    ({'chain': 4, 'draw': 2000}, ['accepted'])
    >>> round(float(tree["sample_stats"]["accepted"].mean()), 2)
    0.75
    >>> dict(streamacc.to_arviz("chains.zarr", var_names=["x"], chain_dim=None).posterior.sizes)
    {'chain': 4, 'draw': 2000}
    """
    xr = _xarray()
    ds = store if isinstance(store, xr.Dataset) else open_output(store, storage_options=storage_options, chunks=chunks)
    if "step" not in ds.dims:
        raise InputError(f"{arg('store')} must be an output of streamacc (a Dataset with dimension step), got "
                         f"one of dimensions {list(ds.dims)}; pass the path of the output")  # fmt: skip
    names = [str(n) for n in ds.data_vars]
    stats = _stat_names(sample_stats, names)
    posterior = _var_names(var_names, names, stats)
    _not_coordinates(posterior, stats)
    chain = _chain_dim(chain_dim, ds)
    attrs = {k: v for k, v in ds.attrs.items() if k not in (FIRST_STEP, SAVE_EVERY)}
    attrs.update(_draw_steps(ds))
    groups = {"posterior": _group(xr, ds, {n: n for n in posterior}, chain, attrs)}
    if stats:
        groups["sample_stats"] = _group(xr, ds, stats, chain, attrs)
    tree: xarray.DataTree = xr.DataTree.from_dict(groups)
    tree.attrs = dict(attrs)
    return tree


def _draw_steps(ds: Any) -> dict[str, int]:
    """The attributes that say which step each draw is: draw d is step ``first + d * k`` (``k`` left out where it
    is 1). None where the draws are not evenly spaced forward in steps (a reversed or an uneven selection), or have
    no step labels: no attribute is better than a wrong one."""
    if "step" not in ds.indexes or not ds.sizes["step"]:
        return {}
    import pandas as pd

    index = ds.indexes["step"]  # a RangeIndex wherever the steps are evenly spaced: no label is materialised
    if isinstance(index, pd.RangeIndex):
        first, stride = int(index.start), int(index.step)
    else:
        steps = np.asarray(index, dtype=np.int64)
        first, stride = int(steps[0]), int(steps[1] - steps[0]) if len(steps) > 1 else 1
        if np.any(np.diff(steps) != stride):
            return {}
    if len(index) == 1:
        return {FIRST_STEP: first}
    if stride <= 0:
        return {}
    return {FIRST_STEP: first, **({SAVE_EVERY: stride} if stride != 1 else {})}


def _xarray() -> Any:
    """xarray (with ``DataTree``), where ArviZ is installed too; else the extra to install, in one line."""
    try:
        import xarray as xr
    except ImportError:
        raise InputError(f"streamacc.to_arviz needs ArviZ and xarray: {NEEDS}") from None
    arviz = any(importlib.util.find_spec(name) is not None for name in ("arviz", "arviz_base"))
    if not arviz or not hasattr(xr, "DataTree"):
        what = "ArviZ" if not arviz else "xarray 2024.10 or later (xarray.DataTree)"
        raise InputError(f"streamacc.to_arviz needs {what}: {NEEDS}")
    return xr


def _stat_names(sample_stats: Any, names: list[str]) -> dict[str, str]:
    """``sample_stats`` as a dict from an output array's name to its name in the group."""
    if isinstance(sample_stats, str):
        sample_stats = [sample_stats]
    if isinstance(sample_stats, Mapping):
        stats = {str(k): str(v) for k, v in sample_stats.items()}
    else:
        try:
            stats = {str(n): str(n) for n in sample_stats}
        except TypeError:
            raise InputError(
                f"{arg('sample_stats', sample_stats)} must be a list of array names or a dict renaming them; "
                f"pass e.g. {arg('sample_stats', {'logdensity': 'lp'})}"
            ) from None
    _known("sample_stats", list(stats), names)
    if len(set(stats.values())) < len(stats):
        raise InputError(f"{arg('sample_stats', sample_stats)} gives two arrays the same name; name each once")
    return stats


def _var_names(var_names: Sequence[str] | None, names: list[str], stats: dict[str, str]) -> list[str]:
    if var_names is None:
        return [n for n in names if n not in stats]
    chosen = [var_names] if isinstance(var_names, str) else [str(n) for n in var_names]
    _known("var_names", chosen, names)
    both = [n for n in chosen if n in stats]
    if both:
        raise InputError(f"{', '.join(both)} cannot be in both {arg('var_names')} and {arg('sample_stats')}; "
                         "name each array in one group")  # fmt: skip
    return chosen


def _not_coordinates(posterior: list[str], stats: dict[str, str]) -> None:
    """Refuse a variable that would take the name of a group's coordinate, ``chain`` or ``draw``."""
    taken = [n for n in posterior if n in (CHAIN, DRAW)]
    if taken:
        renamed = {**stats, **{n: f"{n}_value" for n in taken}}
        raise InputError(
            f"the output has {' and '.join(f'an array named {n!r}' for n in taken)}, as ArviZ names the coordinates "
            f"of its groups (chain, draw); put {'it' if len(taken) == 1 else 'them'} in the sample_stats group under "
            f"another name, e.g. {arg('sample_stats', renamed)}, or leave {'it' if len(taken) == 1 else 'them'} out "
            f"with {arg('var_names', [n for n in posterior if n not in taken])}"
        )
    for name, label in stats.items():
        if label in (CHAIN, DRAW):
            raise InputError(
                f"{arg('sample_stats')} gives the array {name!r} the name {label!r}, as ArviZ names a coordinate of "
                f"its groups (chain, draw); name it otherwise, e.g. "
                f"{arg('sample_stats', {**stats, name: f'{name}_value'})}"
            )


def _known(what: str, chosen: list[str], names: list[str]) -> None:
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise InputError(f"{arg(what, chosen)} names {', '.join(map(repr, unknown))}, not an array of the output; "
                         f"its arrays are {', '.join(names)}")  # fmt: skip


def _chain_dim(chain_dim: str | None, ds: Any) -> str | None:
    """The output dimension that holds the chains, or None for a single chain; what would clash refused."""
    dims = [str(d) for d in ds.dims if d != "step"]
    if chain_dim is None:
        chain_dim = CHAIN if CHAIN in dims else None
    elif chain_dim not in dims:
        has = f"its dimensions after step are {', '.join(dims)}" if dims else "it has no dimension after step"
        raise InputError(f"{arg('chain_dim', chain_dim)} is not a dimension of the output ({has}); name the "
                         "dimension that holds the chains, or leave it out for a single chain")  # fmt: skip
    for taken in (DRAW, CHAIN):
        if taken in dims and taken != chain_dim:
            fix = "name it as chain_dim, or rename it" if taken == CHAIN else "rename it (ds.rename), pass the Dataset"
            raise InputError(f"the output has a dimension named {taken!r}, which ArviZ's {taken!r} would clash "
                             f"with; {fix}")  # fmt: skip
    return chain_dim


def _group(xr: Any, ds: Any, names: dict[str, str], chain: str | None, attrs: dict[str, Any]) -> Any:
    """The Dataset of arrays ``names`` (output name -> group name) on ``(chain, draw, ...)``, lazily."""
    chains = ds.sizes[chain] if chain is not None else 1
    variables = {}
    for name, label in names.items():
        da = ds[name].drop_vars(list(ds[name].coords))  # step, time: draws are numbered 0, 1, ...
        if chain is not None and chain not in da.dims:
            raise InputError(
                f"{name} has no dimension {chain!r} (its dimensions are {', '.join(map(str, da.dims))}), so it "
                f"holds no chains; leave it out with {arg('var_names')}, or write it with the chains on {chain!r}"
            )
        da = da.rename({"step": DRAW, **({chain: CHAIN} if chain is not None else {})})
        var = da.variable if chain is not None else _one_chain(xr, da)
        variables[label] = var.transpose(CHAIN, DRAW, ...)
    import pandas as pd

    coords = xr.Coordinates(
        {CHAIN: np.arange(chains), DRAW: pd.RangeIndex(ds.sizes["step"], name=DRAW)}
    )  # a RangeIndex: draws cost no memory at any length
    group = xr.Dataset(variables, coords=coords, attrs=dict(attrs))
    group.encoding.update(ds.encoding)
    return group


def _one_chain(xr: Any, da: Any) -> Any:
    """The variable of ``da`` with a leading ``chain`` dimension of length 1, as lazily as ``da`` is: xarray's
    ``expand_dims`` reads an array that is not dask's."""
    if da.chunks is not None:
        return da.variable.expand_dims(CHAIN)
    return xr.Variable((CHAIN, *da.dims), _leading_axis()(da), da.attrs)


@functools.cache
def _leading_axis() -> Any:
    """A function that gives a lazy DataArray a leading axis of length 1, as a lazy array (xarray's backend API)."""
    from xarray.backends import BackendArray

    # A backend array's indexing (explicit_indexing_adapter, LazilyIndexedArray), as xarray's own backends
    # and its documentation's example backend use it: no public module holds them
    from xarray.core import indexing

    class LeadingAxis(BackendArray):
        __slots__ = ("da", "dtype", "shape")

        def __init__(self, da: Any) -> None:
            self.da = da
            self.shape = (1, *da.shape)
            self.dtype = da.dtype

        def __getitem__(self, key: Any) -> Any:
            return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.BASIC, self._get)

        def _get(self, key: tuple[Any, ...]) -> Any:
            values = np.asarray(self.da[key[1:]].values)  # the rows asked for, read
            return values if isinstance(key[0], (int, np.integer)) else values[np.newaxis][key[0]]

    def lazy(da: Any) -> Any:
        return indexing.LazilyIndexedArray(LeadingAxis(da))

    return lazy
