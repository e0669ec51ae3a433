"""The summary windows a write asks for, checked: arithmetic only, so the command line checks
them before it imports JAX, Zarr or numpy (numpy registers its integers as ``numbers.Integral``)."""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence
from typing import Any

from ..base import (
    DEFAULT_SUMMARY_WINDOWS,
    SHORT_SUMMARY_WINDOW_AT_LEAST,
    SUMMARY_STATE_AT_MOST,
    SUMMARY_VALUES_AT_MOST,
    SUMMARY_WINDOW_AT_LEAST,
    SUMMARY_WINDOWS_AT_LEAST,
    VIRTUAL_SUMMARY_WINDOW_AT_MOST,
)
from ..errors import InputError, arg

__all__ = ["check_windows", "default_windows", "over_state", "too_long"]

LEVEL_FACTOR = DEFAULT_SUMMARY_WINDOWS[1] // DEFAULT_SUMMARY_WINDOWS[0]


def default_windows(rows: int, state_size: int = 1, virtual: bool = False) -> list[int]:
    """The default levels of an output of ``rows`` rows whose largest state holds ``state_size`` values.

    A long output gets ``DEFAULT_SUMMARY_WINDOWS``; a shorter one a finest window that
    gives at least 1024 windows, of at least ``_defaults.SUMMARY_WINDOW_AT_LEAST`` rows (of
    ``SHORT_SUMMARY_WINDOW_AT_LEAST`` for an output of fewer than 2**16 values), or fewer
    where its states are large (``_defaults.SUMMARY_VALUES_AT_MOST``), and coarser levels by
    ``LEVEL_FACTOR`` (4) no longer than the output. A ``virtual`` output, whose summaries are most of what it
    stores, keeps to ``SUMMARY_VALUES_AT_MOST`` values per statistic at the finest level with
    windows of up to ``VIRTUAL_SUMMARY_WINDOW_AT_MOST`` rows: longer ones would leave a run stopped long
    before its length (one of 2**63 steps) with no complete window to draw.
    """
    finest = SUMMARY_WINDOW_AT_LEAST if rows * state_size >= 2**16 else SHORT_SUMMARY_WINDOW_AT_LEAST
    while finest * 2 <= DEFAULT_SUMMARY_WINDOWS[0] and rows // (finest * 2) >= SUMMARY_WINDOWS_AT_LEAST:
        finest *= 2
    longest = VIRTUAL_SUMMARY_WINDOW_AT_MOST if virtual else DEFAULT_SUMMARY_WINDOWS[0]
    while (finest * 2 <= DEFAULT_SUMMARY_WINDOWS[0] or (finest * 2 <= longest and finest < rows)) and (
        -(-rows // finest) * state_size > SUMMARY_VALUES_AT_MOST
    ):
        finest *= 2
    windows = [finest * LEVEL_FACTOR**i for i in range(len(DEFAULT_SUMMARY_WINDOWS))]
    return [w for w in windows if w == finest or w <= rows]


def over_state(sizes: dict[str, int]) -> list[str]:
    """The outputs (``sizes``: the values of each one's state) whose summaries are taken over their whole state:
    those of a state larger than ``SUMMARY_STATE_AT_MOST``. Their length decides nothing, so that an extended
    output is summarised as one run of its new length would be."""
    return [name for name, size in sizes.items() if size > SUMMARY_STATE_AT_MOST]


def too_long(windows: Sequence[int], rows: int) -> InputError | None:
    """The error for summary windows longer than an output of ``rows`` rows (None when they fit)."""
    if not windows or windows[-1] <= rows:
        return None
    fitting = [w for w in windows if w <= rows]
    return InputError(
        f"{arg('summaries', list(windows))} asks for windows of {windows[-1]} rows, longer than the output's {rows} "
        f"rows, which no window of it fills; pass windows of at most {rows} rows"
        + (f", e.g. {arg('summaries', fitting)}" if fitting else "")
        + f", or leave {arg('summaries')} out for levels chosen from its length"
    )


def check_windows(summaries: bool | Sequence[int] | None, reverse: bool) -> list[int]:
    """The summary windows of a write: ``summaries=True`` (the default levels), False/None, or window lengths.

    For ``True`` the levels of a long output: the write chooses them from the output's
    length (:func:`default_windows`) once it is known. A reverse scan gets none: its
    blocks commit from the end, and its summaries are not written (``overview`` and
    ``plot`` say so); windows asked for explicitly are refused.
    """
    if summaries is None or summaries is False:
        return []
    windows: Any = list(DEFAULT_SUMMARY_WINDOWS) if summaries is True else summaries
    try:
        windows = list(windows)
    except TypeError:
        windows = None
    good = windows is not None and all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in windows)
    if good and windows:
        good = windows[0] >= 1 and all(b > a and b % a == 0 for a, b in itertools.pairwise(windows))
    if not good:
        raise InputError(
            f"{arg('summaries', summaries)} does not give increasing window lengths in steps, each a multiple of the "
            f"one before; pass e.g. {arg('summaries', list(DEFAULT_SUMMARY_WINDOWS))}"
        )
    if reverse and windows and summaries is not True:
        raise InputError(
            f"a reverse scan writes no summaries (its blocks commit from its last step), so "
            f"{arg('summaries', summaries)} cannot be kept; leave {arg('summaries')} out or pass "
            f"{arg('summaries', False)}"
        )
    return [] if reverse else [int(w) for w in windows]
