"""How a scan of ``length`` steps is cut into blocks, and which layouts are refused: pure arithmetic, no JAX.

Kept apart from the engine so that reading and checking an output's bookkeeping, and
refusing a bad command line, never need to import JAX. Nothing here loops over blocks:
every answer costs the same at any length up to :data:`MAX_LENGTH`.
"""

from __future__ import annotations

from collections.abc import Iterator

from .._errors import InputError, spell

__all__ = ["MAX_LENGTH", "block_bounds", "block_count", "check_grouping", "check_length", "committed_span"]

MAX_LENGTH = 2**63 - 1
"""The longest output readers can index: numpy, dask and xarray index with a C ``ssize_t``."""


def check_length(length: int) -> None:
    """Refuse a length that readers cannot index."""
    if length > MAX_LENGTH:
        raise InputError(
            f"{spell('length', length)} is longer than 2**63 - 1 steps, the most that numpy, dask and xarray "
            "can index; split the run into several outputs"
        )


def check_grouping(length: int, block_size: int, unroll: int | bool, reverse: bool) -> None:
    """Refuse blocks that cannot reproduce ``lax.scan``'s grouping of steps under ``unroll``.

    ``lax.scan(unroll=u)`` runs groups of u steps per loop trip, and XLA may reassociate
    floating-point work within a group, so blocks must line up with the whole scan's
    groups (and run their loop at least twice) to give the same bits.
    """
    if length <= block_size or unroll is False or (unroll == 1 and unroll is not True):
        return
    if unroll is True:
        raise InputError(
            f"{spell('unroll', True)} unrolls each block completely, which regroups steps unlike one lax.scan; "
            f"pass an integer unroll such as {spell('unroll', 8)}"
        )
    if block_size % unroll or block_size < 2 * unroll:
        good = max(2 * unroll, block_size - block_size % unroll)
        raise InputError(
            f"{spell('block_size', block_size)} must be a multiple of the scan's unroll ({unroll}) and at least "
            f"{2 * unroll}, so that blocks line up with lax.scan's unrolled groups; "
            f"pass e.g. {spell('block_size', good)}"
        )
    if reverse and length % unroll:
        raise InputError(
            f"with {spell('reverse', True)}, {spell('length', length)} must be a multiple of the scan's unroll "
            f"({unroll}), as lax.scan runs its remainder steps first; pass {spell('unroll', 1)} or a length divisible "
            "by the unroll"
        )


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
