"""A dask.distributed cluster for a run's blocks: a local one that closes on every exit and never outlives its
driver, or a running one reached at its address; its workers' store sessions closed.

``LocalCluster(processes=True)`` runs the scheduler and the nannies inside the driver and
each worker in a child process. A worker process watches a pipe from its parent and exits
at once when the parent dies, so even a driver killed with SIGKILL leaves no worker behind
for long. Normal exits, errors and Ctrl-C close the cluster through
the context manager, after each worker has closed its store sessions. Workers ignore
Ctrl-C, which a terminal sends to them too: the driver alone reacts, closing them in order
(a worker the nanny restarts later does not inherit that). The command line runs its work
on another thread (its main thread takes the signals), which cannot have its workers inherit
it, so each worker process also ignores it itself from its first moments on: this module is
their dask preload (:func:`dask_setup`). What runs on the cluster is ``_dask``'s.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

from ..base import as_count
from ..errors import InputError, arg, one_line
from ..store import close_store_sessions

__all__ = ["close_worker_sessions", "cluster_client", "dask_setup", "local_cluster"]


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
        "preload": ["streamacc.run._cluster"],  # workers ignore Ctrl-C even when started from another thread
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
