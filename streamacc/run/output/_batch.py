"""Blocks that commit together: a virtual run's, and a materialize's.

A block that stores no data (a virtual run's) or whose data are already written costs
milliseconds, and a commit two durable writes; committing each such block alone would
make the commits the run's cost. Their blocks wait in a :class:`Batch` and commit together
about once every so many seconds, so a crash costs at most that much of the run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Generic, TypeVar

__all__ = ["Batch"]

T = TypeVar("T")


class Batch(Generic[T]):
    """What waits to commit together, and how long since the last commit.

    Attributes
    ----------
    waiting : list
        What waits, in the order added.
    """

    def __init__(self) -> None:
        self.waiting: list[T] = []
        self._since = time.monotonic()

    def add(self, items: Iterable[T], seconds: float) -> bool:
        """Add ``items``; whether the batch is due: ``seconds`` or more since the last commit."""
        self.waiting.extend(items)
        return time.monotonic() - self._since >= seconds

    def take(self) -> list[T]:
        """Empty the batch and restart its clock (as its commit begins, or once it is done); what waited."""
        taken, self.waiting = self.waiting, []
        self._since = time.monotonic()
        return taken
