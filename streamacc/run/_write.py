"""``write``: run a blocked scan and stream its output into a Zarr store, resumably.

``write`` reads as four steps: the arguments taken apart into the scan's spec, the
output's layout and where the blocks run (``execute.split_keywords``), with a validated plan and the
output it must produce; the output opened in its run session (``session.RunSession``: the
writer lock, the progress bar; new, overwritten, resumed or extended); and an executor that computes and writes the
remaining blocks while the output commits them in scan order. A crash therefore costs at
most the blocks in flight, and ``mode="resume"`` continues from the last committed block
with the exact carry, giving the bytes of an uninterrupted run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Unpack

from ..base import Layout, Mode, check_request, check_written_length, interruptible
from ..engine import Carry, Predicate, ScanSpec, as_spec, caller_scopes, from_host, to_host
from ..errors import InputError, arg
from ._execute import CarryExecutor, Dask, Executor, Local, LocalExecutor, WriteKeywords, split_keywords
from ._planning import OutputSpec, plan_output
from ._session import RunSession
from ._verify import check_resumable
from ._virtual import recomputed_rows

__all__ = ["executor_for", "write"]


def executor_for(where: Local | Dask, spec: OutputSpec) -> Executor:
    """The executor that runs ``spec``'s blocks where ``where`` says: this process's, or a dask cluster's (imported
    only then).

    A virtual run without summaries computes no block at all, only carries: its carry pass
    runs in this process, whatever ``where`` is.
    """
    from ..summaries import summarized_names

    summarised = bool(spec.identity.summaries and summarized_names(spec.identity.arrays))
    if not spec.storage.computes_blocks(summarised):
        if where.inflight is not None:
            raise InputError(
                f"{arg('inflight')} does not apply to a virtual write without summaries, which computes only the "
                f"carries, one block after another; leave {arg('inflight')} out"
            )
        return CarryExecutor()
    if isinstance(where, Local):
        return LocalExecutor(spec.storage.inflight if where.inflight is None else where.inflight)
    from ._dask import DaskExecutor

    return DaskExecutor.for_client(where.client, where.inflight)



@interruptible(caller_scopes)
def write(
    store: Any,
    f: Callable[[Carry, Any], tuple[Carry, Any]] | ScanSpec,
    init: Carry | None = None,
    xs: Any = None,
    *,
    length: int | None = None,
    mode: Mode = "create",
    layout: Layout | None = None,
    executor: Local | Dask | None = None,
    storage_options: dict[str, Any] | None = None,
    progress: bool = True,
    until: Predicate | None = None,
    **keywords: Unpack[WriteKeywords],
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
        (with ``storage_options``), or a zarr store object. A path is taken as ``open``
        takes it: ``"~/out.zarr"`` is a folder ``~`` in the current directory (the shell
        expands ``~`` on the command line; ``os.path.expanduser`` does in Python).
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
        with it (``xs`` of no rows are refused, as ``length=0`` is). With ``until``, the
        most the run takes.
    mode : {"create", "overwrite", "resume", "extend"}, default "create"
        What to do with an output that is already there. ``"create"`` refuses it;
        ``"overwrite"`` starts afresh; ``"resume"`` continues an interrupted run with
        identical settings (on a finished run it does nothing and warns); ``"extend"``
        continues a finished run to a longer ``length``, as one run of that length would
        have written it.
    layout : Layout, optional
        How the output is laid out: array names and dimensions, chunks, codec, attributes,
        the time axis, summaries, and whether it is virtual (see :class:`~streamacc.Layout`).
        By default ``Layout()``, or the one its keywords give alone.
    executor : Local or Dask, optional
        Where the blocks run: in this process (:class:`~streamacc.Local`, the default) or
        on a dask cluster (:class:`~streamacc.Dask`); the bytes written are the same.
    storage_options : dict, optional
        fsspec options for a URL ``store`` (endpoint, credentials).
    progress : bool, default True
        Show a progress bar on a terminal.
    until : callable, optional
        The run's condition, ``until(carry, y) -> bool``: a JAX function of the carry after
        a step and that step's y that returns one boolean, tested after each step. The run
        ends after the first step ``k`` where it holds, that step included, and ``length``
        (or the length of ``xs``) is the most it runs. The output then holds steps ``0`` to
        ``k``, its arrays ``k + 1`` rows long (of ``save_every``-th steps, ``(k + 1) //
        save_every``), is complete, and :func:`~streamacc.info` says where it ended; the carry
        returned is the one step ``k`` left. Its code and the values it uses are part of the
        run's identity, as ``f``'s are: a resume with another condition is refused. With
        ``mode="extend"`` the output continues past the step where it ended, to a longer
        ``length``, with the condition given then (tested from the step after, or none).
        Not with ``reverse`` nor a virtual output. See the guide's page "Runs that end on a
        condition".
    **keywords
        The keywords of :class:`~streamacc.ScanSpec` (``block_size``, ``unroll``,
        ``reverse``, ``save_every``), of :class:`~streamacc.Layout` (``names``, ``dims``,
        ``chunks``, ``codec``, ``attrs``, ``array_attrs``, ``time``, ``summaries``,
        ``virtual``) and of where the blocks run (``client``, ``inflight``), given alone:
        ``write(path, f, init, length=n, names="x", client=c)`` is ``write(path, f, init,
        length=n, layout=Layout(names="x"), executor=Dask(c))``. A block left unsized
        holds about 32 MiB of ys, four times
        :func:`~streamacc.iter_blocks`'s 8 MiB: each written block also pays its chunk files,
        their fsync, its checksums and its commit, which larger blocks amortise (a block in
        memory pays only its dispatch); a resumed
        or extended run keeps the block size it was begun with. ``unroll`` left out is 1
        on a CPU, and on a TPU or GPU chosen for the step and the length (see
        :class:`~streamacc.ScanSpec`;
        ``streamacc info`` says which, and that it was chosen); it is part of the result's
        identity (it can change the last bits), so a resumed or extended run keeps the one
        its output records, on any platform.

    Returns
    -------
    pytree of jax.Array
        The carry after the last step (``lax.scan``'s first result; with ``until``, the
        step where it held), also when resuming a run that was already complete.

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
    scan_keywords, layout, where = split_keywords(layout, executor, keywords)
    if length is not None:
        check_written_length(length)  # before the scan's own check, which takes 0
    scan_spec = as_spec(f, init, xs, length=length, until=until, **scan_keywords)
    planned = plan_output(scan_spec, check_request(mode=mode, layout=layout, reverse=scan_spec.reverse), store,
                          storage_options)  # fmt: skip
    plan, request, spec, stored = planned.plan, planned.request, planned.spec, planned.stored
    blocks = executor_for(where, spec)
    session = RunSession(store, storage_options=storage_options, progress=progress, mode=request.mode,
                         length=plan.length, check=blocks.check)  # fmt: skip
    session.check_memory(plan, host=blocks.blocks_held(), asked=scan_spec.block_size, who="this write")
    with session:
        target = session.target
        with session.translated():
            output = session.open_output(
                spec, init=to_host(plan.init),
                check_resumable=lambda o: check_resumable(o, plan),
                rows=recomputed_rows(target, plan) if stored is not None and stored.virtual else None,
            )  # fmt: skip
        if session.already_complete():
            done_already: Carry = from_host(output.carry, plan.init)
            return done_already
        session.begin(extends=request.mode == "extend" and stored is not None and stored.blocking.length < plan.length)
        with session.translated():
            if not output.ended:  # a run that ended on its condition has only its finish left
                blocks.run(plan, output)
            session.finish()
    carry: Carry = from_host(output.carry, plan.init)
    return carry
