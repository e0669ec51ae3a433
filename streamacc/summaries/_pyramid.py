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

An output summarised over its whole state (a large state: see ``_windows.over_state``) has
every value of every step of a window reduced together: its block is cut into pieces as
any other, each piece's steps and values flattened in C order and reduced in one call, so
its windows are scalars.

NaNs are skipped (``fmin``/``fmax``, a count of the values that are not NaN, and a sum
of those), so a window of a float output holding some NaNs still has a min, a max and a
mean; one holding only NaNs has NaN for all three and a count of 0. Integer and boolean
outputs keep their dtype for min and max; every mean is float64.

Arrays here carry the window axis first and the output's trailing (state) axes after it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import numpy.typing as npt

from ..base import is_bfloat16
from ._reduce import Acc, Rows, reduce_steps

__all__ = [
    "BlockPieces",
    "Piece",
    "block_pieces",
    "fold_children",
    "fold_pieces",
    "nonfinite_pieces",
    "summarizable",
]


def summarizable(dtype: np.dtype) -> bool:
    """Whether an output of ``dtype`` gets summaries (ordered numbers: floats, bfloat16 too, integers, booleans)."""
    return np.dtype(dtype).kind in "fiub" or is_bfloat16(dtype)


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


@dataclasses.dataclass(frozen=True)
class BlockCut:
    """Where the rows ``[start, start + rows)`` of a block fall among the finest windows: ``head`` rows that end a
    window begun before the block, ``whole`` windows of ``window`` rows, ``last`` rows of the output's last window
    (shorter than the others), and ``tail`` rows that begin a window the block does not finish, in that order."""

    start: int
    window: int
    head: int
    whole: int
    last: int
    tail: int


def block_cut(start: int, rows: int, window: int, length: int) -> BlockCut:
    """The :class:`BlockCut` of rows ``[start, start + rows)`` of an output of ``length`` rows, in windows of
    ``window`` rows."""
    stop = start + rows
    a = min(-(-start // window) * window, stop)  # the first window boundary in the block
    e = stop if stop == length else stop // window * window  # whole windows end here
    whole = (e - a) // window if e > a else 0
    last = e - a - whole * window if e > a else 0  # the output's last window, shorter than the others
    return BlockCut(start, window, a - start, whole, last, stop - max(e, a))


def block_pieces(data: np.ndarray, start: int, window: int, length: int, *, whole: bool = False) -> BlockPieces:
    """Cut block ``data`` (steps ``[start, start + len(data))`` of ``length``) into finest-level pieces.

    With ``whole``, each piece over every value of its steps (the output summarised over its whole state).
    """
    if whole:
        data = np.asarray(data).reshape(len(data), -1)
    cut = block_cut(start, len(data), window, length)

    def one(part: np.ndarray) -> Acc:
        return reduce_steps(part.reshape(-1) if whole else part, 0)

    head = tail = rows = None
    at = start + cut.head  # where the whole windows begin
    if cut.head:
        head = Piece(start // window, start, at, one(data[: cut.head]))
    parts = []
    if cut.whole:
        body = data[cut.head : cut.head + cut.whole * window]
        if whole:  # a window at a time, each one numpy call over its values: the same bits however sliced
            parts += [one(body[k * window : (k + 1) * window]).one().rows() for k in range(cut.whole)]
        else:
            parts.append(reduce_steps(body.reshape(cut.whole, window, *data.shape[1:]), 1).rows())
    if cut.last:
        begin = cut.head + cut.whole * window
        parts.append(one(data[begin : begin + cut.last]).one().rows())
    if parts:
        rows = parts[0] if len(parts) == 1 else Rows.concat(parts)
    if cut.tail:
        begin = start + len(data) - cut.tail
        tail = Piece(begin // window, begin, start + len(data), one(data[len(data) - cut.tail :]))
    return BlockPieces(head, at // window, rows, tail)


def _all_finite(low: np.ndarray, high: np.ndarray, count: np.ndarray, values: Any, windows: int) -> np.ndarray:
    """Per window (first axis, ``windows`` of them): whether every value is finite, from its statistics alone.

    A NaN is not counted (the count falls short of the window's ``values``) and an
    infinity is the window's min or max.
    """
    def each(a: Any) -> npt.NDArray[np.bool_]:
        return np.asarray(np.asarray(a).reshape(windows, -1).all(axis=1))

    counted = np.asarray(count).reshape(windows, -1) == np.reshape(values, (-1, 1))
    return each(counted) & each(np.isfinite(low)) & each(np.isfinite(high))


def nonfinite_pieces(pieces: BlockPieces, window: int, length: int, size: int = 1) -> list[tuple[int, int]]:
    """The rows ``[start, stop)`` of each of a block's pieces that holds a NaN or an infinity, in row order.

    Read off the pieces' statistics, which every float value went into: what is left to
    look at, row by row, to find the first such row is those pieces alone (none where the
    block is finite). Integer and boolean outputs hold none. ``size`` is the values a row
    counts: its state's, for an output summarised over its whole state, else 1.
    """
    parts = [p for p in (pieces.head, pieces.tail) if p is not None]
    sample = parts[0].acc.min if parts else None if pieces.rows is None else pieces.rows.min
    if sample is None or np.asarray(sample).dtype.kind != "f":
        return []
    found: list[tuple[int, int]] = []
    head = pieces.head
    if head is not None and not _all_finite(head.acc.min, head.acc.max, head.acc.count, (head.stop - head.start) * size,
                                            1)[0]:  # fmt: skip
        found.append((head.start, head.stop))
    rows = pieces.rows
    if rows is not None:
        first = pieces.first * window
        sizes = np.full(len(rows), window, dtype=np.int64)
        sizes[-1] = min(window, length - (first + (len(rows) - 1) * window))  # the output's last window is short
        for i in np.flatnonzero(~_all_finite(rows.min, rows.max, rows.count, sizes * size, len(rows))):
            start = first + int(i) * window
            found.append((start, start + int(sizes[i])))
    tail = pieces.tail
    if tail is not None and not _all_finite(tail.acc.min, tail.acc.max, tail.acc.count, (tail.stop - tail.start) * size,
                                            1)[0]:  # fmt: skip
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


def fold_children(
    acc: Acc | None, first: int, rows: Rows, factor: int, children: int
) -> tuple[Acc | None, Rows | None]:
    """Fold stored child rows ``first, first + 1, ...`` into the open parent ``acc``.

    Returns the parent left open and the parent rows completed (a parent is complete with
    its last child: every ``factor``-th, or the level's last child ``children - 1``).
    Children that begin or end a parent only in part are folded one at a time; the whole
    parents between them together, one numpy call per field and child position over all of
    them. Any cut stores the same bits (see ``Acc.fold``, which settles a tie between 0.0
    and -0.0 the same way wherever it falls).
    """
    part = Acc.of_rows(rows)
    done: list[Rows] = []
    count = len(rows)

    def one_at_a_time(acc: Acc | None, i: int, j: int) -> Acc | None:
        for t in range(i, j):
            child = part[t]
            acc = child if acc is None else acc.fold(child)
            if (first + t + 1) % factor == 0 or first + t + 1 == children:
                done.append(acc.one().rows())
                acc = None
        return acc

    i = 0
    if acc is not None or first % factor:  # the open parent's remaining children
        i = min(count, factor - first % factor)
        acc = one_at_a_time(acc, 0, i)
    whole = (count - i) // factor
    if whole:
        stop = i + whole * factor
        done.append(_fold_whole(Acc(*(v[i:stop].reshape(whole, factor, *v.shape[1:]) for v in part.fields()))).rows())
        i = stop
    acc = one_at_a_time(acc, i, count)
    return acc, (Rows.concat(done) if len(done) > 1 else done[0] if done else None)


def _fold_whole(shaped: Acc) -> Acc:
    """Each parent's children (``shaped``: parent axis first, then its children) folded left to right as
    :meth:`Acc.fold` folds them, the tie between 0.0 and -0.0 settled once for all of them rather than at each fold:
    a minimum of zero is -0.0 where a child's minimum is -0.0, a maximum of zero 0.0 where a child's maximum is 0.0,
    as folding one child at a time leaves it (the same bits, at a third of the numpy calls)."""
    low, high, total, count = (np.array(v[:, 0]) for v in shaped.fields())  # copies: the ties are settled in place
    for t in range(1, shaped.count.shape[1]):
        low, high = np.fmin(low, shaped.min[:, t]), np.fmax(high, shaped.max[:, t])
        total, count = total + shaped.sum[:, t], count + shaped.count[:, t]
    if low.dtype.kind == "f":
        zero = np.zeros((), low.dtype)
        for extreme, children, smallest in ((low, shaped.min, True), (high, shaped.max, False)):
            at = extreme == 0
            if at.any():
                signed = (children == 0) & (np.signbit(children) if smallest else ~np.signbit(children))
                found = signed.any(axis=1)
                settled = np.where(found, -zero if smallest else zero, zero if smallest else -zero)
                extreme[at] = settled[at]
    return Acc(low, high, total, count)


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


COARSE_CHUNK_BYTES = 512 * 1024
"""Bytes of float64 per statistic a chunk of a coarser level holds at most (see :func:`level_chunks`)."""


def level_chunks(windows: list[int], state_size: int) -> list[int]:
    """Windows per stored chunk at each level: the finest's :func:`chunk_rows`, and each coarser level's chunk the
    same steps as the finest's chunk times the levels' factor, up to ``COARSE_CHUNK_BYTES`` per statistic.

    A coarser level's rows in no durable chunk are rebuilt from the rows below rather than recorded in a commit's
    tail, so its chunks may be longer: fewer files to write and fsync (a 2**30-step series: 4 at the 2**14 level,
    not 16; 1 at each level above).
    """
    finest = chunk_rows(state_size)
    most = max(finest, chunk_rows(state_size) * COARSE_CHUNK_BYTES // (32 * 1024))
    return [min(finest * (w // windows[0]), most) if i else finest for i, w in enumerate(windows)]


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

    The finest windows are folded into the coarser levels a finest chunk at a time, as the
    chunk completes (before its rows can leave the pending ones), rather than block by block:
    a few numpy calls a level for every chunk instead of for every block. What a commit records
    of the coarser levels, their complete windows (:meth:`counts`), follows from the finest's
    alone, folded or not.
    """

    length: int
    levels: list[Level]
    open: Piece | None = None  # the open finest window
    folded: int = 0  # the finest windows folded into the coarser levels so far

    @classmethod
    def new(cls, windows: list[int], length: int, state_size: int, chunks: list[int] | None = None) -> Pyramid:
        """An empty pyramid; ``chunks`` the windows per stored chunk at each level (by default a new output's,
        :func:`level_chunks`; those an output was written with, where it is read)."""
        chunks = level_chunks(windows, state_size) if chunks is None else chunks
        levels = [Level(w, w // windows[i - 1] if i else 1, -(-length // w), chunks[i]) for i, w in enumerate(windows)]
        return cls(length, levels)

    def add(self, pieces: BlockPieces) -> list[tuple[int, int, Rows]]:
        self.open, done = fold_pieces(self.open, pieces, self.levels[0].window, self.length)
        writes: list[tuple[int, int, Rows]] = []
        finest = self.levels[0]
        for rows in done:
            written = finest.whole
            finest.pending = rows if finest.pending is None else Rows.concat([finest.pending, rows])
            finest.emitted += len(rows)
            if finest.whole > written:
                writes.append((0, written, finest.pending[written - finest.durable : finest.whole - finest.durable]))
                writes += self.catch_up()
        return writes

    def catch_up(self) -> list[tuple[int, int, Rows]]:
        """Fold the finest windows not folded yet into the coarser levels; the coarser chunks that completes."""
        finest = self.levels[0]
        writes: list[tuple[int, int, Rows]] = []
        if len(self.levels) > 1 and finest.emitted > self.folded:
            assert finest.pending is not None and self.folded >= finest.durable  # they are pending until folded
            rows = finest.pending[self.folded - finest.durable : finest.emitted - finest.durable]
            upper = self.levels[1]
            upper.acc, parents = fold_children(upper.acc, self.folded, rows, upper.factor, finest.total)
            if parents is not None:
                self._emit(1, parents, writes)
        self.folded = finest.emitted
        return writes

    def counts(self) -> list[tuple[int, int]]:
        """Each level's complete windows and those in durable chunks, every finest window folded in or not: what
        a commit records (a coarser window is complete with its last finer one)."""
        out = []
        emitted = 0
        for i, level in enumerate(self.levels):
            if i == 0:
                emitted = level.emitted
            else:
                below = self.levels[i - 1]
                emitted = level.total if emitted == below.total else emitted // level.factor
            out.append((emitted, level.durable))
        return out

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
