"""The output a run must produce: its arrays, layout, codec, attributes and identity, checked before any write.

Also what a continued run (resumed or extended) takes from the output it continues: a
block size and chunks left to the default are the stored ones, so that a change of the
defaults never strands an output.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..._version import __version__
from ...base import dtype_name
from ...engine import Plan
from ...errors import InputError, arg
from ...store import ArraySpec, open_target, storable
from ...summaries import over_state, summarized_names, too_long
from ..bookkeeping import Ledger, Manifest, RunIdentity, run_identity
from ._layout import RESERVED, array_dims, resolve_chunks
from ._options import STORED, Request, Storage
from ._time import check_span, time_attrs

__all__ = ["OutputSpec", "output_names", "output_spec", "stored_identity", "stored_manifest"]


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
                f"{arg('names')} has {len(chosen)} entries but f's y has {len(leaves)} leaves; give one per leaf"
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
