"""Block tasks on a dask.distributed cluster (an exact two-pass run of a sequential scan), and the local cluster
that runs them.

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
worker died. Step functions travel by cloudpickle; the plan is scattered once per worker.

A local dask.distributed cluster that closes on every exit and never outlives its driver.

``LocalCluster(processes=True)`` runs the scheduler and the nannies inside the driver and
each worker in a child process. A worker process watches a pipe from its parent and exits
at once when the parent dies, so even a driver killed with SIGKILL leaves no worker behind
for long. Normal exits, errors and Ctrl-C close the cluster through
the context manager, after each worker has closed its store sessions. Workers ignore
Ctrl-C, which a terminal sends to them too: the driver alone reacts, closing them in order
(a worker the nanny restarts later does not inherit that). The command line runs its work
on another thread (its main thread takes the signals), which cannot have its workers inherit
it, so each worker process also ignores it itself from its first moments on: this module is
their dask preload (:func:`dask_setup`).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import json
import logging
import os
import queue
import secrets
import signal
import threading
from collections.abc import Iterator
from typing import Any

from ..base import HostLeaf, as_count, check_stop, on_own_thread, pool_size, run_ordered
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
from ..errors import CarryMismatchError, InputError, StreamaccError, arg, one_line
from ..store import LocalTarget, StoreTarget, Target, ZarrSink, close_store_sessions, open_target
from ..summaries import SummaryPlan
from ._commit import BlockResult, Output
from ._execute import write_block

__all__ = [
    "BLOCKS_PER_TASK", "BlockTask", "DaskExecutor", "SinkSpec", "close_worker_sessions", "cluster_client", "dask_setup",
    "local_cluster", "run_block_tasks",
]


WORKERS_PER_CORE = 2
"""The most worker processes per CPU core a local cluster may start: beyond one, only I/O waits gain."""
MIN_WORKER_LIMIT = 4


def _cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise InputError(
            f"{arg('workers')} needs dask.distributed; install it with pip install 'streamacc[dist]'"
        ) from None
    return distributed


def close_worker_sessions(client: Any, timeout: float = 10.0) -> None:
    """Have every worker close its store sessions, waiting at most ``timeout`` seconds.

    Quietly, and bounded: a worker may be gone or unresponsive, and shutting down must not
    hang on it (the sessions then die with the worker).
    """

    def run() -> None:
        with contextlib.suppress(Exception):
            client.run(close_store_sessions, wait=True)

    closer = threading.Thread(target=run, name="streamacc-close-sessions", daemon=True)
    closer.start()
    closer.join(timeout)


def dask_setup(worker: Any) -> None:
    """Ignore SIGINT in this worker process (only the main thread may set a handler): run by each worker
    process of a local cluster as it starts (a dask preload)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _sigint_ignored() -> Iterator[None]:
    """Ignore Ctrl-C while worker processes start, so that they inherit ignoring it.

    A terminal sends Ctrl-C to every process in the foreground group, workers included;
    the driver alone should react, by closing the cluster in order.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; workers then see Ctrl-C too
        return
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


@contextlib.contextmanager
def local_cluster(n_workers: int, **cluster_options: Any) -> Iterator[Any]:
    """A ``distributed.Client`` on a new cluster of ``n_workers`` single-threaded worker processes.

    The cluster is closed when the block ends, however it ends. ``cluster_options`` go to
    ``LocalCluster`` (e.g. ``memory_limit``).
    """
    n_workers = as_count("workers", n_workers, minimum=1, example=2)
    cores = _cores()
    most = max(MIN_WORKER_LIMIT, WORKERS_PER_CORE * cores)
    if n_workers > most:
        raise InputError(
            f"{arg('workers', n_workers)} asks for more worker processes than this machine can run ({cores} CPU "
            f"cores; each worker is a process of its own with its own JAX); pass at most {arg('workers', most)}, "
            f"or run a larger cluster and pass {arg('scheduler')}"
        )
    distributed = _distributed()
    options = {
        "threads_per_worker": 1,
        "processes": True,
        "dashboard_address": None,  # no dashboard; its HTTP server (health, metrics) on a free loopback port
        "scheduler_kwargs": {"dashboard_address": "127.0.0.1:0"},  # not on 8787, which another cluster may hold
        "preload": ["streamacc.run._dask"],  # workers ignore Ctrl-C even when started from another thread
        **cluster_options,
    }
    with _sigint_ignored():
        cluster = distributed.LocalCluster(n_workers=n_workers, silence_logs=logging.ERROR, **options)
    # not the process's default dask scheduler: dask arrays the caller computes meanwhile stay local
    with cluster, distributed.Client(cluster, set_as_default=False) as client:
        try:
            yield client
        finally:
            close_worker_sessions(client)


def _check_address(scheduler: str) -> None:
    """Refuse an address no dask transport knows before a Client is made of it.

    A Client that fails on such an address is left half started, and closing it at exit
    waits 60 s and prints dask's traceback.
    """
    from distributed.comm.addressing import parse_address
    from distributed.comm.registry import get_backend

    try:
        scheme, location = parse_address(scheduler)
        get_backend(scheme)
        if not location:
            raise ValueError("it names no host")
    except ValueError as exc:
        raise InputError(
            f"{arg('scheduler', scheduler)} is not a dask scheduler address ({one_line(exc)}); "
            f"pass e.g. {arg('scheduler', 'tcp://127.0.0.1:8786')}"
        ) from None


@contextlib.contextmanager
def cluster_client(workers: int | None, scheduler: str | None) -> Iterator[Any]:
    """Where a command's blocks run: None (this process), a new local cluster, or a running one.

    ``workers`` starts a :func:`local_cluster` of that many processes for the block and
    closes it afterwards; ``scheduler`` (e.g. ``tcp://10.0.0.5:8786``) connects to a
    cluster someone else runs and only disconnects.
    """
    if workers is not None and scheduler is not None:
        raise InputError(f"{arg('workers')} and {arg('scheduler')} exclude each other; pass one")
    if workers is not None:
        with local_cluster(workers) as client:
            yield client
    elif scheduler is not None:
        distributed = _distributed()
        _check_address(scheduler)
        try:
            client = distributed.Client(scheduler, timeout=30, set_as_default=False)
        except (OSError, TimeoutError, ValueError) as exc:
            raise InputError(
                f"cannot reach the dask scheduler at {scheduler!r} ({one_line(exc)}); check "
                f"{arg('scheduler')}, e.g. {arg('scheduler', 'tcp://127.0.0.1:8786')}"
            ) from None
        with client:
            try:
                yield client
            finally:
                close_worker_sessions(client)
    else:
        yield None


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


@functools.lru_cache(maxsize=4)
def _open_sink(spec: SinkSpec) -> ZarrSink:
    """The sink of ``spec`` in this worker process, opened once a run and reused by its later tasks."""
    target = open_target(spec.location, storage_options=json.loads(spec.storage_options), follow=spec.lease)
    return ZarrSink.open(target, list(spec.names))


SCATTER_TIMEOUT = 120.0
"""Seconds the workers have to take a run's plan: a worker that dies while it is sent
(restarting, unreachable) would otherwise keep the broadcast waiting for ever."""

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
        try:
            plan_future = self.client.scatter(plan, broadcast=True, hash=False, timeout=SCATTER_TIMEOUT)
        except TimeoutError:
            raise StreamaccError(
                f"the cluster's workers did not all take the run's plan within {SCATTER_TIMEOUT:.0f} s (a worker "
                f"restarting or unreachable); nothing more was written; rerun with {arg('mode', 'resume')} once "
                "the cluster is healthy"
            ) from None
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
    plan: Any  # the plan, scattered to every worker
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
