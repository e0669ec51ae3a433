"""How a scan of ``length`` steps is cut into blocks: pure arithmetic, no JAX.

Kept apart from the engine so that reading and checking an output's bookkeeping never
needs to import JAX.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["MAX_LENGTH", "block_bounds", "block_count", "committed_span"]

MAX_LENGTH = 2**63 - 1
"""The longest output readers can index: numpy, dask and xarray index with a C ``ssize_t``."""


def block_count(length: int, block_size: int, unroll: int | bool = 1) -> int:
    """How many blocks cover ``length`` steps.

    Normally ``ceil(length / block_size)``. With ``unroll`` u > 1, a short tail of u to
    2u - 1 steps joins the block before it: alone, its unrolled loop would run once, and
    XLA inlines such a loop and regroups its floating-point work, changing the bits.
    """
    count = -(-length // block_size)
    tail = length % block_size
    if count >= 2 and not isinstance(unroll, bool) and unroll > 1 and unroll <= tail < 2 * unroll:
        count -= 1
    return count


def block_bounds(
    length: int, block_size: int, reverse: bool = False, first: int = 0, unroll: int | bool = 1
) -> Iterator[tuple[int, int]]:
    """The ``[start, stop)`` of each block in scan order, skipping the first ``first`` blocks.

    Blocks start at multiples of ``block_size`` from step 0 in both directions, so every
    block maps onto whole output chunks; the last block in index order (the first one
    run when ``reverse``) ends at ``length`` and may be shorter, or longer (see
    :func:`block_count`).
    """
    count = block_count(length, block_size, unroll)
    order = range(count - 1 - first, -1, -1) if reverse else range(first, count)
    for k in order:
        yield k * block_size, length if k == count - 1 else (k + 1) * block_size


def committed_span(length: int, block_size: int, reverse: bool, blocks: int, unroll: int | bool = 1) -> tuple[int, int]:
    """The steps ``[start, stop)`` that the first ``blocks`` blocks in scan order cover."""
    if blocks <= 0:
        return (length, length) if reverse else (0, 0)
    bounds = list(block_bounds(length, block_size, reverse, blocks - 1, unroll))[:1]
    if not bounds:
        return (0, length)
    start, stop = bounds[0]
    return (start, length) if reverse else (0, stop)
