"""A block's rows of the inputs, read one block at a time, and the host rows of the blocks before let go."""

from __future__ import annotations

import functools
import gc
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from jax import lax

from ..plan import Plan
from ._pool import POOL_MIN_BYTES

__all__ = ["block_xs", "let_go", "spent_rows"]


@functools.lru_cache(maxsize=64)
def _slicer(length: int) -> Callable[[jax.Array, int], jax.Array]:
    return jax.jit(lambda a, start: lax.dynamic_slice_in_dim(a, start, length))


def _take(leaf: Any, start: int, stop: int) -> Any:
    """Rows ``[start, stop)`` of one xs leaf, reading nothing else."""
    if isinstance(leaf, jax.Array):
        return _slicer(stop - start)(leaf, start)  # a traced start: one compile per block length
    return np.asarray(leaf[start:stop])


def block_xs(plan: Plan, start: int, stop: int) -> Any:
    """The rows ``[start, stop)`` of every xs leaf (None without xs).

    Host rows of the blocks before are let go first (see :func:`_drop_spent_rows`), so
    that a block's rows are read into memory its predecessor's have just freed.
    """
    if plan.xs is None:
        return None
    if _host_rows_nbytes(plan.xs) * (stop - start) >= HOST_ROWS_MIN_BYTES:
        _drop_spent_rows()
    return jax.tree_util.tree_map(lambda leaf: _take(leaf, start, stop), plan.xs)


HOST_ROWS_MIN_BYTES = POOL_MIN_BYTES
"""Smallest block of host rows (bytes) whose predecessors :func:`block_xs` lets go of
before reading it; smaller rows come from glibc's heap, which reuses them whenever they go."""


def _host_rows_nbytes(xs: Any) -> int:
    """Bytes of one step of the leaves of ``xs`` that live on the host (not JAX arrays)."""
    return sum(
        np.dtype(leaf.dtype).itemsize * int(np.prod(leaf.shape[1:], dtype=np.int64))
        for leaf in jax.tree_util.tree_leaves(xs)
        if not isinstance(leaf, jax.Array)
    )


def _drop_spent_rows() -> None:
    """Free the host rows that XLA has finished computing on, now rather than at Python's next collection.

    XLA computes on an aligned numpy array in place and holds it meanwhile; once done, it
    lets go of it from a thread of its own, where jaxlib, without the GIL, only queues the
    reference for its garbage list, which a gc callback empties at each collection. Until
    then a block's rows outlive it, and the next block's rows are read while the rows of
    the block before (or more) still take their memory. A young-generation collection runs
    that callback, and costs little against a block's read.
    """
    gc.collect(0)


SPENT_ROWS_WAIT_S = 1.0
"""Longest :func:`let_go` waits for XLA's thread to let go of a computed block's rows."""


def spent_rows(plan: Plan, xs: Any, length: int) -> tuple[weakref.ref[Any], ...]:
    """Weak references to a block's host rows, where they are large enough to be let go of (see :func:`let_go`)."""
    if xs is None or _host_rows_nbytes(plan.xs) * length < HOST_ROWS_MIN_BYTES:
        return ()
    return tuple(weakref.ref(leaf) for leaf in jax.tree_util.tree_leaves(xs) if isinstance(leaf, np.ndarray))


def let_go(rows: Sequence[weakref.ref[Any]]) -> None:
    """Wait, briefly, until the rows of a block whose values are ready are freed.

    XLA lets go of them from its own thread once the block is done (see
    :func:`_drop_spent_rows`), a moment after its values are ready; a busy machine can
    stretch that moment, and the next block's rows would be read beside them. The wait is
    bounded by :data:`SPENT_ROWS_WAIT_S`: rows someone else holds only cost that once.
    """
    deadline = time.monotonic() + SPENT_ROWS_WAIT_S
    while any(r() is not None for r in rows) and time.monotonic() < deadline:
        gc.collect(0)  # runs jaxlib's queue of references let go of without the GIL
        if any(r() is not None for r in rows):
            time.sleep(0.0005)
