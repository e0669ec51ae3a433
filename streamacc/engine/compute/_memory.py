"""What a blocked scan holds in memory, checked against the machine's before anything runs."""

from __future__ import annotations

import math
import os

import jax

from ...base import DEFAULT_BLOCK_BYTES, unrolled
from ...errors import InputError, arg
from ..plan import Plan

__all__ = ["block_memory", "check_memory", "physical_memory", "too_big"]


def physical_memory() -> int | None:
    """This machine's memory in bytes, where the system says."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, OSError, ValueError):
        return None


def in_bytes(n: int) -> str:
    """``n`` bytes in binary units: ``8.0 TiB``."""
    value, unit = float(n), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024 or unit == "EiB":
            break
        value /= 1024
    return f"{n} bytes" if unit == "bytes" else f"{value:.1f} {unit}"


def too_big(needed: int, memory: int | None, rows: int) -> InputError:
    """The error for ys that do not fit in memory: scan keeps them all there."""
    have = "more than memory holds"
    if memory is not None:
        have = f"more than this machine's {in_bytes(memory)} of memory"
    return InputError(
        f"scan keeps every row of ys in memory, and {rows} rows take {in_bytes(needed)}, {have}; stream them "
        f"instead with streamacc.iter_blocks (block by block) or streamacc.write (to Zarr on disk), or keep "
        f"fewer rows with {arg('save_every')}"
    )


def _largest_block(plan: Plan) -> int:
    """Steps of the plan's longest block: a full one, or the last, which a short tail under ``unroll`` joins."""
    last = plan.blocking.last_steps
    return last if plan.block_count <= 1 else max(plan.block_size, last)


def _row_bytes(plan: Plan) -> int:
    """Bytes of one step's y (exact at any size: Python integers)."""
    return sum(s.dtype.itemsize * math.prod(s.shape) for s in jax.tree_util.tree_leaves(plan.y_struct))


def block_memory(plan: Plan, buffers: int) -> tuple[int, int]:
    """The bytes of ys of the plan's longest block, and what ``buffers`` of them take with a block computing.

    A block computing unrolled and thinned holds every step's y besides its kept rows
    (see :func:`~streamacc.engine.compute._kernels.thinned_scan`).
    """
    steps, row = _largest_block(plan), _row_bytes(plan)
    block = steps // plan.save_every * row
    computing = steps * row if plan.save_every > 1 and unrolled(plan.unroll) else 0
    return block, buffers * block + computing


def check_memory(
    plan: Plan,
    buffers: int,
    *,
    asked: int | None,
    who: str,
    besides: int = 0,
    default_bytes: int = DEFAULT_BLOCK_BYTES,
) -> None:
    """Refuse, with an :class:`InputError` naming ``block_size``, blocks of which ``buffers`` exceed memory.

    ``who`` holds ``buffers`` blocks at once, and ``besides`` bytes more; ``asked`` is
    the block size its caller gave (None: blocks sized to about ``default_bytes``).
    Checked before anything is computed or created: numpy would fail to allocate the
    first block's buffer, or the machine would run out of memory filling it.
    """
    memory = physical_memory()
    block, needed = block_memory(plan, buffers)
    if memory is None or needed + besides <= memory:
        return
    held = f"{who} holds {buffers} of them at once" if buffers > 1 else f"{who} holds one at a time"
    if besides:
        held += f" besides the {in_bytes(besides)} of ys it returns"
    over = f"({in_bytes(needed + besides)} in all), more than this machine's {in_bytes(memory)} of memory"
    if asked is not None:
        raise InputError(
            f"{arg('block_size', asked)} makes blocks that do not fit in memory: a block's ys take "
            f"{in_bytes(block)} and {held} {over}; pass a smaller {arg('block_size')}, or leave it out for "
            f"blocks of about {in_bytes(default_bytes)} of ys"
        )
    raise InputError(
        f"blocks of {plan.block_size} steps (sized by default) do not fit in memory: a block's ys take "
        f"{in_bytes(block)} and {held} {over}; each step's y takes {in_bytes(_row_bytes(plan))}: make f return "
        f"less per step, keep fewer rows with {arg('save_every')}, or pass a smaller {arg('block_size')}"
    )
