"""``streamacc.follow``: a growing output read as it grows, each committed step once, in order.

A run commits block after block, and its manifest says at every moment which steps are
committed (``record.Manifest.rows``): a follower polls it, one read of one small object
(``_streamacc/zarr.json``: a local file read, or one GET on an object store), and when the
committed rows passed those it gave already, opens the output as :func:`streamacc.open`
does and hands over the new rows alone, lazily. It never reads past what that opening's
own manifest commits, so it never hands over a step that is not committed, and it
remembers the rows it gave, so a writer killed and resumed (or an interrupted extension,
whose manifest first counts fewer blocks) never makes it give one twice. The output's run
must stay the same: one rewritten by another run is refused. Nothing is imported but what
reading needs: no JAX, for a stored output.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..base import rows_in
from ..errors import InputError, StoreError, arg
from ..record import Ledger, Manifest
from ..store import IcechunkTarget, Target, open_target

if TYPE_CHECKING:
    import xarray

__all__ = ["Committed", "committed", "follow"]

_LENGTH_FIELDS = ("length", "xs_values", "until", "until_values", "until_from", "prefixes")
"""What an extension of the same run changes in its identity (its length, and what follows from it)."""


@dataclasses.dataclass(frozen=True)
class Committed:
    """What an output commits at one poll of its manifest."""

    rows: tuple[int, int]
    """The committed rows ``[first, last)`` (``streamacc.open``'s rows)."""
    steps: tuple[int, int]
    """The committed steps ``[start, stop)``."""
    length: int
    complete: bool
    run: dict[str, Any]
    """The run's identity without what an extension changes: a follower's check that the run is the same."""


def _run_of(manifest: Manifest) -> dict[str, Any]:
    ident = manifest.identity.to_json()
    kept = {k: v for k, v in ident.items() if k not in _LENGTH_FIELDS and k != "versions"}
    kept["arrays"] = {name: [dtype, shape[1:]] for name, (dtype, shape) in ident.get("arrays", {}).items()}
    return kept


def committed(target: Target) -> Committed | None:
    """What ``target`` commits now, from one read of its manifest; None where it holds no manifest (yet)."""
    manifest = Ledger(target).load()
    if manifest is None:
        return None
    return Committed(manifest.rows(), manifest.span(), manifest.length, manifest.complete, _run_of(manifest))


def _seconds(name: str, value: Any, *, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise InputError(f"{arg(name, value)} must be a number of seconds, at least 0; pass e.g. {arg(name, 5)}")
    return float(value)


def _new_rows(done: tuple[int, int] | None, rows: tuple[int, int]) -> list[tuple[int, int]]:
    """The committed ``rows`` not given yet (``done``: the rows given so far), in scan order: those after the given
    ones (a forward scan) or before them (a reverse scan, whose committed rows grow towards row 0)."""
    first, last = rows
    if first >= last:
        return []
    if done is None:
        return [(first, last)]
    parts = []
    if last > done[1]:
        parts.append((max(first, done[1]), last))
    if first < done[0]:
        parts.append((first, min(last, done[0])))
    return [(a, b) for a, b in parts if a < b]


def follow(
    store: Any,
    f: Any = None,
    init: Any = None,
    xs: Any = None,
    *,
    storage_options: dict[str, Any] | None = None,
    interval: float = 1.0,
    timeout: float | None = None,
    chunks: Any = "auto",
) -> Iterator[xarray.Dataset]:
    """Follow an output as its run writes it: each item the steps committed since the item before.

    The first item holds every step committed when it is asked for; each next one, once
    more blocks are committed, the steps they add, in scan order (for a reverse scan, each
    item lies before the one before it). Every committed step comes exactly once, and only
    committed steps come, through a writer killed and resumed. The iteration ends once the
    run is complete (or ended on its condition) and its last steps were given. Between
    items it reads the manifest every ``interval`` seconds: one read of one small object (a
    local file read, or one GET on an object store), nothing else until blocks commit. An
    output not there yet is waited for, as for its first block. Each item is opened as
    :func:`streamacc.open` opens an output, lazily (dask), its checks included.

    Parameters
    ----------
    store : str, os.PathLike or zarr store
        The output: a local path, an fsspec URL (with ``storage_options``), an Icechunk
        repository (its branch read afresh at every poll) or a zarr store.
    f, init, xs : optional
        For a virtual output written from Python, its step function (see
        :func:`streamacc.open`).
    storage_options : dict, optional
        fsspec options for a URL ``store``.
    interval : float, default 1.0
        Seconds between two reads of the manifest while nothing new is committed.
    timeout : float, optional
        Seconds to wait for a new block while no writer holds the output (its lock, or
        its lease on an object store) before giving up: a writer killed and never
        resumed. None (the default) waits as long as it takes.
    chunks : "auto", int, tuple, dict or None, default "auto"
        dask chunks of each item, as :func:`streamacc.open` takes them.

    Yields
    ------
    xarray.Dataset
        Each item the newly committed steps of every output array, with their ``step``
        (and ``time``) coordinates and the run's attributes, and in ``encoding`` what was
        committed when it was read (``streamacc_committed_steps``, ``streamacc_complete``,
        ... as :func:`streamacc.open` gives them).

    Raises
    ------
    streamacc.errors.InputError
        ``interval`` or ``timeout`` is not a number of seconds; xarray is not installed.
    streamacc.errors.StoreError
        No block was committed for ``timeout`` seconds and no writer holds the output; or
        the output was rewritten by another run (another function, settings or start)
        while it was followed.
    streamacc.errors.VerifyError
        The output cannot be trusted, as :func:`streamacc.open` refuses it.

    Examples
    --------
    A finished output is one item, and the iteration ends:

    >>> import jax, numpy as np, streamacc
    >>> jax.config.update("jax_enable_x64", True)
    >>> def step(x, _):
    ...     x = x * 1.5
    ...     return x, x
    >>> _ = streamacc.write("followed.zarr", step, np.float64(1.0), length=100, block_size=25, names="x",
    ...                     progress=False)
    >>> [(int(ds.step[0]), int(ds.step[-1])) for ds in streamacc.follow("followed.zarr")]
    [(0, 99)]

    A run written while it is followed (here on a thread; usually another process, a
    cluster or a chip's job) gives its blocks as they commit, every step once:

    >>> import threading
    >>> writer = threading.Thread(target=streamacc.write, args=("growing.zarr", step, np.float64(1.0)),
    ...                           kwargs=dict(length=400, block_size=25, names="x", progress=False))
    >>> writer.start()
    >>> items = list(streamacc.follow("growing.zarr", interval=0.05, timeout=60))
    >>> writer.join()
    >>> steps = np.concatenate([ds.step.values for ds in items])
    >>> len(items) >= 1, bool((steps == np.arange(400)).all())
    (True, True)
    """
    interval_s = _seconds("interval", interval, allow_none=False)
    timeout_s = _seconds("timeout", timeout, allow_none=True)
    assert interval_s is not None
    from ._dataset import open as open_output

    target = open_target(store, storage_options=storage_options, read_only=True)
    fresh = isinstance(target, IcechunkTarget)  # a read-only session sees one snapshot: the branch's head is re-read
    done: tuple[int, int] | None = None
    run: dict[str, Any] | None = None
    quiet_since = time.monotonic()
    while True:
        if fresh:
            target = open_target(store, storage_options=storage_options, read_only=True)
        now = committed(target)
        if now is not None:
            if run is not None and now.run != run:
                raise StoreError(
                    f"{target.label} was rewritten by another run while it was followed (its function, settings or "
                    "first carry differ from the run followed so far); follow it again from its start"
                )
            run = now.run
            parts = _new_rows(done, now.rows)
            if parts:
                ds = open_output(store, f, init, xs, storage_options=storage_options, chunks=chunks)
                opened, given = _rows_of(ds), False
                for a, b in parts:
                    a, b = max(a, opened[0]), min(b, opened[1])  # never past what this opening commits
                    if a < b:
                        done = (a, b) if done is None else (min(done[0], a), max(done[1], b))
                        given = True
                        yield ds.isel(step=slice(a - opened[0], b - opened[0]))
                if given:
                    quiet_since = time.monotonic()
                    continue  # asked again: the manifest first, then what is new
            if now.complete and not _new_rows(done, now.rows):
                return
        if timeout_s is not None and time.monotonic() - quiet_since >= timeout_s:
            if target.writer() is None:
                held = "nothing" if now is None else f"steps {now.steps[0]} to {now.steps[1]} of {now.length}"
                raise StoreError(
                    f"{target.label}: no block committed for {timeout_s:g} s and no writer holds it ({held} "
                    f"committed); resume its run to finish it, or follow it with a longer {arg('timeout')}"
                )
            quiet_since = time.monotonic()  # a live writer: its blocks take long
        time.sleep(interval_s)


def _rows_of(ds: xarray.Dataset) -> tuple[int, int]:
    """The rows ``[first, last)`` an opened output holds (its committed rows when it was opened)."""
    start = int(ds.encoding["streamacc_committed_start"])
    every = int(ds.attrs.get("streamacc_save_every", 1))
    first = rows_in(start, start + int(ds.encoding["streamacc_committed_steps"]), every)[0]
    return first, first + int(ds.sizes["step"])
