"""How a scan of ``length`` steps is cut into blocks, and which layouts are refused: pure arithmetic, no JAX.

Kept apart from the engine so that reading and checking an output's bookkeeping, and
refusing a bad command line, never need to import JAX. Nothing here loops over blocks:
every answer costs the same at any length up to :data:`MAX_LENGTH`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from .._checks import as_count, as_unroll
from ..errors import InputError, arg

__all__ = [
    "MAX_BLOCK_STEPS",
    "MAX_LENGTH",
    "block_bounds",
    "block_count",
    "block_size_near",
    "block_steps",
    "check_block_size",
    "check_grouping",
    "check_length",
    "check_save_every",
    "check_scan_keywords",
    "committed_span",
    "pool_size",
    "row_step",
    "rows_in",
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


def check_length(length: int) -> None:
    """Refuse a length that readers cannot index."""
    if length > MAX_LENGTH:
        raise InputError(
            f"{arg('length', length)} is longer than 2**63 - 1 steps, the most that numpy, dask and xarray "
            "can index; split the run into several outputs"
        )


def check_save_every(save_every: int, length: int) -> None:
    """Refuse a ``save_every`` that keeps no step of a scan of ``length`` steps."""
    if save_every > max(length, 1):
        raise InputError(
            f"{arg('save_every', save_every)} keeps no step of a scan of {length} steps (the first kept is step "
            f"{save_every - 1}); pass a {arg('save_every')} of at most {arg('length')}"
        )


def block_size_near(block_size: int, unroll: int, save_every: int) -> int:
    """The block size to suggest for a refused ``block_size``: the nearest below it that is a multiple of both
    ``unroll`` and ``save_every`` and, with an unroll, at least two unrolled groups (the smallest such otherwise)."""
    multiple = math.lcm(unroll, save_every)
    least = -(-2 * unroll // multiple) if unroll > 1 else 1
    return max(least, block_size // multiple) * multiple


def check_grouping(length: int, block_size: int, unroll: int | bool, reverse: bool, save_every: int = 1) -> None:
    """Refuse blocks that cannot reproduce ``lax.scan``'s grouping of steps under ``unroll``.

    ``lax.scan(unroll=u)`` runs groups of u steps per loop trip, and XLA may reassociate
    floating-point work within a group, so blocks must line up with the whole scan's
    groups (and run their loop at least twice) to give the same bits.
    """
    if length <= block_size or unroll is False or (unroll == 1 and unroll is not True):
        return
    if unroll is True:
        raise InputError(
            f"{arg('unroll', True)} unrolls each block completely, which regroups steps unlike one lax.scan; "
            f"pass an integer unroll such as {arg('unroll', 8)}"
        )
    if block_size % unroll or block_size < 2 * unroll:
        good = block_size_near(block_size, unroll, save_every)  # a thinned block keeps whole rows too
        also = f" and of {arg('save_every', save_every)}" if save_every > 1 else ""
        raise InputError(
            f"{arg('block_size', block_size)} must be a multiple of the scan's unroll ({unroll}){also} and at "
            f"least {2 * unroll}, so that blocks line up with lax.scan's unrolled groups; "
            f"pass e.g. {arg('block_size', good)}"
        )
    if reverse and length % unroll:
        raise InputError(
            f"with {arg('reverse', True)}, {arg('length', length)} must be a multiple of the scan's unroll "
            f"({unroll}), as lax.scan runs its remainder steps first; pass {arg('unroll', 1)} or a length divisible "
            "by the unroll"
        )


def check_block_size(given: Any, length: int, unroll: Any, save_every: int) -> int:
    """``block_size`` as a positive int that holds whole rows of ``save_every`` steps, or an :class:`InputError`."""
    block_size = as_count("block_size", given, minimum=1)
    if block_size % save_every:
        u = unroll if type(unroll) is int and unroll > 1 and block_size < length else 1  # blocks line up with groups
        good = block_size_near(block_size, u, save_every)
        also = f" and of the scan's unroll ({u})" if u > 1 else ""
        raise InputError(
            f"{arg('block_size', block_size)} must be a multiple of {arg('save_every', save_every)}{also}, so "
            f"that every block keeps whole rows; pass e.g. {arg('block_size', good)}"
        )
    return block_size


def check_scan_keywords(
    length: Any, block_size: Any, unroll: Any, reverse: Any, save_every: Any
) -> tuple[int, int | None, int | bool, bool, int]:
    """A scan's keywords checked and normalised, with no step function and no JAX.

    What :class:`~streamacc.ScanSpec` checks of its keywords before it traces the step;
    the command line asks it of its options before JAX is imported.
    """
    n = as_count("length", length, minimum=0)
    check_length(n)
    every = as_count("save_every", save_every, minimum=1)
    check_save_every(every, n)
    size = None if block_size is None else check_block_size(block_size, n, unroll, every)
    unrolled = as_unroll(unroll)
    numpy_bool = getattr(reverse, "shape", None) == () and getattr(getattr(reverse, "dtype", None), "kind", "") == "b"
    if not (isinstance(reverse, bool) or numpy_bool):
        raise InputError(f"{arg('reverse')} must be True or False, got {reverse!r}")
    if size is not None:
        check_grouping(n, size, unrolled, bool(reverse), every)
    return n, size, unrolled, bool(reverse), every


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
