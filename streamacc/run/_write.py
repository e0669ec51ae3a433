"""``write``: run a blocked scan and stream its output into a Zarr store, resumably.

``write`` reads as three steps: a validated plan (and the output it must produce), the
output opened under its writer lock (new, overwritten or resumed), and an executor that
computes and writes the remaining blocks while the output commits them in scan order. A
crash therefore costs at most the blocks in flight, and ``resume=True`` continues from
the last committed block with the exact carry, giving the bytes of an uninterrupted run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax
import numpy as np

from .._defaults import DEFAULT_CODEC, DEFAULT_INFLIGHT, DEFAULT_WRITE_BLOCK_BYTES
from .._version import __version__
from ..engine import Plan, as_count, check_length, from_host, make_plan, to_host
from ..errors import InputError, StoreError, StreamaccWarning, spell
from ..store import Target, compressors_for, describe_store_failure, is_store_failure, open_target
from ..summaries import check_windows
from .execute import Executor, LocalExecutor, Progress
from .output import (
    STEP,
    OutputSpec,
    array_dims,
    check_time,
    chunk_rows,
    open_output,
    resolve_chunks,
    stored_chunks,
    time_attrs,
)
from .recompute import check_resumable
from .record import run_identity
from .threads import interruptible

__all__ = ["output_names", "output_spec", "write"]

log = logging.getLogger("streamacc")

Carry = TypeVar("Carry")
"""The carry's type, as ``jax.lax.scan`` types it: what ``write`` returns is the carry after the last step."""


def output_names(y_struct: Any, names: Sequence[str] | None) -> list[str]:
    """One array name per leaf of ``y``: from ``names``, from dict keys, or ``y`` for one leaf."""
    paths = [path for path, _ in jax.tree_util.tree_leaves_with_path(y_struct)]
    if names is not None:
        names = [names] if isinstance(names, str) else list(names)
        if len(names) != len(paths):
            raise InputError(
                f"{spell('names')} has {len(names)} entries but f's y has {len(paths)} leaves; give one per leaf"
            )
    elif len(paths) == 1 and not paths[0]:
        names = ["y"]
    else:
        names = [jax.tree_util.keystr(p, simple=True, separator="_") for p in paths]
        names = [n if n and not n[0].isdigit() else f"y_{n}" for n in names]
    for name in names:
        if not isinstance(name, str) or not name or "/" in name or name.startswith(("_", ".")) or name == "zarr.json":
            raise InputError(f"output name {name!r} is not allowed; use letters, digits and '_', not starting with '_'")
    if len(set(names)) != len(names):
        raise InputError(f"output names must be unique, got {names}")
    return names


def _check_json(name: str, value: Any) -> None:
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"{spell(name)} must be JSON-serialisable ({exc}); pass plain numbers, strings, lists and dicts"
        ) from None


def _check_attrs(attrs: Mapping | None) -> dict:
    attrs = dict(attrs or {})
    _check_json("attrs", attrs)
    reserved = sorted(k for k in attrs if str(k).startswith("streamacc_"))
    if reserved:
        raise InputError(f"{spell('attrs')} must not set {', '.join(reserved)}: streamacc keeps those up to date")
    return {**attrs, "streamacc_version": __version__}


def _check_array_attrs(array_attrs: Mapping | None, names: list[str]) -> dict[str, dict]:
    array_attrs = dict(array_attrs or {})
    unknown = sorted(set(array_attrs) - set(names))
    if unknown or not all(isinstance(v, Mapping) for v in array_attrs.values()):
        raise InputError(
            f"{spell('array_attrs')} must map output names ({', '.join(names)}) to dicts of attributes, "
            f"got keys {sorted(array_attrs)}; pass e.g. {spell('array_attrs', {names[0]: {'units': 'm'}})}"
        )
    _check_json("array_attrs", array_attrs)
    return {name: dict(value) for name, value in array_attrs.items()}


def _chunks_arg(chunks: Any, chunk_size: int | None) -> Any:
    """``chunks``, or the older ``chunk_size`` (rows along ``step``) as the same request."""
    if chunk_size is None:
        return chunks
    if chunks is not None:
        raise InputError(f"{spell('chunk_size')} and {spell('chunks')} exclude each other; pass "
                         f"{spell('chunks', {STEP: chunk_size})} alone")  # fmt: skip
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise InputError(f"{spell('chunk_size')} must be a positive integer, got {chunk_size!r}")
    return {STEP: int(chunk_size)}


def output_spec(
    plan: Plan,
    *,
    names: Sequence[str] | None = None,
    codec: str = DEFAULT_CODEC,
    chunks: Any = None,
    dims: Mapping[str, Sequence[str]] | None = None,
    attrs: Mapping[str, Any] | None = None,
    array_attrs: Mapping[str, Mapping[str, Any]] | None = None,
    time: dict | None = None,
    summaries: bool | Sequence[int] | None = True,
) -> OutputSpec:
    """The output a run of ``plan`` must produce (arrays, layout, codec, attributes, identity), checked."""
    names = output_names(plan.y_struct, names)
    compressors_for(codec)
    attrs = {**_check_attrs(attrs), **time_attrs(time)}
    if plan.save_every > 1:
        attrs["streamacc_save_every"] = plan.save_every  # row r holds step r * k + k - 1
    checked_array_attrs = _check_array_attrs(array_attrs, names)
    leaves = dict(zip(names, jax.tree_util.tree_leaves(plan.y_struct), strict=True))
    trailing = {n: tuple(s.shape) for n, s in leaves.items()}
    dimensions = array_dims(trailing, dims)
    itemsizes = {n: np.dtype(s.dtype).itemsize for n, s in leaves.items()}
    chunk_shapes = resolve_chunks(trailing, itemsizes, dimensions, chunks, plan.block_rows)
    specs = {n: ((plan.rows, *trailing[n]), np.dtype(s.dtype)) for n, s in leaves.items()}
    arrays = {n: [dt.str, list(shape)] for n, (shape, dt) in specs.items()}
    asked = None if dims is None else {n: list(dimensions[n][1:]) for n in dims}
    windows = check_windows(summaries, plan.reverse)
    identity = run_identity(
        plan, arrays=arrays, codec=codec, chunks=chunk_shapes, attrs=attrs, dims=asked, time=time, summaries=windows
    )
    return OutputSpec(identity, specs, chunk_shapes, dimensions, codec, attrs, checked_array_attrs, plan.block_count)


def _again(target: Target, mode: str) -> str:
    """How to rerun a command whose output failed before any block: as it was, unless it left an output behind."""
    if mode != "new":
        return f"rerun with {spell(mode, True)}"
    with contextlib.suppress(Exception):  # the store just failed: it may fail to answer this too
        if target.exists():
            return f"rerun with {spell('resume', True)}"  # a run that claims no block: resuming starts it afresh
    return "rerun"


def _executor_for(client: Any, inflight: int) -> Executor:
    """Where the blocks run: this process, or the dask cluster behind ``client``."""
    if client is None:
        return LocalExecutor(inflight)
    from .execute import DaskExecutor

    return DaskExecutor.for_client(client)


def _stored_layout(store: Any, storage_options: dict | None) -> dict[str, Any] | None:
    """The block size and chunk shapes of the run stored at ``store``, or None where there is none to read.

    A resumed or extended run that leaves ``block_size`` or ``chunks`` to the default takes
    them from the output, so that a change of the defaults never strands an output.
    """
    from .record import Ledger

    try:
        target = open_target(store, storage_options=storage_options, read_only=True)
        manifest = Ledger(target).load()
    except Exception:  # whatever is wrong, opening the output under its lock will say
        return None
    if manifest is None or not isinstance(manifest.identity, dict):
        return None
    return manifest.identity


@interruptible
def write(
    store: Any,
    f: Callable[[Carry, Any], tuple[Carry, Any]],
    init: Carry,
    xs: Any = None,
    *,
    length: int | None = None,
    block_size: int | None = None,
    unroll: int | bool = 1,
    reverse: bool = False,
    names: Sequence[str] | None = None,
    dims: Mapping[str, Sequence[str]] | None = None,
    chunks: Any = None,
    save_every: int = 1,
    codec: str = DEFAULT_CODEC,
    chunk_size: int | None = None,
    overwrite: bool = False,
    resume: bool = False,
    extend: bool = False,
    progress: bool = True,
    attrs: Mapping[str, Any] | None = None,
    array_attrs: Mapping[str, Mapping[str, Any]] | None = None,
    time: Mapping[str, Any] | None = None,
    inflight: int = DEFAULT_INFLIGHT,
    durable: bool = True,
    storage_options: dict | None = None,
    client: Any = None,
    summaries: bool | Sequence[int] | None = True,
) -> Carry:
    """Run ``lax.scan(f, init, xs, length)`` block by block into a Zarr group; return the final carry.

    ``store`` is a local path, an fsspec URL (with ``storage_options``) or a zarr store.
    Each leaf of ``y`` becomes one array (named by ``names``, by dict keys, or ``y``) on
    dimension ``step`` followed by ``dims[name]`` (default ``{name}_dim_1``, ...), with
    ``array_attrs[name]`` as its attributes and ``attrs`` on the group.

    Layout: ``block_size`` counts steps; by default a block holds about 32 MiB of ys
    whatever one step outputs. ``chunks`` follows dask's conventions (an int for every
    axis, a tuple per axis, a dict by dimension name such as ``{"step": 4096, "x": 512}``;
    -1 or None for a whole axis; 'auto'); by default chunks are sized in bytes on every
    axis. ``save_every=k`` keeps the ys of steps ``k-1, 2k-1, ...`` only. ``time`` says
    what a step means in time (``{"step": dt, "start": t0, "units": "s"}``), for the
    ``time`` coordinate of :func:`streamacc.open`. ``summaries`` (default True: windows
    of ``DEFAULT_SUMMARY_WINDOWS`` rows; a list of window lengths; False for none) writes
    each window's min, max and mean with the data, for :func:`streamacc.overview` and
    ``streamacc plot``; a reverse scan writes none.

    An existing output is refused unless ``overwrite`` (start afresh), ``resume``
    (continue an interrupted run with identical settings; on a finished run it does
    nothing and warns) or ``extend`` (continue a finished run to a longer ``length``, as
    one run of that length would have written it). ``durable=False`` skips fsync and
    exists only to measure its cost. ``client`` (a ``distributed.Client``) runs the blocks
    on a dask cluster; the bytes written are the same either way. Bad arguments raise
    before anything is written. The carry returned is the one after the last
    step (``lax.scan``'s first result, with JAX arrays as its leaves), also when resuming a
    run that was already complete.
    """
    if sum(map(bool, (overwrite, resume, extend))) > 1:
        chosen = [spell(n, True) for n, v in (("overwrite", overwrite), ("resume", resume), ("extend", extend)) if v]
        raise InputError(f"{' and '.join(chosen)} exclude each other; pass one")
    chunks = _chunks_arg(chunks, chunk_size)
    time = check_time(time)
    stored = _stored_layout(store, storage_options) if (resume or extend) else None
    if stored is not None and block_size is None and stored.get("save_every", 1) == save_every:
        block_size = stored.get("block_size")
    if (
        stored is not None and summaries is True and not reverse
    ):  # the default: an output keeps the summaries it was begun with
        summaries = stored.get("summaries") or False
    rows_multiple = chunk_rows(chunks)
    plan = make_plan(
        f, init, xs, length=length, block_size=block_size, unroll=unroll, reverse=reverse, save_every=save_every,
        block_bytes=DEFAULT_WRITE_BLOCK_BYTES, rows_multiple=rows_multiple,
    )  # fmt: skip
    check_length(plan.length)
    if stored is not None and chunks is None and plan.block_size == stored.get("block_size"):
        chunks = stored_chunks(stored, plan.block_rows)
    spec = output_spec(
        plan, names=names, codec=codec, chunks=chunks, dims=dims, attrs=attrs, array_attrs=array_attrs, time=time,
        summaries=summaries,
    )  # fmt: skip
    executor = _executor_for(client, as_count("inflight", inflight, minimum=1))
    target = open_target(store, storage_options=storage_options)
    target.fsync = durable
    executor.check(target)
    mode = "resume" if resume else "overwrite" if overwrite else "extend" if extend else "new"
    command = spell(mode, True) if mode != "new" else "another output path"
    with target.lock(command):
        try:
            output = open_output(
                target, spec, mode=mode, init=to_host(plan.init), check_resumable=lambda o: check_resumable(o, plan)
            )
        except Exception as exc:
            if is_store_failure(exc):
                raise StoreError(
                    f"preparing {target.label} failed ({describe_store_failure(exc)}); fix the cause and "
                    f"{_again(target, mode)}"
                ) from exc
            raise
        if output.complete:
            message = f"{target.label} is already complete ({plan.length} steps); nothing to do"
            warnings.warn(message, StreamaccWarning, stacklevel=2)
            return from_host(output.carry, plan.init)
        if mode == "extend" and stored is not None and stored.get("length", plan.length) < plan.length:
            done = output.manifest.committed_steps
            log.info("extending %s to step %d (computing on from step %d)", target.label, plan.length, done)
        elif output.first_block:
            log.info("resuming %s at step %d of %d", target.label, output.manifest.committed_steps, plan.length)
        initial = output.manifest.committed_steps
        with Progress(plan.length, initial=initial, enabled=progress, label=target.label) as bar:
            output.on_commit = lambda result: bar.update(len(result), result.nbytes, stored=result.stored)
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
    return from_host(output.carry, plan.init)
