"""A fixed set of block output buffers, reused for a whole run.

A fresh output buffer per block costs more than the arithmetic: the kernel maps and
zero-fills every page of it (glibc maps each 32 MiB buffer afresh and unmaps it on free).
The engine instead donates a recycled buffer to the jitted block function, and XLA writes
the block's ys into the same memory (``input_output_alias``). A slot's buffer is
allocated (zero-filled) for the first block computed in it, so that every full block
runs the one compiled function that writes into a donated buffer. On CPU the host
arrays handed to the caller are views of the slot's memory.

A slot of the pool is leased to one block from its computation until the block is
*released*: explicitly with :meth:`Block.release` (the writer does it once the block is
durable), or implicitly when the last view of the block's ys is garbage collected. A
slot is donated again only once released, so a view can never see a later block's
values unless its owner released it first. When every slot is leased, the block gets a
buffer of its own, so a caller who keeps every block stays correct, with the memory of
what it keeps.

The views hold no PJRT external reference (those would make XLA copy the donated
buffer instead of reusing it); each view's base object keeps its slot, and so the
memory, alive.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import Any

import jax
import numpy as np
import numpy.typing as npt

from ...base import pool_size

__all__ = ["POOL_MIN_BYTES", "BlockPool", "PoolStats", "fresh_buffers", "pool_size"]

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
