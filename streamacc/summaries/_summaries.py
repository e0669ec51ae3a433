"""A run's window summaries: cut from each block where it is written, committed with it in scan order.

Each block's pieces (its steps in each finest window it touches, reduced) are computed on
the thread or worker that writes the block, from the block still in memory, so the
computing thread never pays for them. The output's commit then folds the pieces in scan
order (cheap: a few rows per block), hands the summary chunks now complete to a writer
thread, and records the rest, the *tail* (rows in no durable chunk yet, and the open
window), in the manifest it saves, so that the committed summaries always cover exactly
the committed steps and change with them atomically.

Why the open finest window is recorded rather than recomputed on resume: its sum is a
fold of its pieces so far, which no stored row holds (a row stores the mean), and
rebuilding it would mean reading back up to a window of data, 128 MiB for a 4096-point
float64 state, and the data, which an unfinished run's ``overview`` must not need. It is
one row per output in the manifest. The coarser levels' rows not yet in a chunk, and
their open windows, are folds of the rows below them, so a resume (and ``overview``)
rebuilds them instead of recording them: for a 256x256 field they would be megabytes per
commit. The finest rows not yet in a durable chunk are recorded (for a series at the
default sizes, 24-96 KiB per commit).

``verify``'s check of them against the data is ``_check``'s.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from ..base import dtype_from_name
from ..errors import VerifyError, arg, one_line
from ..store import ArraySpec, Target
from ._pyramid import BlockPieces, Pyramid, block_pieces, fold_children, nonfinite_pieces, summarizable
from ._reduce import Rows
from ._store import SummaryArrays, TailText, decode_tail, encode_tail

__all__ = ["Summaries", "SummarizedRun", "SummaryPlan", "damaged", "summarized_names"]


class SummarizedRun(Protocol):
    """What the summaries read of a run's identity (``run.bookkeeping.RunIdentity``)."""

    @property
    def summaries(self) -> list[int]:
        """The window lengths, in rows, of the summaries' levels (none: no summaries)."""

    @property
    def arrays(self) -> Mapping[str, tuple[str, tuple[int, ...]]]:
        """Each output's dtype name and shape, by name."""

    @property
    def over_state(self) -> Sequence[str]:
        """The outputs summarised over their whole state."""

    @property
    def rows(self) -> int:
        """The rows of the output arrays: one per step, or per ``save_every`` steps. Summaries count rows."""


def summarized_names(arrays: Mapping[str, Any]) -> list[str]:
    """The outputs that get summaries (identity ``arrays``: name -> [dtype, shape]): ordered numbers only."""
    return [name for name, (dtype, _shape) in arrays.items() if summarizable(dtype_from_name(dtype))]


def _state_sizes(run: SummarizedRun, names: Sequence[str]) -> dict[str, int]:
    """Each summarised output's values per summary row: its state's, or 1 where summarised over its whole state."""
    return {n: 1 if n in run.over_state else int(np.prod(run.arrays[n][1][1:], dtype=np.int64)) for n in names}


@dataclasses.dataclass(frozen=True)
class SummaryPlan:
    """What the writer of a block needs to cut its pieces (hashable: it travels to cluster workers)."""

    window: int
    length: int
    names: tuple[str, ...]
    over_state: frozenset[str] = frozenset()
    """The outputs summarised over their whole state: each window's values of every step together."""

    def pieces(self, start: int, ys: Mapping[str, np.ndarray]) -> dict[str, BlockPieces]:
        """Each summarised output's pieces of the block of ``ys`` beginning at row ``start``."""
        return {
            name: block_pieces(np.asarray(ys[name]), start, self.window, self.length, whole=name in self.over_state)
            for name in self.names
        }

    def nonfinite(
        self, pieces: Mapping[str, BlockPieces], ys: Mapping[str, np.ndarray]
    ) -> dict[str, list[tuple[int, int]]]:
        """Per summarised output, the rows of a block's pieces that hold a NaN or an infinity (see ``pieces``)."""
        return {
            name: nonfinite_pieces(
                p, self.window, self.length, int(np.prod(ys[name].shape[1:])) if name in self.over_state else 1
            )
            for name, p in pieces.items()
        }


@dataclasses.dataclass(frozen=True)
class _Layout:
    """A run's summaries as they are stored: windows, pyramids, chunks, and each output's summary shape (its rows
    and trailing axes, or its rows alone where summarised over its whole state), dimensions and the dimensions
    summarised over."""

    windows: list[int]
    pyramids: dict[str, Pyramid]
    chunks: dict[str, list[int]]
    shapes: dict[str, ArraySpec]
    dims: dict[str, tuple[str | None, ...]]
    over: dict[str, list[str]]


INFLIGHT_WRITES = 1
"""Commits whose summary chunks may still be on their way to the disk; the next commit waits
for the oldest beyond these. Their rows stay in the tail meanwhile, so one: its chunks,
a few small files, are durable long before the next block is computed."""


class Summaries:
    """The summaries of a run being written: pyramids per output, their store, and the committed tail.

    Chunks a commit completes are written and fsynced by a thread of their own, so that a
    commit (which every later block waits for) never waits for them; until a chunk is
    durable its rows stay in the tail that the manifest records.
    """

    def __init__(
        self,
        target: Target,
        store: SummaryArrays,
        pyramids: dict[str, Pyramid],
        length: int,
        over_state: frozenset[str] = frozenset(),
    ) -> None:
        self.target = target
        self.store = store
        self.pyramids = pyramids
        self.plan = SummaryPlan(store.windows[0], length, tuple(pyramids), over_state & set(pyramids))
        self._writer: ThreadPoolExecutor | None = None
        self._text = TailText()  # the pending rows' base64, from one commit to the next
        self._inflight: deque[tuple[Future[None], list[tuple[str, int, int]]]] = deque()

    @staticmethod
    def _layout(
        run: SummarizedRun, specs: Mapping[str, ArraySpec], dims: Mapping[str, Sequence[str | None]]
    ) -> _Layout | None:
        """A new run's windows, its pyramids, each summarised output's chunk, and the shapes and dimensions of
        its summaries (None: the run has no summaries)."""
        windows = run.summaries
        names = summarized_names(run.arrays)
        if not windows or not names:
            return None
        sizes = _state_sizes(run, names)
        pyramids = {n: Pyramid.new(windows, run.rows, sizes[n]) for n in names}
        over = frozenset(run.over_state)
        shapes = {n: ((specs[n][0][0],), specs[n][1]) if n in over else specs[n] for n in names}
        summary_dims = {n: tuple(dims[n][:1]) if n in over else tuple(dims[n]) for n in names}
        over_dims = {n: [str(d) for d in dims[n][1:]] for n in names if n in over}
        chunks = {n: [level.chunk for level in pyramids[n].levels] for n in names}
        return _Layout(windows, pyramids, chunks, shapes, summary_dims, over_dims)

    @classmethod
    def create(
        cls,
        target: Target,
        run: SummarizedRun,
        specs: Mapping[str, ArraySpec],
        dims: Mapping[str, Sequence[str | None]],
    ) -> Summaries | None:
        """Create the summary arrays of a new run (None when it has no summaries)."""
        layout = cls._layout(run, specs, dims)
        if layout is None:
            return None
        store = SummaryArrays.create(target, layout.shapes, windows=layout.windows, chunks=layout.chunks,
                                    dims=layout.dims, over=layout.over)  # fmt: skip
        target.make_durable(store.metadata_keys())
        return cls(target, store, layout.pyramids, run.rows, frozenset(run.over_state))

    @classmethod
    def expected_documents(
        cls,
        run: SummarizedRun,
        specs: Mapping[str, ArraySpec],
        dims: Mapping[str, Sequence[str | None]],
    ) -> dict[str, bytes]:
        """The metadata documents :meth:`create` stores for a run, by key (none when it has no summaries)."""
        layout = cls._layout(run, specs, dims)
        if layout is None:
            return {}
        return SummaryArrays.expected(layout.shapes, windows=layout.windows, chunks=layout.chunks,
                                     dims=layout.dims, over=layout.over)  # fmt: skip

    @classmethod
    def load(
        cls, target: Target, run: SummarizedRun, record: dict[str, Any] | None, committed: int
    ) -> Summaries | None:
        """The committed summaries of an output (``record``: the manifest's tail), to continue or to read.

        ``committed`` is the rows the manifest commits: the tail must cover exactly those.
        """
        windows = run.summaries
        names = summarized_names(run.arrays)
        if not windows or not names:
            return None
        try:
            tail = None if record is None else decode_tail(record)
        except (ValueError, KeyError, TypeError, AttributeError, OSError):
            raise damaged(target, "the tail its manifest records cannot be read") from None
        store = SummaryArrays(target, windows)
        pyramids = {}
        sizes = _state_sizes(run, names)
        for name in names:
            pyramid = Pyramid.new(windows, run.rows, sizes[name], store.chunks(name))
            if tail is not None:
                if name not in tail:
                    raise damaged(target, f"its tail has no entry for {name!r}")
                levels, pyramid.open = tail[name]
                if len(levels) != len(pyramid.levels):
                    raise damaged(target, f"its tail has {len(levels)} levels for {name!r}")
                for level, (emitted, durable, pending) in zip(pyramid.levels, levels, strict=True):
                    level.emitted, level.durable, level.pending = emitted, durable, pending
                    if not 0 <= durable <= emitted <= level.total:
                        raise damaged(target, f"its tail contradicts itself for {name!r}")
                first = pyramid.levels[0]
                if (0 if first.pending is None else len(first.pending)) != first.emitted - first.durable:
                    raise damaged(target, f"its tail contradicts itself for {name!r}")
            if pyramid.covered() != committed:
                what = f"they cover {pyramid.covered()} rows of {name!r}, the manifest commits {committed}"
                raise damaged(target, what)
            pyramids[name] = pyramid
        summaries = cls(target, store, pyramids, run.rows, frozenset(run.over_state))
        for name, pyramid in pyramids.items():
            summaries._reopen(name, pyramid)
            pyramid.folded = pyramid.levels[0].emitted  # the coarser levels rebuilt from every finer row
        return summaries

    def rows(self, name: str, index: int, start: int, stop: int) -> Rows:
        """Committed complete windows ``[start, stop)`` of level ``index``: durable chunks, then the tail.

        A durable window that cannot be read as it was written (its array or chunk missing, a
        chunk damaged) is a VerifyError naming the file, never the fill value.
        """
        level = self.pyramids[name].levels[index]
        parts = []
        if start < min(stop, level.durable):
            end = min(stop, level.durable)
            problem = self.store.problem(name, level.window, start, end, level.total)
            if problem is None:
                try:
                    parts.append(self.store.read(name, level.window, start, end))
                except Exception as exc:  # a damaged chunk fails in its codec or checksum: name it
                    problem = self.store.problem(name, level.window, start, end, level.total, decode=True) or (
                        f"windows {start} to {end} of {level.window} rows cannot be read ({one_line(exc)})"
                    )
            if problem is not None:
                raise damaged(self.target, f"{name!r}: {problem}")
        if stop > level.durable and level.pending is not None:
            parts.append(level.pending[max(start, level.durable) - level.durable : stop - level.durable])
        if not parts:
            return self.store.read(name, level.window, start, start)
        return parts[0] if len(parts) == 1 else Rows.concat(parts)

    def _reopen(self, name: str, pyramid: Pyramid) -> None:
        """Rebuild each coarse level's rows in no durable chunk, and its open window, from the rows below."""
        for i in range(1, len(pyramid.levels)):
            level, below = pyramid.levels[i], pyramid.levels[i - 1]
            begun = level.durable * level.factor
            if below.emitted > begun:
                children = self.rows(name, i - 1, begun, below.emitted)
                level.acc, level.pending = fold_children(None, begun, children, level.factor, below.total)
            made = 0 if level.pending is None else len(level.pending)
            if made != level.emitted - level.durable:
                what = f"level {level.window} counts {level.emitted - level.durable} windows its finer rows make {made}"
                raise damaged(self.target, what)

    def resume(self) -> None:
        """Write again the whole chunks a killed run may not have made durable (their rows are in the tail)."""
        writes = []
        for name, pyramid in self.pyramids.items():
            for index, level in enumerate(pyramid.levels):
                if level.whole > level.durable:
                    assert level.pending is not None  # windows [durable, emitted) are pending
                    writes.append((name, index, level.durable, level.pending[: level.whole - level.durable]))
        self._submit(writes)

    def _submit(self, writes: list[tuple[str, int, int, Rows]]) -> None:
        if not writes:
            return
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="streamacc-summaries")

        def write() -> None:
            keys: list[str] = []
            for name, index, first, rows in writes:
                keys += self.store.write(name, self.pyramids[name].levels[index].window, first, rows)
            self.target.make_durable(keys)

        marks = [(name, index, first + len(rows)) for name, index, first, rows in writes]
        self._inflight.append((self._writer.submit(write), marks))

    def _settle(self, keep: int) -> None:
        """Take in the chunk writes that are done, in order, waiting for the oldest beyond ``keep`` in flight."""
        while self._inflight and (len(self._inflight) > keep or self._inflight[0][0].done()):
            future, marks = self._inflight.popleft()
            future.result()  # a failed write stops the run here, before a commit counts its rows as durable
            for name, index, upto in marks:
                self.pyramids[name].levels[index].made_durable(upto)

    def fold(self, results: Sequence[Any]) -> None:
        """Fold the blocks of ``results`` in (scan order) and start writing the chunks they complete.

        Until :meth:`tail` is saved in a manifest, what was folded is not committed: a run
        killed meanwhile continues from the tail saved before, and writes those chunks again.
        """
        writes = []
        for result in results:
            for name, pyramid in self.pyramids.items():
                for index, first, rows in pyramid.add(result.summary[name]):
                    writes.append((name, index, first, rows))
        self._submit(writes)
        self._settle(INFLIGHT_WRITES)

    def wait(self) -> None:
        """Wait for every chunk write begun so far (before anything that looks for a killed writer's temp files)."""
        self._settle(0)

    def finish(self) -> dict[str, Any]:
        """Wait for every chunk write; the finished run's tail (every window in a durable chunk)."""
        self.wait()
        self.close()
        return self.tail()

    def close(self) -> None:
        """Stop the chunk writer once its writes are done (before the run's lock is released)."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None

    def tail(self) -> dict[str, Any]:
        """What a manifest records of the summaries: the rows in no durable chunk yet, and the open window.

        Chunk writes that are done by now are taken in first (without waiting), so that their
        rows are left out.
        """
        self._settle(INFLIGHT_WRITES)
        state = {
            name: ([(e, d, lv.pending) for (e, d), lv in zip(p.counts(), p.levels, strict=True)], p.open)
            for name, p in self.pyramids.items()
        }
        return encode_tail(state, self._text)


def damaged(target: Target, what: str) -> VerifyError:
    return VerifyError(
        f"the summaries of {target.label} are damaged ({what}); rewrite the output with {arg('mode', 'overwrite')}"
    )
