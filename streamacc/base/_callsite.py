"""Where a warning points: the caller's line that called streamacc, even from the threads streamacc runs on.

``write`` and ``verify`` compute on a thread of their own (Ctrl-C then stays prompt), where
the caller's frames are not on the stack: :func:`run_from` records the caller's line as
the call starts, and :func:`warn` points there when it finds no frame of the caller's own.
"""

from __future__ import annotations

import concurrent.futures.thread
import contextlib
import os
import sys
import threading
import warnings
from collections.abc import Iterator
from contextvars import ContextVar
from types import FrameType
from typing import Any

__all__ = ["origin", "outside", "run_from", "warn"]

_PACKAGE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "")  # streamacc/, not streamacc_x.py
_THREAD_STARTS = frozenset({threading.__file__, concurrent.futures.thread.__file__})
"""Where a thread's frames begin: a thread's start, or a pool's worker (streamacc's writers)."""

Site = tuple[str, int, dict[str, Any]]
"""A line of the caller's code: its file, its line number and its module's globals."""

_ORIGIN: ContextVar[Site | None] = ContextVar("streamacc_origin", default=None)


def outside(frame: FrameType | None) -> Site | None:
    """The first line above ``frame`` (itself included) that is not streamacc's, nor a thread's start."""
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    if frame is None or frame.f_code.co_filename in _THREAD_STARTS:
        return None
    return frame.f_code.co_filename, frame.f_lineno, frame.f_globals


@contextlib.contextmanager
def run_from(site: Site | None) -> Iterator[None]:
    """Within this block (on a worker thread), warnings point at ``site``, the line that started the work."""
    token = _ORIGIN.set(site)
    try:
        yield
    finally:
        _ORIGIN.reset(token)


def origin() -> Site | None:
    """The caller's line as :func:`warn` would find it here: to point at from a thread started later (a writer's)."""
    return outside(sys._getframe(1)) or _ORIGIN.get()


def warn(message: str, category: type[Warning]) -> None:
    """``warnings.warn`` at the caller's line (once per line, as Python's default filter shows warnings)."""
    site = outside(sys._getframe(1)) or _ORIGIN.get()
    if site is None:
        warnings.warn(message, category, stacklevel=2)
        return
    filename, lineno, module_globals = site
    warnings.warn_explicit(
        message,
        category,
        filename,
        lineno,
        module=module_globals.get("__name__"),
        registry=module_globals.setdefault("__warningregistry__", {}),
    )
