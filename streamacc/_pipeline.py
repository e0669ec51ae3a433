"""A bounded producer/consumer pipeline with in-order commits.

The caller's thread produces items (computed blocks) while worker threads do the slow
part (encode and write); results are committed strictly in production order, and at
most ``depth`` items are in flight, so memory stays at a few blocks whatever the length.
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

    Production blocks while ``depth`` items are unfinished. If any work fails, nothing
    after the failed item is committed, the rest is cancelled, and the error is raised.
    """
    inflight: deque[tuple[T, Future[R]]] = deque()

    def commit_head() -> None:
        item, future = inflight.popleft()
        commit(item, future.result())

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="streamacc-write") as pool:
        try:
            for item in items:
                inflight.append((item, pool.submit(work, item)))
                while inflight and (len(inflight) >= depth or inflight[0][1].done()):
                    commit_head()
            while inflight:
                commit_head()
        finally:
            for _, future in inflight:
                future.cancel()
