"""A finished block of a blocked scan, as ``iter_blocks`` yields it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ...base import rows_in

__all__ = ["Block"]


@dataclasses.dataclass(frozen=True)
class Block:
    """One finished block of a blocked scan, as :func:`iter_blocks` yields it.

    Attributes
    ----------
    start : int
        The first step the block covers (steps ``[start, stop)`` of the whole scan).
    stop : int
        The step after the block's last.
    ys : pytree of numpy.ndarray
        The ys of the block's steps, one host array per leaf of ``y`` with leading axis
        ``len(block.rows)``: every step's y, or every ``save_every``-th. Read-only; on a
        CPU they are views of the engine's recycled buffers (see :meth:`release`).
    carry : pytree of jax.Array
        The carry after the block's last step in scan order: the carry that enters the
        next block (in a reverse scan, the block before it).
    save_every : int
        The block keeps the y of steps ``k-1, 2k-1, ...`` (``k = save_every``); 1 keeps all.
    ended : bool
        Whether the scan's condition (``until``) held in this block: the block ends after
        the step where it first held (``stop - 1``), its ``carry`` is the carry that step
        left, and no block follows.

    Examples
    --------
    >>> import numpy as np, streamacc
    >>> def count(c, _):
    ...     return c + 1, c
    >>> block = next(streamacc.iter_blocks(count, np.int32(0), length=10, block_size=4))
    >>> block.start, block.stop, len(block), block.ys, int(block.carry)
    (0, 4, 4, array([0, 1, 2, 3], dtype=int32), 4)
    >>> block.rows
    range(0, 4)
    """

    start: int
    stop: int
    ys: Any
    carry: Any
    _release: Callable[[], None] | None = dataclasses.field(default=None, repr=False, compare=False)
    save_every: int = 1
    ended: bool = False

    def __len__(self) -> int:
        return self.stop - self.start

    @property
    def rows(self) -> range:
        """The output rows this block's ys fill: ``range(start, stop)``, or the kept rows when thinned.

        Output row ``r`` holds the y of step ``r * save_every + save_every - 1``.
        """
        return range(*rows_in(self.start, self.stop, self.save_every))

    def __reduce__(self) -> tuple[Callable[..., Block], tuple[int, int, Any, Any, int, bool]]:
        # a copy holds no buffer of the pool
        return _rebuild_block, (self.start, self.stop, self.ys, self.carry, self.save_every, self.ended)

    def release(self) -> None:
        """Give this block's buffers back for reuse by a later block; ``ys`` must not be read after.

        Optional: without it a buffer is reused once every reference to ``ys`` is gone.
        Call it where references linger after the last read, e.g. in a writer, once the
        block's chunks are durable. Calling it again does nothing.
        """
        if self._release is not None:
            self._release()


def _rebuild_block(start: int, stop: int, ys: Any, carry: Any, save_every: int, ended: bool = False) -> Block:
    return Block(start, stop, ys, carry, save_every=save_every, ended=ended)
