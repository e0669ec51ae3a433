"""The ``step`` labels of ``streamacc.open``: pandas' own ``RangeIndex``, whose lookups never materialise them.

xarray aligns, reindexes and swaps an index only with another of the same type, so ``step``
is indexed by xarray's ``PandasIndex``, as a pandas-indexed copy of the same data is: it
aligns with any other ``step`` (``ds.x + other``, ``reindex``, ``align``, ``combine_first``)
as those labels materialised would. Output row ``p`` holds step ``first + p * stride``:
:class:`Steps` is that ``RangeIndex`` (two numbers and a length, exact up to 2**63 - 1),
and answers by integer arithmetic the lookups that pandas answers by materialising every
label (a ``method`` or ``tolerance``, float labels, float slice bounds, which on 2**32 rows
would be 32 GiB): each label is decided on the few rows around it. A missing label says
which steps the index holds.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["Steps", "exact_int", "lazy_steps"]


def exact_int(value: Any, what: str) -> int:
    """``value`` as an exact integer step label, or a KeyError (as pandas raises for a missing label)."""
    if isinstance(value, (bool, np.bool_)):
        raise KeyError(f"{what} {value!r} is not a step label")
    try:
        if isinstance(value, (int, np.integer)):
            return int(value)
        number = float(value)
    except (TypeError, ValueError):
        raise KeyError(f"{what} {value!r} is not a step label; steps are integers") from None
    if not math.isfinite(number) or number != int(number):
        raise KeyError(f"{what} {value!r} is not a step label; steps are integers (use method='nearest')")
    return int(number)


def _integer(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _number(value: Any) -> Fraction | None:
    """``value`` as an exact rational (a float is one), or None for anything that is no finite real number."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if _integer(value):
        return Fraction(int(value))
    if isinstance(value, (float, np.floating)) and math.isfinite(value):
        return Fraction(float(value))
    return None


class Steps(pd.RangeIndex):  # type: ignore[misc]  # pandas comes without types here
    """Evenly spaced step labels: pandas' ``RangeIndex``, whose every lookup works by integer arithmetic.

    ``get_loc``, ``get_indexer`` (any ``method`` and ``tolerance``) and ``slice_indexer``
    (float bounds too) never materialise the labels; ``append``, ``union`` and
    ``intersection`` keep an evenly spaced result a ``Steps``.
    """

    def describe(self) -> str:
        """The steps it holds, in words: ``2 to 599 every 3``."""
        if len(self) == 0:
            return "none"
        every = f" every {self.step}" if self.step != 1 else ""
        return f"{self.start} to {self.start + (len(self) - 1) * self.step}{every}"

    def get_loc(self, key: Any) -> int:
        label = exact_int(key, "step")
        try:
            return int(super().get_loc(label))
        except KeyError:
            raise KeyError(f"step {label} is not in the index: it holds steps {self.describe()}") from None

    def get_indexer(
        self, target: Any, method: str | None = None, limit: int | None = None, tolerance: Any = None
    ) -> np.ndarray:
        labels = np.asarray(target)
        if limit is not None or labels.ndim != 1:
            found: np.ndarray = super().get_indexer(target, method=method, limit=limit, tolerance=tolerance)
            return found
        if method is None and tolerance is None and labels.dtype.kind in "iu":
            return self._exact(labels)
        if method is None and tolerance is None and labels.dtype.kind == "f":
            whole = np.isfinite(labels) & (np.floor(labels) == labels) & (np.abs(labels) < 2.0**63)
            out = np.full(len(labels), -1, dtype=np.intp)
            out[whole] = self._exact(labels[whole].astype(np.int64))
            return out
        out = np.full(len(labels), -1, dtype=np.intp)
        if labels.dtype.kind in "mM":  # dates and durations label no step
            return out
        for i, value in enumerate(labels.tolist()):  # each label decided on the few rows around it
            rows = self._around(value)
            if len(rows):
                near = pd.Index(np.asarray([self.start + p * self.step for p in rows], dtype=np.int64))
                hit = int(near.get_indexer([value], method=method, tolerance=tolerance)[0])
                out[i] = -1 if hit < 0 else rows.start + hit
        return out

    def _exact(self, labels: np.ndarray) -> np.ndarray:
        """The rows of integer labels (-1 where none), in integer arithmetic that cannot overflow."""
        if len(labels) == 0:
            return np.zeros(0, dtype=np.intp)
        low, high = int(labels.min()), int(labels.max())
        if high < 2**63 and low - self.start >= -(2**63) and high - self.start < 2**63:
            offsets = labels.astype(np.int64) - np.int64(self.start)  # every difference within int64
            rows, off = np.divmod(offsets, self.step)
            hit = (off == 0) & (rows >= 0) & (rows < len(self))
            return np.where(hit, rows, -1).astype(np.intp)
        return np.asarray([self._row(int(v)) for v in labels.tolist()], dtype=np.intp)

    def _row(self, label: int) -> int:
        p, off = divmod(label - self.start, self.step)
        return p if off == 0 and 0 <= p < len(self) else -1

    def _around(self, value: Any) -> range:
        """The few rows around where ``value`` falls (empty for anything that is no number)."""
        number = _number(value)
        if number is None or len(self) == 0:
            return range(0)
        centre = min(max(math.floor((number - self.start) / self.step), 0), len(self) - 1)
        return range(max(0, centre - 1), min(len(self), centre + 3))

    def slice_indexer(self, start: Any = None, end: Any = None, step: Any = None) -> slice:
        bounds = [b for b in (start, end) if b is not None]
        if all(_integer(b) for b in bounds) or any(_number(b) is None for b in bounds):
            found: slice = super().slice_indexer(start, end, step)  # integers: pandas' own arithmetic
            return found
        if step is not None and not (_integer(step) and step > 0):
            found = super().slice_indexer(start, end, step)
            return found
        lo = 0 if start is None else self._bound(start, first=True)
        hi = len(self) if end is None else self._bound(end, first=False)
        return slice(lo, max(lo, hi), step)

    def _bound(self, value: Any, *, first: bool) -> int:
        """The first row whose label is at or past ``value`` in index order (``first``), or one past the last
        row before it: as pandas slices by label, both ends included, from high to low in a descending index."""
        number = _number(value)
        assert number is not None
        position = (number - self.start) / self.step
        row = math.ceil(position) if first else math.floor(position) + 1
        return int(min(max(row, 0), len(self)))

    def append(self, other: Any) -> pd.Index:
        return lazy_steps(super().append(other))

    def union(self, other: Any, sort: bool | None = None) -> pd.Index:
        return lazy_steps(super().union(other, sort=sort))

    def intersection(self, other: Any, sort: bool = False) -> pd.Index:
        return lazy_steps(super().intersection(other, sort=sort))


def lazy_steps(index: pd.Index) -> pd.Index:
    """``index`` as :class:`Steps` where pandas made a plain ``RangeIndex`` of it, else as it is."""
    if type(index) is pd.RangeIndex:
        return Steps(index.start, index.stop, index.step, name=index.name)
    return index
