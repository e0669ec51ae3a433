"""``streamacc.overview``: a whole output (or a range of it) at a glance, from its window summaries.

A picture of 2**32 steps needs a few thousand windows, not 32 GiB: this reads the level
of summaries that gives at least ``points`` windows (a few chunks of a few KiB) and the
committed tail, not the data, and never imports JAX. It works with the data chunks
deleted, on object stores, and while a run is still writing (it shows exactly the steps
committed when it opened). A small output has no summaries (``SMALL_OUTPUT_VALUES``): its
data are read instead, a few hundred KiB, in windows as fine as ``points`` asks (one row each
for 4096 rows).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from ..base import OVERVIEW_DATA_VALUES_AT_MOST, as_count, dtype_from_name, over_state, row_step, rows_in, times
from ..errors import InputError, NoOutputError, arg
from ..record import Manifest, trusted_manifest
from ..store import open_target, progress_attrs
from ..summaries import Rows, Summaries, reduce_steps, summarized_names

if TYPE_CHECKING:
    import xarray

__all__ = ["Column", "Table", "overview", "overview_table", "step_labels"]


def step_labels(rows: np.ndarray, manifest: Manifest) -> np.ndarray:
    """The step each output row holds (``base.row_step``: every step, or every ``save_every``-th)."""
    steps: np.ndarray = row_step(np.asarray(rows, dtype=np.int64), manifest.identity.blocking.save_every)
    return steps


def _node(target: Any, key: str) -> dict[str, Any]:
    raw = target.read(key)
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        doc = {}
    return doc if isinstance(doc, dict) else {}


def _step_number(value: Any, steps: Any) -> int:
    """One end of ``steps``: a whole step number (an int, or a float holding one)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        number = float(value)
        if math.isfinite(number) and number == int(number):
            return int(number)
    raise InputError(
        f"{arg('steps', steps)} must be a (start, stop) pair or a slice of whole step numbers (either end may be "
        f"None), and {value!r} is not one; pass e.g. {arg('steps', (0, 2**20))}"
    )


def _range(steps: Any, start: int, stop: int) -> tuple[int, int]:
    """``steps`` (None, a slice or a pair) clipped to the committed ``[start, stop)``."""
    if steps is None:
        return start, stop
    if isinstance(steps, slice):
        if steps.step not in (None, 1):
            raise InputError(
                f"{arg('steps', steps)} must not have a stride; the level of summaries sets the resolution"
            )
        steps = (steps.start, steps.stop)
    try:
        a, b = steps
    except (TypeError, ValueError):
        raise InputError(
            f"{arg('steps', steps)} must be a (start, stop) pair or a slice of steps; pass e.g. "
            f"{arg('steps', (0, 2**20))}"
        ) from None
    a = start if a is None else _step_number(a, steps)
    b = stop if b is None else _step_number(b, steps)
    a, b = max(a, start), min(b, stop)
    if a >= b:
        raise InputError(
            f"no committed step is in {arg('steps', steps)} (the committed steps are {start} to {stop}); choose a "
            f"range among them, e.g. {arg('steps', [start, stop])}"
        )
    return a, b


@dataclasses.dataclass(frozen=True)
class Column:
    """One variable of a :class:`Table`: its name, dimensions, numpy values and attributes."""

    name: str
    dims: tuple[str, ...]
    values: np.ndarray
    attrs: dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Table:
    """What :func:`overview` returns, in numpy alone: a picture needs neither xarray nor pandas, slow to import.

    Indexed by name like the Dataset (``table["x_mean"].values``, ``table["step"].values``).
    ``time_axis`` is the output's time axis (``{"step", "start", "units"}``), None without one.
    """

    data_vars: dict[str, Column]
    step: np.ndarray
    attrs: dict[str, Any]
    encoding: dict[str, Any]
    time_axis: dict[str, Any] | None = None

    def times(self, steps: np.ndarray) -> np.ndarray:
        """The times of ``steps`` on the output's time axis (which it must have), as ``streamacc.open`` gives them."""
        assert self.time_axis is not None
        return times(np.asarray(steps, dtype=np.int64), self.time_axis)

    def __getitem__(self, name: str) -> Column:
        if name == "step":
            return Column("step", ("step",), self.step, {})
        return self.data_vars[name]

    @property
    def sizes(self) -> dict[str, int]:
        return {"step": int(self.step.shape[0])}

    def to_xarray(self) -> xarray.Dataset:
        """The same as an xarray Dataset (coordinate ``step``)."""
        import pandas as pd
        import xarray as xr

        # variables of host numpy data, built without xarray probing for dask, which imports it
        data = {n: xr.Variable(c.dims, np.asarray(c.values), c.attrs, fastpath=True) for n, c in self.data_vars.items()}
        ds = xr.Dataset(data, coords=xr.Coordinates({"step": pd.Index(self.step, name="step")}))
        ds.attrs.update(self.attrs)
        ds.encoding.update(self.encoding)
        return ds


def choose_level(windows: list[int], a: int, b: int, points: int) -> int:
    """The coarsest level with at least ``points`` windows over ``[a, b)``, else the finest."""
    best = 0
    for i, w in enumerate(windows):
        if (b - 1) // w - a // w + 1 >= points:
            best = i
    return best


def _columns(target: Any, name: str, rows: Rows, whole: bool) -> dict[str, Column]:
    """Output ``name``'s ``NAME_min``, ``NAME_max`` and ``NAME_mean`` of the windows ``rows`` (``whole``: each window's
    statistics over every value of its steps), with the array's dimensions and its long name and units."""
    meta = _node(target, f"{name}/zarr.json")
    trailing = [str(d) for d in (meta.get("dimension_names") or [])[1:]]
    attrs = {k: v for k, v in meta.get("attributes", {}).items() if k in ("long_name", "units")}
    dims: tuple[str, ...] = ("step", *trailing)
    if whole:
        dims, attrs = ("step",), {**attrs, "over": trailing}
    return {
        f"{name}_{stat}": Column(f"{name}_{stat}", dims, np.asarray(getattr(rows, stat)), {**attrs, "statistic": stat})
        for stat in ("min", "max", "mean")
    }


def _small(manifest: Manifest) -> bool:
    """Whether ``overview`` draws an output without summaries from its data: stored (not virtual), holding an array
    to summarise and at most ``OVERVIEW_DATA_VALUES_AT_MOST`` committed values of them."""
    names = summarized_names(manifest.identity.arrays)
    values = sum(math.prod(manifest.identity.arrays[n][1][1:]) for n in names) * manifest.committed_rows
    return bool(names) and not manifest.virtual and 0 < values <= OVERVIEW_DATA_VALUES_AT_MOST


def _data_table(target: Any, manifest: Manifest, points: int, steps: Any) -> Table:
    """:func:`overview_table` of an output without summaries, from its committed data (see :func:`_small`): windows
    of a power of two rows, the longest that still gives ``points`` of them (one row each for a short output),
    reduced as the summaries reduce theirs."""
    import zarr

    from ..record import CheckedStore  # zarr's: imported only to draw an output from its data
    from ..store import register_data_types

    ident = manifest.identity
    start, stop = manifest.span()
    every = ident.blocking.save_every
    a, b = _range(steps, start, stop)
    ra, rb = rows_in(a, b, every)
    if ra >= rb:
        raise InputError(f"steps {a} to {b} hold no stored row (every {every}th step is kept); choose a longer range")
    w = 1
    while (rb - 1) // (2 * w) - ra // (2 * w) + 1 >= points:
        w *= 2
    first, last = ra // w, (rb - 1) // w + 1
    low, high = manifest.rows()  # the committed rows: windows reach past [ra, rb) to whole ones, within these
    register_data_types()
    group = zarr.open_group(CheckedStore(target.store, target.label, manifest), mode="r", zarr_format=3)
    names = summarized_names(ident.arrays)
    whole = set(over_state({n: math.prod(ident.arrays[n][1][1:]) for n in names}))
    data_vars = {}
    for name in names:
        array = group[name]
        assert isinstance(array, zarr.Array)
        lo, hi = max(first * w, low), min(last * w, high)
        data = np.asarray(array[lo:hi])
        if name in whole:  # one window's statistics over every value of its steps, as its summaries would be
            data = data.reshape(len(data), -1)
        stats = _windows_of(data, lo, hi, w, first, last, name in whole)
        data_vars.update(_columns(target, name, stats, name in whole))
    root = _node(target, "zarr.json").get("attributes", {})
    table_attrs = {k: v for k, v in root.items() if not k.startswith("streamacc_")}
    table_attrs.update({"window": w * every, "windows": [w * every], "first_step": a, "stop_step": b})
    progress = progress_attrs((start, stop), manifest.length, manifest.complete)
    labels = step_labels(np.arange(first, last, dtype=np.int64) * w, manifest)
    return Table(data_vars, labels, table_attrs, progress, ident.time)


def _windows_of(data: np.ndarray, lo: int, hi: int, w: int, first: int, last: int, whole: bool) -> Rows:
    """The statistics of windows ``first`` to ``last`` of ``w`` rows, ``data`` being rows ``[lo, hi)``: the windows
    lying whole inside in one batch, a window cut by either end alone (``whole``: over every value of its rows)."""
    parts = []
    inner = (-(-lo // w), hi // w)  # the windows inside [lo, hi)
    for k in range(first, min(inner[0], last)):
        rows = data[: min((k + 1) * w, hi) - lo]
        parts.append(reduce_steps(rows.reshape(-1) if whole else rows, 0).one().rows())
    if inner[1] > inner[0]:
        body = data[inner[0] * w - lo : inner[1] * w - lo]
        shaped = body.reshape(inner[1] - inner[0], w * body.shape[1]) if whole else body.reshape(-1, w, *body.shape[1:])
        parts.append(reduce_steps(shaped, 1).rows())
    for k in range(max(inner[1], first, inner[0]), last):
        rows = data[max(k * w, lo) - lo :]
        parts.append(reduce_steps(rows.reshape(-1) if whole else rows, 0).one().rows())
    return parts[0] if len(parts) == 1 else Rows.concat(parts)


def overview(
    store: Any, points: int = 4096, storage_options: dict[str, Any] | None = None, *, steps: Any = None
) -> xarray.Dataset:
    """A whole output, or a range of its steps, at a glance: min, max and mean per window, from its summaries.

    Each output array ``x`` becomes ``x_min``, ``x_max`` and ``x_mean`` on dimension
    ``step`` (then the array's own trailing dimensions). The level of summaries read is
    the coarsest whose windows over the committed steps (or ``steps``) number at least
    ``points``, or the finest where the output is short. Only the summaries and the
    manifest are read, not the data and never JAX, so it works with the data deleted,
    while a run writes (it shows the steps committed when it opened) and on object stores.
    An output without summaries (a small one has none: at most 2**18 values) is drawn
    from its data, where it holds at most 2**22 values, in windows of a power of two rows.

    Parameters
    ----------
    store : str, os.PathLike or zarr store
        The output: a local path, an fsspec URL (with ``storage_options``) or a zarr store.
    points : int, default 4096
        The fewest windows wanted; a picture needs a few thousand whatever the length.
    storage_options : dict, optional
        fsspec options for a URL ``store``.
    steps : slice or (int, int), optional
        Only the steps ``[start, stop)`` (either end may be None), clipped to the
        committed steps; a slice must not have a stride.

    Returns
    -------
    xarray.Dataset
        ``x_min``, ``x_max``, ``x_mean`` for each summarised output, on dimension ``step``
        holding each window's first step. ``attrs["window"]`` is the steps per window
        (the last window may be partial: it covers the committed steps so far),
        ``attrs["windows"]`` every level's, and the root's attributes follow; what was
        committed when it was read is in ``encoding``, as :func:`streamacc.open` puts it
        (``streamacc_complete``, ``streamacc_committed_steps``, ...).

    Raises
    ------
    streamacc.errors.InputError
        xarray is not installed, or ``points`` or ``steps`` is not valid.
    streamacc.errors.NoOutputError
        Nothing is there, no streamacc output, an output without summaries (written
        with ``summaries=False``, or a reverse scan), or none of its steps committed yet.
    streamacc.errors.StoreError
        The output cannot be trusted, as :func:`streamacc.open` refuses it: a link or
        special file inside it, or (a VerifyError) changed array metadata or a root that
        lies.

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> jax.config.update("jax_enable_x64", True)
    >>> def walk(x, dx):
    ...     x = x + dx
    ...     return x, x
    >>> dx = np.random.default_rng(0).normal(size=2**16)
    >>> _ = streamacc.write("walk.zarr", walk, np.float64(0.0), dx, names="x", summaries=[2**8, 2**12],
    ...                     progress=False)
    >>> ds = streamacc.overview("walk.zarr", points=64)
    >>> ds.attrs["window"], ds.sizes["step"], list(ds.data_vars)
    (256, 256, ['x_min', 'x_max', 'x_mean'])
    >>> bool((ds.x_min <= ds.x_mean).all() and (ds.x_mean <= ds.x_max).all())
    True
    """
    try:
        import xarray  # noqa: F401
    except ImportError:
        raise InputError("streamacc.overview needs xarray: pip install 'streamacc[xarray]'") from None
    return overview_table(store, points, storage_options, steps=steps).to_xarray()


def overview_table(
    store: Any, points: int = 4096, storage_options: dict[str, Any] | None = None, *, steps: Any = None
) -> Table:
    """:func:`overview` as a :class:`Table` of numpy arrays, importing neither xarray nor pandas (for ``plot``), nor
    Zarr where the summaries have the form streamacc writes (see ``summaries/_plain.py``)."""
    points = as_count("points", points, minimum=1, example=4096)
    target = open_target(store, storage_options=storage_options, read_only=True)
    manifest = trusted_manifest(target)  # what open, info and verify refuse (a link, a named pipe) is not read
    ident = manifest.identity
    summaries = Summaries.load(target, ident, manifest.summaries, manifest.committed_rows)
    if summaries is None and _small(manifest):
        return _data_table(target, manifest, points, steps)
    if summaries is None:
        if not ident.names:
            raise NoOutputError(
                f"{target.label} holds no output array (its step returns no y: the run keeps its carries only), so "
                "there is nothing to summarise; streamacc.open(path) gives its committed steps"
            )
        if not summarized_names(ident.arrays):
            kinds = ", ".join(f"{n} ({dtype_from_name(d).name})" for n, (d, _shape) in ident.arrays.items())
            raise NoOutputError(
                f"{target.label} has no summaries: its outputs {kinds} are not ordered real numbers, which are never "
                "summarised; read its data with streamacc.open(path) and draw what you need from them (abs, real)"
            )
        if ident.blocking.reverse:
            fix = "a reverse scan, which writes none); read its data with streamacc.open(path)"
        else:
            fix = (
                "summaries=False or an older streamacc, or grown from a small output, and its data are too many "
                f"to draw from: more than {OVERVIEW_DATA_VALUES_AT_MOST} values); read its data with "
                "streamacc.open(path), or rewrite it with summaries on"
            )
        raise NoOutputError(f"{target.label} has no summaries (written with {fix}")
    start, stop = manifest.span()
    every = ident.blocking.save_every
    if manifest.committed_rows <= 0:
        raise NoOutputError(f"{target.label} has no committed step yet; wait for its first block, or resume it")
    a, b = _range(steps, start, stop)
    ra, rb = rows_in(a, b, every)  # the rows holding steps in [a, b): summaries count rows
    if ra >= rb:
        raise InputError(f"steps {a} to {b} hold no stored row (every {every}th step is kept); choose a longer range")
    windows = summaries.store.windows
    index = choose_level(windows, ra, rb, int(points))
    w = windows[index]
    first, last = ra // w, (rb - 1) // w + 1
    root = _node(target, "zarr.json").get("attributes", {})
    data_vars = {}
    for name, pyramid in summaries.pyramids.items():
        level = pyramid.levels[index]
        parts = []
        if first < min(last, level.emitted):
            parts.append(summaries.rows(name, index, first, min(last, level.emitted)))
        partial = pyramid.partial_rows()[index]
        if first <= level.emitted < last and partial is not None:
            parts.append(partial)
        rows = parts[0] if len(parts) == 1 else Rows.concat(parts)
        data_vars.update(_columns(target, name, rows, name in summaries.plan.over_state))
    steps_ = step_labels(np.arange(first, last, dtype=np.int64) * w, manifest)
    table_attrs = {k: v for k, v in root.items() if not k.startswith("streamacc_")}
    table_attrs.update({"window": w * every, "windows": [v * every for v in windows], "first_step": a, "stop_step": b})
    progress = progress_attrs((start, stop), manifest.length, manifest.complete)  # as open's (see there)
    return Table(data_vars, steps_, table_attrs, progress, ident.time)
