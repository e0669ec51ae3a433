"""A blocked scan validated and planned: its length, blocks, unroll, thinning, condition and output shape."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any, Unpack

import jax
import jax.numpy as jnp
import numpy as np

from ...base import DEFAULT_BLOCK_BYTES, Blocking, ScanKeywords, block_steps, check_block_size, unrolled
from ._checks import Step, check_x64, resolve_length, step_shapes, x_struct
from ._platform import compute_platform
from ._unroll import choose_unroll
from ._until import Predicate, Until, check_until

__all__ = ["Plan", "make_plan", "resize"]


@dataclasses.dataclass(frozen=True)
class Plan:
    """A validated blocked scan: everything needed to run it, and the shape of its output."""

    f: Step
    init: Any
    xs: Any
    blocking: Blocking
    """Its length, blocks (their size chosen), unroll (chosen), direction and thinning."""
    y_struct: Any
    unroll_chosen: bool = False
    """Whether the unroll was chosen for the step (``_unroll.choose_unroll``) rather than given."""
    until: Until | None = None
    """Its condition, tested after each step (None: it runs to its length)."""

    @property
    def length(self) -> int:
        return self.blocking.length

    @property
    def block_size(self) -> int:
        return self.blocking.size

    @property
    def unroll(self) -> int | bool:
        return self.blocking.unrolled_by

    @property
    def reverse(self) -> bool:
        return self.blocking.reverse

    @property
    def save_every(self) -> int:
        return self.blocking.save_every

    @property
    def block_nbytes(self) -> int:
        """Bytes of ys in one full block: the size of each buffer of a :class:`BlockPool`."""
        return sum(s.dtype.itemsize * int(np.prod(s.shape)) for s in self._full_block)

    @property
    def rows(self) -> int:
        """Output rows of the whole scan: one per step, or per ``save_every`` steps."""
        return self.blocking.rows

    @property
    def block_rows(self) -> int:
        """Output rows of one full block."""
        return self.blocking.block_rows

    def out_structs(self, length: int) -> list[jax.ShapeDtypeStruct]:
        """Shape and dtype of each ys leaf of a block of ``length`` steps (starting on a row boundary)."""
        if length == self.block_size:
            return self._full_block
        rows = length // self.save_every
        return [jax.ShapeDtypeStruct((rows, *s.shape), s.dtype) for s in jax.tree_util.tree_leaves(self.y_struct)]

    @functools.cached_property
    def _full_block(self) -> list[jax.ShapeDtypeStruct]:
        leaves = jax.tree_util.tree_leaves(self.y_struct)
        return [jax.ShapeDtypeStruct((self.block_rows, *s.shape), s.dtype) for s in leaves]

    @property
    def block_count(self) -> int:
        """How many blocks the scan runs."""
        return self.blocking.block_count

    def bounds(self, first: int = 0) -> Iterator[tuple[int, int]]:
        """The ``[start, stop)`` of each block in scan order from block ``first``."""
        return self.blocking.bounds(first)


def _nbytes(tree: Any, skip: int = 0) -> int:
    """Bytes of one element of every leaf of ``tree`` (its shape past the first ``skip`` axes)."""
    return sum(
        np.dtype(leaf.dtype).itemsize * int(np.prod(leaf.shape[skip:], dtype=np.int64))
        for leaf in jax.tree_util.tree_leaves(tree)
        if not jnp.issubdtype(leaf.dtype, jax.dtypes.extended)
    )


def _sized(blocking: Blocking, y_struct: Any, xs: Any, block_bytes: int, rows_multiple: int) -> int:
    """Steps per block holding about ``block_bytes`` of ys (or of xs, if larger), in whole ``rows_multiple`` rows."""
    unroll, save_every = blocking.unrolled_by, blocking.save_every
    u = unroll if not isinstance(unroll, bool) else 1
    row_bytes = _nbytes(y_struct) * (save_every if unrolled(unroll) else 1)  # see _thinned_scan
    return block_steps(
        row_bytes, block_bytes, save_every=save_every, xs_bytes=_nbytes(xs, 1), unroll=u, rows_multiple=rows_multiple
    )


def make_plan(
    f: Step,
    init: Any,
    xs: Any = None,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    rows_multiple: int = 1,
    until: Predicate | None = None,
    **keywords: Unpack[ScanKeywords],
) -> Plan:
    """Validate the arguments of a blocked scan, raising :class:`InputError` on any problem.

    ``keywords`` are the scan's (``ScanKeywords``). ``block_size`` counts steps; None sizes
    blocks by bytes: about ``block_bytes`` of ys (or of xs, if larger) per block, in a whole
    number of ``rows_multiple`` output rows. ``unroll`` None is chosen for the step, the
    platform JAX computes on and the length (:func:`~._unroll.choose_unroll`). ``until`` is
    the scan's condition, if any.
    """
    scan = keywords.copy()
    scan["length"] = resolve_length(xs, keywords.get("length"))
    asked = Blocking.checked(**scan)
    check_x64(init=init, xs=xs)
    carry_struct, y_struct = step_shapes(f, init, xs)
    if until is not None:
        check_until(until, carry_struct, y_struct, reverse=asked.reverse)
    blocking, chosen = asked, asked.unroll is None
    if chosen:
        unroll = choose_unroll(
            f, carry_struct, x_struct(xs), y_struct, length=asked.length, platform=compute_platform(),
            block_size=asked.block_size, reverse=asked.reverse, save_every=asked.save_every,
        )  # fmt: skip
        blocking = dataclasses.replace(asked, unroll=unroll)
        if asked.block_size is not None:
            blocking = blocking.sized(asked.block_size)
    if blocking.block_size is None:
        blocking = blocking.sized(_sized(blocking, y_struct, xs, block_bytes, rows_multiple))
    init = jax.tree_util.tree_map(lambda leaf, s: jnp.asarray(leaf, dtype=s.dtype), init, carry_struct)
    return Plan(f, init, xs, blocking, y_struct, chosen, None if until is None else Until(until))


def resize(plan: Plan, *, block_size: int | None = None, block_bytes: int = DEFAULT_BLOCK_BYTES,
           rows_multiple: int = 1, unroll: tuple[int | bool, bool] | None = None) -> Plan:  # fmt: skip
    """``plan`` in blocks of ``block_size`` steps, or of about ``block_bytes`` of ys; its step is not traced again.

    ``unroll``, where given, is ``(unroll, chosen)`` in place of the plan's: a continued run's, as it recorded it.
    """
    if unroll is not None:
        blocking = dataclasses.replace(plan.blocking, unroll=unroll[0])
        plan = dataclasses.replace(plan, blocking=blocking, unroll_chosen=unroll[1])
    if block_size is not None:
        size = check_block_size(block_size, plan.length, plan.unroll, plan.save_every)
    else:
        size = _sized(plan.blocking, plan.y_struct, plan.xs, block_bytes, rows_multiple)
    if size == plan.block_size and unroll is None:
        return plan
    return dataclasses.replace(plan, blocking=plan.blocking.sized(size))
