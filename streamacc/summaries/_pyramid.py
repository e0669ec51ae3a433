"""Window summaries (min, max, mean, count) of an output, as pure numpy arithmetic.

An output's steps are cut into windows of ``w`` steps aligned at step 0, at a few
levels, each window ``factor`` times longer than the one below. Every window's
statistics must come out bit for bit the same however the run was cut into blocks,
killed and resumed, or spread over a cluster, so the arithmetic is pinned down here:

* Finest level: a block contributes one *piece* per window it touches (its steps in
  that window), reduced in one numpy call over the contiguous piece; a window's
  statistics are the pieces folded left to right in scan order. The pieces follow the
  block layout, which is part of a run's identity, so every executor and every resume
  makes the same pieces.
* Coarser levels: a window's statistics are its child windows' *stored* rows folded left
  to right, each child contributing ``mean * count`` to the sum. A coarse row is
  therefore a function of stored finer rows alone: ``verify`` checks it without the data,
  and a resumed run rebuilds a coarse window begun before the kill from stored rows.

NaNs are skipped (``fmin``/``fmax``, a count of the values that are not NaN, and a sum
of those), so a window of a float output holding some NaNs still has a min, a max and a
mean; one holding only NaNs has NaN for all three and a count of 0. Integer and boolean
outputs keep their dtype for min and max; every mean is float64.

Arrays here carry the window axis first and the output's trailing (state) axes after it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "Acc",
    "BlockPieces",
    "Piece",
    "Rows",
    "block_pieces",
    "fold_children",
    "fold_pieces",
    "nonfinite_pieces",
    "summarizable",
]


def summarizable(dtype: np.dtype) -> bool:
    """Whether an output of ``dtype`` gets summaries (ordered numbers: floats, integers, booleans)."""
    return np.dtype(dtype).kind in "fiub"


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
            np.fmin(self.min, other.min), np.fmax(self.max, other.max), self.sum + other.sum, self.count + other.count
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


def _reduce(data: np.ndarray, axis: int) -> Acc:
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
    it in the core's cache instead of memory: a block of a 256x256 field inside one longer
    window (64 steps, 32 MiB) took 6.2-6.3 ms of CPU against 8.1-8.3 ms reduced whole, and a
    4096-point state's block (4096 steps, 128 MiB, windows of 64, one window 2 MiB) 28.8-30.3
    ms against 30.7-31.7 ms (``python benchmarks/bench_summaries.py --slices``, run twice with
    each code, alternating).
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
    low, high = np.empty((windows, values), flat.dtype), np.empty((windows, values), flat.dtype)
    total = np.empty((windows, values), np.float64)
    count = np.full((windows, values), steps, dtype=np.int64)
    first, last = (np.logical_and, np.logical_or) if flat.dtype.kind == "b" else (np.minimum, np.maximum)
    for i in range(0, windows, rows):
        for j in range(0, values, width):
            at = (slice(i, i + rows), slice(j, j + width if values - (j + width) >= STATE_TILE_VALUES else values))
            part = flat[at[0], :, at[1]]
            first.reduce(part, axis=1, out=low[at])
            last.reduce(part, axis=1, out=high[at])
            _sum(part, 1, out=total[at])
            if flat.dtype.kind == "f" and np.isnan(total[at]).any():  # a NaN in the tile: NaN-aware again
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
    time (see ``_reduce_state``); one window of a series is reduced in one call.
    """
    if data.nbytes <= SLICE_BYTES:
        return _reduce(data, axis)
    if data.ndim > axis + 1:
        return _reduce_state(data, axis)
    if axis == 0:
        return _reduce(data, axis)
    rows = max(1, SLICE_BYTES * len(data) // data.nbytes)
    shape = (len(data), *data.shape[2:])
    low, high, total = np.empty(shape, data.dtype), np.empty(shape, data.dtype), np.empty(shape, np.float64)
    first, last = (np.logical_and, np.logical_or) if data.dtype.kind == "b" else (np.minimum, np.maximum)
    for i in range(0, len(data), rows):  # three calls a slice, into place: no per-slice arrays to join
        part = data[i : i + rows]
        first.reduce(part, axis=1, out=low[i : i + rows])
        last.reduce(part, axis=1, out=high[i : i + rows])
        _sum(part, 1, out=total[i : i + rows])
    count = np.full(shape, data.shape[1], dtype=np.int64)
    if data.dtype.kind == "f" and np.isnan(total).any():  # the slices holding a NaN window again, NaN-aware
        for i in range(0, len(data), rows):
            if np.isnan(total[i : i + rows]).any():
                redone = _reduce(data[i : i + rows], axis)
                low[i : i + rows], high[i : i + rows], total[i : i + rows], count[i : i + rows] = redone.fields()
    return Acc(low, high, total, count)


@dataclasses.dataclass(frozen=True)
class Piece:
    """A block's steps ``[start, stop)`` inside finest window ``window`` (not the whole window)."""

    window: int
    start: int
    stop: int
    acc: Acc


@dataclasses.dataclass(frozen=True)
class BlockPieces:
    """What one block contributes to the finest level, in scan order: ``head``, whole ``rows``, ``tail``.

    ``rows`` holds the whole windows ``first, first + 1, ...`` lying inside the block.
    """

    head: Piece | None
    first: int
    rows: Rows | None
    tail: Piece | None


def block_pieces(data: np.ndarray, start: int, window: int, length: int) -> BlockPieces:
    """Cut block ``data`` (steps ``[start, start + len(data))`` of ``length``) into finest-level pieces."""
    stop = start + len(data)
    a = min(-(-start // window) * window, stop)  # the first window boundary in the block
    e = stop if stop == length else stop // window * window  # whole windows end here
    head = tail = rows = None
    if start < a:
        head = Piece(start // window, start, a, reduce_steps(data[: a - start], 0))
    if e > a:
        whole = (e - a) // window
        parts = []
        if whole:
            body = data[a - start : a - start + whole * window]
            parts.append(reduce_steps(body.reshape(whole, window, *data.shape[1:]), 1).rows())
        if a + whole * window < e:  # the output's last window, shorter than the others
            last = reduce_steps(data[a - start + whole * window : e - start], 0)
            parts.append(last.one().rows())
        rows = parts[0] if len(parts) == 1 else Rows.concat(parts)
    if max(e, a) < stop:
        tail = Piece(max(e, a) // window, max(e, a), stop, reduce_steps(data[max(e, a) - start :], 0))
    return BlockPieces(head, a // window, rows, tail)


def _all_finite(low: np.ndarray, high: np.ndarray, count: np.ndarray, values: Any, windows: int) -> np.ndarray:
    """Per window (first axis, ``windows`` of them): whether every value is finite, from its statistics alone.

    A NaN is not counted (the count falls short of the window's ``values``) and an
    infinity is the window's min or max.
    """
    def each(a: Any) -> npt.NDArray[np.bool_]:
        return np.asarray(np.asarray(a).reshape(windows, -1).all(axis=1))

    counted = np.asarray(count).reshape(windows, -1) == np.reshape(values, (-1, 1))
    return each(counted) & each(np.isfinite(low)) & each(np.isfinite(high))


def nonfinite_pieces(pieces: BlockPieces, window: int, length: int) -> list[tuple[int, int]]:
    """The rows ``[start, stop)`` of each of a block's pieces that holds a NaN or an infinity, in row order.

    Read off the pieces' statistics, which every float value went into: what is left to
    look at, row by row, to find the first such row is those pieces alone (none where the
    block is finite). Integer and boolean outputs hold none.
    """
    parts = [p for p in (pieces.head, pieces.tail) if p is not None]
    sample = parts[0].acc.min if parts else None if pieces.rows is None else pieces.rows.min
    if sample is None or np.asarray(sample).dtype.kind != "f":
        return []
    found: list[tuple[int, int]] = []
    head = pieces.head
    if head is not None and not _all_finite(head.acc.min, head.acc.max, head.acc.count, head.stop - head.start, 1)[0]:
        found.append((head.start, head.stop))
    rows = pieces.rows
    if rows is not None:
        first = pieces.first * window
        sizes = np.full(len(rows), window, dtype=np.int64)
        sizes[-1] = min(window, length - (first + (len(rows) - 1) * window))  # the output's last window is short
        for i in np.flatnonzero(~_all_finite(rows.min, rows.max, rows.count, sizes, len(rows))):
            start = first + int(i) * window
            found.append((start, start + int(sizes[i])))
    tail = pieces.tail
    if tail is not None and not _all_finite(tail.acc.min, tail.acc.max, tail.acc.count, tail.stop - tail.start, 1)[0]:
        found.append((tail.start, tail.stop))
    return found


def _extend(open_: Piece | None, piece: Piece, window: int) -> Piece:
    """The open finest window with ``piece`` folded in (``piece`` begins the window when none is open)."""
    if open_ is None:
        if piece.start != piece.window * window:
            raise ValueError(f"steps {piece.start}-{piece.stop} continue a window that was never begun")
        return piece
    if (open_.window, open_.stop) != (piece.window, piece.start):
        raise ValueError(f"steps {piece.start}-{piece.stop} do not follow steps {open_.start}-{open_.stop}")
    return Piece(piece.window, open_.start, piece.stop, open_.acc.fold(piece.acc))


def fold_pieces(open_: Piece | None, pieces: BlockPieces, window: int, length: int) -> tuple[Piece | None, list[Rows]]:
    """Fold one block's pieces into the open finest window; the window left open, and the rows completed."""
    done: list[Rows] = []
    if pieces.head is not None:
        open_ = _extend(open_, pieces.head, window)
        if open_.stop == min((open_.window + 1) * window, length):
            done.append(open_.acc.one().rows())
            open_ = None
    if pieces.rows is not None:
        if open_ is not None:
            raise ValueError(f"window {open_.window} is left open before whole windows")
        done.append(pieces.rows)
    if pieces.tail is not None:
        open_ = _extend(open_, pieces.tail, window)  # a tail never reaches its window's end
    return open_, done


def _groups(first: int, count: int, factor: int, children: int) -> Iterator[tuple[int, int]]:
    """Runs ``[i, j)`` of ``count`` consecutive children (from child ``first``) that share a parent."""
    i = 0
    while i < count:
        c = first + i
        end = min((c // factor + 1) * factor, children)
        j = min(i + end - c, count)
        yield i, j
        i = j


def fold_children(
    acc: Acc | None, first: int, rows: Rows, factor: int, children: int
) -> tuple[Acc | None, Rows | None]:
    """Fold stored child rows ``first, first + 1, ...`` into the open parent ``acc``.

    Returns the parent left open and the parent rows completed (a parent is complete with
    its last child: every ``factor``-th, or the level's last child ``children - 1``).
    Whole groups are folded together, one numpy call per child position, in the same
    order as one at a time.
    """
    part = Acc.of_rows(rows)
    done: list[Rows] = []
    groups = list(_groups(first, len(rows), factor, children))
    k = 0
    while k < len(groups):
        i, j = groups[k]
        ends = min(((first + i) // factor + 1) * factor, children) == first + j
        if acc is None and ends and j - i == factor:
            run = k  # consecutive whole groups: fold them together
            while run + 1 < len(groups) and groups[run + 1][1] - groups[run + 1][0] == factor:
                run += 1
            stop = groups[run][1]
            shaped = Acc(*(v[i:stop].reshape(-1, factor, *v.shape[1:]) for v in part.fields()))
            total = shaped[:, 0]
            for t in range(1, factor):
                total = total.fold(shaped[:, t])
            done.append(total.rows())
            k = run + 1
            continue
        for t in range(i, j):
            child = part[t]
            acc = child if acc is None else acc.fold(child)
        if ends:
            assert acc is not None  # a group holds one child at least
            done.append(acc.one().rows())
            acc = None
        k += 1
    return acc, (Rows.concat(done) if len(done) > 1 else done[0] if done else None)


def chunk_rows(state_size: int) -> int:
    """Windows per stored chunk: about 32 KiB of float64 per statistic, 1 to 4096 windows.

    Chunks cost a write and an fsync each (four files, one per statistic, per 2**24 steps
    of a series at the finest level), and a commit records in the manifest the finest rows
    in no durable chunk yet: at most a chunk and the chunks being fsynced, 32 KiB per 1024
    windows of a series. The 4096 windows of a 2**32-step picture are one chunk per
    statistic.
    """
    rows = (32 * 1024 // 8) // max(state_size, 1)
    return 1 << max(0, min(rows, 4096).bit_length() - 1)


@dataclasses.dataclass
class Level:
    """One level of one output's summaries while it is written: what is durable, pending and open."""

    window: int
    factor: int  # windows of the level below per window (1 for the finest)
    total: int  # windows in the whole output
    chunk: int  # windows per stored chunk
    emitted: int = 0  # windows complete
    durable: int = 0  # windows [0, durable) are in durable chunks
    pending: Rows | None = None  # complete windows [durable, emitted), in no durable chunk yet
    acc: Acc | None = None  # the open window (coarse levels)

    @property
    def whole(self) -> int:
        """Windows in whole chunks (every window once the level is complete): what may be written."""
        return self.emitted if self.emitted == self.total else self.emitted // self.chunk * self.chunk

    def made_durable(self, upto: int) -> None:
        """Windows ``[durable, upto)`` are now in durable chunks: drop them from the pending rows."""
        if upto > self.durable:
            if upto >= self.emitted:
                self.pending = None
            else:
                assert self.pending is not None  # windows [durable, emitted) are pending
                self.pending = self.pending[upto - self.durable :]
            self.durable = upto


@dataclasses.dataclass
class Pyramid:
    """The summaries of one output array at every level, fed block by block in scan order.

    :meth:`add` folds one block's pieces in and returns the chunks now complete, as
    ``(level, first window, rows)``: those are written once and never change. Until the
    caller reports them durable (:meth:`Level.made_durable`), their rows stay pending:
    each level's pending rows and the open finest window are the tail a commit records.
    """

    length: int
    levels: list[Level]
    open: Piece | None = None  # the open finest window

    @classmethod
    def new(cls, windows: list[int], length: int, state_size: int) -> Pyramid:
        chunk = chunk_rows(state_size)
        levels = [Level(w, w // windows[i - 1] if i else 1, -(-length // w), chunk) for i, w in enumerate(windows)]
        return cls(length, levels)

    def add(self, pieces: BlockPieces) -> list[tuple[int, int, Rows]]:
        self.open, done = fold_pieces(self.open, pieces, self.levels[0].window, self.length)
        writes: list[tuple[int, int, Rows]] = []
        for rows in done:
            self._emit(0, rows, writes)
        return writes

    def _emit(self, index: int, rows: Rows, writes: list[tuple[int, int, Rows]]) -> None:
        level = self.levels[index]
        first = level.emitted
        written = level.whole
        level.pending = rows if level.pending is None else Rows.concat([level.pending, rows])
        level.emitted += len(rows)
        if level.whole > written:
            writes.append((index, written, level.pending[written - level.durable : level.whole - level.durable]))
        if index + 1 < len(self.levels):
            upper = self.levels[index + 1]
            upper.acc, parents = fold_children(upper.acc, first, rows, upper.factor, level.total)
            if parents is not None:
                self._emit(index + 1, parents, writes)

    def covered(self) -> int:
        """Steps folded in so far (from step 0): the finest level's complete windows and its open one."""
        first = self.levels[0]
        if self.open is not None:
            return self.open.stop
        return self.length if first.emitted == first.total else first.emitted * first.window

    def partial_rows(self) -> list[Rows | None]:
        """Each level's open window as one row, over the steps folded so far (None where none is open)."""
        out: list[Rows | None] = []
        below: Rows | None = None if self.open is None else self.open.acc.one().rows()
        for i, level in enumerate(self.levels):
            if i == 0:
                out.append(below)
                continue
            acc = level.acc
            if below is not None:
                part = Acc.of_rows(below)[0]
                acc = part if acc is None else acc.fold(part)
            below = None if acc is None else acc.one().rows()
            out.append(below)
        return out
