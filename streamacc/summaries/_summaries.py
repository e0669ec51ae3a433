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
"""

from __future__ import annotations

import dataclasses
import json
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import VerifyError, spell
from ..store import Target
from ._pyramid import Acc, BlockPieces, Piece, Pyramid, Rows, block_pieces, fold_children, reduce_steps, summarizable
from ._store import SUMMARIES, SummaryStore, decode_tail, encode_tail, level_path

__all__ = [
    "Summaries",
    "SummaryCheck",
    "SummaryPlan",
    "extension_tail",
    "output_rows",
    "rebuild_stale_arrays",
    "summarized_names",
]


def output_rows(identity: Mapping[str, Any]) -> int:
    """The rows of a run's output arrays: one per step, or per ``save_every`` steps. Summaries count rows."""
    return int(identity["length"]) // int(identity.get("save_every", 1))


def summarized_names(arrays: Mapping[str, Any]) -> list[str]:
    """The outputs that get summaries (identity ``arrays``: name -> [dtype, shape]): ordered numbers only."""
    return [name for name, (dtype, _shape) in arrays.items() if summarizable(np.dtype(dtype))]


@dataclasses.dataclass(frozen=True)
class SummaryPlan:
    """What the writer of a block needs to cut its pieces (hashable: it travels to cluster workers)."""

    window: int
    length: int
    names: tuple[str, ...]

    def pieces(self, start: int, ys: Mapping[str, np.ndarray]) -> dict[str, BlockPieces]:
        return {name: block_pieces(np.asarray(ys[name]), start, self.window, self.length) for name in self.names}


INFLIGHT_WRITES = 1
"""Commits whose summary chunks may still be on their way to the disk; the next commit waits
for the oldest beyond these. Their rows stay in the tail meanwhile, so one: its chunks,
a few small files, are durable long before the next block is (a block of 2**22 steps
takes about 20 ms)."""


class Summaries:
    """The summaries of a run being written: pyramids per output, their store, and the committed tail.

    Chunks a commit completes are written and fsynced by a thread of their own, so that a
    commit (which every later block waits for) never waits for them; until a chunk is
    durable its rows stay in the tail that the manifest records.
    """

    def __init__(self, target: Target, store: SummaryStore, pyramids: dict[str, Pyramid], length: int) -> None:
        self.target = target
        self.store = store
        self.pyramids = pyramids
        self.plan = SummaryPlan(store.windows[0], length, tuple(pyramids))
        self._writer: ThreadPoolExecutor | None = None
        self._inflight: deque[tuple[Future[None], list[tuple[str, int, int]]]] = deque()

    @classmethod
    def create(cls, target: Target, identity: dict, specs: Mapping, codec: str, dims: Mapping) -> Summaries | None:
        """Create the summary arrays of a new run (None when it has no summaries)."""
        windows = identity.get("summaries") or []
        names = summarized_names(identity["arrays"])
        if not windows or not names:
            return None
        sizes = {n: int(np.prod(specs[n][0][1:], dtype=np.int64)) for n in names}
        pyramids = {n: Pyramid.new(windows, output_rows(identity), sizes[n]) for n in names}
        chunks = {n: pyramids[n].levels[0].chunk for n in names}
        store = SummaryStore.create(
            target, {n: specs[n] for n in names}, windows=windows, chunks=chunks, codec=codec, dims=dims
        )
        target.make_durable(store.metadata_keys())
        return cls(target, store, pyramids, output_rows(identity))

    @classmethod
    def load(cls, target: Target, identity: dict, record: dict | None, committed: int) -> Summaries | None:
        """The committed summaries of an output (``record``: the manifest's tail), to continue or to read.

        ``committed`` is the rows the manifest commits: the tail must cover exactly those.
        """
        windows = identity.get("summaries") or []
        names = summarized_names(identity["arrays"])
        if not windows or not names:
            return None
        try:
            tail = None if record is None else decode_tail(record)
        except (ValueError, KeyError, TypeError, AttributeError, OSError):
            raise _damaged(target, "the tail its manifest records cannot be read") from None
        store = SummaryStore(target, windows)
        pyramids = {}
        for name in names:
            size = int(np.prod(identity["arrays"][name][1][1:], dtype=np.int64))
            pyramid = Pyramid.new(windows, output_rows(identity), size)
            if tail is not None:
                if name not in tail:
                    raise _damaged(target, f"its tail has no entry for {name!r}")
                levels, pyramid.open = tail[name]
                if len(levels) != len(pyramid.levels):
                    raise _damaged(target, f"its tail has {len(levels)} levels for {name!r}")
                for level, (emitted, durable, pending) in zip(pyramid.levels, levels, strict=True):
                    level.emitted, level.durable, level.pending = emitted, durable, pending
                    if not 0 <= durable <= emitted <= level.total:
                        raise _damaged(target, f"its tail contradicts itself for {name!r}")
                first = pyramid.levels[0]
                if (0 if first.pending is None else len(first.pending)) != first.emitted - first.durable:
                    raise _damaged(target, f"its tail contradicts itself for {name!r}")
            if pyramid.covered() != committed:
                what = f"they cover {pyramid.covered()} rows of {name!r}, the manifest commits {committed}"
                raise _damaged(target, what)
            pyramids[name] = pyramid
        summaries = cls(target, store, pyramids, output_rows(identity))
        for name, pyramid in pyramids.items():
            summaries._reopen(name, pyramid)
        return summaries

    def rows(self, name: str, index: int, start: int, stop: int) -> Rows:
        """Committed complete windows ``[start, stop)`` of level ``index``: durable chunks, then the tail."""
        level = self.pyramids[name].levels[index]
        parts = []
        if start < min(stop, level.durable):
            parts.append(self.store.read(name, level.window, start, min(stop, level.durable)))
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
                raise _damaged(self.target, what)

    def resume(self) -> None:
        """Write again the whole chunks a killed run may not have made durable (their rows are in the tail)."""
        writes = []
        for name, pyramid in self.pyramids.items():
            for index, level in enumerate(pyramid.levels):
                if level.whole > level.durable:
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

    def commit(self, results: Sequence[Any]) -> dict:
        """Fold the blocks of ``results`` in (scan order), start writing the chunks they complete; the tail."""
        writes = []
        for result in results:
            for name, pyramid in self.pyramids.items():
                for index, first, rows in pyramid.add(result.summary[name]):
                    writes.append((name, index, first, rows))
        self._submit(writes)
        self._settle(INFLIGHT_WRITES)
        return self.tail()

    def finish(self) -> dict:
        """Wait for every chunk write; the finished run's tail (every window in a durable chunk)."""
        self._settle(0)
        self.close()
        return self.tail()

    def close(self) -> None:
        """Stop the chunk writer once its writes are done (before the run's lock is released)."""
        if self._writer is not None:
            self._writer.shutdown(wait=True)
            self._writer = None

    def tail(self) -> dict:
        state = {
            name: ([(lv.emitted, lv.durable, lv.pending) for lv in p.levels], p.open)
            for name, p in self.pyramids.items()
        }
        return encode_tail(state)


def _damaged(target: Target, what: str) -> VerifyError:
    return VerifyError(
        f"the summaries of {target.label} are damaged ({what}); rewrite the output with {spell('overwrite', True)}"
    )


def _same(a: Rows, b: Rows) -> bool:
    return all(np.ascontiguousarray(x).tobytes() == np.ascontiguousarray(y).tobytes()
               for x, y in zip(a.arrays().values(), b.arrays().values(), strict=True))  # fmt: skip


def _same_piece(a: Piece | None, b: Piece | None) -> bool:
    if a is None or b is None:
        return a is b
    return (a.window, a.start, a.stop) == (b.window, b.start, b.stop) and _same(a.acc.one().rows(), b.acc.one().rows())


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
        level = self.summaries.pyramids[name].levels[index]
        stop = first + len(rows)
        try:
            stored = self.summaries.rows(name, index, first, min(stop, level.emitted))
        except Exception as exc:  # a damaged chunk fails in its codec or checksum, with the codec's own error
            what = f"windows of {level.window} steps, {type(exc).__name__}: {' '.join(str(exc).split())}"
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


def extension_tail(target: Target, old: Any, kept_rows: int, block_rows: int, read: Any) -> dict | None:
    """The summaries' tail of a finished run cut back to its first ``kept_rows`` rows, for its longer extension.

    ``old`` is the finished run's manifest. Every finest window before the cut is complete
    and stored; the longer run keeps them, with nothing durable yet (the tail holds them,
    and a resume writes their chunks anew into arrays of the longer length). The window
    open at the cut is rebuilt from the data (``read(name, start, stop)``: stored rows),
    folding one piece per block as the writer did. Coarser levels are rebuilt from the
    finest when the tail is loaded. None when the run has no summaries.
    """
    summaries = Summaries.load(target, old.identity, old.summaries, old.committed_rows)
    if summaries is None:
        return None
    windows = summaries.store.windows
    state = {}
    for name in summaries.pyramids:
        emitted = [kept_rows // w for w in windows]
        finest = summaries.rows(name, 0, 0, emitted[0]) if emitted[0] else None
        begun, piece = emitted[0] * windows[0], None
        if begun < kept_rows:
            acc: Acc | None = None
            for low in range(begun // block_rows * block_rows, kept_rows, block_rows):
                part = reduce_steps(np.asarray(read(name, max(low, begun), min(low + block_rows, kept_rows))), 0)
                acc = part if acc is None else acc.fold(part)
            assert acc is not None
            piece = Piece(emitted[0], begun, kept_rows, acc)
        state[name] = ([(emitted[0], 0, finest), *((n, 0, None) for n in emitted[1:])], piece)
    summaries.close()
    return encode_tail(state)


def rebuild_stale_arrays(
    target: Target, identity: dict, record: dict | None, specs: Mapping, codec: str, dims: Mapping
) -> None:
    """Make the summary arrays those of ``identity`` where an extension left them the shorter run's.

    Only a tail that holds every window (nothing durable: what :func:`extension_tail`
    makes) allows it, since the arrays are then created afresh and filled from the tail.
    """
    windows = identity.get("summaries") or []
    names = summarized_names(identity["arrays"])
    if not windows or not names or record is None:
        return
    try:
        tail = decode_tail(record)
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return  # the resume's own load says what is wrong
    if any(durable for levels, _ in tail.values() for _, durable, _ in levels):
        return
    rows = output_rows(identity)
    for name in names:
        raw = target.read(f"{level_path(windows[0])}/{name}_min/zarr.json")
        try:
            shape = json.loads(raw)["shape"] if raw else None
        except (ValueError, KeyError, TypeError):
            shape = None
        if shape is None or shape[0] != -(-rows // windows[0]):
            break
    else:
        return
    for key in target.list_keys(f"{SUMMARIES}/"):
        target.delete(key)
    created = Summaries.create(target, identity, specs, codec, dims)
    if created is not None:
        created.close()
