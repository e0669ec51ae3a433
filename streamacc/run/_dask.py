"""Block tasks on a dask.distributed cluster: an exact two-pass run of a sequential scan (the cluster itself is
``_cluster``'s).

Only the carry of a scan is sequential, and it is small and cheap. The driver runs the
carry pass (a carry-only jitted scan per block, no ys, no I/O) and, as soon as the carry
entering block k is known, submits block task k: recompute the block from that carry on
any worker, encode it, write its chunks there, and return its checksums and the carry it
ends with. The driver commits results strictly in scan order, after checking each task's
final carry against the carry pass bit for bit, so the output is byte-identical to a
single-process run, and resume and verify do not care where blocks ran.

A step whose carry-only scan XLA compiles to other bits than its full block is told apart
from one that differs between machines by recomputing the block on the driver: the run
then goes on with a carry pass that runs the block function itself.

Tasks are idempotent (the same bytes every time), so the scheduler may retry a task whose
worker died. Step functions travel by cloudpickle; the plan is a task of its own, which each worker
fetches once, and which the scheduler makes again where every worker that held it died.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import queue
import secrets
import threading
from collections.abc import Iterator
from typing import Any

from ..base import HostLeaf, check_stop, on_own_thread, pool_size, run_ordered
from ..engine import (
    Block,
    BlockPool,
    Plan,
    caller_scopes,
    carry_pass,
    compute_block,
    from_host,
    jax_option,
    same_leaves,
    to_host,
    x64_scope,
)
from ..errors import CarryMismatchError, InputError
from ..store import LocalTarget, StoreTarget, Target, ZarrSink, open_target
from ..summaries import SummaryPlan
from ._cluster import close_worker_sessions
from ._commit import BlockResult, Output
from ._execute import write_block

__all__ = ["BLOCKS_PER_TASK", "BlockTask", "DaskExecutor", "SinkSpec", "run_block_tasks"]


BLOCKS_PER_TASK = 4
"""Consecutive blocks per task: enough to share the scheduler's round trip, which costs
about what the carry pass of a cheap block does (the scale-out benchmark), few enough that
a failed task costs little to redo. A worker holds at most two blocks at a
time whatever this is: the one it computes and the one it writes."""


@dataclasses.dataclass(frozen=True)
class SinkSpec:
    """How a worker reaches the output: a path or URL, its storage options and the arrays."""

    location: str
    storage_options: str  # JSON text, so that the spec is hashable and each worker opens the store once a run
    names: tuple[str, ...]
    run: str  # a token per run: a worker reuses an opened sink within a run only
    lease: str | None = None  # the driver's lease token: a worker writes only while that lease holds
    summary: SummaryPlan | None = None  # how to cut each block's summary pieces
    stores_data: bool = True  # False for a virtual run: blocks are computed for their summaries only

    @classmethod
    def of(cls, output: Output) -> SinkSpec:
        target = output.target
        options = json.dumps(getattr(target, "storage_options", None), sort_keys=True)
        names = tuple(output.spec.names)
        location, token, lease = cls.location_of(target), secrets.token_hex(8), getattr(target, "lease_token", None)
        return cls(location, options, names, token, lease, output.summary_plan, output.spec.storage.stores_data)

    @staticmethod
    def location_of(target: Target) -> str:
        """The path or URL by which workers reach ``target``, or an error when they cannot."""
        if isinstance(target, LocalTarget):
            return str(target.root)
        if isinstance(target, StoreTarget) and hasattr(target.raw, "fs") and "://" in target.label:
            return target.label
        raise InputError(
            f"{target.label} is a store object that lives in this process only; to write with a dask client "
            "pass a path or URL that every worker can reach"
        )


def _the_plan(plan: Plan) -> Plan:
    """The run's plan, as the result of a task (which the scheduler can run again)."""
    return plan


@functools.lru_cache(maxsize=4)
def _open_sink(spec: SinkSpec) -> ZarrSink:
    """The sink of ``spec`` in this worker process, opened once a run and reused by its later tasks."""
    target = open_target(spec.location, storage_options=json.loads(spec.storage_options), follow=spec.lease)
    return ZarrSink.open(target, list(spec.names))


WRITE_AHEAD = 1
"""Blocks a task computes ahead of the one being written."""


@functools.lru_cache(maxsize=1)
def _worker_pool() -> BlockPool:
    """This worker process's buffers for block outputs, recycled from one task to the next."""
    return BlockPool(pool_size(WRITE_AHEAD))


@dataclasses.dataclass(frozen=True)
class BlockTask:
    """One block to recompute on a worker: where it lies, and the carry entering it."""

    index: int
    start: int
    stop: int
    carry_in: list[HostLeaf]


def _results(plan: Plan, spec: SinkSpec, tasks: list[BlockTask]) -> list[BlockResult]:
    """Compute the blocks of ``tasks`` on this thread while a second thread writes the one before.

    As the local pipeline does: a single-threaded worker would otherwise wait, idle, for
    every chunk's fsync (or PUT) before computing the next block.
    """
    sink = _open_sink(spec) if spec.stores_data else None
    pool, names = _worker_pool(), list(spec.names)
    results: list[BlockResult] = []

    def computed() -> Iterator[tuple[BlockTask, Block]]:
        for task in tasks:
            yield task, compute_block(plan, from_host(task.carry_in, plan.init), task.start, task.stop, pool=pool)

    def write(item: tuple[BlockTask, Block]) -> BlockResult:
        task, block = item
        carry_out = to_host(block.carry)
        return write_block(sink, names, task.index, block, task.carry_in, carry_out, spec.summary, reverse=plan.reverse)

    run_ordered(computed(), write, lambda item, result: results.append(result), depth=WRITE_AHEAD, workers=1)
    return results


def run_block_tasks(plan: Plan, spec: SinkSpec, tasks: list[BlockTask], x64: bool) -> list[BlockResult]:
    """Recompute a few consecutive blocks, each from its own carry-in, write their chunks durably, describe them.

    Runs on a worker, in the driver's precision (``x64``) whatever the worker's own setting.
    """
    with x64_scope(x64):
        return _results(plan, spec, tasks)


@dataclasses.dataclass
class DaskExecutor:
    """Blocks recomputed as tasks on a dask cluster from carries the driver computes.

    Each task recomputes ``blocks_per_task`` consecutive blocks (each from its own
    carry-in, one at a time), so that the scheduler's cost per task, a few milliseconds,
    is shared. At most ``inflight`` tasks are submitted and not yet committed, which
    keeps driver and worker memory flat whatever the length.
    """

    client: Any
    inflight: int
    blocks_per_task: int = BLOCKS_PER_TASK

    @classmethod
    def for_client(cls, client: Any, inflight: int | None = None) -> DaskExecutor:
        """The executor on ``client``'s cluster (a ``distributed.Client``, checked by ``Dask``)."""
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        return cls(client, inflight or 2 * workers + 1)

    def check(self, target: Target) -> None:
        SinkSpec.location_of(target)

    def blocks_held(self) -> int:
        """One: the driver computes a block in full only to confirm a worker's carry (workers hold their own)."""
        return 1

    def run(self, plan: Plan, output: Output) -> None:
        spec = SinkSpec.of(output)
        x64 = bool(jax_option("jax_enable_x64"))
        # not scattered: scattered data lost with its workers is lost for good, and the tasks that need it with it
        plan_future = self.client.submit(_the_plan, plan, pure=False)
        try:
            differs = self._pass(plan, output, _Submit(self.client, plan_future, spec, x64), exact=False)
            if differs is not None:
                # a worker's carry differs from the carry pass's: the step on this machine decides whether the
                # carry-only scan compiled to other bits (go on with an exact carry pass) or the step differs
                _confirm(differs, plan)
                output.commit(differs)
                self._pass(plan, output, _Submit(self.client, plan_future, spec, x64), exact=True)
        finally:
            close_worker_sessions(self.client)
        output.remove_lost_writes()  # a worker killed mid-write left its temp file; another wrote its block again

    def _pass(self, plan: Plan, output: Output, submit: _Submit, *, exact: bool) -> BlockResult | None:
        """One carry pass from the output's first uncommitted block, its tasks, and their in-order commits.

        With ``exact``, the carry pass runs the block function itself (its ys computed and
        dropped), the very program the workers run. Returns the first block whose worker
        ended with another carry than this pass (not committed), or None when every block
        agreed; with ``exact`` such a block raises instead.
        """
        committer = _Committer(output, self.inflight, exact)
        carry_in = output.carry
        carries = on_own_thread(
            carry_pass(plan, carry=from_host(carry_in, plan.init), first_block=output.first_block, exact=exact),
            scopes=caller_scopes,
        )
        group: list[BlockTask] = []
        expected: list[list[HostLeaf]] = []
        try:
            for index, (start, stop, carry) in enumerate(carries, start=output.first_block):
                check_stop()
                if committer.stopped:
                    break
                carry_out = to_host(carry)
                group.append(BlockTask(index, start, stop, carry_in))
                expected.append(carry_out)
                carry_in = carry_out
                if len(group) == self.blocks_per_task:
                    committer.put(submit(group), expected)
                    group, expected = [], []
            if group and not committer.stopped:
                committer.put(submit(group), expected)
            committer.close()
            committer.wait()
        finally:
            carries.close()
            committer.abandon()
        return committer.outcome()


@dataclasses.dataclass(frozen=True)
class _Submit:
    """Submits a group of consecutive block tasks to the cluster."""

    client: Any
    plan: Any  # the plan's task
    spec: SinkSpec
    x64: bool

    def __call__(self, group: list[BlockTask]) -> Any:
        return self.client.submit(run_block_tasks, self.plan, self.spec, list(group), self.x64, pure=False, retries=2)


_END = None


class _Committer:
    """Commits the blocks of submitted tasks strictly in scan order, on a thread of its own.

    The carry pass and the submissions never wait for a commit's fsyncs: the driver hands
    each task (its future and the carries the pass expects after its blocks) to
    :meth:`put`, at most ``inflight`` uncommitted at a time. The committer's state is
    explicit: the tasks handed over (``_queue``, oldest first), those that may still run
    (``_submitted``, to cancel on an interrupt), the first error (``_error``), and the
    first block whose worker's carry differs from the pass's (``_differs``). Once either
    is set, nothing more is committed.
    """

    def __init__(self, output: Output, inflight: int, exact: bool) -> None:
        self._output = output
        self._exact = exact
        self._queue: queue.Queue[tuple[Any, list[list[HostLeaf]]] | None] = queue.Queue(maxsize=inflight)
        self._submitted: collections.deque[Any] = collections.deque()
        self._error: BaseException | None = None
        self._differs: BlockResult | None = None
        self._thread = threading.Thread(target=self._run, name="streamacc-commit", daemon=True)
        self._thread.start()

    @property
    def stopped(self) -> bool:
        """Whether the committer stopped early (an error, or a carry that differs): submit nothing more."""
        return self._error is not None or self._differs is not None or not self._thread.is_alive()

    def put(self, future: Any, expected: list[list[HostLeaf]]) -> None:
        """Hand over a submitted task, waiting while ``inflight`` tasks are uncommitted (interruptibly)."""
        while self._submitted and self._submitted[0].done():
            self._submitted.popleft()  # finished: nothing to cancel, and the deque stays as short as the queue
        self._submitted.append(future)
        while not self.stopped:
            check_stop()
            try:
                self._queue.put((future, list(expected)), timeout=0.1)
                return
            except queue.Full:
                continue

    def close(self) -> None:
        """No more tasks: the committer ends once it has committed the ones it has."""
        while not self.stopped:
            check_stop()
            try:
                self._queue.put(_END, timeout=0.1)
                return
            except queue.Full:
                continue

    def wait(self) -> None:
        """Wait (interruptibly) until every task handed over is committed, or the committer stopped."""
        while self._thread.is_alive():
            check_stop()
            self._thread.join(0.1)

    def abandon(self) -> None:
        """After an interrupt: cancel what may still run and let the commit in hand finish; no-op otherwise."""
        if self._thread.is_alive():
            self._error = self._error or KeyboardInterrupt()
            for future in self._submitted:
                future.cancel()
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(_END)
            self._thread.join()
        if self._differs is not None:
            for future in self._submitted:  # tasks past the block: none may write once it is computed again
                with contextlib.suppress(Exception):
                    future.result()

    def outcome(self) -> BlockResult | None:
        """The block whose worker's carry differs (None if none); raises the committer's error."""
        if self._error is not None:
            raise self._error
        return self._differs

    def _run(self) -> None:
        try:
            while self._error is None and self._differs is None and (item := self._queue.get()) is not _END:
                self._commit(*item)
        except BaseException as exc:
            self._error = self._error or exc

    def _commit(self, future: Any, expected: list[list[HostLeaf]]) -> None:
        results: list[BlockResult] = future.result()
        if self._error is not None:
            return  # the driver gave up meanwhile: commit nothing more
        for result, carry_out in zip(results, expected, strict=True):
            if not same_leaves(result.carry_out, carry_out):
                self._output.commit(*results[: result.index - results[0].index])
                if self._exact:
                    raise _mismatch(result, "in the carry pass")
                self._differs = result
                return
        self._output.commit(*results)


def _mismatch(result: BlockResult, where: str) -> CarryMismatchError:
    return CarryMismatchError(
        f"block {result.index} (steps {result.start}-{result.stop}) ended with another carry on its worker than "
        f"{where}, so the step is not reproducible there (nondeterministic, or different hardware); nothing past "
        "it was committed: rerun without a cluster"
    )


def _confirm(differs: BlockResult, plan: Plan) -> None:
    """Recompute ``differs`` on the driver as workers do; raise unless it ends with the worker's carry."""
    block = compute_block(plan, from_host(differs.carry_in, plan.init), differs.start, differs.stop)
    here = to_host(block.carry)
    block.release()
    if not same_leaves(here, differs.carry_out):
        raise _mismatch(differs, "on this machine")
