"""The summary windows a write asks for, checked: arithmetic only, so the command line checks
them before it imports JAX, Zarr or numpy (numpy registers its integers as ``numbers.Integral``)."""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence
from typing import Any

from .._defaults import DEFAULT_SUMMARY_WINDOWS
from ..errors import InputError, arg

__all__ = ["check_windows"]


def check_windows(summaries: bool | Sequence[int] | None, reverse: bool) -> list[int]:
    """The summary windows of a write: ``summaries=True`` (the default levels), False/None, or window lengths.

    A reverse scan gets none: its blocks commit from the end, and its summaries are not
    written (``overview`` and ``plot`` say so); windows asked for explicitly are refused.
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
