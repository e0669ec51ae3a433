"""What a write asks for of its output: the mode and the :class:`Layout`, with the summaries' windows resolved."""

from __future__ import annotations

import dataclasses
from typing import Literal

from ..._checks import as_choice, as_count
from ...engine import check_length
from ...errors import InputError, arg
from ...summaries import check_windows
from ._options import Layout
from ._storage import Storage, storage_for

__all__ = ["MODES", "Mode", "Request", "check_request", "check_written_length"]

Mode = Literal["create", "overwrite", "resume", "extend"]
MODES: tuple[Mode, ...] = ("create", "overwrite", "resume", "extend")
"""What a write does with an output that is already there (see :func:`streamacc.write`)."""


@dataclasses.dataclass(frozen=True)
class Request:
    """A write's mode and layout, and the summary windows they give a scan in this direction."""

    mode: Mode
    layout: Layout
    summaries: list[int]
    summaries_default: bool  # summaries=True: an output continued keeps the windows it was begun with
    storage: Storage  # chosen once, from the layout
    over_state: list[str] | None = None
    """The outputs summarised over their whole state: the stored run's for a continued run, else None (the
    default's choice, from the states' sizes: ``summaries.over_state``)."""


def check_request(*, mode: object = "create", layout: Layout | None = None, reverse: bool = False) -> Request:
    """The request of a write in ``mode`` with ``layout`` (by default ``Layout()``) of a scan run forwards or not.

    The layout was checked when it was made; what is left is the mode, and the summaries
    a reverse scan cannot keep.
    """
    checked: Mode = as_choice("mode", mode, MODES)  # type: ignore[assignment]
    layout = Layout() if layout is None else layout
    summaries = layout.summaries
    return Request(
        mode=checked,
        layout=layout,
        summaries=check_windows(list(summaries) if isinstance(summaries, tuple) else summaries, reverse),
        summaries_default=summaries is True,
        storage=storage_for(layout.virtual),
    )


def check_written_length(length: object, *, from_xs: bool = False) -> None:
    """Refuse a write of fewer than one step (as the command line refuses ``--size 0``), or more than readers index.

    ``scan`` and ``iter_blocks`` take a length of 0, as ``lax.scan`` does; an output holds
    at least one step, so a write says so of any length below 1 (or not a whole number)
    before the scan's own check, which would take 0.
    """
    if from_xs and length == 0:
        raise InputError(
            f"xs has no rows, which makes {arg('length', 0)}, but an output holds at least one step "
            f"({arg('length')} must be >= 1); pass xs of at least one row"
        )
    check_length(as_count("length", length, minimum=1, example=2**20))
