"""A blocked scan described once and planned: :class:`ScanSpec`, validated where it is made and taken by
every entry point, made into a :class:`Plan` (its length, blocks, unroll, thinning, condition and output shape).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any, Unpack

import jax
import jax.numpy as jnp
import numpy as np

from ..base import DEFAULT_BLOCK_BYTES, SCAN_DEFAULTS, Blocking, ScanKeywords, block_steps, check_block_size, unrolled
from ..errors import InputError, arg
from ._checks import (
    Predicate,
    Step,
    check_until,
    check_x64,
    resolve_length,
    step_shapes,
    struct_bytes,
    x_struct,
)
from ._condition import Until, condition_way
from ._config import compute_platform
from ._unroll import choose_unroll

__all__ = ["Plan", "ScanSpec", "as_spec", "make_plan", "resize", "same_carry", "step_of", "until_of"]


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


def _sized(blocking: Blocking, y_struct: Any, xs: Any, block_bytes: int, rows_multiple: int) -> int:
    """Steps per block holding about ``block_bytes`` of ys (or of xs, if larger), in whole ``rows_multiple`` rows."""
    unroll, save_every = blocking.unrolled_by, blocking.save_every
    u = unroll if not isinstance(unroll, bool) else 1
    row_bytes = struct_bytes(y_struct) * (save_every if unrolled(unroll) else 1)  # see _thinned_scan
    xs_bytes = struct_bytes(xs, 1)
    return block_steps(
        row_bytes, block_bytes, save_every=save_every, xs_bytes=xs_bytes, unroll=u, rows_multiple=rows_multiple
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
    condition = None
    if until is not None:
        way, sources = condition_way(f, until, carry_struct, x_struct(xs), y_struct, save_every=asked.save_every)
        condition = Until(until, way=way, sources=sources)
    return Plan(f, init, xs, blocking, y_struct, chosen, condition)


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


@dataclasses.dataclass(frozen=True, init=False, eq=False)
class ScanSpec:
    """A blocked ``lax.scan``, checked once: the step, its initial carry and inputs, and how it runs.

    ``ScanSpec(f, init, xs, length=n)`` describes ``lax.scan(f, init, xs, length=n)`` run in
    blocks; :func:`~streamacc.scan`, :func:`~streamacc.iter_blocks`, :func:`~streamacc.write`,
    :func:`~streamacc.verify`, :func:`~streamacc.open` and :func:`~streamacc.materialize`
    take it in place of ``f, init, xs`` and the scan's keywords. Every argument is checked
    when the spec is made (the step traced once, abstractly), so a spec that exists is one
    that runs.

    Parameters
    ----------
    f : callable
        The step, ``f(carry, x) -> (carry, y)``, as ``lax.scan`` takes it; hashable (a
        function, or a frozen dataclass).
    init : pytree of arrays
        The carry entering the first step.
    xs : pytree of arrays, optional
        Inputs sliced along their first axis, one row per step.
    length : int, optional
        The number of steps; required without ``xs``, equal to its length with it (with
        ``until``, the most the scan runs).
    block_size : int, optional
        Steps per block; by default each entry point sizes blocks by bytes (about 8 MiB
        of ys in memory, 32 MiB when writing).
    unroll : int or bool, optional
        ``lax.scan``'s unroll. By default 1 on a CPU, where the output is then plain
        ``lax.scan(f, init, xs)``'s bit for bit; on a TPU or GPU, where a loop trip is dear,
        one chosen for the step and the length (up to 64 for a cheap step), the output
        ``lax.scan(f, init, xs, unroll=spec.unroll)``'s, bit for bit. Pass ``unroll=1`` for
        ``lax.scan``'s own default there too.
    reverse : bool, default False
        Scan from the last step to the first.
    save_every : int, default 1
        Keep the ys of every ``save_every``-th step only.
    until : callable, optional
        The scan's condition, ``until(carry, y) -> bool``, a JAX function of the carry
        after a step and that step's y returning one boolean: the scan ends after the
        first step where it holds, and ``length`` is the most it runs (see
        :func:`~streamacc.iter_blocks`). Hashable, as ``f``; not with ``reverse``.

    Attributes
    ----------
    f, init, xs : callable, pytree, pytree or None
        The step, the initial carry and the inputs, as given.
    until : callable or None
        The scan's condition, as given.
    length : int
        The number of steps (from ``xs`` where not given).
    block_size : int or None
        Steps per block as given, checked; None leaves the block size to the entry point.
    unroll : int or bool
        ``lax.scan``'s unroll: as given, checked, or the one chosen.
    unroll_chosen : bool
        Whether ``unroll`` was chosen for the step (none was given).
    reverse : bool
        Whether the scan runs from the last step to the first.
    save_every : int
        The thinning: every ``save_every``-th step's y is kept.

    Raises
    ------
    streamacc.errors.InputError
        A bad argument, named as the keyword it was given by.
    streamacc.errors.StepFunctionError
        ``f`` breaks the scan contract, or JAX cannot trace it.
    streamacc.errors.X64Error
        64-bit inputs while ``jax_enable_x64`` is off.

    Examples
    --------
    >>> import numpy as np, streamacc
    >>> def count(c, _):
    ...     return c + 1, c
    >>> spec = streamacc.ScanSpec(count, np.int32(0), length=10, block_size=4)
    >>> spec.length, spec.block_size
    (10, 4)
    >>> [(b.start, b.stop) for b in streamacc.iter_blocks(spec)]
    [(0, 4), (4, 8), (8, 10)]
    >>> streamacc.scan(spec)[1]
    array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], dtype=int32)
    """

    f: Step
    init: Any
    xs: Any
    until: Predicate | None
    _blocking: Blocking
    """The scan's settings as given, checked (its block size None where left to the entry point)."""
    _plan: Plan

    def __init__(
        self,
        f: Step,
        init: Any,
        xs: Any = None,
        *,
        length: int | None = None,
        block_size: int | None = None,
        unroll: int | bool | None = None,
        reverse: bool = False,
        save_every: int = 1,
        until: Predicate | None = None,
    ) -> None:
        plan = make_plan(
            f, init, xs, length=length, block_size=block_size, unroll=unroll, reverse=reverse, save_every=save_every,
            until=until,
        )  # fmt: skip
        asked = dataclasses.replace(
            plan.blocking, block_size=None if block_size is None else plan.block_size,
            unroll=None if unroll is None else plan.unroll,
        )  # fmt: skip
        for field, value in zip(dataclasses.fields(self), (f, init, xs, until, asked, plan), strict=True):
            object.__setattr__(self, field.name, value)

    @property
    def length(self) -> int:
        return self._blocking.length

    @property
    def block_size(self) -> int | None:
        return self._blocking.block_size

    @property
    def unroll(self) -> int | bool:
        return self._plan.unroll

    @property
    def unroll_chosen(self) -> bool:
        return self._plan.unroll_chosen

    @property
    def reverse(self) -> bool:
        return self._blocking.reverse

    @property
    def save_every(self) -> int:
        return self._blocking.save_every

    def __repr__(self) -> str:
        shown = {"f": self.f, "init": self.init, "xs": self.xs, **self.keywords()}
        if self.until is not None:
            shown["until"] = self.until
        return f"{type(self).__qualname__}({', '.join(f'{name}={value!r}' for name, value in shown.items())})"

    def keywords(self) -> dict[str, Any]:
        """The scan's keywords (``length``, ``block_size``, ``unroll``, ``reverse``, ``save_every``) as given."""
        return dict(self._blocking.keywords())

    def plan(self, *, block_bytes: int = DEFAULT_BLOCK_BYTES, rows_multiple: int = 1,
             default_block_size: int | None = None, unroll: tuple[int | bool, bool] | None = None) -> Plan:  # fmt: skip
        """The plan that runs it, without tracing the step again.

        Its blocks hold ``block_size`` steps, else ``default_block_size``, else about
        ``block_bytes`` of ys in a whole number of ``rows_multiple`` rows; its unroll is the
        given one, else ``unroll`` (``(unroll, chosen)``: a continued run's), else the one chosen.
        """
        if self._blocking.unroll is not None:
            unroll = None
        if self.block_size is not None and unroll is None:
            return self._plan
        size = self.block_size if self.block_size is not None else default_block_size
        return resize(self._plan, block_size=size, block_bytes=block_bytes, rows_multiple=rows_multiple, unroll=unroll)


def as_spec(f: Any, init: Any, xs: Any, *, until: Predicate | None = None, **keywords: Any) -> ScanSpec:
    """``f`` itself if it is a :class:`ScanSpec` (and nothing else is given), else the spec of the arguments."""
    if not isinstance(f, ScanSpec):
        return ScanSpec(f, init, xs, until=until, **keywords)
    extra = [arg(name) for name, value in (("init", init), ("xs", xs), ("until", until)) if value is not None]
    extra += [arg(name, value) for name, value in keywords.items() if not _is_default(value, SCAN_DEFAULTS[name])]
    if extra:
        given = ", ".join(extra)
        raise InputError(
            f"a ScanSpec already holds the step, its carry, inputs and scan keywords: pass the spec alone, or "
            f"f, init and xs with their keywords; drop {given} or put it in the ScanSpec"
        )
    return f


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (type(value) is type(default) and value == default)  # unroll=True is not 1


def same_carry(carry: Any, init: Any) -> Any:
    """``carry`` as JAX arrays, or an :class:`InputError` if its structure, shapes or dtypes are not ``init``'s."""
    want, got = str(jax.tree_util.tree_structure(init)), str(jax.tree_util.tree_structure(carry))
    if want != got:
        raise InputError(f"{arg('carry')} must have init's structure {want}, got {got}")
    for leaf, like in zip(jax.tree_util.tree_leaves(carry), jax.tree_util.tree_leaves(init), strict=True):
        shape, dtype = jnp.shape(leaf), getattr(leaf, "dtype", None)
        if shape != jnp.shape(like) or dtype != like.dtype:
            raise InputError(
                f"{arg('carry')} must have init's shapes and dtypes: a leaf is {dtype}{list(shape)} where init's is "
                f"{like.dtype}{list(jnp.shape(like))}"
            )
    return jax.tree_util.tree_map(jnp.asarray, carry)


def step_of(f: Any, init: Any, xs: Any, *, needs_init: bool = False) -> tuple[Step, Any, Any]:
    """``f, init, xs``, taken from ``f`` if it is a :class:`ScanSpec` (where an output records the rest)."""
    if not isinstance(f, ScanSpec):
        if needs_init and init is None:
            raise InputError(f"{arg('init')} is needed with the step function f: pass both, or a ScanSpec")
        return f, init, xs
    as_spec(f, init, xs)
    return f.f, f.init, f.xs


def until_of(f: Any, until: Predicate | None) -> Predicate | None:
    """The condition: ``until``, or a :class:`ScanSpec`'s (given alone)."""
    if not isinstance(f, ScanSpec):
        return until
    if until is not None:
        as_spec(f, None, None, until=until)  # refused: the spec holds it
    return f.until
