"""The output a run must produce: its arrays, layout, codec, attributes and identity, checked before any write.

Also what a continued run (resumed or extended) takes from the output it continues: a
block size and chunks left to the default are the stored ones, so that a change of the
defaults never strands an output.

Attributes a decoding reader cannot decode, refused before a run creates anything.

``array_attrs`` go into each array's metadata as given, and xarray, which ``streamacc.open``
reads through, decodes some of them (``scale_factor``, ``_FillValue``, ``units`` naming a
time, ...): one it cannot decode (a ``scale_factor`` of ``"abc"``, a ``_FillValue`` xarray
expects encoded for Zarr v3, ``"days since never"``) would make every output of the run
unreadable. So an output's arrays with such attributes are made in memory, one row each,
exactly as the run would make them, and read back as ``open`` reads them.

A run's plan and the output it must produce, from its scan spec and request, as every writer derives them.

What a continued run (resumed or extended) leaves to the defaults is the stored run's: its
block size (for the same ``save_every``), its summaries' windows and its chunks, so that a
change of the defaults never strands an output. :func:`streamacc.write` and
:class:`streamacc.Stream` both plan here, so that the same job gets the same blocks, chunks
and identity whichever of them runs it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from .._version import __version__
from ..base import (
    DEFAULT_SUMMARY_WINDOWS,
    RESERVED,
    STORED,
    Mode,
    Request,
    Storage,
    array_dims,
    check_span,
    check_written_length,
    chunk_rows,
    counted,
    dtype_name,
    over_state,
    resolve_chunks,
    shard_shape,
    stored_chunks,
    time_attrs,
    too_long,
    warn,
    write_block_bytes,
)
from ..engine import Plan, ScanSpec, compute_platform, recorded_way
from ..errors import InputError, StreamaccWarning, arg, one_line
from ..record import Ledger, Manifest, RunIdentity
from ..store import ArraySpec, Target, ZarrSink, decoding_attributes, open_target, storable
from ..summaries import summarized_names
from ._identity import run_identity

__all__ = [
    "OutputSpec", "Planned", "again", "block_bytes_here", "check_decodable", "output_names", "output_spec",
    "plan_output", "stored_identity", "stored_manifest",
]


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """What a run's output must look like; built and checked before anything is touched."""

    identity: RunIdentity
    arrays: dict[str, ArraySpec]
    chunks: dict[str, tuple[int, ...]]
    dims: dict[str, tuple[str, ...]]
    codec: str
    attrs: dict[str, Any]
    array_attrs: dict[str, dict[str, Any]]
    total_blocks: int
    storage: Storage = STORED
    """What the run keeps of its blocks: their data, or (virtual) only their carries and summaries."""
    shards: dict[str, tuple[int, ...] | None] = dataclasses.field(default_factory=dict)
    """Each array's shard shape, where a new output shards it (``base.shard_shape``: a block's rows of chunks
    stored as one object); absent or None for an array stored a chunk per object."""

    @property
    def names(self) -> list[str]:
        return list(self.arrays)

    @property
    def virtual(self) -> bool:
        """The run stores no data chunks (they are recomputed on reading), only its carries and summaries."""
        return self.storage.virtual

    @property
    def block_nbytes(self) -> int:
        """The bytes of the rows one full block stores, all arrays together (before compression)."""
        rows = self.identity.blocking.block_rows
        return rows * sum(math.prod(shape[1:]) * dtype.itemsize for shape, dtype in self.arrays.values())


NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
"""An output array's name: a folder of its own in every store, so plain ASCII, and short."""

NAME_RULE = "at most 64 ASCII letters, digits and '_', beginning with a letter"


def _leaf_names(paths: list[Any]) -> list[str]:
    """The name each leaf of ``y`` gets by default: its dict keys (joined by '_'), or ``y`` for one leaf."""
    if len(paths) == 1 and not paths[0]:
        return ["y"]
    names = [jax.tree_util.keystr(p, simple=True, separator="_") for p in paths]
    return [n if n and not n[0].isdigit() else f"y_{n}" for n in names]


def _listed(keys: list[Any], what: str) -> list[str]:
    return [f"{', '.join(map(repr, keys))} {'is' if len(keys) == 1 else 'are'} {what}"] if keys else []


def _renamed(leaves: list[str], names: Mapping[Any, Any]) -> list[Any]:
    """The names a mapping ``{leaf: name}`` gives the leaves, applied by key."""
    unknown = [key for key in names if key not in leaves]
    missing = [leaf for leaf in leaves if leaf not in names]
    if unknown or missing:
        example = {leaf: names.get(leaf, leaf) for leaf in leaves}
        raise InputError(
            f"{arg('names')} as a dict renames f's outputs by key, so its keys must be exactly theirs "
            f"({', '.join(leaves)}): {' and '.join(_listed(unknown, 'not among them') + _listed(missing, 'missing'))}; "
            f"pass e.g. {arg('names', example)}"
        )
    return [names[leaf] for leaf in leaves]


def _in_order(names: list[Any], leaves: list[str]) -> None:
    """Refuse a list that gives one leaf the name of another: names in a list follow y's leaves in order."""
    for i, name in enumerate(names):
        if name in leaves and leaves.index(name) != i:
            raise InputError(
                f"{arg('names')} would store output {leaves[i]!r} of f under {name!r}, the key of another of its "
                f"outputs: a list of names follows f's outputs in order ({', '.join(leaves)}); leave {arg('names')} "
                f"out to name each by its key, or rename by key with a dict, e.g. {arg('names', {leaves[i]: name})}"
            )


def _shown(name: Any) -> str:
    return f"{name[:32]!r}... ({len(name)} characters)" if isinstance(name, str) and len(name) > 70 else repr(name)


def output_names(y_struct: Any, names: Sequence[str] | Mapping[str, str] | str | None) -> list[str]:
    """One array name per leaf of ``y``: from ``names`` (in leaf order, or a dict by key), from dict keys, or ``y``."""
    leaves = _leaf_names([path for path, _ in jax.tree_util.tree_leaves_with_path(y_struct)])
    if names is None:
        chosen: list[Any] = leaves
    elif isinstance(names, Mapping):
        chosen = _renamed(leaves, names)
    else:
        chosen = [names] if isinstance(names, str) else list(names)
        if len(chosen) != len(leaves):
            raise InputError(
                f"{arg('names')} has {counted(len(chosen), 'entry', 'entries')} but f's y has "
                f"{counted(len(leaves), 'leaf', 'leaves')}; give one per leaf"
            )
        _in_order(chosen, leaves)
    for name in chosen:
        if not isinstance(name, str) or not NAME.fullmatch(name):
            how = f"name it with {arg('names')}" if names is None else f"choose another in {arg('names')}"
            raise InputError(f"output name {_shown(name)} is not allowed: use {NAME_RULE} ({how})")
        if name in RESERVED:
            raise InputError(
                f"output name {name!r} is the name of a coordinate streamacc gives every output; name it otherwise "
                f"with {arg('names')} (or another key in the dict f returns)"
            )
    if len(set(chosen)) != len(chosen):
        raise InputError(f"output names must be unique, got {chosen}")
    return list(chosen)


def _check_array_attrs(array_attrs: dict[str, dict[str, Any]], names: list[str]) -> dict[str, dict[str, Any]]:
    unknown = sorted(set(array_attrs) - set(names))
    if unknown:
        raise InputError(
            f"{arg('array_attrs')} must map output names ({', '.join(names)}) to dicts of attributes, "
            f"got keys {sorted(array_attrs)}; pass e.g. {arg('array_attrs', {names[0]: {'units': 'm'}})}"
        )
    return array_attrs


def output_spec(
    plan: Plan, request: Request, *, prefixes: Sequence[int] = (), stored: RunIdentity | None = None
) -> OutputSpec:
    """The output a run of ``plan`` asked for by ``request`` must produce, checked against the step's ``y``
    (``prefixes``: the lengths whose inputs' values its identity keeps beside it, for an extension; ``stored``: the
    identity of the run it continues, see ``run_identity``)."""
    layout = request.layout
    names = output_names(plan.y_struct, layout.names)
    attrs = {**layout.attrs, "streamacc_version": __version__, **time_attrs(layout.time)}
    if plan.save_every > 1:
        attrs["streamacc_save_every"] = plan.save_every  # row r holds step r * k + k - 1
    checked_array_attrs = _check_array_attrs(layout.array_attrs, names)
    leaves = dict(zip(names, jax.tree_util.tree_leaves(plan.y_struct), strict=True))
    trailing = {n: tuple(s.shape) for n, s in leaves.items()}
    for name, leaf in leaves.items():
        if not storable(leaf.dtype):
            raise InputError(
                f"output {name!r} of f has dtype {np.dtype(leaf.dtype).name}, which Zarr cannot store: return it as "
                "a type Zarr stores, e.g. y.astype(jnp.float32) (bfloat16, float16 and every numpy number are stored)"
            )
    for name, shape in trailing.items():
        if 0 in shape:
            raise InputError(
                f"output {name!r} of f has shape {shape} each step, which holds no value, so there is nothing to "
                "store: leave it out of what f returns"
            )
    dimensions = array_dims(trailing, layout.dims)
    if plan.rows:
        check_span(layout.time, plan.rows * plan.save_every - 1)  # the last stored step's time, as readers label it
    windows = request.summaries
    summarized = summarized_names({n: (dtype_name(s.dtype), trailing[n]) for n, s in leaves.items()})
    sizes = {n: math.prod(trailing[n]) for n in summarized}
    over = request.over_state if request.over_state is not None else over_state(sizes)
    over = [n for n in summarized if n in over] if windows else []
    if request.summaries_default and windows:
        largest = max((size for n, size in sizes.items() if n not in over), default=1)
        windows = request.storage.windows(plan.rows, largest, values=plan.rows * sum(sizes.values()))
        over = over if windows else []
    elif request.mode in ("create", "overwrite"):  # a continued run's windows are the stored run's
        error = too_long(windows, plan.rows)
        if error is not None:
            raise error
    itemsizes = {n: np.dtype(s.dtype).itemsize for n, s in leaves.items()}
    chunk_shapes = resolve_chunks(trailing, itemsizes, dimensions, layout.chunks, plan.block_rows)
    specs = {n: ((plan.rows, *trailing[n]), np.dtype(s.dtype)) for n, s in leaves.items()}
    arrays = {n: [dtype_name(dt), list(shape)] for n, (shape, dt) in specs.items()}
    asked = None if layout.dims is None else {n: list(dimensions[n][1:]) for n in layout.dims}
    identity = run_identity(
        plan,
        arrays=arrays,
        codec=layout.codec,
        chunks=chunk_shapes,
        attrs=attrs,
        dims=asked,
        time=layout.time,
        summaries=windows,
        over_state=over,
        virtual=request.storage.virtual,
        prefixes=prefixes,
        stored=stored,
    )
    shards = {n: shard_shape(chunk_shapes[n], shape, dt.itemsize, plan.block_rows) for n, (shape, dt) in specs.items()}
    return OutputSpec(
        identity,
        specs,
        chunk_shapes,
        dimensions,
        layout.codec,
        attrs,
        checked_array_attrs,
        plan.block_count,
        request.storage,
        shards,
    )


def stored_identity(store: Any, storage_options: dict[str, Any] | None) -> RunIdentity | None:
    """The identity of the run stored at ``store``, or None where there is none to read.

    Whatever is wrong with the output, opening it under its lock says so; here it only
    means that nothing is taken from it.
    """
    manifest = stored_manifest(store, storage_options)
    return None if manifest is None else manifest.identity


def stored_manifest(store: Any, storage_options: dict[str, Any] | None) -> Manifest | None:
    """The manifest of the run stored at ``store``, or None where there is none to read (see
    :func:`stored_identity`)."""
    try:
        target = open_target(store, storage_options=storage_options, read_only=True)
        manifest = Ledger(target).load()
        if manifest is not None:
            _ = manifest.blocking.block_count  # an identity without a layout is none to read either
    except Exception:
        return None
    return manifest


def _fails(spec: OutputSpec, name: str, attrs: dict[str, Any]) -> str | None:
    """What reading array ``name`` with ``attrs`` as ``streamacc.open`` does raises, or None when it reads."""
    import xarray as xr
    import zarr

    shape, dtype = spec.arrays[name]
    one = (1,) * len(shape)
    target = open_target(zarr.storage.MemoryStore())
    sink = ZarrSink.create(
        target, {name: (one, dtype)}, chunks={name: one}, dims={name: spec.dims[name]}, codec=spec.codec,
        attrs={}, array_attrs={name: attrs},
    )  # fmt: skip
    sink.arrays[name][...] = np.zeros(one, dtype)
    try:
        np.asarray(xr.open_zarr(target.store, consolidated=False, zarr_format=3, chunks=None)[name].values)
    except Exception as exc:  # whatever xarray raises of it
        return f"{type(exc).__name__}: {one_line(exc)}"
    return None


def check_decodable(spec: OutputSpec) -> None:
    """Refuse ``array_attrs`` that ``streamacc.open`` (xarray) cannot decode, naming the attribute and why.

    Only arrays given attributes that change decoded values are tried, so that a write
    without such attributes (nearly every write) never imports xarray; without xarray, none
    is tried (``open`` then asks for it itself).
    """
    decoded = {name: d for name, attrs in spec.array_attrs.items() if (d := decoding_attributes(attrs))}
    if not decoded:
        return
    try:
        import xarray  # noqa: F401
    except ImportError:
        return
    for name, decoding in decoded.items():
        attrs = spec.array_attrs[name]
        if _fails(spec, name, attrs) is None:
            continue
        plain = {k: v for k, v in attrs.items() if k not in decoding}
        culprits = [k for k in decoding if _fails(spec, name, {**plain, k: decoding[k]}) is not None] or list(decoding)
        why = _fails(spec, name, {**plain, **{k: decoding[k] for k in culprits}})
        raise InputError(
            f"{arg('array_attrs')} of {name!r} hold {', '.join(f'{k}={decoding[k]!r}' for k in culprits)}, which "
            f"streamacc.open cannot decode ({why}); correct or leave out {', '.join(culprits)}"
        )


@dataclasses.dataclass(frozen=True)
class Planned:
    """A run's plan, its request as the stored run completes it, the output it must produce, and the stored
    identity it continues (None for a new run)."""

    plan: Plan
    request: Request
    spec: OutputSpec
    stored: RunIdentity | None


def _continued(spec: ScanSpec, request: Request, stored: RunIdentity | None) -> tuple[int | None, Request]:
    """What a continued run leaves to the default, taken from the output it continues: its block size and windows.

    A block size left to the default is the stored one (for the same ``save_every``), and
    so are the summaries' windows (and the unroll: see :func:`_unroll`): a change of the
    defaults never strands an output.
    """
    if stored is None:
        return None, request
    request = dataclasses.replace(request, over_state=list(stored.over_state))
    block_size = None
    if spec.block_size is None and stored.blocking.save_every == spec.save_every:
        block_size = stored.blocking.block_size
    if request.summaries_default and not spec.reverse:
        # the windows are the stored run's, whatever its length now
        request = dataclasses.replace(request, summaries=stored.summaries, summaries_default=False)
    return block_size, request


def _warn_fine_summaries(store: Any, kept: Sequence[int], rows: int, storage: Storage) -> None:
    """Warn where an extension keeps summary levels far finer than the default for its new length.

    The default levels of a short output are fine (one row per window below 1024 rows); they
    stay the output's as it grows, and at 4 values per window the summaries of a long
    extension would then outweigh its data.
    """
    wanted = storage.windows(rows, 1)
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


def block_bytes_here() -> int:
    """Bytes of ys per block a write or Stream sizes its blocks to by default, on the platform JAX computes on."""
    return write_block_bytes(compute_platform())


def _unroll(stored: RunIdentity | None) -> tuple[int | bool, bool] | None:
    """The unroll a continued run takes where none is given: the stored run's, chosen or given, whatever the
    platform now (an output of an earlier release keeps the one it recorded)."""
    if stored is None:
        return None
    try:
        return stored.blocking.unrolled_by, stored.unroll_chosen
    except (KeyError, TypeError, ValueError):  # none readable: opening the output says what is wrong with it
        return None


def _plan(spec: ScanSpec, request: Request, block_size: int | None, stored: RunIdentity | None) -> Plan:
    check_written_length(spec.length, from_xs=spec.xs is not None)
    rows_multiple = chunk_rows(request.layout.chunks)
    return spec.plan(
        block_bytes=block_bytes_here(), rows_multiple=rows_multiple, default_block_size=block_size,
        unroll=_unroll(stored),
    )  # fmt: skip


def plan_output(scan_spec: ScanSpec, request: Request, store: Any, storage_options: dict[str, Any] | None) -> Planned:
    """The plan of a run of ``scan_spec`` into ``store`` as ``request`` asks, and the output it must produce.

    A resumed or extended run reads the stored run's identity (without its lock: what is
    wrong with the output, opening it says) and takes what it leaves to the defaults from it.
    """
    manifest = stored_manifest(store, storage_options) if request.mode in ("resume", "extend") else None
    stored = None if manifest is None else manifest.identity
    asked_default = request.summaries_default
    block_size, request = _continued(scan_spec, request, stored)
    plan = _plan(scan_spec, request, block_size, stored)
    if plan.until is not None:
        plan = _tested_from(plan, request, manifest)
    if request.mode == "extend" and asked_default:
        _warn_fine_summaries(store, request.summaries, plan.rows, request.storage)
    if stored is not None and request.layout.chunks is None and plan.block_size == stored.blocking.block_size:
        chunks = stored_chunks(stored.chunks, plan.block_rows)
        request = dataclasses.replace(request, layout=dataclasses.replace(request.layout, chunks=chunks))
    extends = stored is not None and request.mode == "extend" and stored.blocking.length < plan.length
    prefixes = [stored.blocking.length] if stored is not None and extends else []  # its inputs' values compared
    spec = output_spec(plan, request, prefixes=prefixes, stored=stored)
    if request.mode in ("create", "overwrite"):  # a continued run's arrays are the stored run's
        check_decodable(spec)
    return Planned(plan, request, spec, stored)


def _tested_from(plan: Plan, request: Request, manifest: Manifest | None) -> Plan:
    """``plan``, whose condition is tested from the step a continued run tests it from.

    An extension of a finished run (one that ended on its condition, or is lengthened)
    tests the condition given now from the step after the stored run's last; a resumed run
    (an interrupted extension included) from where the stored run tested its own.
    """
    assert plan.until is not None
    if request.storage.virtual:
        raise InputError(
            f"{arg('until')} cannot end a virtual output, whose blocks are recomputed from f alone when read; pass "
            f"{arg('virtual', False)}, or leave {arg('until')} out"
        )
    if manifest is None:
        return plan
    identity = manifest.identity.to_json()
    until = plan.until
    if identity.get("until") is not None:  # tested as the stored run tested its own
        until = recorded_way(until, identity.get("until_tested"))
    armed = identity.get("until_from", 0)
    lengthened = manifest.ended_at is not None or plan.length > manifest.length
    if request.mode == "extend" and manifest.complete and lengthened:
        armed = manifest.length
    if isinstance(armed, int) and armed > 0:
        until = dataclasses.replace(until, armed=armed)
    return dataclasses.replace(plan, until=until)


def again(target: Target, mode: Mode) -> str:
    """How to rerun a command whose output failed before any block: as it was, unless it left an output behind."""
    if mode != "create":
        return f"rerun with {arg('mode', mode)}"
    with contextlib.suppress(Exception):  # the store just failed: it may fail to answer this too
        if target.exists():
            return f"rerun with {arg('mode', 'resume')}"  # a run that claims no block: resuming starts it afresh
    return "rerun"
