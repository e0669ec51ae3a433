"""``materialize``: store the data of a virtual output's blocks, as a stored write would have stored them.

A virtual output records the carry entering every block; materializing a block recomputes
it from that carry and writes its chunks, the bytes a stored write of the same run holds.
The commit protocol is the write's: a block's chunks are durable before its record names
their checksums, and its record before the manifest counts the block as stored, so an
interrupted materialize leaves an output that reads exactly as before and that the next
materialize continues; it first removes the temp files a killed one left (whatever steps
that one stored), as a resumed write does. Once every block is stored, the arrays become
plain Zarr arrays (see ``store.VIRTUAL``), which any reader opens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import jax

from ..base import as_count, check_stop, interruptible, on_own_thread, pool_size, run_ordered
from ..engine import (
    Block,
    BlockPool,
    Plan,
    caller_scopes,
    compute_block,
    from_host,
    same_leaves,
    step_of,
    to_host,
    x64_scope,
)
from ..errors import InputError, VerifyError, arg
from ..record import (
    BlockRecord,
    Ledger,
    Manifest,
    bookkeeping_listing,
    carries_problem,
    check_structure,
    load_manifest,
    remove_partial_writes,
)
from ..store import ZarrSink, open_target, progress_attrs
from ._commit import Batch
from ._session import Progress, RunSession
from ._virtual import recompute_plan

__all__ = ["materialize"]

INFLIGHT = 2
"""Blocks being written at once while the next is computed."""


def _blocks(manifest: Manifest, plan: Plan, steps: Any, label: str) -> list[int]:
    """The committed blocks (scan order) holding steps in ``steps`` (None: all) whose data are not stored."""
    start, stop = manifest.span()
    if steps is not None:
        pair = (steps.start, steps.stop) if isinstance(steps, slice) else steps
        try:
            a, b = pair
        except (TypeError, ValueError):
            raise InputError(f"{arg('steps', steps)} is not a (start, stop) pair of steps; pass e.g. "
                             f"{arg('steps', [0, 2**20])}") from None  # fmt: skip
        a = start if a is None else as_count("steps", a, minimum=0, example=0)
        b = stop if b is None else as_count("steps", b, minimum=0, example=2**20)
        if max(a, start) >= min(b, stop):
            raise InputError(
                f"no committed step of {label} is in {arg('steps', [a, b])} (the committed steps are {start} to "
                f"{stop}); choose a range among them, e.g. {arg('steps', [start, stop])}"
            )
        start, stop = max(a, start), min(b, stop)
    chosen = []
    for k, (first, last) in zip(range(manifest.committed_blocks), plan.bounds(), strict=False):
        if first < stop and last > start and not manifest.stores(k):
            chosen.append(k)
    return chosen


@dataclasses.dataclass(frozen=True)
class _MaterializedBlock:
    record: BlockRecord
    after: list[Any]
    block: Block


class _Materializer:
    """Computes, writes and commits the chosen blocks of one output (its writer lock held).

    Its blocks commit in a :class:`~streamacc.run._commit.Batch` (every ``COMMIT_SECONDS``), as a virtual run's
    do, but not through ``Output.commit``: that appends the blocks that follow the committed ones (their records,
    their carries, a manifest counting more blocks), where these blocks are committed already and
    gain their chunks' checksums in their records and their place among the stored blocks in the
    manifest, which is all that changes.
    """

    def __init__(self, target: Any, manifest: Manifest, plan: Plan, sink: ZarrSink, bar: Progress) -> None:
        self.target, self.manifest, self.plan, self.sink, self.bar = target, manifest, plan, sink, bar
        self.ledger = Ledger(target)
        self.names = list(sink.arrays)
        self._batch: Batch[BlockRecord] = Batch()
        self.stored = 0

    def items(self, blocks: list[int], pool: BlockPool) -> Iterator[_MaterializedBlock]:
        for k in blocks:
            m = self.manifest
            record = self.ledger.block(k, m)
            after = self.ledger.kept_carry(m, k + 1)
            carry = from_host(self.ledger.kept_carry(m, k), self.plan.init)
            block = compute_block(self.plan, carry, record.start, record.stop, pool=pool)
            yield _MaterializedBlock(record, after, block)

    def write(self, item: _MaterializedBlock) -> BlockRecord:
        check_stop()
        record, block = item.record, item.block
        try:
            if not same_leaves(to_host(block.carry), item.after):
                raise VerifyError(
                    f"block {record.index} (steps {record.start}-{record.stop}) of {self.target.label} recomputes to "
                    "another carry than the one recorded after it: the step function, or a value it uses, is not "
                    "that of the run that wrote it; nothing of it was stored: pass the original one"
                )
            ys = dict(zip(self.names, jax.tree_util.tree_leaves(block.ys), strict=True))
            crcs, _ = self.sink.write(block.rows.start, block.rows.stop, ys)
        finally:
            block.release()
        return dataclasses.replace(record, crc32c=crcs)

    def commit(self, item: _MaterializedBlock, record: BlockRecord) -> None:
        self.bar.update(record.stop - record.start, 0)
        if self._batch.add([record]):
            self.flush()

    def flush(self) -> None:
        """Commit the blocks written so far: their records (with their chunks' checksums), then the manifest."""
        waiting = self._batch.waiting
        if not waiting:
            return
        self.target.check_lock()
        self.ledger.update(*waiting)
        manifest = self.manifest
        for record in waiting:
            manifest = dataclasses.replace(manifest, stored=manifest.with_stored(range(record.index, record.index + 1)))
        self.ledger.save(manifest)
        self.manifest = manifest
        self.stored += len(waiting)
        self._batch.take()  # only once committed: a commit that failed is tried again by the last flush

    def publish(self) -> None:
        """Once every block is stored: the arrays become plain arrays, then the root says so."""
        m = self.manifest
        if m.all_stored:
            self.sink.publish_arrays()
        nodes = bookkeeping_listing(self.sink.target, m)
        self.sink.publish(progress_attrs(m.span(), m.length, m.complete, virtual=m.recomputes), nodes)


@interruptible(caller_scopes)
def materialize(
    store: Any,
    f: Any = None,
    init: Any = None,
    xs: Any = None,
    *,
    steps: Any = None,
    storage_options: dict[str, Any] | None = None,
    progress: bool = True,
) -> int:
    """Store the data of a virtual output's blocks (those holding ``steps``, or all), as a stored write would.

    Parameters
    ----------
    store : str, os.PathLike or zarr store
        A virtual output (written with ``virtual=True``).
    f, init, xs : optional
        For an output written from Python: its step function (or a :class:`~streamacc.ScanSpec`
        holding all three), a carry of its structure (where it has more than one leaf) and its
        inputs, as for :func:`streamacc.open`. Recipe outputs need none.
    steps : (int, int) or slice, optional
        Store the blocks holding these steps (``(start, stop)``, either end None); all by default.
    storage_options : dict, optional
        fsspec options for a URL ``store``.
    progress : bool, default True
        Show a progress bar on a terminal.

    Returns
    -------
    int
        How many blocks this call stored (blocks stored already are left as they are).

    Raises
    ------
    streamacc.errors.InputError
        Not a virtual output, a range with no committed step, or no step function for an
        output written from Python.
    streamacc.errors.VerifyError
        A recomputed block does not end with the carry recorded after it (another step function).
    streamacc.errors.LockedError
        Another process is writing the output.

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> jax.config.update("jax_enable_x64", True)
    >>> def step(x, _):
    ...     x = x * (1 + 1e-8)
    ...     return x, x
    >>> _ = streamacc.write("virtual.zarr", step, np.float64(1.0), length=2**16, block_size=2**12,
    ...                     virtual=True, progress=False)
    >>> streamacc.materialize("virtual.zarr", steps=(0, 2**13), f=step, progress=False)
    2
    >>> streamacc.info("virtual.zarr").stored_blocks
    2
    """
    if f is not None:
        f, init, xs = step_of(f, init, xs)
    reader = open_target(store, storage_options=storage_options, read_only=True)
    manifest = load_manifest(reader)
    if not manifest.virtual:
        raise InputError(
            f"{reader.label} stores its data already (it was not written with {arg('virtual', True)}), so there is "
            "nothing to materialize"
        )
    with RunSession(store, storage_options=storage_options, progress=progress,
                    command="streamacc materialize") as session:  # fmt: skip
        target = session.target
        manifest = load_manifest(target)  # under the lock: what it holds now
        check_structure(target, manifest)
        problem = carries_problem(target, manifest)  # what it recomputes from, and writes beside
        if problem is not None:
            raise VerifyError(f"{target.label}: {problem}")
        plan, x64 = recompute_plan(target, manifest, f=f, init=init, xs=xs, storage_options=storage_options)
        blocks = _blocks(manifest, plan, steps, target.label)
        names = manifest.identity.names
        remove_partial_writes(target, names)  # a killed materialize's (or write's) half-written chunks, any steps
        sink = ZarrSink.open(target, names)
        total = sum(len(range(*next(plan.bounds(k)))) for k in blocks)
        work = _Materializer(target, manifest, plan, sink, session.progress(total, initial=0))
        pool = BlockPool(pool_size(INFLIGHT))
        with x64_scope(x64):
            items = on_own_thread(work.items(blocks, pool), scopes=caller_scopes)
            try:
                run_ordered(items, work.write, work.commit, depth=INFLIGHT, workers=INFLIGHT)
            finally:
                items.close()
                work.flush()  # what was written is committed, interrupted or not
        work.publish()
    return work.stored

