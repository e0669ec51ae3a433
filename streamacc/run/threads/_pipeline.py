"""A bounded producer/consumer pipeline with in-order commits off the producer's thread.

The caller's thread produces items (computed blocks) and does nothing else; worker
threads do the slow part (encode, write, fsync) and then commit, each waiting for the
commit of the item before it, so commits happen strictly in production order without
ever stalling production. At most ``depth`` items are in flight, so memory stays at a
few blocks whatever the length.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

__all__ = ["run_ordered"]

T = TypeVar("T")
R = TypeVar("R")


def run_ordered(
    items: Iterable[T],
    work: Callable[[T], R],
    commit: Callable[[T, R], None],
    *,
    depth: int,
    workers: int,
) -> None:
    """Run ``work(item)`` on ``workers`` threads and ``commit(item, result)`` in item order.

    Production blocks while ``depth`` items are unfinished. If any work or commit fails,
    nothing after the failed item is committed, the rest is cancelled, and the first
    error is raised here.
    """

    def run(item: T, before: Future[None] | None) -> None:
        result = work(item)
        if before is not None:
            before.result()  # raises if an earlier item failed: then this one must not commit
        commit(item, result)

    inflight: deque[Future[None]] = deque()
    with ThreadPoolExecutor(max_workers=max(workers, 1), thread_name_prefix="streamacc-write") as pool:
        try:
            for item in items:
                while len(inflight) >= depth:
                    inflight.popleft().result()
                inflight.append(pool.submit(run, item, inflight[-1] if inflight else None))
            while inflight:
                inflight.popleft().result()
        finally:
            for future in inflight:
                future.cancel()
