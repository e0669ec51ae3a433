"""Argument checks that need nothing but Python: shared by the library and the command line.

Each turns a bad argument into one :class:`~streamacc.errors.InputError` sentence that
names the argument (in the caller's terms, see :func:`~streamacc.errors.arg`) and the fix.
numpy registers its integers as ``numbers.Integral``, so they pass as integers here.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Sequence
from typing import Any

from ..errors import InputError, arg

__all__ = ["as_choice", "as_count", "as_unroll"]


def as_count(name: str, value: Any, *, minimum: int, example: int | None = None) -> int:
    """Argument ``name`` as a Python int no smaller than ``minimum``, or an error saying why not."""
    fix = arg(name, example if example is not None else max(minimum, 1024))
    if isinstance(value, bool) or value is None or (isinstance(value, numbers.Real) and not isinstance(
        value, numbers.Integral
    )):
        kind = "" if value is None or isinstance(value, bool) else f" of type {type(value).__name__}"
        raise InputError(f"{arg(name)} must be a whole number >= {minimum}, got {value!r}{kind}; pass e.g. {fix}")
    try:
        count = operator.index(value)
    except TypeError:
        raise InputError(
            f"{arg(name)} must be a whole number >= {minimum}, got {value!r} of type {type(value).__name__}; "
            f"pass e.g. {fix}"
        ) from None
    if count < minimum:
        raise InputError(f"{arg(name)} must be >= {minimum}, got {count}; pass e.g. {fix}")
    return count


def as_unroll(unroll: Any) -> int | bool:
    """``unroll`` as ``lax.scan`` takes it: True, False or a whole number >= 1."""
    if isinstance(unroll, bool):
        return unroll
    return as_count("unroll", unroll, minimum=1, example=8)


def as_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """Argument ``name`` as one of ``choices``, or an error listing them."""
    if not isinstance(value, str) or value not in choices:
        options = ", ".join(arg(name, c) for c in choices)
        raise InputError(f"{arg(name, value)} is unknown; pass one of {options}")
    return value
