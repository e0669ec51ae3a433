"""The store a virtual output is read through: every chunk that is not stored is recomputed.

A scan's output is a pure function of its carries: block k's ys are the step run from the
carry entering block k, which every output records. :class:`RecomputingStore` serves an
output's arrays to zarr (and so to xarray and dask) as plain arrays: a chunk whose block
is stored (materialized) is read, checked against its block record and decoded; any other
is computed from its block's recorded carry, bit for bit what a stored write holds. Each
recomputed block is checked against the carry recorded after it, so a step function that
is not the run's is refused rather than read. Blocks of different chunks compute at the
same time (zarr asks for chunks concurrently; JAX releases the GIL), and a few recent
blocks are kept, within a bound, so that the chunks and arrays of one block cost one
computation.

To zarr the arrays have their recorded layout with the ``bytes`` codec alone: a chunk is
served as its raw values, so a recomputed chunk is never compressed only to be decompressed.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import json
import os
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
from zarr.abc.buffer import Buffer, BufferPrototype
from zarr.abc.store import ByteRequest, Store
from zarr.buffer import default_buffer_prototype

from ..base import counted, dtype_from_name, rows_in
from ..engine import BlockPool, Plan, PoolStats, compute_block, from_host, same_leaves, to_host, x64_scope
from ..errors import InputError, VerifyError, arg
from ..record import CheckedStore, Ledger, Manifest, decode_leaves, ranged
from ..store import ChunkWriter, StateSharingWrapper, open_target, plain_document

if TYPE_CHECKING:
    import xarray

__all__ = [
    "CACHE_BYTES",
    "RECYCLED_BLOCKS",
    "RecomputingStore",
    "recompute_plan",
    "recomputed_rows",
    "recomputing_store",
]

COMPUTE_THREADS = max(2, os.cpu_count() or 1)
"""Blocks recomputed at once by one reader (JAX releases the GIL while it computes)."""

CACHE_BYTES = 32 * 2**20
"""Bytes of recomputed blocks a reader keeps beyond the last ``COMPUTE_THREADS`` blocks (which it
always keeps): a block serves all of its chunks and arrays from one computation."""

RECYCLED_BLOCKS = COMPUTE_THREADS + 2
"""Block buffers a reader recycles: those its threads compute into, those its cache holds, and
those whose values zarr is still copying out. A block computed into a fresh buffer instead
page-faults all of it, which over a whole read costs more than the computation; once every
buffer is held, a block gets a buffer of its own (see :class:`~streamacc.engine.BlockPool`)."""


def _served_document(doc: dict[str, Any]) -> dict[str, Any]:
    """An array's recorded metadata as zarr reads it here: raw values (``bytes`` codec alone), no declaration; a
    sharded array's shards served as chunks of raw values (a block's rows, which it recomputes whole anyway)."""
    plain = plain_document(doc)[0]
    codecs = [c for c in plain.get("codecs", []) if isinstance(c, dict)]
    for codec in codecs:
        if codec.get("name") == "sharding_indexed" and isinstance(codec.get("configuration"), dict):
            codecs = [c for c in codec["configuration"].get("codecs", []) if isinstance(c, dict)]
    return {**plain, "codecs": [c for c in codecs if c.get("name") == "bytes"]}


class RecomputingStore(StateSharingWrapper):
    """An output's store (read-only) whose chunks are read where stored and recomputed elsewhere.

    ``plan`` recomputes the run's blocks (its step, inputs and layout, checked against the
    recorded identity by the caller); ``manifest`` says which blocks are committed and
    which are stored.
    """

    FORWARDED = frozenset({"set", "set_if_not_exists", "_set_many", "delete", "delete_dir", "clear", "is_empty",
                           "list", "list_prefix", "list_dir"})  # fmt: skip
    """What it leaves to the store inside: it serves what is read of the arrays' chunks and metadata, and
    nothing else (zarr lists no chunk to read one)."""

    def __init__(
        self, target: Any, manifest: Manifest, plan: Plan, *, cache_bytes: int = CACHE_BYTES, x64: bool = True
    ) -> None:
        checked = CheckedStore(target.store, target.label, manifest)
        super().__init__(checked)
        self.label = target.label
        self.manifest = manifest
        self.plan = plan
        self.x64 = x64
        self.cache_bytes = cache_bytes
        blocking = manifest.identity.blocking
        self._names = manifest.identity.names
        self._save_every = blocking.save_every
        self._blocks = blocking.block_count
        self._block_rows = blocking.block_rows
        self._writers: dict[str, ChunkWriter] = {}  # each array's layout (see _layouts)
        self._laid_out = False
        self._target = target
        self._reset()

    async def _layouts(self) -> dict[str, ChunkWriter]:
        """Each array's layout, its stored chunks read through the checks; read from the store on the first request
        (an array not made is read as the store holds it: nothing of it)."""
        if not self._laid_out:
            prototype = default_buffer_prototype()
            for name in self._names:
                buf = await self._store.get(f"{name}/zarr.json", prototype)
                if buf is not None:
                    doc = plain_document(json.loads(buf.to_bytes()))[0]
                    self._writers[name] = ChunkWriter.of_document(self._store, name, doc)
            self._laid_out = True
        return self._writers

    def _reset(self) -> None:
        self._cache: collections.OrderedDict[int, tuple[dict[str, np.ndarray], int]] = collections.OrderedDict()
        self._computing: dict[int, threading.Event] = {}
        self._served_chunks: dict[int, int] = {}  # per cached block: how many of its chunks were served
        self._lock = threading.Lock()  # held around the cache only, never across I/O
        self._ledger_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(COMPUTE_THREADS, "streamacc-recompute")
        self._buffers = BlockPool(RECYCLED_BLOCKS)
        self._ledger = Ledger(self._target)
        self._served: dict[str, bytes] = {}

    @classmethod
    async def open(cls, store_cls: type[Store], *args: Any, **kwargs: Any) -> RecomputingStore:
        """The output in ``store_cls(*args, **kwargs)``, opened, read as the keyword arguments ``manifest`` and
        ``plan`` say (as zarr's ``WrapperStore.open`` opens a wrapper, which builds it from the store alone)."""
        manifest, plan = kwargs.pop("manifest"), kwargs.pop("plan")
        store = store_cls(*args, **kwargs)
        await store._open()
        return cls(open_target(store), manifest, plan)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        live = ("_cache", "_computing", "_served_chunks", "_lock", "_ledger_lock", "_pool", "_buffers", "_ledger")
        for key in (*live, "_served"):  # this process's: remade by _reset
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def __repr__(self) -> str:
        return f"RecomputingStore({self._store!r})"

    @property
    def buffer_stats(self) -> PoolStats:
        """What happened to the buffers this reader recomputed blocks into (recycled, filled, overflowed)."""
        return self._buffers.stats

    @property
    def names(self) -> list[str]:
        """The output's arrays, in their recorded order."""
        return list(self._names)

    @property
    def cached_blocks(self) -> int:
        """How many recomputed blocks this reader holds for the chunks of them not served yet."""
        with self._lock:
            return len(self._cache)

    def recomputed_variables(self, ds: xarray.Dataset) -> xarray.Dataset:
        """``ds`` (opened lazily from this store, without dask) with its arrays read as the recomputed blocks
        themselves, where a read lies in one (``streamacc/_xarray.py``: xarray is needed only here)."""
        from .._xarray import recomputed_variables

        return recomputed_variables(ds, self)

    def __eq__(self, value: object) -> bool:
        return isinstance(value, RecomputingStore) and self._store == value._store

    def __hash__(self) -> int:
        return hash(id(self))

    # --- what zarr reads ---------------------------------------------------------------

    def _document(self, name: str) -> bytes:
        if name not in self._served:
            doc = self._writers[name].array.metadata.to_dict()
            self._served[name] = json.dumps(_served_document(doc)).encode()
        return self._served[name]

    async def get(self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None) -> Buffer | None:
        name, _, rest = key.partition("/")
        if name not in await self._layouts():
            return await self._store.get(key, prototype, byte_range)
        raw: bytes | memoryview
        if rest == "zarr.json":
            raw = self._document(name)
        else:
            place = self._writers[name].place(key)
            if place is None:
                return await self._store.get(key, prototype, byte_range)
            chunk = await self._chunk(name, *place)
            if chunk is None:
                return None
            raw = chunk
        buf = prototype.buffer.from_bytes(raw)
        return buf if byte_range is None else ranged(buf, byte_range, prototype)

    async def exists(self, key: str) -> bool:
        name, _, rest = key.partition("/")
        if name in await self._layouts() and rest == "zarr.json":
            return True
        return await self._store.exists(key)

    async def get_partial_values(
        self, prototype: BufferPrototype, key_ranges: Iterable[tuple[str, ByteRequest | None]]
    ) -> list[Buffer | None]:
        return list(await asyncio.gather(*(self.get(key, prototype, part) for key, part in key_ranges)))

    _get_many = Store._get_many  # each request through this store's own get

    # --- chunks ------------------------------------------------------------------------

    def _block_of(self, row_chunk: int, name: str) -> int:
        """The block (in scan order) that row chunk ``row_chunk`` of ``name`` lies in."""
        position: int = min(row_chunk * self._writers[name].chunk // self._block_rows, self._blocks - 1)
        return self._blocks - 1 - position if self.plan.reverse else position

    async def _chunk(self, name: str, row_chunk: int, tile: int) -> memoryview | None:
        """The raw bytes of one chunk: read where its block is stored, recomputed elsewhere.

        A stored chunk is read on zarr's event loop (its reads need the loop's threads); a
        block is recomputed on a thread of this store's own, so that reads never wait for
        threads that wait for them.
        """
        writer = self._writers[name]
        k = self._block_of(row_chunk, name)
        if k >= self.manifest.committed_blocks:
            return None
        start_row = row_chunk * writer.chunk
        region = writer.region(start_row, min(start_row + writer.chunk, writer.array.shape[0]), tile)
        rows = slice(start_row + region[0].start, start_row + region[0].stop)
        if self.manifest.stores(k):
            values = np.asarray(await writer.array.async_array.getitem((rows, *region[1:])))
        else:
            loop = asyncio.get_running_loop()
            ys, first_row = await loop.run_in_executor(self._pool, self._recomputed, k)
            values = ys[name][(slice(rows.start - first_row, rows.stop - first_row), *region[1:])]
            self._count_served(k, ys, first_row, 1)
        if values.shape == tuple(writer.shape) and values.flags.c_contiguous:
            return values.reshape(-1).view(np.uint8).data  # served as it lies: zarr copies it once, into place
        full = np.full(writer.shape, writer.array.metadata.fill_value, dtype=writer.array.dtype)
        full[tuple(slice(0, n) for n in values.shape)] = values
        return full.reshape(-1).view(np.uint8).data

    def block_rows(self, name: str, start: int, stop: int) -> np.ndarray | None:
        """Rows ``[start, stop)`` of ``name`` as a read-only view of its recomputed block, copied nowhere.

        None unless the rows lie in one committed block that is not stored: the caller then
        reads them through zarr. Rows that are a whole block count as all of its chunks of
        ``name`` served (see :meth:`_count_served`).
        """
        if not 0 <= start < stop <= self._block_rows * self._blocks:
            return None
        k = self._block_of(start // self._writers[name].chunk, name)
        if k >= self.manifest.committed_blocks or self.manifest.stores(k):
            return None
        ys, first_row = self._recomputed(k)
        rows = len(ys[name])
        if not first_row <= start < stop <= first_row + rows:
            return None
        if (start, stop) == (first_row, first_row + rows):
            self._count_served(k, ys, first_row, self._chunks_in(name, first_row, rows))
        return ys[name][start - first_row : stop - first_row]

    def _recomputed(self, k: int) -> tuple[dict[str, np.ndarray], int]:
        """Block ``k``'s ys by array (host), and its first row: from the cache, or computed once here."""
        while True:
            with self._lock:
                if k in self._cache:
                    self._cache.move_to_end(k)
                    return self._cache[k]
                waiting = self._computing.get(k)
                if waiting is None:
                    self._computing[k] = threading.Event()
                    break
            waiting.wait()
        try:
            computed = self._compute(k)
            with self._lock:
                self._cache[k] = computed
                self._evict()
            return computed
        finally:
            with self._lock:
                self._computing.pop(k).set()

    def _chunks_in(self, name: str, first_row: int, rows: int) -> int:
        """The chunks of array ``name`` holding rows ``[first_row, first_row + rows)`` (every tile of each)."""
        writer = self._writers[name]
        return (-(-(first_row + rows) // writer.chunk) - first_row // writer.chunk) * len(writer.tiles)

    def _count_served(self, k: int, ys: dict[str, np.ndarray], first_row: int, chunks: int) -> None:
        """Count ``chunks`` chunks of block ``k`` served; once all of them were, the cache lets the block go.

        A block is cached so that its other chunks and arrays need no computation of their
        own; one read in full (a reduction over the whole output) asks for each chunk once,
        and keeping its blocks would only hold their buffers.
        """
        total = sum(self._chunks_in(name, first_row, len(ys[name])) for name in self._writers)
        with self._lock:
            served = self._served_chunks.get(k, 0) + chunks
            if served < total:
                self._served_chunks[k] = served
                return
            self._served_chunks.pop(k, None)
            if k in self._cache and self._cache[k][0] is ys:
                del self._cache[k]

    def _evict(self) -> None:
        held = sum(sum(a.nbytes for a in ys.values()) for ys, _ in self._cache.values())
        while len(self._cache) > COMPUTE_THREADS and held > self.cache_bytes:
            k, (ys, _) = self._cache.popitem(last=False)
            self._served_chunks.pop(k, None)  # computed again, it counts its chunks afresh
            held -= sum(a.nbytes for a in ys.values())

    def _compute(self, k: int) -> tuple[dict[str, np.ndarray], int]:
        with self._ledger_lock:
            record = self._ledger.block(k, self.manifest)
            entering = self._ledger.kept_carry(self.manifest, k)
            after = self._ledger.kept_carry(self.manifest, k + 1)
        with x64_scope(self.x64):
            block = compute_block(self.plan, from_host(entering, self.plan.init), record.start, record.stop,
                                  pool=self._buffers)  # fmt: skip
            # views of a recycled buffer, not copies: the buffer is taken until the last view of it is gone
            ys = dict(zip(self._names, (np.asarray(y) for y in _leaves(block.ys)), strict=True))
            ended = to_host(block.carry)
        if not same_leaves(ended, after):
            raise VerifyError(
                f"block {k} (steps {record.start}-{record.stop}) of {self.label} recomputes to another carry than "
                "the one recorded after it, so its data cannot be read back: the step function, or a value it "
                "uses, is not that of the run that wrote it; pass the original one"
            )
        return ys, rows_in(record.start, record.stop, self._save_every)[0]


def _leaves(tree: Any) -> list[Any]:
    import jax

    return list(jax.tree_util.tree_leaves(tree))


def _needs_x64(manifest: Manifest) -> bool:
    """Whether the run computed in 64 bits: a 64-bit output or carry (JAX makes none without ``jax_enable_x64``)."""
    dtypes = [dtype_from_name(dtype) for dtype, _ in manifest.identity.arrays.values()]
    if manifest.v2:
        dtypes += [leaf.dtype for leaf, _ in decode_leaves(manifest.carry or [])]
    else:
        dtypes += [leaf.dtype for leaf in manifest.carry_leaves]
    return any(d.itemsize >= 8 and d.kind in "fiuc" for d in dtypes)


def recompute_plan(
    target: Any,
    manifest: Manifest,
    *,
    f: Any = None,
    init: Any = None,
    xs: Any = None,
    storage_options: dict[str, Any] | None = None,
) -> tuple[Plan, bool]:
    """The plan that recomputes ``target``'s blocks, and whether it computes in 64 bits.

    A recipe output is recomputed from its recorded recipe and parameters; an output written
    from Python needs its step function ``f``, checked against the recorded identity, with
    ``init`` (a carry of the run's structure: needed where the carry has more than one leaf,
    its values are taken from the record) and ``xs`` as it was written with.
    """
    from ._verify import check_function, plan_for, recorded_job

    label = target.label
    if f is None:
        if not manifest.identity.recipe:
            raise InputError(
                f"{label} is a virtual output written from Python, so its data can only be recomputed with its step "
                f"function; pass it as {arg('f')} (and {arg('init')}, {arg('xs')} as written)"
            )
        job = recorded_job(manifest, label, storage_options)
        with x64_scope(True):
            return plan_for(manifest, job.f, job.init, job.xs), True
    check_function(manifest, f, label)
    if init is None:
        leaves = Ledger(target).kept_carry(manifest, 0)
        if len(leaves) != 1:
            raise InputError(
                f"the carry of {label} has {counted(len(leaves), 'leaf', 'leaves')}; pass {arg('init')} (any carry of "
                "the run's "
                "structure: its values are taken from the record)"
            )
        ((array, impl),) = leaves
        init = array if impl is None else _key(array, impl)
    x64 = _needs_x64(manifest)
    with x64_scope(x64):
        return plan_for(manifest, f, init, xs), x64


def recomputing_store(
    target: Any,
    manifest: Manifest,
    *,
    f: Any = None,
    init: Any = None,
    xs: Any = None,
    storage_options: dict[str, Any] | None = None,
    cache_bytes: int = CACHE_BYTES,
) -> RecomputingStore:
    """The store that reads ``target``'s virtual output (see :func:`recompute_plan` for the arguments)."""
    plan, x64 = recompute_plan(target, manifest, f=f, init=init, xs=xs, storage_options=storage_options)
    return RecomputingStore(target, manifest, plan, cache_bytes=cache_bytes, x64=x64)


def _key(data: np.ndarray, impl: str) -> Any:
    import jax

    return jax.random.wrap_key_data(jax.numpy.asarray(data), impl=impl)


def recomputed_rows(target: Any, plan: Plan) -> Any:
    """``rows(name, a, b)``: rows ``[a, b)`` of output ``name`` of the run stored at ``target``, recomputed.

    Each block holding them is computed from its recorded carry with ``plan`` (a plan of the
    same block layout: the stored run's, or a longer run's that extends it).
    """
    ledger = Ledger(target)

    def rows(name: str, a: int, b: int) -> np.ndarray:
        manifest = ledger.load()
        assert manifest is not None
        names = manifest.identity.names
        parts = []
        for k, (start, stop) in enumerate(plan.bounds()):
            first, last = rows_in(start, stop, plan.save_every)
            if last <= a:
                continue
            if first >= b:
                break
            block = compute_block(plan, from_host(ledger.kept_carry(manifest, k), plan.init), start, stop)
            ys = dict(zip(names, _leaves(block.ys), strict=True))
            parts.append(np.array(ys[name][max(a, first) - first : min(b, last) - first]))
            block.release()
        return np.concatenate(parts)

    return rows
