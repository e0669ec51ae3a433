"""A block's memory: its output buffers pooled, its rows of the inputs, and the whole checked against the
machine's before anything runs.

A fresh output buffer per block costs more than the arithmetic: the kernel maps and
zero-fills every page of it (glibc maps each 32 MiB buffer afresh and unmaps it on free).
The engine instead donates a recycled buffer of a fixed set (:class:`BlockPool`) to the
jitted block function, and XLA writes the block's ys into the same memory
(``input_output_alias``). A slot's buffer is allocated (zero-filled) for the first block
computed in it, so that every full block runs the one compiled function that writes into a
donated buffer. On CPU the host arrays handed to the caller are views of the slot's memory.

A slot of the pool is leased to one block from its computation until the block is
*released*: explicitly with :meth:`Block.release` (the writer does it once the block is
durable), or implicitly when the last view of the block's ys is garbage collected. A
slot is donated again only once released, so a view can never see a later block's
values unless its owner released it first. When every slot is leased, the block gets a
buffer of its own, so a caller who keeps every block stays correct, with the memory of
what it keeps. The views hold no PJRT external reference (those would make XLA copy the
donated buffer instead of reusing it); each view's base object keeps its slot, and so the
memory, alive.

A block's rows of the inputs are read one block at a time, and the host rows of the blocks
before are let go.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
import numpy.typing as npt
from jax import lax

from ..base import DEFAULT_BLOCK_BYTES, pool_size, unrolled
from ..errors import InputError, arg
from ._plan import Plan

__all__ = [
    "POOL_MIN_BYTES",
    "BlockPool",
    "PoolStats",
    "block_memory",
    "block_xs",
    "check_memory",
    "fresh_buffers",
    "let_go",
    "physical_memory",
    "pool_size",
    "spent_rows",
    "too_big",
]


POOL_MIN_BYTES = 4 * 2**20
"""Smallest block (bytes of ys) that the default pool recycles. glibc's heap already
reuses freed buffers of up to a few MiB without page faults, so below this the pool's own
bookkeeping per block would cost more than it saves; larger fresh buffers page-fault."""


@dataclasses.dataclass
class PoolStats:
    """What happened to a pool's blocks (for tests and benchmarks)."""

    reused: int = 0
    """blocks computed into a recycled buffer, in place"""
    filled: int = 0
    """blocks that gave an empty slot its buffer (the first use of each slot)"""
    overflow: int = 0
    """full blocks computed while every slot was leased, into a buffer of their own"""
    copied: int = 0
    """recycled blocks that XLA wrote elsewhere after all (donation not honoured)"""


class _Slot:
    """One reusable set of output buffers (one device array per leaf of y)."""

    __slots__ = ("__weakref__", "arrays", "pointers", "token")

    def __init__(self) -> None:
        self.arrays: list[jax.Array] | None = None
        self.pointers: list[int | None] | None = None  # where the arrays live, to see whether XLA reused them
        self.token = 0  # changes at each lease, so that a stale release is ignored


class _HostView:
    """The base object of one host view: exposes the device memory and holds the block's lease."""

    __slots__ = ("__array_interface__", "lease")

    def __init__(self, interface: dict[str, Any], lease: _Lease) -> None:
        self.__array_interface__ = interface
        self.lease = lease


class _Lease:
    """One block's hold on a slot; ends at :meth:`release` or when its last view dies."""

    __slots__ = ("__weakref__", "_finalizer", "slot")

    def __init__(self, pool: BlockPool, slot: _Slot) -> None:
        self.slot = slot  # keeps the memory alive while a view exists, even after the pool is gone
        self._finalizer = weakref.finalize(self, pool._give_back, slot, slot.token)

    def release(self) -> None:
        self._finalizer()


class BlockPool:
    """``size`` reusable output buffers for the full-size blocks of one plan.

    Thread-safe: blocks may be released from any thread. ``size=0`` disables reuse.
    """

    def __init__(self, size: int) -> None:
        if size < 0:
            raise ValueError(f"size must be >= 0, got {size}")
        self.size = size
        self.stats = PoolStats()
        self._lock = threading.Lock()
        self._free: list[_Slot] = [_Slot() for _ in range(size)]

    @property
    def leased(self) -> int:
        """Slots currently held by blocks."""
        with self._lock:
            return self.size - len(self._free)

    def acquire(self) -> _Lease | None:
        """A lease on a free slot, or None when every slot is leased."""
        with self._lock:
            if not self._free:
                self.stats.overflow += 1
                return None
            slot = self._free.pop()  # the most recently released: its pages are the warmest
            slot.token += 1
        return _Lease(self, slot)

    def _give_back(self, slot: _Slot, token: int) -> None:
        with self._lock:
            if slot.token == token and slot not in self._free:
                self._free.append(slot)

    def buffers(self, lease: _Lease | None, structs: list[jax.ShapeDtypeStruct]) -> list[jax.Array] | None:
        """Buffers to donate to a block of ``structs``: the leased slot's, or fresh ones (see :func:`fresh_buffers`)."""
        if lease is None:
            return fresh_buffers(structs)
        slot = lease.slot
        if slot.arrays is not None and all(_fits(a, s) for a, s in zip(slot.arrays, structs, strict=True)):
            return slot.arrays
        slot.arrays = slot.pointers = None  # empty, or shaped for another plan: filled by this block
        return fresh_buffers(structs)

    def hand_over(self, lease: _Lease | None, out: list[jax.Array]) -> list[npt.NDArray[Any]]:
        """Host arrays of a block computed into ``out`` under ``lease``.

        On CPU the host arrays are views of the device memory whose base holds the
        lease; where they are copies (from an accelerator) the lease ends at once.
        Without a lease (a buffer of the block's own), the host arrays keep ``out`` alive.
        """
        if lease is None:
            return [np.asarray(o) for o in out]
        slot = lease.slot
        pointers = [_pointer(o) for o in out]
        with self._lock:
            if slot.pointers is None:
                self.stats.filled += 1
            elif slot.pointers == pointers:
                self.stats.reused += 1
            else:
                self.stats.copied += 1
        slot.arrays, slot.pointers = out, pointers
        hosts, shared = [], False
        for o, p in zip(out, pointers, strict=True):
            host = np.asarray(o)  # waits for the block's values
            view = _view(host, p, lease)
            shared = shared or view is not None
            hosts.append(host if view is None else view)
            del host  # a zero-copy array's PJRT reference would make XLA copy the slot instead of reusing it
        if not shared:
            lease.release()
        return hosts


def fresh_buffers(structs: list[jax.ShapeDtypeStruct]) -> list[jax.Array] | None:
    """Zero-filled device buffers of ``structs``; None where a leaf's dtype has no zeros (a PRNG key's).

    A block computed into these runs the same compiled function as one computed into a
    recycled buffer, so a block length compiles once, not once to allocate and once to reuse.
    """
    if any(jax.numpy.issubdtype(s.dtype, jax.dtypes.extended) for s in structs):
        return None
    return [jax.device_put(np.zeros(s.shape, s.dtype)) for s in structs]  # jnp.zeros would compile per shape


def _pointer(array: jax.Array) -> int | None:
    try:
        return array.unsafe_buffer_pointer()
    except (NotImplementedError, RuntimeError, ValueError):  # no raw pointers: host arrays are copies then
        return None


def _fits(array: jax.Array, struct: jax.ShapeDtypeStruct) -> bool:
    return not array.is_deleted() and array.shape == struct.shape and array.dtype == struct.dtype


def _view(host: npt.NDArray[Any], pointer: int | None, lease: _Lease) -> npt.NDArray[Any] | None:
    """A read-only view of ``host``'s memory whose base is ``lease``; None unless ``host`` is the device memory."""
    interface = dict(host.__array_interface__)
    if host.nbytes == 0 or pointer is None or interface["data"][0] != pointer:
        return None
    interface["data"] = (interface["data"][0], True)
    view = np.asarray(_HostView(interface, lease))
    # the interface's type string of an ml_dtypes type (bfloat16's "<V2") reads back as raw bytes
    return view if view.dtype == host.dtype else view.view(host.dtype)


@functools.lru_cache(maxsize=64)
def _slicer(length: int) -> Callable[[jax.Array, int], jax.Array]:
    return jax.jit(lambda a, start: lax.dynamic_slice_in_dim(a, start, length))


def _take(leaf: Any, start: int, stop: int) -> Any:
    """Rows ``[start, stop)`` of one xs leaf, reading nothing else."""
    if isinstance(leaf, jax.Array):
        return _slicer(stop - start)(leaf, start)  # a traced start: one compile per block length
    return np.asarray(leaf[start:stop])


def block_xs(plan: Plan, start: int, stop: int) -> Any:
    """The rows ``[start, stop)`` of every xs leaf (None without xs).

    Host rows of the blocks before are let go first (see :func:`_drop_spent_rows`), so
    that a block's rows are read into memory its predecessor's have just freed.
    """
    if plan.xs is None:
        return None
    if _host_rows_nbytes(plan.xs) * (stop - start) >= HOST_ROWS_MIN_BYTES:
        _drop_spent_rows()
    return jax.tree_util.tree_map(lambda leaf: _take(leaf, start, stop), plan.xs)


HOST_ROWS_MIN_BYTES = POOL_MIN_BYTES
"""Smallest block of host rows (bytes) whose predecessors :func:`block_xs` lets go of
before reading it; smaller rows come from glibc's heap, which reuses them whenever they go."""


def _host_rows_nbytes(xs: Any) -> int:
    """Bytes of one step of the leaves of ``xs`` that live on the host (not JAX arrays)."""
    return sum(
        np.dtype(leaf.dtype).itemsize * int(np.prod(leaf.shape[1:], dtype=np.int64))
        for leaf in jax.tree_util.tree_leaves(xs)
        if not isinstance(leaf, jax.Array)
    )


def _drop_spent_rows() -> None:
    """Free the host rows that XLA has finished computing on, now rather than at Python's next collection.

    XLA computes on an aligned numpy array in place and holds it meanwhile; once done, it
    lets go of it from a thread of its own, where jaxlib, without the GIL, only queues the
    reference for its garbage list, which a gc callback empties at each collection. Until
    then a block's rows outlive it, and the next block's rows are read while the rows of
    the block before (or more) still take their memory. A young-generation collection runs
    that callback, and costs little against a block's read.
    """
    gc.collect(0)


SPENT_ROWS_WAIT_S = 1.0
"""Longest :func:`let_go` waits for XLA's thread to let go of a computed block's rows."""


def spent_rows(plan: Plan, xs: Any, length: int) -> tuple[weakref.ref[Any], ...]:
    """Weak references to a block's host rows, where they are large enough to be let go of (see :func:`let_go`)."""
    if xs is None or _host_rows_nbytes(plan.xs) * length < HOST_ROWS_MIN_BYTES:
        return ()
    return tuple(weakref.ref(leaf) for leaf in jax.tree_util.tree_leaves(xs) if isinstance(leaf, np.ndarray))


def let_go(rows: Sequence[weakref.ref[Any]]) -> None:
    """Wait, briefly, until the rows of a block whose values are ready are freed.

    XLA lets go of them from its own thread once the block is done (see
    :func:`_drop_spent_rows`), a moment after its values are ready; a busy machine can
    stretch that moment, and the next block's rows would be read beside them. The wait is
    bounded by :data:`SPENT_ROWS_WAIT_S`: rows someone else holds only cost that once.
    """
    deadline = time.monotonic() + SPENT_ROWS_WAIT_S
    while any(r() is not None for r in rows) and time.monotonic() < deadline:
        gc.collect(0)  # runs jaxlib's queue of references let go of without the GIL
        if any(r() is not None for r in rows):
            time.sleep(0.0005)


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
    (see ``engine._kernels._thinned_scan``).
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
