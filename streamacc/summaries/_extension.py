"""The summaries of a finished run cut back for its extension, and rebuilt where an extension was interrupted."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ..store import ArraySpec, Target
from ._pyramid import Piece
from ._reduce import Acc, reduce_steps
from ._store import SUMMARIES, decode_tail, encode_tail
from ._summaries import Summaries, SummarizedRun

__all__ = ["extension_tail", "rebuild_stale_arrays"]


class _Finished(Protocol):
    """What the extension needs of a finished run's manifest."""

    @property
    def identity(self) -> SummarizedRun: ...
    @property
    def summaries(self) -> dict[str, Any] | None: ...
    @property
    def committed_rows(self) -> int: ...


def extension_tail(
    target: Target,
    old: _Finished,
    kept_rows: int,
    block_rows: int,
    read: Callable[[str, int, int], npt.ArrayLike],
) -> dict[str, Any] | None:
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
    over = summaries.plan.over_state
    state = {}
    for name in summaries.pyramids:
        emitted = [kept_rows // w for w in windows]
        finest = summaries.rows(name, 0, 0, emitted[0]) if emitted[0] else None
        begun, piece = emitted[0] * windows[0], None
        if begun < kept_rows:
            acc: Acc | None = None
            for low in range(begun // block_rows * block_rows, kept_rows, block_rows):
                rows = np.asarray(read(name, max(low, begun), min(low + block_rows, kept_rows)))
                part = reduce_steps(rows.reshape(-1) if name in over else rows, 0)
                acc = part if acc is None else acc.fold(part)
            assert acc is not None
            piece = Piece(emitted[0], begun, kept_rows, acc)
        state[name] = ([(emitted[0], 0, finest), *((n, 0, None) for n in emitted[1:])], piece)
    summaries.close()
    return encode_tail(state)


def rebuild_stale_arrays(
    target: Target,
    run: SummarizedRun,
    record: dict[str, Any] | None,
    specs: Mapping[str, ArraySpec],
    dims: Mapping[str, Sequence[str | None]],
) -> None:
    """Make the summary arrays those of ``run`` where an extension left them the shorter run's, or half made.

    Only a tail that holds every window (nothing durable: what :func:`extension_tail`
    makes) allows it, since the arrays are then created afresh and filled from the tail.
    Every level's metadata is compared with what the run creates, so that an extension
    interrupted anywhere in the rebuild (some arrays deleted, some levels made) is rebuilt
    again: everything under the summaries is deleted, and then every document written.
    """
    if record is None:
        return
    expected = Summaries.expected_documents(run, specs, dims)
    if not expected:
        return
    try:
        tail = decode_tail(record)
    except (ValueError, KeyError, TypeError, AttributeError, OSError):
        return  # the resume's own load says what is wrong
    if any(durable for levels, _ in tail.values() for _, durable, _ in levels):
        return
    if all(_same_document(target.read(key), doc) for key, doc in expected.items()):
        return
    for key in target.list_keys(f"{SUMMARIES}/"):
        target.delete(key)
    created = Summaries.create(target, run, specs, dims)
    if created is not None:
        created.close()


def _same_document(raw: bytes | None, expected: bytes) -> bool:
    if raw is None:
        return False
    try:
        return bool(json.loads(raw) == json.loads(expected))
    except ValueError:
        return False
