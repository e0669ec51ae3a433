"""``verify``'s check of an output's window summaries against its data, which verify has proven to recompute.

Minima, maxima, means and counts are compared bit for bit. A coarser window is compared with the fold of the
stored windows below it, or, when every block is checked, with the fold of the windows recomputed from the data.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..errors import one_line
from ._pyramid import BlockPieces, Piece, Pyramid, fold_children
from ._reduce import Rows
from ._summaries import Summaries

__all__ = ["SummaryCheck"]


def _same_bits(x: np.ndarray, y: np.ndarray, *, zeros: bool = False) -> bool:
    """Whether ``x`` and ``y`` hold the same bits; with ``zeros``, 0.0 and -0.0 count as the same."""
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    if x.tobytes() == y.tobytes():
        return True
    if not zeros or x.dtype != y.dtype or x.shape != y.shape or x.dtype.kind != "f":
        return False
    bits = np.dtype(f"u{x.dtype.itemsize}")
    return bool(np.all((x.view(bits) == y.view(bits)) | ((x == 0) & (y == 0))))


def _same(a: Rows, b: Rows) -> bool:
    """Row for row the same bits. A minimum or maximum of zero may differ in its sign only: outputs written by
    1.0 and before settled a tie between 0.0 and -0.0 by where it fell in numpy's loops, and keep verifying."""
    return all(
        _same_bits(x, y, zeros=name in ("min", "max"))
        for (name, x), y in zip(a.arrays().items(), b.arrays().values(), strict=True)
    )


def _same_piece(a: Piece | None, b: Piece | None) -> bool:
    if a is None or b is None:
        return a is b
    same = _same(a.acc.one().rows(), b.acc.one().rows())
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

    def _compare(self, name: str, index: int, first: int, rows: Rows) -> None:
        """Compare stored windows ``[first, first + len(rows))`` of level ``index`` with ``rows`` (recomputed from the
        data, or folded from the stored rows below them), bit for bit."""
        level = self.summaries.pyramids[name].levels[index]
        stop = first + len(rows)
        try:
            stored = self.summaries.rows(name, index, first, min(stop, level.emitted))
        except Exception as exc:  # a damaged chunk fails in its codec or checksum, with the codec's own error
            what = f"windows of {level.window} steps, {type(exc).__name__}: {one_line(exc)}"
            raise self.fail(f"the summaries of {name!r} cannot be read ({what})") from None
        if stop > level.emitted or not _same(stored, rows):
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
                    self._compare(name, index, 0, parents)
