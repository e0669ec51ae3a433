"""A scan's steps and how they run in blocks, held once: :class:`Blocking`, its arithmetic and its checks.

The five settings (``length``, ``block_size``, ``unroll``, ``reverse``, ``save_every``) are
declared here and nowhere else: :class:`ScanKeywords` types them as keywords, their defaults
are :class:`Blocking`'s, and every check that refuses one, with its message, is here. A run
that ended on its condition (``until``) before its length also knows its ``end``, which its
arithmetic respects. How a length is cut into blocks (``block_count``, ``block_bounds``,
``rows_in``, ``committed_span``, ...) is plain arithmetic that never loops over blocks: every
answer costs the same at any length up to :data:`MAX_LENGTH`. No JAX, so that reading an
output's identity and refusing a bad command line never import it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from typing import Any, TypedDict, Unpack, cast

from ..errors import InputError, arg
from ._values import as_count, as_unroll

__all__ = [
    "BLOCK_KEYWORDS", "MAX_BLOCK_STEPS", "MAX_LENGTH", "SCAN_DEFAULTS", "BlockKeywords", "Blocking", "ScanKeywords",
    "block_bounds", "block_count", "block_size_near", "block_steps", "check_block_size", "check_grouping",
    "check_length", "check_save_every", "committed_span", "pool_size", "row_step", "rows_in", "unrolled",
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


class BlockKeywords(TypedDict, total=False):
    """How a scan's steps run, as keywords: all of the scan's but its ``length`` (which ``write`` takes apart)."""

    block_size: int | None
    unroll: int | bool | None
    """None (the default): chosen for the step and the platform JAX computes on."""
    reverse: bool
    save_every: int


class ScanKeywords(BlockKeywords, total=False):
    """The scan's keywords, as :class:`~streamacc.ScanSpec`, ``iter_blocks`` and ``scan`` take them."""

    length: int | None


@dataclasses.dataclass(frozen=True)
class Blocking:
    """A scan's steps and how they run: its length, its blocks, ``lax.scan``'s unroll, its direction and thinning.

    Made checked from a caller's keywords (:meth:`checked`), or as a run recorded it. The
    block size is None until the plan chooses one (sized by bytes), and so is the unroll
    (chosen for the step: ``_unroll.choose_unroll``); the arithmetic of the blocks needs both.
    ``end`` is None but for a run that ended on its condition: the steps it holds (the step
    where the condition held, plus one); its blocks are then the first of ``length``'s
    layout, the last cut at ``end`` (see :meth:`ended`). It is no keyword of the scan.
    """

    length: int
    block_size: int | None = None
    unroll: int | bool | None = None
    reverse: bool = False
    save_every: int = 1
    end: int | None = dataclasses.field(default=None, kw_only=True)

    @classmethod
    def checked(cls, **keywords: Unpack[ScanKeywords]) -> Blocking:
        """The scan's keywords checked and normalised, with no step function and no JAX.

        What :class:`~streamacc.ScanSpec` checks of its keywords before it traces the step;
        the command line asks it of its options before JAX is imported.
        """
        given: dict[str, Any] = {**SCAN_DEFAULTS, **keywords}
        n = as_count("length", given["length"], minimum=0)
        check_length(n)
        every = as_count("save_every", given["save_every"], minimum=1)
        check_save_every(every, n)
        block_size, unroll, reverse = given["block_size"], given["unroll"], given["reverse"]
        unrolled = None if unroll is None else as_unroll(unroll)
        size = None if block_size is None else check_block_size(block_size, n, unrolled, every)
        if not _is_bool(reverse):
            raise InputError(f"{arg('reverse')} must be True or False, got {reverse!r}")
        if size is not None and unrolled is not None:
            check_grouping(n, size, unrolled, bool(reverse), every)
        return cls(n, size, unrolled, bool(reverse), every)

    def sized(self, block_size: int) -> Blocking:
        """This scan in blocks of ``block_size`` steps (whole rows), refused where they break the unroll's groups."""
        check_grouping(self.length, block_size, self.unrolled_by, self.reverse, self.save_every)
        return dataclasses.replace(self, block_size=block_size)

    def keywords(self) -> ScanKeywords:
        """The settings as the scan's keywords."""
        return cast(ScanKeywords, {name: getattr(self, name) for name in SCAN_DEFAULTS})

    def ended(self, end: int | None) -> Blocking:
        """This scan as a run that ended on its condition holds it: its first ``end`` steps (None: all of them)."""
        if end is not None and not (0 < end <= self.length and not self.reverse):
            raise ValueError(f"a run of {self.length} steps cannot end after {end}")
        return dataclasses.replace(self, end=end)

    @property
    def steps(self) -> int:
        """The steps the run holds: its ``end`` where it ended on its condition, else its ``length``."""
        return self.length if self.end is None else self.end

    @property
    def size(self) -> int:
        """Steps per block, once chosen (a ValueError before)."""
        if self.block_size is None:
            raise ValueError("the block size is chosen when the scan is planned")
        return self.block_size

    @property
    def unrolled_by(self) -> int | bool:
        """``lax.scan``'s unroll, once chosen (a ValueError before)."""
        if self.unroll is None:
            raise ValueError("the unroll is chosen when the scan is planned")
        return self.unroll

    @property
    def rows(self) -> int:
        """Output rows of the whole scan: one per step, or per ``save_every`` steps (up to its ``end``)."""
        return self.steps // self.save_every

    @property
    def block_rows(self) -> int:
        """Output rows of one full block."""
        return self.size // self.save_every

    @property
    def block_count(self) -> int:
        """How many blocks the scan runs (see :func:`block_count`); up to the one holding its ``end``."""
        count = block_count(self.length, self.size, self.unrolled_by)
        return count if self.end is None else min((self.end - 1) // self.size, count - 1) + 1

    @property
    def last_steps(self) -> int:
        """Steps of the last block in index order (the first run when ``reverse``): the rest of the length,
        shorter than a block, or longer where a short tail under ``unroll`` joins it."""
        return self.length - (block_count(self.length, self.size, self.unrolled_by) - 1) * self.size

    def bounds(self, first: int = 0) -> Iterator[tuple[int, int]]:
        """The ``[start, stop)`` of each block in scan order from block ``first`` (the last cut at the ``end``)."""
        every = block_bounds(self.length, self.size, self.reverse, first, self.unrolled_by)
        if self.end is None:
            return every
        return ((start, min(stop, self.end)) for start, stop in itertools.islice(every, self.block_count - first))

    def layout_stop(self, start: int) -> int:
        """Where the block beginning at step ``start`` ends in the layout of the whole ``length`` (past the ``end``
        of a run that ended in it): the steps its block function runs."""
        return next(block_bounds(self.length, self.size, self.reverse, start // self.size, self.unrolled_by))[1]

    def span(self, blocks: int) -> tuple[int, int]:
        """The steps ``[start, stop)`` that the first ``blocks`` blocks in scan order cover."""
        start, stop = committed_span(self.length, self.size, self.reverse, blocks, self.unrolled_by)
        return (start, stop) if self.end is None else (start, min(stop, self.end))

    def rows_of(self, blocks: int) -> tuple[int, int]:
        """The output rows ``[first, last)`` that the first ``blocks`` blocks in scan order fill."""
        return rows_in(*self.span(blocks), self.save_every)


SCAN_DEFAULTS: dict[str, Any] = {
    f.name: None if f.default is dataclasses.MISSING else f.default
    for f in dataclasses.fields(Blocking)
    if not f.kw_only  # the end a run reached: no keyword of the scan
}
"""The scan's keywords and their defaults, as ``scan``, ``iter_blocks`` and ``write`` take them."""

BLOCK_KEYWORDS: tuple[str, ...] = tuple(BlockKeywords.__annotations__)
"""The scan's keywords but ``length``, in order: those ``write`` takes alone for the scan."""


def _is_bool(value: Any) -> bool:
    """Whether ``value`` is True or False: a Python bool, or numpy's (a bool array of no axes included)."""
    numpy_bool = getattr(value, "shape", None) == () and getattr(getattr(value, "dtype", None), "kind", "") == "b"
    return isinstance(value, bool) or numpy_bool


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
