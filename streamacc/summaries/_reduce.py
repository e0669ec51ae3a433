"""The reductions of window summaries: a batch of windows' min, max, sum and count in numpy, and their rows.

Each reduction runs over slices of about ``SLICE_BYTES`` of rows, so that its second and
third passes find the slice in the core's cache; a state wider than a slice is reduced a
tile of its values at a time. The order of every sum is numpy's over a window's steps, so
the stored means are bit for bit the same however the reductions are cut. numpy's loops for
bfloat16 (ml_dtypes') are scalar and several times slower than its float32 loops, so bfloat16 is
reduced as float32 a slice at a time, exactly (each bfloat16 is a float32): its minima and
maxima are float32s holding bfloat16 values, stored so.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from ..base import numpy_float

__all__ = ["SLICE_BYTES", "Acc", "Rows", "reduce_steps"]


@dataclasses.dataclass
class Rows:
    """Stored statistics of consecutive windows (window axis first): what the summary arrays hold."""

    min: np.ndarray
    max: np.ndarray
    mean: np.ndarray  # float64
    count: np.ndarray  # int64: the values that are not NaN

    def __len__(self) -> int:
        return len(self.count)

    def __getitem__(self, index: slice) -> Rows:
        return Rows(self.min[index], self.max[index], self.mean[index], self.count[index])

    @staticmethod
    def concat(parts: list[Rows]) -> Rows:
        return Rows(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("min", "max", "mean", "count")))

    def arrays(self) -> dict[str, np.ndarray]:
        return {"min": self.min, "max": self.max, "mean": self.mean, "count": self.count}


def _zero_ties(folded: np.ndarray, a: np.ndarray, b: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """``folded``, where ``a`` and ``b`` are both zeros: -0.0 where ``negative``, else 0.0."""
    if folded.dtype.kind != "f":
        return folded
    tie = (a == 0) & (b == 0)
    if not tie.any():
        return folded
    zero = np.zeros((), folded.dtype)
    return np.where(tie, np.where(negative, -zero, zero), folded)


def _fmin(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.fmin``, with -0.0 the smaller of two zeros: numpy's vector and scalar loops settle that tie each
    their own way, so a window's minimum would depend on where its parts fell in the arrays folded."""
    return _zero_ties(np.fmin(a, b), a, b, np.signbit(a) | np.signbit(b))


def _fmax(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.fmax``, with 0.0 the larger of two zeros (see :func:`_fmin`)."""
    return _zero_ties(np.fmax(a, b), a, b, np.signbit(a) & np.signbit(b))


@dataclasses.dataclass
class Acc:
    """Running statistics of one window (or of a batch of windows, window axis first)."""

    min: np.ndarray
    max: np.ndarray
    sum: np.ndarray  # float64, of the values that are not NaN
    count: np.ndarray  # int64

    def fold(self, other: Acc) -> Acc:
        """``self`` then ``other``: the one way any two parts of a window are combined."""
        return Acc(
            _fmin(self.min, other.min), _fmax(self.max, other.max), self.sum + other.sum, self.count + other.count
        )

    def rows(self) -> Rows:
        """The stored form: the mean instead of the sum (NaN where every value was NaN)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.true_divide(self.sum, self.count)
        return Rows(self.min, self.max, np.where(self.count > 0, mean, np.nan), self.count)

    def __getitem__(self, index: int | slice | tuple[int | slice, ...]) -> Acc:
        return Acc(self.min[index], self.max[index], self.sum[index], self.count[index])

    def fields(self) -> tuple[np.ndarray, ...]:
        return self.min, self.max, self.sum, self.count

    def one(self) -> Acc:
        """This single window's statistics as a batch of one."""
        return Acc(*(np.expand_dims(v, 0) for v in self.fields()))

    @staticmethod
    def of_rows(rows: Rows) -> Acc:
        """What stored rows contribute to the window above them: their sums as ``mean * count``."""
        return Acc(rows.min, rows.max, np.where(rows.count > 0, rows.mean * rows.count, 0.0), rows.count)


SLICE_BYTES = 2**20
"""Windows are reduced a slice of about this many bytes at a time, so that of the three passes
(min, max, sum) over a slice only the first reads memory and the other two find the slice in
the core's cache; smaller slices would pay more in calls than the cache saves
(``python benchmarks/bench_summaries.py --slices`` compares the sizes)."""


def _sum(
    data: npt.NDArray[Any], axis: int, out: npt.NDArray[np.float64] | None = None
) -> npt.NDArray[np.float64] | np.float64:
    """The float64 sum along ``axis`` (0 or 1), into ``out`` where given.

    Along contiguous steps (a series) einsum's loop, twice as fast here as ``np.add.reduce``;
    across the steps of a state (rows added element by element) ``np.add.reduce``, faster there.
    """
    cast = None if data.dtype == np.float64 else np.float64  # None: numpy's default, no cast
    total: npt.NDArray[np.float64] | np.float64
    if data.ndim == axis + 1:
        total = np.einsum("i->" if axis == 0 else "ij->i", data, dtype=cast, out=out)
    else:
        total = np.add.reduce(data, axis=axis, dtype=cast, out=out)
    return total


def _numpy(data: np.ndarray) -> np.ndarray:
    """``data`` in a dtype of numpy's own that holds its values exactly (bfloat16 as float32; others as they are)."""
    wide = numpy_float(data.dtype)
    return data if wide == data.dtype else data.astype(wide)


def _reduce(data: np.ndarray, axis: int) -> Acc:
    data = _numpy(data)
    if data.dtype.kind == "b":
        low, high = np.logical_and.reduce(data, axis=axis), np.logical_or.reduce(data, axis=axis)
    else:
        low, high = np.minimum.reduce(data, axis=axis), np.maximum.reduce(data, axis=axis)
    total = np.asarray(_sum(data, axis))
    count = np.full(total.shape, data.shape[axis], dtype=np.int64)
    if data.dtype.kind == "f":
        bad = np.isnan(total)
        if bad.any():  # a NaN in the window (or an inf - inf): a second, NaN-aware pass
            nan = np.isnan(data)
            count = count - np.count_nonzero(nan, axis=axis)
            total = np.where(bad, _sum(np.where(nan, 0, data), axis), total)
            low = np.where(bad, np.fmin.reduce(data, axis=axis), low)
            high = np.where(bad, np.fmax.reduce(data, axis=axis), high)
    return Acc(np.asarray(low), np.asarray(high), total, np.asarray(count))


STATE_TILE_VALUES = 64
"""The fewest values of a state a tile of :func:`reduce_steps` spans (see ``_reduce_state``): each
step's part of a tile is then at least 512 bytes of float64 in a row, and a tile never spans a
single value, which numpy would reduce along its steps in another order."""


def _reduce_state(data: np.ndarray, axis: int) -> Acc:
    """:func:`reduce_steps` of a state (``data`` has axes after the steps), in tiles of about ``SLICE_BYTES``.

    A tile is a few whole windows where a window fits in ``SLICE_BYTES``, else a range of the
    state's values (at least ``STATE_TILE_VALUES``) over one window's steps: numpy reduces a
    state along its steps value by value, in step order, so each value's statistics are the
    bits of one call over the whole window. The second and third passes over a tile then find
    it in the core's cache instead of memory, which saves CPU on a large field's block and a
    wide state's (``python benchmarks/bench_summaries.py --slices`` measures it).
    """
    batch = data if axis == 1 else data[np.newaxis]
    windows, steps = batch.shape[:2]
    state = batch.shape[2:]
    flat = batch.reshape(windows, steps, -1)
    values = flat.shape[2]
    window_bytes = steps * values * flat.itemsize
    if window_bytes <= SLICE_BYTES:
        rows, width = max(1, SLICE_BYTES // window_bytes), values
    else:
        rows, width = 1, max(STATE_TILE_VALUES, SLICE_BYTES // (steps * flat.itemsize))
        if values - width < STATE_TILE_VALUES:
            width = values  # no narrow last tile
    wide = numpy_float(flat.dtype)
    low, high = np.empty((windows, values), wide), np.empty((windows, values), wide)
    total = np.empty((windows, values), np.float64)
    count = np.full((windows, values), steps, dtype=np.int64)
    first, last = (np.logical_and, np.logical_or) if flat.dtype.kind == "b" else (np.minimum, np.maximum)
    for i in range(0, windows, rows):
        for j in range(0, values, width):
            at = (slice(i, i + rows), slice(j, j + width if values - (j + width) >= STATE_TILE_VALUES else values))
            part = _numpy(flat[at[0], :, at[1]])
            first.reduce(part, axis=1, out=low[at])
            last.reduce(part, axis=1, out=high[at])
            _sum(part, 1, out=total[at])
            if wide.kind == "f" and np.isnan(total[at]).any():  # a NaN in the tile: NaN-aware again
                low[at], high[at], total[at], count[at] = _reduce(part, 1).fields()
            if at[1].stop == values:
                break
    shape = (windows, *state)
    acc = Acc(low.reshape(shape), high.reshape(shape), total.reshape(shape), count.reshape(shape))
    return acc if axis == 1 else acc[0]


def reduce_steps(data: np.ndarray, axis: int) -> Acc:
    """Statistics of ``data`` along ``axis`` (a window's steps: 0 for one window, 1 for a batch), NaNs skipped.

    Only windows holding a NaN (or an inf - inf) pay for a second, NaN-aware pass. A
    large batch of a series goes a slice of windows at a time, a large state a tile at a
    time (see ``_reduce_state``); one window of a series is reduced in one call. A minimum
    of zero is -0.0 where the window holds a -0.0, a maximum of zero 0.0 where it holds a
    0.0, as :meth:`Acc.fold` settles the tie, whichever zero numpy's loops gave.
    """
    acc = _reduce_any(data, axis)
    if acc.min.dtype.kind == "f":
        _settle_zeros(data, axis, acc.min, smallest=True)
        _settle_zeros(data, axis, acc.max, smallest=False)
    return acc


def _settle_zeros(data: np.ndarray, axis: int, extreme: np.ndarray, *, smallest: bool) -> None:
    """Where ``extreme`` (the minimum if ``smallest``, else the maximum along ``axis``) is a zero, make it the
    zero of the window's that comes first in the order -0.0 < 0.0 from that end."""
    moved = np.moveaxis(data, axis, -1)  # steps last
    if extreme.ndim == 0:  # one window of a series
        extreme, moved = extreme.reshape(1), moved[np.newaxis]
    at = np.nonzero(extreme == 0)
    if not at[0].size:
        return
    series = moved[at]  # the windows (and values of a state) concerned
    zeros = series == 0
    found = (zeros & np.signbit(series)) if smallest else (zeros & ~np.signbit(series))
    zero = np.zeros((), extreme.dtype)
    extreme[at] = np.where(found.any(axis=-1), -zero if smallest else zero, zero if smallest else -zero)


def _reduce_any(data: np.ndarray, axis: int) -> Acc:
    if data.nbytes <= SLICE_BYTES:
        return _reduce(data, axis)
    if data.ndim > axis + 1:
        return _reduce_state(data, axis)
    if axis == 0:
        return _reduce_long(data)
    return _reduce_windows(data)


def _extremes(data: np.ndarray) -> tuple[np.ufunc, np.ufunc]:
    """The reductions of a minimum and a maximum of ``data``'s dtype (logical ones for booleans)."""
    return (np.logical_and, np.logical_or) if data.dtype.kind == "b" else (np.minimum, np.maximum)


def _identities(dtype: np.dtype) -> tuple[Any, Any]:
    """The smallest and largest values of ``dtype`` (a maximum's and a minimum's identity): infinities, an integer
    type's bounds, False and True."""
    if dtype.kind == "f":
        return -np.inf, np.inf
    if dtype.kind == "b":
        return False, True
    bounds = np.iinfo(dtype)
    return bounds.min, bounds.max


def _reduce_windows(data: np.ndarray) -> Acc:
    """:func:`reduce_steps` of a batch of series windows (window axis first) larger than a slice: three calls a
    slice of windows, into arrays made once (no per-slice arrays to join), the dtype's work done once."""
    windows, steps = data.shape
    rows = max(1, SLICE_BYTES * windows // data.nbytes)
    wide = numpy_float(data.dtype)
    cast = wide != data.dtype  # bfloat16: each slice reduced as float32
    low, high, total = np.empty(windows, wide), np.empty(windows, wide), np.empty(windows, np.float64)
    first, last = _extremes(data)
    minimum, maximum = first.reduce, last.reduce
    # the reductions' identities: without them numpy starts each window from its first step, copied across windows
    smallest, largest = _identities(wide)
    summed = None if wide == np.float64 else np.float64  # None: numpy's default, no cast (the bits of _sum)
    for i in range(0, windows, rows):  # the slice's first call reads memory, the other two find it in the cache
        j = i + rows
        part = data[i:j].astype(wide) if cast else data[i:j]
        minimum(part, axis=1, out=low[i:j], initial=largest)
        maximum(part, axis=1, out=high[i:j], initial=smallest)
        np.einsum("ij->i", part, dtype=summed, out=total[i:j])
    count = np.full(windows, steps, dtype=np.int64)
    if wide.kind == "f" and np.isnan(total).any():  # the slices holding a NaN window again, NaN-aware
        for i in range(0, windows, rows):
            if np.isnan(total[i : i + rows]).any():
                redone = _reduce(data[i : i + rows], 1)
                low[i : i + rows], high[i : i + rows], total[i : i + rows], count[i : i + rows] = redone.fields()
    return Acc(low, high, total, count)


def _reduce_long(data: np.ndarray) -> Acc:
    """:func:`reduce_steps` of one window of a series larger than a slice (a large state's window, summarised over
    its whole state, flattened): its minimum and maximum a slice at a time (the second call finds the slice in the
    cache: each is exact however cut, a zero's sign settled after), its sum in one call over the whole window, whose
    bits that order makes. Two passes over memory, where three calls over the whole window make three; a window
    holding a NaN (its sum NaN) is reduced again whole, NaN-aware."""
    data = _numpy(data)
    first, last = _extremes(data)
    step = max(1, SLICE_BYTES // data.itemsize)
    lows, highs = [], []
    for i in range(0, len(data), step):
        part = data[i : i + step]
        lows.append(first.reduce(part))
        highs.append(last.reduce(part))
    total = np.asarray(_sum(data, 0))
    if data.dtype.kind == "f" and np.isnan(total):
        return _reduce(data, 0)
    low, high = first.reduce(np.asarray(lows)), last.reduce(np.asarray(highs))
    return Acc(np.asarray(low), np.asarray(high), total, np.asarray(len(data), dtype=np.int64))
