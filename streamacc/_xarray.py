"""xarray's side of ``streamacc.open``: the ``step`` and ``time`` indexes, and a virtual output's recomputed arrays.

Output row ``p`` of a run holds step ``first + p * stride`` (``row_step`` of
``base/_blocking``: ``stride`` is ``save_every``), and with a time axis the time
``start + step * dt``. ``step`` is indexed by xarray's own ``PandasIndex`` over pandas'
``RangeIndex`` (:class:`~streamacc._steps.Steps`, lazy and exact), so that it aligns,
reindexes, concatenates and swaps with any pandas-indexed ``step`` as the labels
materialised would. ``time`` has an index of its own, :class:`TimeIndex`, which never
materialises its labels: ``sel`` by time, slice or array (exact, or with
``method='nearest'``, ``'pad'``, ``'backfill'``) works on the few rows around each label,
found by arithmetic; ``isel``, ``where(..., drop=True)``, ``concat`` and alignment along
``step`` keep it in step with the steps. (xarray reindexes a dimension with two indexes only
where every object has both: to align along ``step`` with an object without a ``time``
index, or to swap ``step`` for ``time``, drop it first, ``ds.drop_indexes("time")``.) A
selection that is no longer evenly spaced keeps its labels explicitly: only the rows
selected.

A virtual output's arrays as xarray reads them: recomputed blocks handed over as they lie.

Read through zarr, every chunk of a virtual output is computed into a block buffer and then
copied by zarr into an array of its own, whose fresh pages the kernel zero-fills first: a
large share of the work of reading a long output in full. A dask task that asks for rows
lying in one recomputed block gets a read-only view of the block instead (the buffer goes
back to its pool once the last view of it is gone); anything else (stored blocks, rows
across blocks, fancy indexing) is read through zarr as before.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import pandas as pd
import xarray as xr
import zarr
from xarray.backends import BackendArray

# What an index's sel returns and the lazy coordinate of a transform index, and a backend array's indexing
# (explicit_indexing_adapter, LazilyIndexedArray) as xarray's own backends use it: the index and backend APIs
# document them, but xarray exports them from no public module.
from xarray.core import indexing
from xarray.indexes import CoordinateTransform, CoordinateTransformIndex, PandasIndex

from ._steps import Steps
from .base import is_calendar, row_step, times
from .store import register_data_types


class BlockSource(Protocol):
    """What a recomputed array asks of its store (``run.RecomputingStore``): its arrays, and rows as they lie."""

    @property
    def names(self) -> list[str]: ...

    def block_rows(self, name: str, start: int, stop: int) -> np.ndarray | None: ...



__all__ = ["StepTransform", "TimeIndex", "recomputed_variables", "step_coordinates"]


STEP, TIME = "step", "time"


def step_coordinates(start: int, stop: int, save_every: int, time: Mapping[str, Any] | None) -> xr.Coordinates:
    """The ``step`` (and ``time``) coordinates of output rows ``[start, stop)`` of a run that keeps every
    ``save_every``-th step: ``step`` in a ``PandasIndex`` over :class:`Steps`, ``time`` in a :class:`TimeIndex`."""
    first, size = row_step(start, save_every), max(0, stop - start)
    index = PandasIndex(Steps(first, first + size * save_every, save_every, name=STEP), STEP)
    variables = index.create_variables()
    variables[STEP].attrs.update(_default_attrs(STEP, None))
    coords = xr.Coordinates(variables, indexes={STEP: index})
    if time:
        coords = coords.assign(xr.Coordinates.from_xindex(TimeIndex.for_rows(start, stop, save_every, time)))
    return coords


class StepTransform(CoordinateTransform):
    """Row positions to times, through the steps the rows hold (exact int64 labels).

    Evenly spaced (``first + p * stride``) unless ``labels`` holds them explicitly.
    """

    def __init__(
        self, first: int, stride: int, size: int, time: Mapping[str, Any], labels: np.ndarray | None = None
    ) -> None:
        time_dtype = np.dtype("datetime64[ns]") if is_calendar(time["units"]) else np.dtype(np.float64)
        super().__init__((TIME,), {STEP: size}, dtype=time_dtype)
        self.first, self.stride, self.time, self.labels = int(first), int(stride), time, labels
        self.dtypes: dict[Hashable, np.dtype[Any]] = {TIME: time_dtype}

    @property
    def size(self) -> int:
        return self.dim_size[self.dims[0]]

    def steps(self, positions: Any) -> np.ndarray:
        rows = np.asarray(positions, dtype=np.int64)
        if self.labels is not None:
            return self.labels[rows]
        return self.first + rows * self.stride

    def forward(self, dim_positions: dict[str, Any]) -> dict[Hashable, Any]:
        return {name: times(self.steps(dim_positions[self.dims[0]]), self.time) for name in self.coord_names}

    def equals(self, other: CoordinateTransform, **kwargs: Any) -> bool:
        if not isinstance(other, StepTransform) or self.time != other.time or self.size != other.size:
            return False
        if self.labels is None and other.labels is None:
            return self.size == 0 or (self.first, self.stride) == (other.first, other.stride)
        return bool(np.array_equal(self.all_steps(), other.all_steps()))

    def all_steps(self) -> np.ndarray:
        return self.steps(np.arange(self.size))

    def regular(self) -> tuple[int, int] | None:
        """``(first, stride)`` when the labels are evenly spaced (then nothing is materialised), else None."""
        if self.labels is None:
            return self.first, self.stride
        return _progression(self.labels)

    def step_labels(self) -> pd.Index:
        """The steps of its rows as pandas holds them: :class:`Steps` where evenly spaced."""
        spaced = self.regular()
        if spaced is None:
            return pd.Index(self.all_steps(), name=STEP)
        first, stride = spaced
        return Steps(first, first + self.size * stride, stride, name=STEP)

    def subset(self, positions: Any) -> StepTransform:
        """The transform of the rows at ``positions`` (a slice or an integer array), evenly spaced where possible."""
        if isinstance(positions, slice):
            rows = range(self.size)[positions]
            if self.labels is None:
                first = self.first + rows.start * self.stride
                return StepTransform(first, self.stride * rows.step, len(rows), self.time)
            positions = np.arange(rows.start, rows.stop, rows.step)
        return from_steps(self.steps(positions), self.time)


def _progression(steps: np.ndarray) -> tuple[int, int] | None:
    """``(first, stride)`` of an evenly spaced, non-constant integer sequence, else None."""
    if len(steps) == 0:
        return 0, 1
    if len(steps) == 1:
        return int(steps[0]), 1
    stride = int(steps[1]) - int(steps[0])
    if stride == 0 or not np.array_equal(np.diff(steps), np.full(len(steps) - 1, stride)):
        return None
    return int(steps[0]), stride


def from_steps(steps: Any, time: Mapping[str, Any]) -> StepTransform:
    """A transform for the step labels ``steps`` (an array, or a pandas index): evenly spaced (kept as two numbers,
    never materialised from a ``RangeIndex``) or explicit."""
    if isinstance(steps, pd.RangeIndex):
        return StepTransform(steps.start, steps.step if len(steps) > 1 else 1, len(steps), time)
    steps = np.asarray(steps, dtype=np.int64)
    spaced = _progression(steps)
    if spaced is not None:
        return StepTransform(spaced[0], spaced[1], len(steps), time)
    return StepTransform(0, 1, len(steps), time, labels=steps)


class _LazyCoordinate(indexing.CoordinateTransformIndexingAdapter):
    """xarray's lazy coordinate array, with each coordinate's own dtype (float or date times).

    It holds no values, and says so: a Dataset of 2**32 steps does not count 32 GiB of labels
    in its size.
    """

    _transform: StepTransform

    @property
    def dtype(self) -> np.dtype:
        return self._transform.dtypes[self._coord_name]

    @property
    def nbytes(self) -> int:
        return 0


def _indexer(name: str, values: np.ndarray, labels: np.ndarray, method: str | None, tolerance: Any) -> np.ndarray:
    """pandas' positions of ``labels`` among ``values``; a KeyError saying so where rows share a label.

    Times are float64: far from zero (a start of 2**60, or step 2**60 of a long run) the
    times of neighbouring steps round to one number, which no selection by time can tell apart.
    """
    index = pd.Index(values)
    if not index.is_unique:
        shared = index[index.duplicated()][0]
        raise KeyError(
            f"{name} {shared} labels several rows: float64 times cannot tell neighbouring steps apart at this "
            f"size; select by step instead (ds.sel(step=...))"
        )
    found: np.ndarray = index.get_indexer(labels, method=method, tolerance=tolerance)
    return found


class TimeIndex(CoordinateTransformIndex):
    """The index of ``streamacc.open``'s ``time`` coordinate (with a time axis), along ``step``."""

    transform: StepTransform

    def __init__(self, transform: StepTransform) -> None:
        super().__init__(transform)

    @classmethod
    def for_rows(cls, start: int, stop: int, save_every: int, time: Mapping[str, Any]) -> TimeIndex:
        """The index of the times of output rows ``[start, stop)`` of a run that keeps every ``save_every``-th step."""
        return cls(StepTransform(row_step(start, save_every), save_every, max(0, stop - start), time))

    @property
    def dim(self) -> str:
        return self.transform.dims[0]

    def create_variables(self, variables: Mapping[Any, xr.Variable] | None = None) -> dict[Hashable, xr.Variable]:
        out = {}
        for name in self.transform.coord_names:
            attrs = dict(variables[name].attrs) if variables and name in variables else _default_attrs(name, self)
            out[name] = xr.Variable((self.dim,), _LazyCoordinate(self.transform, name, (self.dim,)), attrs=attrs)
        return out

    def to_pandas_index(self) -> pd.Index:
        return self.transform.step_labels()  # the steps its rows hold, lazily: the times would be materialised

    def isel(self, indexers: Mapping[Any, Any]) -> TimeIndex | None:
        key = indexers.get(self.dim)
        if key is None:  # its coordinate on another dimension (swap_dims keeps the index): it selects no more
            return None
        if isinstance(key, xr.Variable):
            if key.ndim != 1:
                return None
            key = key.values
        if isinstance(key, slice):
            return TimeIndex(self.transform.subset(key))
        key = np.asarray(key)
        if key.ndim != 1:
            return None  # a scalar drops the dimension, and its index with it
        if key.dtype == bool:
            key = np.flatnonzero(key)
        return TimeIndex(self.transform.subset(np.where(key < 0, key + self.transform.size, key)))

    def sel(self, labels: dict[Any, Any], method: str | None = None, tolerance: Any = None) -> indexing.IndexSelResult:
        ((name, label),) = labels.items()
        dims = None
        if isinstance(label, (xr.DataArray, xr.Variable)):
            dims, label = label.dims, label.values
        if isinstance(label, slice):
            if method is not None or tolerance is not None:
                raise ValueError("a slice selects by label range; it takes no method or tolerance")
            return indexing.IndexSelResult({self.dim: self._slice(name, label)})
        positions = self._by_pandas(name, np.asarray(label), method, tolerance)
        if dims is not None:
            return indexing.IndexSelResult({self.dim: xr.Variable(dims, positions)})
        if positions.ndim == 0:
            return indexing.IndexSelResult({self.dim: int(positions)})
        return indexing.IndexSelResult({self.dim: positions})

    # --- label arithmetic ------------------------------------------------------------------

    def _fractional(self, values: np.ndarray) -> np.ndarray:
        """Fractional row positions of times (regular transforms only)."""
        t = self.transform
        offsets = (_time_offsets(values, t.time) - t.time["start"]) / t.time["step"]
        return (np.asarray(offsets, dtype=np.float64) - t.first) / t.stride

    def _by_pandas(self, name: str, labels: np.ndarray, method: str | None, tolerance: Any) -> np.ndarray:
        """Positions through pandas, each label on the few rows around it (all rows for explicit labels)."""
        t = self.transform
        flat = labels.reshape(-1)
        if is_calendar(t.time["units"]):
            flat = pd.to_datetime(flat).values
        if t.labels is None and flat.dtype.kind == "O":
            with contextlib.suppress(TypeError, ValueError):
                flat = flat.astype(np.float64)  # numbers held as objects
        if t.labels is None and flat.dtype.kind not in "iufM":  # never a label: say so before building any
            raise KeyError(
                f"{name} {flat[0].item()!r} is not in the index: its labels are numbers (it holds {name}s "
                f"{self._describe()}); pass a number"
            )
        found: np.ndarray
        if t.labels is not None or flat.dtype.kind not in "iufM":
            found = _indexer(name, self._values(range(t.size)), flat, method, tolerance)
        else:
            found = np.empty(len(flat), dtype=np.int64)
            for i, value in enumerate(flat):  # the rows around each label, found by arithmetic, decide it
                rows = self._around(value)
                hit = _indexer(name, self._values(rows), np.asarray([value]), method, tolerance)[0]
                found[i] = -1 if hit < 0 else hit + rows.start
        if (found < 0).any():
            missing = flat[found < 0][0]
            raise KeyError(f"{name} {missing!r} is not in the index (it holds {name}s {self._describe()}); pass "
                           "method='nearest' to select the closest")  # fmt: skip
        return found.reshape(labels.shape)

    def _around(self, value: Any) -> range:
        """The few rows around where the time ``value`` falls."""
        t = self.transform
        if t.size == 0:
            return range(0)
        frac = float(self._fractional(np.asarray([value]))[0])
        if not math.isfinite(frac):
            return range(0)
        centre = min(max(math.floor(frac), 0), t.size - 1)
        return range(max(0, centre - 1), min(t.size, centre + 3))

    def _values(self, rows: range) -> np.ndarray:
        values: np.ndarray = self.transform.forward({self.dim: np.arange(rows.start, rows.stop)})[TIME]
        return values

    def _slice(self, name: str, label: slice) -> slice:
        """The rows whose time lies in ``label`` (both ends included, as pandas slices by label)."""
        t = self.transform
        if t.labels is not None:
            rows: slice = pd.Index(self._values(range(t.size))).slice_indexer(label.start, label.stop, label.step)
            return rows
        lo = 0 if label.start is None else self._bound(label.start, first=True)
        hi = t.size if label.stop is None else self._bound(label.stop, first=False)
        lo, hi = min(max(lo, 0), t.size), min(max(hi, 0), t.size)
        step = 1 if label.step is None else label.step  # as pandas: a label slice's step counts rows
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 1:
            raise ValueError(f"a label slice's step counts rows and must be a positive integer, got {label.step!r}")
        return slice(lo, max(lo, hi), int(step))

    def _bound(self, value: Any, *, first: bool) -> int:
        """The first row at or past the time ``value`` in index order (``first``), or one past the last before it:
        found among the few rows around the arithmetic guess, on the values themselves."""
        t = self.transform
        frac = float(self._fractional(np.asarray([value]))[0])
        if not math.isfinite(frac):
            return 0 if (frac < 0) == first else t.size
        centre = min(max(math.floor(frac), 0), max(t.size - 1, 0))
        rows = range(max(0, centre - 2), min(t.size, centre + 3))
        values, target = _time_offsets(self._values(rows), t.time), _time_offsets(np.asarray([value]), t.time)
        ordered, bound = np.asarray(values, dtype=np.float64), float(target[0])
        if len(ordered) > 1 and ordered[-1] < ordered[0]:  # descending labels: pandas slices from high to low
            ordered, bound = -ordered, -bound
        found = int(np.searchsorted(ordered, bound, side="left" if first else "right"))
        return rows.start + found

    def _describe(self) -> str:
        t = self.transform
        if t.size == 0:
            return "none"
        return f"{self._values(range(0, 1))[0]} to {self._values(range(t.size - 1, t.size))[0]}"

    # --- combining: by the steps the rows hold, as the step index combines -------------------

    def equals(self, other: Any, *, exclude: frozenset[Hashable] | None = None, **kwargs: Any) -> bool:
        return isinstance(other, TimeIndex) and self.transform.equals(other.transform)

    @classmethod
    def concat(
        cls, indexes: Sequence[TimeIndex], dim: Hashable, positions: Iterable[Iterable[int]] | None = None
    ) -> TimeIndex:
        if positions is not None or any(ix.dim != dim for ix in indexes):
            raise NotImplementedError(f"TimeIndex concatenates along its dimension ({STEP!r}) only, in order")
        if len({repr(ix.transform.time) for ix in indexes}) > 1:
            raise ValueError("cannot concatenate outputs with different time axes along 'step'")
        time = indexes[0].transform.time
        spaced = [ix.transform.regular() for ix in indexes if ix.transform.size]
        sizes = [ix.transform.size for ix in indexes if ix.transform.size]
        regular = [s for s in spaced if s is not None]
        if spaced and len(regular) == len(spaced):
            first, stride = regular[0]
            expected, ok = first, True
            for (f, s), n in zip(regular, sizes, strict=True):
                ok = ok and f == expected and (s == stride or n == 1)
                expected = f + n * stride
            if ok:
                return cls(StepTransform(first, stride, sum(sizes), time))
        steps = np.concatenate([ix.transform.all_steps() for ix in indexes]) if indexes else np.zeros(0, np.int64)
        return cls(from_steps(steps, time))

    def join(self, other: TimeIndex, how: str = "inner") -> TimeIndex:
        mine, theirs = self.transform.step_labels(), other.transform.step_labels()
        joined = mine.union(theirs) if how == "outer" else mine.intersection(theirs)  # as a PandasIndex joins
        return TimeIndex(from_steps(joined, self.transform.time))

    def reindex_like(self, other: TimeIndex, method: str | None = None, tolerance: Any = None) -> dict[Hashable, Any]:
        mine, theirs = self.transform.step_labels(), other.transform.step_labels()
        return {self.dim: mine.get_indexer(np.asarray(theirs), method=method, tolerance=tolerance)}

    def _repr_inline_(self, max_width: int) -> str:
        return f"TimeIndex ({self._describe()})"

    def __repr__(self) -> str:
        return f"TimeIndex({self._describe()}, size={self.transform.size})"


def _time_offsets(values: np.ndarray, time: Mapping[str, Any]) -> np.ndarray:
    """Times (floats, or dates for calendar units) as offsets in the axis' units."""
    if not is_calendar(time["units"]):
        return np.asarray(values, dtype=np.float64)
    from xarray.coding.times import encode_cf_datetime

    dates = pd.to_datetime(np.asarray(values).reshape(-1)).values
    calendar = time.get("calendar", "standard")  # floats: a step may be a fraction of the units (0.5 s)
    return np.asarray(encode_cf_datetime(dates, time["units"], calendar, dtype=np.dtype(np.float64))[0])


def _default_attrs(name: Hashable, index: TimeIndex | None) -> dict[str, Any]:
    if name == STEP or index is None:
        return {"long_name": "step of the scan whose output this row holds"}
    time = index.transform.time
    attrs: dict[str, Any] = {"standard_name": "time", "long_name": "time"}
    if not is_calendar(time["units"]) and time["units"]:
        attrs["units"] = time["units"]
    return attrs


class RecomputedArray(BackendArray):
    """One array of a virtual output: views of recomputed blocks where the rows allow, zarr elsewhere."""

    def __init__(self, store: BlockSource, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
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


def recomputed_variables(ds: xr.Dataset, store: BlockSource) -> xr.Dataset:
    """``ds`` (opened lazily from ``store``, without dask) with its arrays read as :class:`RecomputedArray`."""
    variables = {}
    for name in store.names:
        v = ds[name].variable
        lazy = indexing.LazilyIndexedArray(RecomputedArray(store, name, v.shape, v.dtype))
        variables[name] = xr.Variable(v.dims, lazy, v.attrs, v.encoding)
    return ds.assign(variables)
