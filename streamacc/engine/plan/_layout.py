"""How a scan of ``length`` steps is cut into blocks: pure arithmetic, no JAX.

Kept apart from the engine so that reading and checking an output's bookkeeping never
needs to import JAX (``_blocking`` holds a scan's settings, checked, and asks these).
Nothing here loops over blocks: every answer costs the same at any length up to
:data:`MAX_LENGTH`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

__all__ = [
    "MAX_BLOCK_STEPS",
    "MAX_LENGTH",
    "block_bounds",
    "block_count",
    "block_steps",
    "committed_span",
    "pool_size",
    "row_step",
    "rows_in",
    "unrolled",
]

MAX_LENGTH = 2**63 - 1
"""The longest output readers can index: numpy, dask and xarray index with a C ``ssize_t``."""

ENGINE_HELD = 1
"""Blocks the engine holds besides the caller's: the one it is computing, which needs a slot."""

AHEAD_HELD = 1
"""Blocks the engine holds besides those when it computes ahead (see ``engine.computes_ahead``):
the next block, dispatched before the previous one is handed over."""

MAX_BLOCK_STEPS = 2**26
"""The most steps a block sized by bytes runs (a step with little or no output, or one that
keeps every k-th row, would otherwise make a block of billions of steps): a few seconds of
work at most for a cheap step, so progress, commits and resumes stay fine-grained."""


def pool_size(depth: int, *, ahead: bool = False) -> int:
    """Block buffers a caller needs so that no block waits for memory: its ``depth`` in flight and the engine's.

    The engine holds the block it computes and, computing ``ahead`` (on an accelerator),
    the one dispatched before the previous block is handed over.
    """
    return depth + ENGINE_HELD + (AHEAD_HELD if ahead else 0)


def rows_in(start: int, stop: int, save_every: int = 1) -> tuple[int, int]:
    """The output rows ``[first, last)`` that the steps ``[start, stop)`` produce.

    Output row r holds the y of step ``r * save_every + save_every - 1`` (see
    :func:`row_step`), so the steps before ``s`` produce exactly ``s // save_every`` rows.
    """
    return start // save_every, stop // save_every


def row_step(row: Any, save_every: int = 1) -> Any:
    """The step whose y output row ``row`` holds: ``row * save_every + save_every - 1``.

    The one mapping from output rows to step labels, for readers, writers and indexes
    alike; works on Python ints (exact at any length) and on integer numpy arrays.
    """
    return row * save_every + (save_every - 1)


def _round_rows(rows: int) -> int:
    """``rows`` rounded down to a multiple of a power of two of at least an eighth of it.

    Keeps its three leading bits (4096 stays, 4194 becomes 4096, 1398101 becomes 1310720),
    so that chunk lengths that are powers of two divide a block.
    """
    if rows < 8:
        return rows
    unit = 1 << (rows.bit_length() - 3)
    return rows - rows % unit


def block_steps(
    row_bytes: int,
    budget: int,
    *,
    save_every: int = 1,
    xs_bytes: int = 0,
    unroll: int = 1,
    rows_multiple: int = 1,
) -> int:
    """Steps per block so that one block's output, and the inputs it reads, take about ``budget`` bytes.

    A block keeps ``rows`` output rows of ``row_bytes`` each and reads ``rows * save_every``
    steps of inputs of ``xs_bytes`` each, whichever is larger counts. At least one row
    (a step larger than the budget runs alone), at most :data:`MAX_BLOCK_STEPS` steps;
    ``rows`` is a multiple of ``rows_multiple`` (whole chunks per block), and the steps a
    multiple of ``unroll`` and at least twice it (see :func:`block_count`).
    """
    per_row = max(row_bytes, save_every * xs_bytes)
    rows = budget // per_row if per_row else MAX_BLOCK_STEPS
    rows = _round_rows(max(1, min(rows, MAX_BLOCK_STEPS // save_every)))
    step = rows_multiple
    if unroll > 1:
        need = unroll // math.gcd(unroll, save_every)  # rows per whole number of unrolled groups
        step = step * need // math.gcd(step, need)
        rows = max(rows, -(-2 * unroll // save_every))
    rows = max(step, rows - rows % step)
    return rows * save_every


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
    :func:`block_count`). Lazy: nothing is computed for blocks not asked for.
    """
    count = block_count(length, block_size, unroll)
    order = range(count - 1 - first, -1, -1) if reverse else range(first, count)
    for k in order:
        yield k * block_size, length if k == count - 1 else (k + 1) * block_size


def committed_span(length: int, block_size: int, reverse: bool, blocks: int, unroll: int | bool = 1) -> tuple[int, int]:
    """The steps ``[start, stop)`` that the first ``blocks`` blocks in scan order cover.

    Pure arithmetic, whatever the length: a prefix ``[0, stop)``, or with ``reverse`` the
    suffix ``[start, length)``.
    """
    count = block_count(length, block_size, unroll)
    if blocks <= 0:
        return (length, length) if reverse else (0, 0)
    if blocks >= count:
        return (0, length)
    return ((count - blocks) * block_size, length) if reverse else (0, blocks * block_size)


def unrolled(unroll: int | bool) -> bool:
    return unroll is True or (not isinstance(unroll, bool) and unroll > 1)
