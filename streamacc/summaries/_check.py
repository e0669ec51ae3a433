"""``verify``'s check of an output's window summaries against its data, which verify has proven to recompute.

Minima, maxima and counts are compared bit for bit; so are means, but for an output whose windows a TPU or GPU
may have reduced (float32, bfloat16, float16: see ``engine.window_stats``), whose mean recomputed from the data may
differ by :func:`mean_tolerance`. A coarser window is compared with the fold of the stored windows below it bit for
bit, or, when every block is checked, with the fold of the windows recomputed from the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import one_line
from ._pyramid import BlockPieces, Piece, Pyramid, fold_children
from ._reduce import Rows
from ._summaries import Summaries

__all__ = ["MEAN_ROUNDING", "SummaryCheck", "mean_tolerance"]


def _same_bits(x: np.ndarray, y: np.ndarray, *, zeros: bool = False) -> bool:
    """Whether ``x`` and ``y`` hold the same bits; with ``zeros``, 0.0 and -0.0 count as the same."""
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    if x.tobytes() == y.tobytes():
        return True
    if not zeros or x.dtype != y.dtype or x.shape != y.shape or x.dtype.kind != "f":
        return False
    bits = np.dtype(f"u{x.dtype.itemsize}")
    return bool(np.all((x.view(bits) == y.view(bits)) | ((x == 0) & (y == 0))))


def _same(a: Rows, b: Rows, *, rounded: bool = False) -> bool:
    """Row for row the same bits. A minimum or maximum of zero may differ in its sign only: outputs written by
    1.0 and before settled a tie between 0.0 and -0.0 by where it fell in numpy's loops, and keep verifying.

    With ``rounded`` (``b`` recomputed from the data), the mean of an output whose windows a device may have
    reduced (float32, bfloat16, float16: their minima are float32 or float16) may differ from the data's by
    :func:`mean_tolerance`: its sum's last bits depend on the order the device added in."""
    for (name, x), y in zip(a.arrays().items(), b.arrays().values(), strict=True):
        if _same_bits(x, y, zeros=name in ("min", "max")):
            continue
        if not (rounded and name == "mean" and _device_reduced(a) and x.shape == y.shape):
            return False
        bound = mean_tolerance(b.count, b.min, b.max)
        with np.errstate(invalid="ignore"):
            close = (np.abs(x - y) <= bound) | (np.isnan(x) & np.isnan(y))
        if not close.all():
            return False
    return True


def _device_reduced(rows: Rows) -> bool:
    """Whether a device may have reduced these rows' windows: an output of float32, bfloat16 or float16, whose
    minima are float32 (bfloat16's too) or float16 (see ``engine.window_stats``)."""
    return rows.min.dtype in (np.dtype(np.float32), np.dtype(np.float16))


MEAN_ROUNDING = 2.0**-46
"""Of the sum of a window's magnitudes, what a device's float32 pairwise sum may differ from the exact sum by for each
squared level of its pairs (a window of n values has log2(n) + 1 levels): the sum of the rounding errors, kept beside
the sum, is itself summed in float32 (``engine.window_stats``)."""


def mean_tolerance(count: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """How far a window's mean computed by a device (see ``engine.window_stats``) may lie from numpy's, for windows of
    ``count`` values between ``low`` and ``high``.

    Each lies near the exact mean: numpy's float64 sum of n values within ``n * 2**-53`` of the sum of their
    magnitudes, the device's within ``(log2(n) + 1)**2 * 2**-47`` of it (its float32 pairs), and that sum is at most
    n times the largest magnitude, ``max(|low|, |high|)``; twice both, and ``2**-120`` for the subnormal numbers a
    device may flush to zero. A window of float32 values is summed exactly by both in most cases, and its means then
    agree bit for bit.
    """
    n = np.maximum(np.asarray(count, dtype=np.float64), 1.0)
    levels = np.ceil(np.log2(n)) + 1
    with np.errstate(invalid="ignore"):
        scale = np.fmax(np.abs(np.asarray(low, dtype=np.float64)), np.abs(np.asarray(high, dtype=np.float64)))
    return np.asarray((n * 2.0**-52 + levels**2 * MEAN_ROUNDING) * scale + 2.0**-120)


def _same_piece(a: Piece | None, b: Piece | None) -> bool:
    if a is None or b is None:
        return a is b
    same = _same(a.acc.one().rows(), b.acc.one().rows(), rounded=True)
    return (a.window, a.start, a.stop) == (b.window, b.start, b.stop) and same


class SummaryCheck:
    """``verify``'s check of the summaries against the data it reads back (already proven to recompute).

    When every committed block is checked, in scan order, the summaries are rebuilt from
    the data exactly as the writer built them and compared row for row, tail included.
    When only some blocks are checked, the finest windows lying inside them are compared
    with the data, and every coarser row with the fold of the stored rows below it.
    """

    def __init__(self, summaries: Summaries, length: int, streaming: bool, fail: Any) -> None:
        self.summaries = summaries
        self.streaming = streaming
        self.fail = fail
        self.checked = 0
        windows = summaries.store.windows
        self.fresh = {n: Pyramid.new(windows, length, 1) for n in summaries.pyramids} if streaming else {}
        for name, pyramid in self.fresh.items():
            for level, loaded in zip(pyramid.levels, summaries.pyramids[name].levels, strict=True):
                level.chunk = loaded.chunk

    def _compare(self, name: str, index: int, first: int, rows: Rows, *, from_data: bool = True) -> None:
        """Compare stored windows ``[first, first + len(rows))`` of level ``index`` with ``rows``: recomputed from the
        data (``from_data``: a mean a device computed may differ by :func:`mean_tolerance`), or folded from the
        stored rows below them (bit for bit)."""
        level = self.summaries.pyramids[name].levels[index]
        stop = first + len(rows)
        try:
            stored = self.summaries.rows(name, index, first, min(stop, level.emitted))
        except Exception as exc:  # a damaged chunk fails in its codec or checksum, with the codec's own error
            what = f"windows of {level.window} steps, {type(exc).__name__}: {one_line(exc)}"
            raise self.fail(f"the summaries of {name!r} cannot be read ({what})") from None
        if stop > level.emitted or not _same(stored, rows, rounded=from_data):
            raise self.fail(
                f"the summaries of {name!r} (windows of {level.window} steps, windows {first} to {stop - 1}) do not "
                "match its data"
            )
        self.checked += len(rows)

    def block(self, start: int, cut: Mapping[str, BlockPieces]) -> None:
        """Check what the committed block beginning at ``start`` contributes (``cut``: its pieces, from its data)."""
        for name, pieces in cut.items():
            if self.streaming:
                fresh = self.fresh[name]
                for index, first, rows in fresh.add(pieces):
                    self._compare(name, index, first, rows)
                    fresh.levels[index].made_durable(first + len(rows))
            elif pieces.rows is not None:
                self._compare(name, 0, pieces.first, pieces.rows)

    def finish(self) -> None:
        for name, loaded in self.summaries.pyramids.items():
            if self.streaming:
                fresh = self.fresh[name]
                for index, first, rows in fresh.catch_up():  # the finest windows not folded up yet
                    self._compare(name, index, first, rows)
                    fresh.levels[index].made_durable(first + len(rows))
                for index, (mine, theirs) in enumerate(zip(fresh.levels, loaded.levels, strict=True)):
                    if mine.emitted != theirs.emitted:
                        raise self.fail(f"the summaries of {name!r} count {theirs.emitted} windows of {theirs.window} "
                                        f"steps where the data make {mine.emitted}")  # fmt: skip
                    if mine.pending is not None:
                        self._compare(name, index, mine.durable, mine.pending)
                if not _same_piece(fresh.open, loaded.open):
                    raise self.fail(f"the open window of the summaries of {name!r} does not match its data")
                continue
            for index in range(1, len(loaded.levels)):
                level, below = loaded.levels[index], loaded.levels[index - 1]
                if level.emitted:
                    children = self.summaries.rows(name, index - 1, 0, min(below.emitted, level.emitted * level.factor))
                    _, parents = fold_children(None, 0, children, level.factor, below.total)
                    if parents is None or len(parents) != level.emitted:
                        raise self.fail(f"the summaries of {name!r} at windows of {level.window} steps count "
                                        "windows their finer level does not hold")  # fmt: skip
                    self._compare(name, index, 0, parents, from_data=False)
