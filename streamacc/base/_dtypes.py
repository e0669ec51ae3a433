"""Dtypes by name, and the floats numpy knows only through ml_dtypes (JAX's ``bfloat16``).

numpy spells a dtype as a string (``"<f8"``) that ``np.dtype`` reads back, except the types
ml_dtypes adds: ``np.dtype(bfloat16).str`` is ``"<V2"``, which reads back as two raw bytes.
Those are named by their ml_dtypes name instead (``"bfloat16"``), so that a recorded dtype
(a carry leaf's, an output's) reads back as itself. Nothing here imports JAX; ml_dtypes is
imported only to read such a name back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["dtype_from_name", "dtype_name", "is_bfloat16", "is_float", "numpy_float"]

_BFLOAT16 = "bfloat16"
_LEGACY = {"<V2": _BFLOAT16}
"""Dtype strings streamacc 1.0 recorded for a carry leaf of an ml_dtypes type: ``"<V2"``, the one
two-byte type among them (bfloat16), which is no type a JAX array can have otherwise."""


def _is_ml_dtype(dtype: np.dtype) -> bool:
    """Whether ``dtype`` is one of the scalar types ml_dtypes adds (kind ``V``, but no raw bytes or record)."""
    return dtype.kind == "V" and dtype.type is not np.void and dtype.names is None and dtype.subdtype is None


def dtype_name(dtype: Any) -> str:
    """``dtype`` as a string :func:`dtype_from_name` reads back: numpy's dtype string (``"<f8"``), or for a
    type ml_dtypes adds its name (``"bfloat16"``, ``"float8_e4m3fn"``)."""
    dt = np.dtype(dtype)
    return str(dt.name if _is_ml_dtype(dt) else dt.str)


def dtype_from_name(name: str) -> np.dtype:
    """The dtype :func:`dtype_name` named ``name``; ValueError when ``name`` names none.

    Also reads the ``"<V2"`` that streamacc 1.0 recorded for a bfloat16 carry leaf as bfloat16.
    """
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
    dt = np.dtype(dtype)
    return dt.name == _BFLOAT16 and _is_ml_dtype(dt)


def is_float(dtype: Any) -> bool:
    """Whether ``dtype`` is a real floating-point type (NaN and infinities among its values): numpy's, or bfloat16."""
    return np.dtype(dtype).kind == "f" or is_bfloat16(dtype)


def numpy_float(dtype: Any) -> np.dtype:
    """The numpy dtype that holds every value of ``dtype`` exactly and numpy's own loops reduce: float32 for
    bfloat16 (whose values are float32s with the low 16 bits clear), ``dtype`` itself for any other."""
    return np.dtype(np.float32) if is_bfloat16(dtype) else np.dtype(dtype)
