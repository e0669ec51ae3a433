"""Window statistics of a block's ys on the device that computed them: each piece's minimum, maximum and sum.

A writer on an accelerator asks for them as soon as a block is dispatched, so that the host,
which would otherwise pass over every value of the block three times for its summaries,
receives a few numbers a window instead. The statistics are computed by a jitted function of
their own over the block's outputs (never inside the block's scan, whose bits it must not
touch), for floating-point outputs of 32 bits or fewer: float32, bfloat16, float16. A block's
rows are cut into *pieces*, given as runs of ``(rows, pieces)`` in order (the windows of a
block, and the parts of windows it begins or ends); each piece is reduced over its rows (and
over every value of its state, ``whole``, for an output summarised over its whole state).

- The minimum and maximum are exact on any device: they are taken on the values' bits mapped
  to integers that order as the values do (-0.0 below 0.0, subnormal numbers as themselves),
  so no floating-point comparison (a device that flushes subnormals to zero, a zero's sign)
  decides them.
- The sum is a float32 pairwise sum with each addition's rounding error kept (TwoSum) and
  summed beside it, in a fixed order: the halves of the piece's values added pairwise, level
  after level. Its two parts, added in float64 on the host, give the sum to about 2**-44
  of the sum of the values' magnitudes, as a float64 sum does: what its last bits are depends
  on that order and on the device's float32 arithmetic (one that flushes subnormals to zero
  loses them), where numpy's sum on the host gives other last bits.
- A piece holding a NaN or an infinity, or whose float32 sum overflowed, is marked, and its
  host reduces it from the data, as it reduces every piece without this.

Knows JAX and numpy, nothing of the summaries' arrays or their windows.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..base import is_bfloat16, numpy_float

__all__ = ["WindowStats", "device_reducible", "window_stats"]

Runs = tuple[tuple[int, int], ...]
"""A block's pieces in order, as runs of ``(rows, pieces)``: ``((100, 1), (4096, 1023))`` is a piece of 100 rows
followed by 1023 pieces of 4096 rows each."""


def device_reducible(dtype: Any) -> bool:
    """Whether an output of ``dtype`` has its window statistics computed by :func:`window_stats`: float32, bfloat16
    and float16 (every value a float32, summed in float32 pairs); any other is reduced on the host."""
    dt = np.dtype(dtype)
    return dt in (np.dtype(np.float32), np.dtype(np.float16)) or is_bfloat16(dt)


def _bits(dtype: np.dtype) -> tuple[Any, int]:
    """The signed integer type of ``dtype``'s width and the mask of its bits below the sign."""
    return (jnp.int32, 0x7FFFFFFF) if dtype.itemsize == 4 else (jnp.int16, 0x7FFF)


def _keys(x: jax.Array) -> jax.Array:
    """The values' bits as signed integers that order as the values do: a negative value's bits below the sign
    flipped, so that -0.0 (key -1) comes below 0.0 (key 0) and a larger magnitude below a smaller one."""
    kind, low = _bits(np.dtype(x.dtype))
    bits = lax.bitcast_convert_type(x, kind)
    return bits ^ (lax.shift_right_arithmetic(bits, jnp.array(8 * x.dtype.itemsize - 1, kind)) & jnp.array(low, kind))


def _finite(x: jax.Array) -> jax.Array:
    """Whether each value is finite, from its bits: an exponent of all ones is an infinity or a NaN."""
    kind, low = _bits(np.dtype(x.dtype))
    exponent = {4: 0x7F800000, 2: 0x7F80 if is_bfloat16(x.dtype) else 0x7C00}[x.dtype.itemsize]
    bits = lax.bitcast_convert_type(x, kind) & jnp.array(low, kind)
    return bits < jnp.array(exponent, kind)


def _two_sum(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``a + b`` rounded, and the rounding's error: their sum is ``a + b`` exactly (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _pairwise(x: jax.Array, axis: int) -> tuple[jax.Array, jax.Array]:
    """The sum of ``x`` (float32) along ``axis`` as a high part and the sum of the rounding errors beside it:
    the two halves added element by element, then the halves of that, until one value is left."""
    hi, lo = x, jnp.zeros_like(x)
    while hi.shape[axis] > 1:
        n = hi.shape[axis]
        if n % 2:  # an odd count: a zero joins the last value
            pad = [(0, 0)] * hi.ndim
            pad[axis] = (0, 1)
            hi, lo = jnp.pad(hi, pad), jnp.pad(lo, pad)
            n += 1
        half = n // 2
        s, e = _two_sum(lax.slice_in_dim(hi, 0, half, axis=axis), lax.slice_in_dim(hi, half, n, axis=axis))
        lo = lax.slice_in_dim(lo, 0, half, axis=axis) + lax.slice_in_dim(lo, half, n, axis=axis) + e
        hi = s
    return lax.index_in_dim(hi, 0, axis, keepdims=False), lax.index_in_dim(lo, 0, axis, keepdims=False)


def _pieces(leaf: jax.Array, runs: Runs, whole: bool) -> tuple[jax.Array, ...]:
    """Each piece's minimum and maximum keys, the two parts of its sum and whether it is finite, a row a piece."""
    parts: list[tuple[jax.Array, ...]] = []
    begin = 0
    for rows, n in runs:
        block = leaf[begin : begin + rows * n]
        begin += rows * n
        shaped = block.reshape(n, rows * int(np.prod(leaf.shape[1:], dtype=np.int64))) if whole else block.reshape(
            n, rows, *leaf.shape[1:]
        )
        keys = _keys(shaped)
        hi, lo = _pairwise(shaped.astype(jnp.float32), 1)
        finite = jnp.all(_finite(shaped), axis=1) & jnp.isfinite(hi)
        parts.append((jnp.min(keys, axis=1), jnp.max(keys, axis=1), hi, lo, finite))
    return tuple(jnp.concatenate(field) for field in zip(*parts, strict=True))


@functools.lru_cache(maxsize=64)
def _compiled(runs: Runs, whole: bool) -> Callable[[jax.Array], tuple[jax.Array, ...]]:
    return jax.jit(functools.partial(_pieces, runs=runs, whole=whole))


@dataclasses.dataclass(frozen=True)
class WindowStats:
    """The statistics of a block's pieces of one output, computing on the device (see :func:`window_stats`)."""

    dtype: np.dtype
    arrays: tuple[jax.Array, ...]

    def fetch(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each piece's minimum, maximum and sum on the host (a row a piece): the minimum and maximum in the dtype
        numpy reduces the output in (float32 for bfloat16), the sum in float64, NaN where the piece holds a NaN or
        an infinity, or where its float32 sum overflowed: the host reduces those from the data."""
        low, high, hi, lo, finite = (np.asarray(a) for a in self.arrays)
        wide = numpy_float(self.dtype)
        bits = np.dtype(f"i{self.dtype.itemsize}")
        low, high = (_values(k.astype(bits, copy=False), self.dtype).astype(wide) for k in (low, high))
        with np.errstate(invalid="ignore", over="ignore"):
            total = hi.astype(np.float64) + lo.astype(np.float64)
        return low, high, np.where(finite, total, np.nan)


def _values(keys: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The values whose :func:`_keys` are ``keys`` (the mapping is its own inverse)."""
    low = np.array(np.iinfo(keys.dtype).max, keys.dtype)
    bits: np.ndarray = keys ^ ((keys >> (8 * keys.itemsize - 1)) & low)
    return bits.view(dtype)


def window_stats(leaf: jax.Array, runs: Runs, *, whole: bool = False) -> WindowStats | None:
    """Start computing the statistics of the pieces ``runs`` of ``leaf`` (a block's output, rows first) on the
    device that holds it; None for an output whose dtype the host reduces (see :func:`device_reducible`).

    ``whole`` reduces each piece over every value of its rows (an output summarised over its whole state); else
    over its rows, value by value. Returns at once (JAX dispatches asynchronously); :meth:`WindowStats.fetch`
    waits for the numbers.
    """
    if not device_reducible(leaf.dtype) or not runs:
        return None
    return WindowStats(np.dtype(leaf.dtype), _compiled(tuple(runs), whole)(leaf))
