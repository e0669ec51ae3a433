"""Values as a caller gives them: counts, unrolls and choices checked, and dtypes by name.

Each check turns a bad argument into one :class:`~streamacc.errors.InputError` sentence that
names the argument (in the caller's terms, see :func:`~streamacc.errors.arg`) and the fix,
needing nothing but Python (numpy registers its integers as ``numbers.Integral``, so they pass
as integers here), so that the library and the command line share them.

A dtype is recorded by name: numpy's dtype string (``"<f8"``), which ``np.dtype`` reads back,
except for the types ml_dtypes adds (``np.dtype(bfloat16).str`` is ``"<V2"``, which reads back
as two raw bytes): those are named by their ml_dtypes name (``"bfloat16"``), so that a recorded
dtype (a carry leaf's, an output's) reads back as itself. numpy is imported when a dtype is
named, and ml_dtypes only to read such a name back; nothing here imports JAX.
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from ..errors import InputError, arg

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

__all__ = [
    "HostLeaf", "as_choice", "as_count", "as_unroll", "counted", "dtype_from_name", "dtype_name", "is_bfloat16",
    "is_float", "numpy_float",
]


HostLeaf: TypeAlias = "tuple[npt.NDArray[Any], str | None]"
"""A carry leaf as plain host data: its numpy array, and the name of its PRNG key implementation (None for no key)."""

def counted(n: int, noun: str, nouns: str | None = None) -> str:
    """``n`` and ``noun``, its plural (``nouns``, else ``noun + "s"``) unless ``n`` is 1: ``1 block``, ``2 blocks``."""
    return f"{n} {noun if n == 1 else nouns or noun + 's'}"


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


_BFLOAT16 = "bfloat16"
_LEGACY = {"<V2": _BFLOAT16}
"""Dtype strings streamacc 1.0 recorded for a carry leaf of an ml_dtypes type: ``"<V2"``, the one
two-byte type among them (bfloat16), which is no type a JAX array can have otherwise."""


def _is_ml_dtype(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is one of the scalar types ml_dtypes adds (kind ``V``, but no raw bytes or record)."""
    import numpy as np

    return dtype.kind == "V" and dtype.type is not np.void and dtype.names is None and dtype.subdtype is None


def dtype_name(dtype: Any) -> str:
    """``dtype`` as a string :func:`dtype_from_name` reads back: numpy's dtype string (``"<f8"``), or for a
    type ml_dtypes adds its name (``"bfloat16"``, ``"float8_e4m3fn"``)."""
    import numpy as np

    dt = np.dtype(dtype)
    return str(dt.name if _is_ml_dtype(dt) else dt.str)


def dtype_from_name(name: str) -> np.dtype:
    """The dtype :func:`dtype_name` named ``name``; ValueError when ``name`` names none.

    Also reads the ``"<V2"`` that streamacc 1.0 recorded for a bfloat16 carry leaf as bfloat16.
    """
    import numpy as np

    name = _LEGACY.get(name, name)
    if name[:1] in ("<", ">", "|", "="):
        return np.dtype(name)
    import ml_dtypes

    found = getattr(ml_dtypes, name, None) if name.isidentifier() and not name.startswith("_") else None
    try:
        dt = np.dtype(found) if isinstance(found, type) else None
    except TypeError:
        dt = None
    if dt is None or not _is_ml_dtype(dt):
        raise ValueError(f"{name!r} names no dtype")
    return dt


def is_bfloat16(dtype: Any) -> bool:
    """Whether ``dtype`` is JAX's and ml_dtypes' ``bfloat16``."""
    import numpy as np

    dt = np.dtype(dtype)
    return dt.name == _BFLOAT16 and _is_ml_dtype(dt)


def is_float(dtype: Any) -> bool:
    """Whether ``dtype`` is a real floating-point type (NaN and infinities among its values): numpy's, or bfloat16."""
    import numpy as np

    return np.dtype(dtype).kind == "f" or is_bfloat16(dtype)


def numpy_float(dtype: Any) -> np.dtype:
    """The numpy dtype that holds every value of ``dtype`` exactly and numpy's own loops reduce: float32 for
    bfloat16 (whose values are float32s with the low 16 bits clear), ``dtype`` itself for any other."""
    import numpy as np

    return np.dtype(np.float32) if is_bfloat16(dtype) else np.dtype(dtype)
