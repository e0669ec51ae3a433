"""``write``: run a blocked scan and stream its output into a Zarr store, resumably.

Each block is written by worker threads while the next computes, made durable, then
committed in scan order: first its record, then the manifest that counts it. A crash
therefore costs at most the blocks in flight, and ``resume=True`` continues from the
last committed block with the exact carry, giving the bytes of an uninterrupted run.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np

from ._carry import HostLeaf, from_host, to_host
from ._checks import as_count
from ._codecs import compressors_for
from ._defaults import DEFAULT_CODEC, DEFAULT_INFLIGHT, DEFAULT_WRITE_BLOCK_SIZE
from ._engine import Block, Plan, make_plan, run_plan
from ._errors import InputError, OutputExistsError, ResumeError, StoreError
from ._identity import run_identity
from ._manifest import BlockRecord, Ledger, Manifest, decode_leaves, encode_leaves, require_same_run
from ._pipeline import run_ordered
from ._progress import Progress
from ._target import Target, open_target
from ._version import __version__
from ._zarr import ZarrSink

__all__ = ["output_names", "write"]

log = logging.getLogger("streamacc")


def output_names(y_struct: Any, names: Sequence[str] | None) -> list[str]:
    """One array name per leaf of ``y``: from ``names``, from dict keys, or ``y`` for one leaf."""
    paths = [path for path, _ in jax.tree_util.tree_leaves_with_path(y_struct)]
    if names is not None:
        names = [names] if isinstance(names, str) else list(names)
        if len(names) != len(paths):
            raise InputError(f"names has {len(names)} entries but f's y has {len(paths)} leaves; give one per leaf")
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


@dataclasses.dataclass(frozen=True)
class _Item:
    index: int
    block: Block
    carry_in: list[HostLeaf]
    carry_out: list[HostLeaf]


def _items(blocks: Iterator[Block], first: int, carry_in: list[HostLeaf]) -> Iterator[_Item]:
    for index, block in enumerate(blocks, start=first):
        carry_out = to_host(block.carry)
        yield _Item(index, block, carry_in, carry_out)
        carry_in = carry_out


def _check_attrs(attrs: dict | None) -> dict:
    attrs = dict(attrs or {})
    try:
        json.dumps(attrs, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"attrs must be JSON-serialisable ({exc}); pass plain numbers, strings, lists and dicts"
        ) from None
    return {**attrs, "streamacc_version": __version__}


def _check_chunk(chunk_size: int | None, block_size: int) -> int:
    if chunk_size is None:
        return block_size
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
        raise InputError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    if block_size % chunk_size:
        raise InputError(
            f"chunk_size={chunk_size} does not divide block_size={block_size}; every block must cover whole chunks"
        )
    return int(chunk_size)


@dataclasses.dataclass
class _Run:
    """An output opened for writing: where to start, and with which carry."""

    sink: ZarrSink
    ledger: Ledger
    manifest: Manifest
    carry: Any

    @property
    def first_block(self) -> int:
        return self.manifest.committed_blocks


def _resumable(target: Target) -> Manifest | None:
    """The manifest to resume from; None when a run was killed before writing its first one."""
    manifest = Ledger(target).load()
    if manifest is None and not target.only_bookkeeping():
        raise ResumeError(f"{target.label} has no streamacc manifest, so it cannot be resumed; use --overwrite")
    return manifest


def _resume(target: Target, plan: Plan, identity: dict, chunk: int) -> _Run | None:
    """Reopen an interrupted run; None when nothing was committed, so it must start afresh."""
    manifest = _resumable(target)
    if manifest is not None:
        require_same_run(manifest, identity, target.label)
    removed = target.clean_partials()
    if removed:
        log.info("removed %d temp file(s) left by an interrupted run", len(removed))
    if manifest is None or (manifest.committed_blocks == 0 and not manifest.complete):
        return None  # killed before its first commit: the arrays may be half created
    carry = plan.init if manifest.carry is None else from_host(decode_leaves(manifest.carry), plan.init)
    return _Run(ZarrSink.open(target, chunk), Ledger(target), manifest, carry)


def _start(target: Target, plan: Plan, identity: dict, chunk: int, specs: dict, codec: str, attrs: dict) -> _Run:
    if target.exists():
        target.clear()
    total = plan.block_count
    ledger = Ledger(target)
    manifest = Manifest(identity, total_blocks=total, carry=encode_leaves(to_host(plan.init)))
    ledger.save(manifest)  # first, so that a run killed while creating its arrays can be resumed
    sink = ZarrSink.create(target, specs, chunk=chunk, codec=codec, attrs=attrs)
    target.make_durable(["zarr.json", *(f"{name}/zarr.json" for name in specs)])
    return _Run(sink, ledger, manifest, plan.init)


def _stream(run: _Run, plan: Plan, names: list[str], *, inflight: int, progress: Progress) -> Any:
    manifest = run.manifest
    blocks = run_plan(plan, carry=run.carry, first_block=run.first_block)

    def work(item: _Item) -> dict[str, int]:
        return run.sink.write(
            item.block.start, item.block.stop, dict(zip(names, jax.tree_util.tree_leaves(item.block.ys), strict=True))
        )

    def commit(item: _Item, crcs: dict[str, int]) -> None:
        block = item.block
        run.ledger.record(BlockRecord(item.index, block.start, block.stop, encode_leaves(item.carry_in), crcs))
        # the in-memory manifest changes only once the new one is durable, so that an
        # error message never counts a block whose commit failed
        _save(
            run,
            committed_blocks=item.index + 1,
            committed_steps=manifest.committed_steps + len(block),
            carry=encode_leaves(item.carry_out),
        )
        progress.update(len(block), sum(y.nbytes for y in jax.tree_util.tree_leaves(block.ys)))

    carry_in = to_host(run.carry)
    try:
        run_ordered(_items(blocks, run.first_block, carry_in), work, commit, depth=inflight, workers=inflight)
        _save(run, complete=True)
    except OSError as exc:
        raise StoreError(
            f"writing {run.sink.target.label} failed after {manifest.committed_steps} of {plan.length} steps "
            f"({exc.strerror or exc}); those steps are safely committed: fix the cause and rerun with --resume"
        ) from exc
    return from_host(decode_leaves(manifest.carry), plan.init)


def _save(run: _Run, **changes: Any) -> None:
    """Durably save the manifest with ``changes``, then apply them in memory."""
    run.ledger.save(dataclasses.replace(run.manifest, **changes))
    for name, value in changes.items():
        setattr(run.manifest, name, value)


def _check_target(target: Target, *, overwrite: bool, resume: bool) -> bool:
    """Refuse what would destroy or misuse existing data; return whether the output exists."""
    existed = target.exists()
    if existed and not (overwrite or resume):
        raise OutputExistsError(
            f"{target.label} already exists; pass --overwrite to replace it or --resume to continue it"
        )
    if overwrite and existed and not target.is_output():
        raise OutputExistsError(
            f"{target.label} exists and is not a Zarr or streamacc output, so --overwrite will not delete it; "
            "choose another path or remove it yourself"
        )
    if resume and existed:
        _resumable(target)  # refuse a foreign directory before the lock creates anything in it
    return existed


def write(
    store: Any,
    f: Callable,
    init: Any,
    xs: Any = None,
    *,
    length: int | None = None,
    block_size: int = DEFAULT_WRITE_BLOCK_SIZE,
    unroll: int | bool = 1,
    reverse: bool = False,
    names: Sequence[str] | None = None,
    codec: str = DEFAULT_CODEC,
    chunk_size: int | None = None,
    overwrite: bool = False,
    resume: bool = False,
    progress: bool = True,
    attrs: dict | None = None,
    inflight: int = DEFAULT_INFLIGHT,
    durable: bool = True,
    storage_options: dict | None = None,
) -> Any:
    """Run ``lax.scan(f, init, xs, length)`` block by block into a Zarr group; return the final carry.

    ``store`` is a local path, an fsspec URL or a zarr store. Each leaf of ``y`` becomes
    one array (named by ``names``, by dict keys, or ``y``) on dimension ``step``. An
    existing output is refused unless ``overwrite`` (start afresh) or ``resume``
    (continue an interrupted run with identical settings). ``durable=False`` skips
    fsync and exists only to measure its cost. Bad arguments raise before anything is
    written.
    """
    plan = make_plan(f, init, xs, length=length, block_size=block_size, unroll=unroll, reverse=reverse)
    names = output_names(plan.y_struct, names)
    chunk = _check_chunk(chunk_size, plan.block_size)
    compressors_for(codec)
    inflight = as_count("inflight", inflight, minimum=1)
    attrs = _check_attrs(attrs)
    specs = {
        n: ((plan.length, *s.shape), np.dtype(s.dtype))
        for n, s in zip(names, jax.tree_util.tree_leaves(plan.y_struct), strict=True)
    }
    arrays = {n: [dt.str, list(shape)] for n, (shape, dt) in specs.items()}
    identity = run_identity(plan, arrays=arrays, codec=codec, chunk=chunk, attrs=attrs)
    target = open_target(store, storage_options=storage_options)
    target.fsync = durable
    existed = _check_target(target, overwrite=overwrite, resume=resume)
    with target.lock():
        try:
            run = _resume(target, plan, identity, chunk) if resume and existed else None
            if run is None:
                run = _start(target, plan, identity, chunk, specs, codec, attrs)
        except OSError as exc:
            raise StoreError(
                f"preparing {target.label} failed ({exc.strerror or exc}); fix the cause and rerun with --resume"
            ) from exc
        if run.manifest.complete:
            log.info("%s is already complete (%d steps); nothing to do", target.label, plan.length)
            return run.carry
        if run.first_block:
            log.info("resuming %s at step %d of %d", target.label, run.manifest.committed_steps, plan.length)
        with Progress(plan.length, initial=run.manifest.committed_steps, enabled=progress, label=target.label) as bar:
            return _stream(run, plan, names, inflight=inflight, progress=bar)
