"""A blocked scan validated and planned: its length, blocks, unroll, thinning and output shape."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._checks import as_count, as_unroll
from .._defaults import DEFAULT_BLOCK_BYTES
from ..errors import InputError, arg
from ._checks import Step, check_x64, resolve_length, step_shapes
from ._kernels import unrolled
from ._layout import (
    block_bounds,
    block_count,
    block_size_near,
    block_steps,
    check_grouping,
    check_save_every,
)

__all__ = ["Plan", "as_save_every", "make_plan"]


@dataclasses.dataclass(frozen=True)
class Plan:
    """A validated blocked scan: everything needed to run it, and the shape of its output."""

    f: Step
    init: Any
    xs: Any
    length: int
    block_size: int
    unroll: int
    reverse: bool
    y_struct: Any
    save_every: int = 1

    @property
    def block_nbytes(self) -> int:
        """Bytes of ys in one full block: the size of each buffer of a :class:`BlockPool`."""
        return sum(s.dtype.itemsize * int(np.prod(s.shape)) for s in self._full_block)

    @property
    def rows(self) -> int:
        """Output rows of the whole scan: one per step, or per ``save_every`` steps."""
        return self.length // self.save_every

    @property
    def block_rows(self) -> int:
        """Output rows of one full block."""
        return self.block_size // self.save_every

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
        return block_count(self.length, self.block_size, self.unroll)

    def bounds(self, first: int = 0) -> Iterator[tuple[int, int]]:
        """The ``[start, stop)`` of each block in scan order from block ``first``."""
        return block_bounds(self.length, self.block_size, self.reverse, first, self.unroll)


def _nbytes(tree: Any, skip: int = 0) -> int:
    """Bytes of one element of every leaf of ``tree`` (its shape past the first ``skip`` axes)."""
    return sum(
        np.dtype(leaf.dtype).itemsize * int(np.prod(leaf.shape[skip:], dtype=np.int64))
        for leaf in jax.tree_util.tree_leaves(tree)
        if not jnp.issubdtype(leaf.dtype, jax.dtypes.extended)
    )


def as_save_every(save_every: Any, length: int) -> int:
    """``save_every`` as a positive int no larger than ``length``, or an :class:`InputError`."""
    k = as_count("save_every", save_every, minimum=1)
    check_save_every(k, length)
    return k


def make_plan(
    f: Step,
    init: Any,
    xs: Any = None,
    *,
    length: int | None = None,
    block_size: int | None = None,
    unroll: int | bool = 1,
    reverse: bool = False,
    save_every: int = 1,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
    rows_multiple: int = 1,
) -> Plan:
    """Validate the arguments of a blocked scan, raising :class:`InputError` on any problem.

    ``block_size`` counts steps; None sizes blocks by bytes: about ``block_bytes`` of ys
    (or of xs, if larger) per block, in a whole number of ``rows_multiple`` output rows.
    """
    n = resolve_length(xs, length)
    save_every = as_save_every(save_every, n)
    if block_size is not None:
        block_size = as_count("block_size", block_size, minimum=1)
        if block_size % save_every:
            u = unroll if type(unroll) is int and unroll > 1 and block_size < n else 1  # blocks line up with groups
            good = block_size_near(block_size, u, save_every)
            also = f" and of the scan's unroll ({u})" if u > 1 else ""
            raise InputError(
                f"{arg('block_size', block_size)} must be a multiple of {arg('save_every', save_every)}{also}, so "
                f"that every block keeps whole rows; pass e.g. {arg('block_size', good)}"
            )
    unroll = as_unroll(unroll)
    if not isinstance(reverse, (bool, np.bool_)):
        raise InputError(f"{arg('reverse')} must be True or False, got {reverse!r}")
    check_x64(init=init, xs=xs)
    carry_struct, y_struct = step_shapes(f, init, xs)
    if block_size is None:
        u = unroll if not isinstance(unroll, bool) else 1
        row_bytes = _nbytes(y_struct) * (save_every if unrolled(unroll) else 1)  # see _thinned_scan
        block_size = block_steps(
            row_bytes, block_bytes, save_every=save_every, xs_bytes=_nbytes(xs, 1), unroll=u,
            rows_multiple=rows_multiple,
        )  # fmt: skip
    check_grouping(n, block_size, unroll, bool(reverse), save_every)
    init = jax.tree_util.tree_map(lambda leaf, s: jnp.asarray(leaf, dtype=s.dtype), init, carry_struct)
    return Plan(f, init, xs, n, block_size, unroll, bool(reverse), y_struct, save_every)
