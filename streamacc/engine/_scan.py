"""The in-memory entry points: ``iter_blocks`` (block by block) and ``scan`` (ys assembled on the host)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
import numpy.typing as npt

from ..base import as_count, pool_size
from ..errors import InputError, arg
from ._checks import Carry, Predicate, Step
from ._memory import check_memory, physical_memory, too_big
from ._plan import Plan, ScanSpec, as_spec, same_carry
from ._run import CALLER_HELD, Block, computes_ahead, run_plan

__all__ = ["iter_blocks", "scan"]


def iter_blocks(
    f: Step | ScanSpec,
    init: Any = None,
    xs: Any = None,
    *,
    length: int | None = None,
    block_size: int | None = None,
    unroll: int | bool | None = None,
    reverse: bool = False,
    save_every: int = 1,
    carry: Any = None,
    first_block: int = 0,
    until: Predicate | None = None,
) -> Iterator[Block]:
    """Run ``lax.scan(f, init, xs, length)`` block by block in bounded memory, yielding each block.

    Concatenating the blocks' ``ys`` in step order, and taking the last block's
    ``carry``, gives bit for bit what one ``lax.scan`` over the whole length gives.
    Memory stays at a few blocks whatever the length. Blocks come in scan order (from
    the end when ``reverse``). On an accelerator the next block computes while the
    caller handles one (:func:`computes_ahead`); on a CPU each block is computed when
    asked for. Arguments are checked when ``iter_blocks`` is called, not at the first
    ``next()``.

    Parameters
    ----------
    f : callable or ScanSpec
        The step, ``f(carry, x) -> (carry, y)``, as ``lax.scan`` takes it. It must be
        hashable (a function, or a frozen dataclass), as for ``jax.jit``. Or a
        :class:`ScanSpec`, which holds the step, ``init``, ``xs`` and the scan's
        keywords, given alone.
    init : pytree of arrays
        The carry entering the first step.
    xs : pytree of arrays, optional
        Inputs sliced along their first axis, one row per step: numpy arrays, memmaps,
        JAX or Zarr arrays. Only the current block's rows are read.
    length : int, optional
        The number of steps; required without ``xs``, and equal to its length with it.
    block_size : int, optional
        Steps per block. By default a block holds about 8 MiB of ys (or of xs, if
        larger), whatever one step outputs: 2**20 steps of a float64 series. A block in
        memory pays only its dispatch, which 8 MiB amortise, and smaller buffers are
        reused rather than mapped afresh; :func:`~streamacc.write`'s blocks hold 32 MiB,
        since each written block also pays its chunk files, their fsync and its commit.
    unroll : int or bool, optional
        ``lax.scan``'s unroll. By default 1 on a CPU, and on a TPU or GPU one chosen for
        the step and the length (``ScanSpec(f, init, xs, length=n).unroll`` says which;
        see :class:`~streamacc.ScanSpec`); pass ``unroll=1`` for ``lax.scan``'s own
        default there. With ``unroll=u > 1`` XLA may regroup floating-point work inside an
        unrolled group, so ``block_size`` must be a multiple of ``u`` and at least ``2u``
        (and a reverse scan's length a multiple of ``u``); a chosen unroll lines up with
        the ``block_size`` given.
    reverse : bool, default False
        Scan from the last step to the first, as ``lax.scan(reverse=True)``.
    save_every : int, default 1
        Keep the ys of steps ``k-1, 2k-1, ...`` only (``k = save_every``), that is
        ``lax.scan(...)[1][k-1::k]``; every step still runs.
    carry : pytree of arrays, optional
        The carry entering block ``first_block`` (a block's ``carry``, kept from an
        earlier run); by default ``init``. It must have ``init``'s structure, shapes and
        dtypes.
    first_block : int, default 0
        The block to start from, in scan order: with the carry that entered it, the
        blocks from there on are those of the whole run, bit for bit.
    until : callable, optional
        The scan's condition, ``until(carry, y) -> bool``: a JAX function of the carry
        after a step and that step's y (as ``f`` returns them) that returns one boolean.
        It is tested after each step, and the scan ends after the first step ``k`` where
        it holds, that step included: the last block stops at ``k + 1``, its ``carry``
        is the carry step ``k`` left, and its ``ended`` is True. ``length`` (or the
        length of ``xs``) is then the most the scan runs: a condition that never holds
        runs it all. The ys are those of one ``lax.scan`` over the whole length, cut
        after step ``k``; with ``unroll`` > 1, XLA compiles the unrolled steps together
        with the condition, which can change the last bits of some steps, as another
        unroll can, and the carry of step ``k`` is the one its block gives when it runs
        again to find ``k``. Hashable, as ``f``; not with ``reverse``.

    Yields
    ------
    Block
        The blocks in scan order, each with its steps' ys on the host and the carry
        after it. A block you keep keeps its buffer; later blocks get other ones.

    Raises
    ------
    streamacc.errors.InputError
        A bad argument (a length, block size, unroll or ``save_every`` that does not fit),
        or a ``block_size`` whose blocks do not fit in the machine's memory.
    streamacc.errors.StepFunctionError
        ``f`` breaks the scan contract, e.g. its carry changes shape or dtype, or JAX
        cannot trace it (Python control flow or numpy on traced values): the message
        names the line of ``f`` that failed, and JAX's error is its ``__cause__``.
    streamacc.errors.StepError
        The step failed at run time in a block (a host callback raised, equinox's ``error_if``,
        diffrax's ``max_steps``): the message names the block's steps, JAX's error is its
        ``__cause__``; it is also a ``jax.errors.JaxRuntimeError``.
    streamacc.errors.X64Error
        ``init`` or ``xs`` hold 64-bit data while ``jax_enable_x64`` is off.

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> jax.config.update("jax_enable_x64", True)
    >>> def step(x, _):
    ...     x = x * (1 + 1e-8)
    ...     return x, x
    >>> for block in streamacc.iter_blocks(step, np.float64(1.0), length=10_000, block_size=4096):
    ...     print(block.start, block.stop, block.ys.shape, float(block.carry))
    0 4096 (4096,) 1.0000409608...
    4096 8192 (4096,) 1.0000819233...
    8192 10000 (1808,) 1.0001000049...
    """
    spec = as_spec(
        f, init, xs, length=length, block_size=block_size, unroll=unroll, reverse=reverse, save_every=save_every,
        until=until,
    )  # fmt: skip
    plan = spec.plan()
    check_memory(plan, pool_size(CALLER_HELD, ahead=computes_ahead()), asked=spec.block_size, who="iter_blocks")
    first = as_count("first_block", first_block, minimum=0)
    if first and first >= plan.block_count:
        raise InputError(
            f"{arg('first_block', first_block)} is past the scan's last block ({plan.block_count} blocks of "
            f"{plan.block_size} steps); pass 0 to {plan.block_count - 1}"
        )
    if carry is not None:
        carry = same_carry(carry, plan.init)
    return run_plan(plan, carry=carry, first_block=first)


def scan(
    f: Callable[[Carry, Any], tuple[Carry, Any]] | ScanSpec,
    init: Carry | None = None,
    xs: Any = None,
    *,
    length: int | None = None,
    block_size: int | None = None,
    unroll: int | bool | None = None,
    reverse: bool = False,
    save_every: int = 1,
    until: Predicate | None = None,
) -> tuple[Carry, Any]:
    """``jax.lax.scan`` computed block by block, with ``ys`` assembled in host memory.

    The result equals one ``lax.scan`` over the whole length bit for bit. Use it when
    the output fits in RAM but one scan of the whole length would not compile or fit on
    the device; to keep memory bounded whatever the length, use :func:`iter_blocks` or
    :func:`write`.

    Parameters
    ----------
    f : callable or ScanSpec
        The step, ``f(carry, x) -> (carry, y)``, as ``lax.scan`` takes it; hashable. Or
        a :class:`ScanSpec`, given alone.
    init : pytree of arrays
        The carry entering the first step.
    xs : pytree of arrays, optional
        Inputs sliced along their first axis, one row per step (numpy, memmap, JAX or
        Zarr arrays).
    length : int, optional
        The number of steps; required without ``xs``, and equal to its length with it.
    block_size : int, optional
        Steps per block; by default about 8 MiB of ys per block (see :func:`iter_blocks`
        for why, and why a write's blocks are larger).
    unroll : int or bool, optional
        ``lax.scan``'s unroll; by default chosen for the step (see :func:`iter_blocks`).
    reverse : bool, default False
        Scan from the last step to the first, as ``lax.scan(reverse=True)``.
    save_every : int, default 1
        Keep the ys of every ``save_every``-th step only: ``lax.scan(...)[1][k-1::k]``.
    until : callable, optional
        The scan's condition, ``until(carry, y) -> bool``, tested after each step: the
        scan ends after the first step where it holds, and ``length`` is the most it
        runs (see :func:`iter_blocks`).

    Returns
    -------
    carry : pytree of jax.Array
        The carry after the last step (the step where ``until`` held, where it did).
    ys : pytree of numpy.ndarray
        The ys of every step (or of every ``save_every``-th), stacked along a leading axis.

    Raises
    ------
    streamacc.errors.InputError
        A bad argument, or ys larger than the machine's memory (stream them with
        :func:`iter_blocks` or :func:`write`), or a ``block_size`` whose blocks do not
        fit in it besides the ys.
    streamacc.errors.StepFunctionError
        ``f`` breaks the scan contract, or JAX cannot trace it (see :func:`iter_blocks`).
    streamacc.errors.StepError
        The step failed at run time in a block (see :func:`iter_blocks`).
    streamacc.errors.X64Error
        64-bit inputs while ``jax_enable_x64`` is off.

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> def step(total, x):
    ...     total = total + x
    ...     return total, total
    >>> xs = np.arange(1, 11, dtype=np.float32)
    >>> carry, ys = streamacc.scan(step, np.float32(0), xs, block_size=4)
    >>> ys
    array([ 1.,  3.,  6., 10., 15., 21., 28., 36., 45., 55.], dtype=float32)
    >>> bool((ys == jax.lax.scan(step, np.float32(0), xs)[1]).all())
    True

    A scan that ends on a condition, here once the total passes 20:

    >>> carry, ys = streamacc.scan(step, np.float32(0), xs, until=lambda total, y: total > 20)
    >>> ys, float(carry)
    (array([ 1.,  3.,  6., 10., 15., 21.], dtype=float32), 21.0)
    """
    spec = as_spec(
        f, init, xs, length=length, block_size=block_size, unroll=unroll, reverse=reverse, save_every=save_every,
        until=until,
    )  # fmt: skip
    plan = spec.plan()
    if plan.until is not None:
        return _scan_until(plan, spec)

    def empty(s: jax.ShapeDtypeStruct) -> npt.NDArray[Any]:
        return np.empty((plan.rows, *s.shape), dtype=s.dtype)

    needed = sum(
        plan.rows * int(np.prod(s.shape, dtype=object)) * np.dtype(s.dtype).itemsize
        for s in jax.tree_util.tree_leaves(plan.y_struct)
    )
    memory = physical_memory()
    if memory is not None and needed > memory:
        raise too_big(needed, memory, plan.rows)
    buffers = pool_size(CALLER_HELD, ahead=computes_ahead())
    check_memory(plan, buffers, asked=spec.block_size, who="scan", besides=needed)
    try:
        ys = jax.tree_util.tree_map(empty, plan.y_struct)
    except (MemoryError, ValueError):  # numpy: "Unable to allocate ...", "array is too big"
        raise too_big(needed, memory, plan.rows) from None
    carry = plan.init
    for block in run_plan(plan):
        rows = slice(block.rows.start, block.rows.stop)
        jax.tree_util.tree_map(lambda out, y, rows=rows: out.__setitem__(rows, y), ys, block.ys)
        carry = block.carry
        block.release()
    return carry, ys


def _scan_until(plan: Plan, spec: ScanSpec) -> tuple[Any, Any]:
    """:func:`scan` of a plan with a condition: its blocks' ys gathered as they come, up to the one where it held
    (the length is only the most it runs, so no output of that length is made beforehand)."""
    check_memory(plan, pool_size(CALLER_HELD, ahead=computes_ahead()), asked=spec.block_size, who="scan")
    parts: list[list[npt.NDArray[Any]]] = []
    carry = plan.init
    for block in run_plan(plan):
        parts.append([np.array(y) for y in jax.tree_util.tree_leaves(block.ys)])
        carry = block.carry
        block.release()
    leaves = jax.tree_util.tree_leaves(plan.y_struct)
    try:
        joined = [
            np.concatenate([part[i] for part in parts]) if parts else np.empty((0, *s.shape), s.dtype)
            for i, s in enumerate(leaves)
        ]
    except MemoryError:
        raise too_big(sum(sum(p.nbytes for p in part) for part in parts), physical_memory(), plan.rows) from None
    return carry, jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(plan.y_struct), joined)
