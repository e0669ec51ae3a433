"""Where a write's blocks run, as the caller says it: :class:`Local` or :class:`Dask`, and the executor for each."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ...base import as_count
from ...errors import InputError, arg

if TYPE_CHECKING:
    from ..output import OutputSpec
    from ._local import Executor

__all__ = ["EXECUTOR_FIELDS", "Dask", "Local", "executor_for"]


def _inflight(inflight: int | None) -> int | None:
    return None if inflight is None else as_count("inflight", inflight, minimum=1, example=3)


@dataclasses.dataclass(frozen=True)
class Local:
    """Blocks computed in this process, on a thread of their own, and written by a few writer threads.

    The default of :func:`~streamacc.write`. Memory holds ``inflight`` blocks being
    written, and the one being computed.

    Parameters
    ----------
    inflight : int, optional
        Blocks being encoded and written at once: by default 3, or 2 for a virtual write,
        which only summarises them.

    Attributes
    ----------
    inflight : int or None
        Blocks written at once, checked; None leaves it to the write.

    Raises
    ------
    streamacc.errors.InputError
        ``inflight`` is not a positive integer.

    Examples
    --------
    >>> import streamacc
    >>> streamacc.Local(inflight=4)
    Local(inflight=4)
    """

    inflight: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "inflight", _inflight(self.inflight))


@dataclasses.dataclass(frozen=True)
class Dask:
    """Blocks recomputed as tasks on the dask cluster behind ``client``; the bytes written are the same.

    The driver runs the carries from block to block and commits in scan order; the
    workers compute, encode and write the blocks' chunks straight to the output, which
    must be a path every worker reaches or an object-store URL.

    Parameters
    ----------
    client : distributed.Client
        The cluster's client.
    inflight : int, optional
        Block tasks submitted and not yet committed: by default twice the workers, plus one.

    Attributes
    ----------
    client : distributed.Client
        The cluster's client.
    inflight : int or None
        Block tasks in flight, checked; None leaves it to the write.

    Raises
    ------
    streamacc.errors.InputError
        ``client`` is not a ``distributed.Client`` (or dask.distributed is not installed),
        or ``inflight`` is not a positive integer.

    Examples
    --------
    >>> import streamacc
    >>> from distributed import Client
    >>> with Client(processes=False, dashboard_address=None) as client:  # doctest: +SKIP
    ...     streamacc.write("out.zarr", step, init, length=2**30, executor=streamacc.Dask(client))
    """

    client: Any
    inflight: int | None = None

    def __post_init__(self) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise InputError(f"{arg('client')} needs dask.distributed: pip install 'streamacc[dist]'") from None
        if not isinstance(self.client, Client):
            raise InputError(f"{arg('client')} must be a distributed.Client, got {type(self.client).__name__}")
        object.__setattr__(self, "inflight", _inflight(self.inflight))


EXECUTOR_FIELDS: tuple[str, ...] = ("client", "inflight")
"""The keywords of :class:`Local` and :class:`Dask`, which :func:`streamacc.write` also takes alone."""


def executor_for(where: Local | Dask, spec: OutputSpec) -> Executor:
    """The executor that runs ``spec``'s blocks where ``where`` says.

    A virtual run without summaries computes no block at all, only carries: its carry pass
    runs in this process, whatever ``where`` is.
    """
    from ...summaries import summarized_names

    summarised = bool(spec.identity.summaries and summarized_names(spec.identity.arrays))
    if not spec.storage.computes_blocks(summarised):
        if where.inflight is not None:
            raise InputError(
                f"{arg('inflight')} does not apply to a virtual write without summaries, which computes only the "
                f"carries, one block after another; leave {arg('inflight')} out"
            )
        from ._carry import CarryExecutor

        return CarryExecutor()
    if isinstance(where, Local):
        from ._local import LocalExecutor

        return LocalExecutor(spec.storage.inflight if where.inflight is None else where.inflight)
    from ._dask import DaskExecutor

    return DaskExecutor.for_client(where.client, where.inflight)
