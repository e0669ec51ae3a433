"""``write``: run a blocked scan and stream its output into a Zarr store, resumably.

``write`` reads as four steps: the arguments checked (``output.check_request``) and a
validated plan with the output it must produce, the output opened under its writer lock
(new, overwritten, resumed or extended), and an executor that computes and writes the
remaining blocks while the output commits them in scan order. A crash therefore costs at
most the blocks in flight, and ``mode="resume"`` continues from the last committed block
with the exact carry, giving the bytes of an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._callsite import warn
from .._defaults import (
    DEFAULT_CODEC,
    DEFAULT_INFLIGHT,
    DEFAULT_SUMMARY_WINDOWS,
    DEFAULT_VIRTUAL_INFLIGHT,
    DEFAULT_WRITE_BLOCK_BYTES,
)
from ..engine import Carry, Plan, ScanSpec, as_spec, check_length, check_memory, from_host, make_plan, to_host
from ..errors import InputError, StoreError, StreamaccWarning, arg
from ..store import Target, describe_store_failure, is_store_failure, open_target
from ..summaries import default_windows, summarized_names
from .execute import CarryExecutor, Executor, LocalExecutor, Progress
from .output import (
    Mode,
    OutputSpec,
    Request,
    check_request,
    chunk_rows,
    open_output,
    output_spec,
    stored_chunks,
    stored_identity,
)
from .recompute import check_resumable, recomputed_rows
from .threads import interruptible

__all__ = ["write"]

log = logging.getLogger("streamacc")


def _continued(request: Request, stored: dict[str, Any] | None) -> Request:
    """``request`` with what a continued run leaves to the default taken from the output it continues.

    A block size left to the default is the stored one (for the same ``save_every``), and
    so are the summaries' windows: a change of the defaults never strands an output.
    """
    if stored is None:
        return request
    changes: dict[str, Any] = {}
    if request.block_size is None and stored.get("save_every", 1) == request.save_every:
        changes["block_size"] = stored.get("block_size")
    if request.summaries_default and not request.reverse:
        changes["summaries"] = list(stored.get("summaries") or [])
        changes["summaries_default"] = False  # the windows are the stored run's, whatever its length now
    return dataclasses.replace(request, **changes)


def _warn_fine_summaries(store: Any, kept: Sequence[int], rows: int, virtual: bool) -> None:
    """Warn where an extension keeps summary levels far finer than the default for its new length.

    The default levels of a short output are fine (one row per window below 1024 rows); they
    stay the output's as it grows, and at 4 values per window the summaries of a long
    extension would then outweigh its data.
    """
    wanted = default_windows(rows, virtual=virtual)
    if not kept or kept[0] * 16 > wanted[0]:
        return
    label = os.fspath(store) if isinstance(store, (str, os.PathLike)) else "the output"
    warn(
        f"{label} keeps the summary levels it was begun with, windows of {list(kept)} rows, so its {rows} rows "
        f"get {rows // kept[0]} windows at the finest level (the default for {rows} rows is {wanted}); to have "
        f"those, rewrite it with {arg('mode', 'overwrite')}, or begin an output meant to grow with "
        f"{arg('summaries', list(DEFAULT_SUMMARY_WINDOWS))}",
        StreamaccWarning,
    )


def _plan(f: Callable[..., Any], init: Any, xs: Any, request: Request) -> Plan:
    plan = make_plan(
        f, init, xs, length=request.length, block_size=request.block_size, unroll=request.unroll,
        reverse=request.reverse, save_every=request.save_every, block_bytes=DEFAULT_WRITE_BLOCK_BYTES,
        rows_multiple=chunk_rows(request.chunks),
    )  # fmt: skip
    check_length(plan.length)  # a length taken from xs, checked as one given
    if plan.length == 0:
        raise InputError(
            f"xs has no rows, which makes {arg('length', 0)}, but an output holds at least one step ({arg('length')} "
            "must be >= 1); pass xs of at least one row"
        )
    return plan


def _again(target: Target, mode: Mode) -> str:
    """How to rerun a command whose output failed before any block: as it was, unless it left an output behind."""
    if mode != "create":
        return f"rerun with {arg('mode', mode)}"
    with contextlib.suppress(Exception):  # the store just failed: it may fail to answer this too
        if target.exists():
            return f"rerun with {arg('mode', 'resume')}"  # a run that claims no block: resuming starts it afresh
    return "rerun"


def _executor_for(client: Any, inflight: int | None, spec: OutputSpec) -> Executor:
    """Where the blocks run: this process, or the dask cluster behind ``client``.

    A virtual run without summaries computes no block at all, only carries: the carry pass
    runs here, whatever ``client`` is.
    """
    if spec.virtual and not (spec.identity["summaries"] and summarized_names(spec.identity["arrays"])):
        if inflight is not None:
            raise InputError(
                f"{arg('inflight')} does not apply to a virtual write without summaries, which computes only the "
                f"carries, one block after another; leave {arg('inflight')} out"
            )
        return CarryExecutor()
    if client is None:
        default = DEFAULT_VIRTUAL_INFLIGHT if spec.virtual else DEFAULT_INFLIGHT
        return LocalExecutor(default if inflight is None else inflight)
    from .execute import DaskExecutor

    return DaskExecutor.for_client(client, inflight)


@interruptible
def write(
    store: Any,
    f: Callable[[Carry, Any], tuple[Carry, Any]] | ScanSpec,
    init: Carry | None = None,
    xs: Any = None,
    *,
    length: int | None = None,
    mode: Mode = "create",
    block_size: int | None = None,
    unroll: int | bool = 1,
    reverse: bool = False,
    save_every: int = 1,
    names: Sequence[str] | str | None = None,
    dims: Mapping[str, Sequence[str]] | None = None,
    chunks: Any = None,
    codec: str = DEFAULT_CODEC,
    attrs: Mapping[str, Any] | None = None,
    array_attrs: Mapping[str, Mapping[str, Any]] | None = None,
    time: Mapping[str, Any] | None = None,
    summaries: bool | Sequence[int] = True,
    storage_options: dict[str, Any] | None = None,
    client: Any = None,
    inflight: int | None = None,
    progress: bool = True,
    virtual: bool = False,
) -> Carry:
    """Run ``jax.lax.scan(f, init, xs, length)`` block by block into a Zarr group; return the final carry.

    Memory stays at a few blocks whatever the length, each committed block survives a
    crash, and the stored ys are bit for bit those of one ``lax.scan`` over the whole length.
    The first step whose y holds a NaN or an infinity is recorded, warned of once (a
    :class:`~streamacc.errors.StreamaccWarning`) and reported by :func:`streamacc.info`;
    a virtual run without summaries, which computes no ys, looks at the carry leaving
    each block instead.

    Parameters
    ----------
    store : str, os.PathLike or zarr store
        Where the output goes: a local path, an fsspec URL such as ``s3://bucket/out.zarr``
        (with ``storage_options``), or a zarr store object.
    f : callable or ScanSpec
        The step, ``f(carry, x) -> (carry, y)``, as ``lax.scan`` takes it. Each leaf of ``y``
        becomes one array of the output. It must be hashable (a function, or a frozen
        dataclass); its code and the values it uses are part of the run's identity. Or a
        :class:`~streamacc.ScanSpec`, which holds the step, ``init``, ``xs`` and the scan's
        keywords (``length``, ``block_size``, ``unroll``, ``reverse``, ``save_every``),
        given alone; blocks it leaves unsized hold about 32 MiB of ys.
    init : pytree of arrays
        The carry entering the first step.
    xs : pytree of arrays, optional
        Inputs sliced along their first axis, one row per step (numpy, memmap, JAX or Zarr
        arrays); only one block's rows are read at a time.
    length : int, optional
        The number of steps, at least 1; required without ``xs``, and equal to its length
        with it (``xs`` of no rows are refused, as ``length=0`` is).
    mode : {"create", "overwrite", "resume", "extend"}, default "create"
        What to do with an output that is already there. ``"create"`` refuses it;
        ``"overwrite"`` starts afresh; ``"resume"`` continues an interrupted run with
        identical settings (on a finished run it does nothing and warns); ``"extend"``
        continues a finished run to a longer ``length``, as one run of that length would
        have written it.
    block_size : int, optional
        Steps per block. By default a block holds about 32 MiB of ys, whatever one step
        outputs. A resumed or extended run keeps the block size it was begun with.
    unroll : int or bool, default 1
        ``lax.scan``'s unroll; part of the result's identity (it can change the last bits).
    reverse : bool, default False
        Scan from the last step to the first, as ``lax.scan(reverse=True)``.
    save_every : int, default 1
        Keep the ys of steps ``k-1, 2k-1, ...`` only (``k = save_every``); every step runs.
    names : str or sequence of str, optional
        One array name per leaf of ``y``; by default the dict keys of ``y``, or ``y``.
    dims : dict, optional
        Names of each array's axes after ``step``, e.g. ``{"u": ["x"]}``; by default
        ``{name}_dim_1``, ...
    chunks : int, tuple, dict or "auto", optional
        Chunk shape, as dask takes it: an int for every axis, a tuple per axis, a dict by
        dimension name (``{"step": 4096, "x": 512}``), -1 or None for a whole axis. Rows per
        chunk must divide a block's rows. By default chunks are sized in bytes on every axis.
    codec : str, default "blosc-lz4"
        The compressor: ``"blosc-lz4"``, ``"blosc-zstd"``, ``"zstd"`` or ``"none"``
        (see ``streamacc write --help``).
    attrs : dict, optional
        Attributes of the output group (JSON-serialisable; ``streamacc_*`` are reserved).
    array_attrs : dict, optional
        Attributes per output array, e.g. ``{"u": {"units": "m"}}``.
    time : dict, optional
        What a step means in time, ``{"step": dt, "start": t0, "units": "s"}``, for the
        ``time`` coordinate of :func:`streamacc.open`; units ``"<unit> since <date>"`` give dates.
    summaries : bool or sequence of int, default True
        Window summaries (min, max, mean per window) written with the data, for
        :func:`streamacc.overview` and ``streamacc plot``: True for the default levels
        (chosen from the output's rows: at least 1024 windows at the finest, or at most
        2**20 values per statistic for a large state, and windows of at most 2**12, 2**16
        and 2**20 rows, or 2**16, 2**20 and 2**24 for a virtual output, which keeps to
        2**20 values per statistic), a list of window lengths in rows (each a multiple of
        the one before, none longer than the output), or False. A reverse scan writes
        none; a resumed or extended output keeps the levels it was begun with.
    storage_options : dict, optional
        fsspec options for a URL ``store`` (endpoint, credentials).
    client : distributed.Client, optional
        Run the blocks on this dask cluster; the bytes written are the same.
    inflight : int, optional
        Blocks being encoded and written at once (default 3; 2 for a virtual write, which
        only summarises them); with ``client``, block tasks submitted and not yet committed
        (default twice the workers, plus one).
    progress : bool, default True
        Show a progress bar on a terminal.
    virtual : bool, default False
        Store no data chunks: only the carry entering every block, the manifest and the
        summaries. :func:`streamacc.open` recomputes each chunk a reader touches from its
        block's carry, bit for bit what a stored write holds; :func:`streamacc.materialize`
        stores some or all of them later. Part of the run's identity.

    Returns
    -------
    pytree of jax.Array
        The carry after the last step (``lax.scan``'s first result), also when resuming a
        run that was already complete.

    Raises
    ------
    streamacc.errors.InputError
        A bad argument, before anything is written; also a ``block_size`` whose blocks,
        as many as the write holds at once, do not fit in the machine's memory.
    streamacc.errors.StepFunctionError
        ``f`` breaks the scan contract or JAX cannot trace it (an ``InputError`` too), found
        by tracing one step before anything is written.
    streamacc.errors.OutputExistsError
        The output exists and ``mode`` is ``"create"``, or it is not a streamacc output.
    streamacc.errors.ResumeError
        The output cannot be resumed or extended as asked (another run, a damaged output).
    streamacc.errors.LockedError
        Another live process is writing the same output.
    streamacc.errors.StoreError
        The store failed; the message says which steps are committed and how to continue.

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> jax.config.update("jax_enable_x64", True)
    >>> def step(x, _):
    ...     x = x * (1 + 1e-8)
    ...     return x, x
    >>> carry = streamacc.write("gp.zarr", step, np.float64(1.0), length=2**20, progress=False)
    >>> float(carry)
    1.01054092...
    >>> carry = streamacc.write("gp.zarr", step, np.float64(1.0), length=2**21, mode="extend", progress=False)
    """
    if isinstance(f, ScanSpec):
        given = as_spec(f, init, xs, length=length, block_size=block_size, unroll=unroll, reverse=reverse,
                        save_every=save_every)  # fmt: skip
        f, init, xs = given.f, given.init, given.xs
        length, block_size, unroll, reverse, save_every = given.keywords().values()
    request = check_request(
        mode=mode, length=length, block_size=block_size, unroll=unroll, reverse=reverse, save_every=save_every,
        chunks=chunks, codec=codec, time=time, summaries=summaries, attrs=attrs, inflight=inflight, virtual=virtual,
    )  # fmt: skip
    stored = stored_identity(store, storage_options) if request.mode in ("resume", "extend") else None
    asked_default = request.summaries_default
    request = _continued(request, stored)
    plan = _plan(f, init, xs, request)
    if request.mode == "extend" and asked_default:
        _warn_fine_summaries(store, request.summaries, plan.rows, request.virtual)
    if stored is not None and request.chunks is None and plan.block_size == stored.get("block_size"):
        request = dataclasses.replace(request, chunks=stored_chunks(stored, plan.block_rows))
    spec = output_spec(plan, request, names=names, dims=dims, array_attrs=array_attrs)
    executor = _executor_for(client, request.inflight, spec)
    check_memory(
        plan, executor.blocks_held(), asked=block_size, who="this write", default_bytes=DEFAULT_WRITE_BLOCK_BYTES
    )
    target = open_target(store, storage_options=storage_options)
    executor.check(target)
    command = arg("mode", request.mode) if request.mode != "create" else "another output path"
    with target.lock(command), Progress(plan.length, enabled=progress, label=target.label) as bar:
        try:
            output = open_output(
                target, spec, mode=request.mode, init=to_host(plan.init),
                check_resumable=lambda o: check_resumable(o, plan),
                on_commit=lambda r: bar.update(len(r), r.nbytes, stored=r.stored),
                rows=recomputed_rows(target, plan) if stored is not None and stored.get("virtual") else None,
            )  # fmt: skip
        except Exception as exc:
            if is_store_failure(exc):
                raise StoreError(
                    f"preparing {target.label} failed ({describe_store_failure(exc)}); fix the cause and "
                    f"{_again(target, request.mode)}"
                ) from exc
            raise
        if output.complete:
            message = f"{target.label} is already complete ({plan.length} steps); nothing to do"
            warn(message, StreamaccWarning)
            done_already: Carry = from_host(output.carry, plan.init)
            return done_already
        done = output.manifest.committed_steps
        if request.mode == "extend" and stored is not None and stored.get("length", plan.length) < plan.length:
            log.info("extending %s to step %d (computing on from step %d)", target.label, plan.length, done)
        elif output.first_block:
            log.info("resuming %s at step %d of %d", target.label, done, plan.length)
        bar.begin(done)
        output.warn_nonfinite(before=True)  # found by the run this one continues: said once, as it starts
        try:
            executor.run(plan, output)
            output.finish()
        except Exception as exc:
            error = output.failure(exc, plan.length)
            if error is None:
                raise
            raise error from exc
        finally:
            output.close()  # no summary chunk may be written once the lock is released
    carry: Carry = from_host(output.carry, plan.init)
    return carry
