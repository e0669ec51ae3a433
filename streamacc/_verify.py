"""``verify``: recompute stored blocks from their recorded carry-ins and compare bytes.

A block passes when its chunks exist, its stored bytes match the CRC recorded at
commit, recomputing it from its carry-in reproduces those bytes exactly, and the carry
it ends with is the carry-in recorded for the next block.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from ._carry import from_host, to_host
from ._engine import Plan, compute_block, make_plan
from ._errors import InputError, VerifyError
from ._identity import describe_function
from ._manifest import Ledger, Manifest, decode_leaves
from ._target import Target, open_target
from ._zarr import ZarrSink, checksum

__all__ = ["VerifyReport", "plan_for", "verify", "verify_plan"]


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What a successful verification checked."""

    checked_blocks: tuple[int, ...]
    committed_blocks: int
    total_blocks: int
    committed_steps: int
    total_steps: int
    complete: bool


def load_manifest(target: Target) -> Manifest:
    """The manifest of ``target``, or a VerifyError saying why there is none."""
    manifest = Ledger(target).load()
    if manifest is None:
        raise VerifyError(f"{target.label} has no streamacc manifest; it was not written by streamacc or is empty")
    return manifest


def select_blocks(committed: int, blocks: str | int) -> list[int]:
    """All committed blocks, or ``blocks`` of them spread evenly, first and last included."""
    if blocks == "all":
        return list(range(committed))
    if isinstance(blocks, bool) or not isinstance(blocks, (int, np.integer)) or blocks < 1:
        raise InputError(f"blocks must be 'all' or a positive number of blocks to check, got {blocks!r}")
    count = min(int(blocks), committed)
    if count <= 1:
        return list(range(count))
    return sorted({round(i * (committed - 1) / (count - 1)) for i in range(count)})


def _bad(k: int, start: int, stop: int, what: str) -> VerifyError:
    return VerifyError(f"block {k} (steps {start}-{stop}) is bad: {what}; rewrite the output with --overwrite")


def _leaves_equal(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() and i == j
        for (x, i), (y, j) in zip(a, b, strict=True)
    )


def _check_block(target: Target, sink: ZarrSink, ledger: Ledger, manifest: Manifest, plan: Plan, k: int) -> None:
    rec = ledger.block(k)
    bounds = next(plan.bounds(k))
    if (rec.start, rec.stop) != bounds:
        raise _bad(k, rec.start, rec.stop, f"its record says steps {rec.start}-{rec.stop}, the layout {bounds}")
    for name in sink.arrays:
        missing = [key for key in sink.chunk_keys(name, rec.start, rec.stop) if not target.has(key)]
        if missing:
            raise _bad(k, rec.start, rec.stop, f"chunk {missing[0]} is missing")
    try:
        stored = sink.read(rec.start, rec.stop)
    except Exception as exc:  # a damaged compressed chunk fails in its codec, with the codec's own error
        raise _bad(k, rec.start, rec.stop, f"its chunks cannot be decoded ({type(exc).__name__}: {exc})") from None
    for name, data in stored.items():
        if checksum(data) != rec.crc32.get(name):
            raise _bad(k, rec.start, rec.stop, f"the bytes of {name!r} do not match their checksum (corrupted chunk)")
    block = compute_block(plan, from_host(decode_leaves(rec.carry_in), plan.init), rec.start, rec.stop)
    for name, y in zip(sink.arrays, jax.tree_util.tree_leaves(block.ys), strict=True):
        if y.tobytes() != np.ascontiguousarray(stored[name]).tobytes():
            raise _bad(k, rec.start, rec.stop, f"recomputing {name!r} from its carry-in gives different bytes")
    after = manifest.carry if k + 1 == manifest.committed_blocks else ledger.block(k + 1).carry_in
    if not _leaves_equal(to_host(block.carry), decode_leaves(after)):
        raise _bad(k, rec.start, rec.stop, "its final carry is not the carry recorded after it")


def verify_plan(target: Target, plan: Plan, manifest: Manifest, *, blocks: str | int = "all") -> VerifyReport:
    """Check the committed blocks of ``target`` (all, or ``blocks`` of them) against ``plan``."""
    total = plan.block_count
    if manifest.total_blocks != total or not 0 <= manifest.committed_blocks <= total:
        raise VerifyError(f"the manifest of {target.label} is inconsistent with its layout; rewrite with --overwrite")
    sink = ZarrSink.open(target, manifest.identity["chunk"])
    ledger = Ledger(target)
    chosen = select_blocks(manifest.committed_blocks, blocks)
    for k in chosen:
        _check_block(target, sink, ledger, manifest, plan, k)
    return VerifyReport(
        tuple(chosen), manifest.committed_blocks, total, manifest.committed_steps, plan.length, manifest.complete
    )


def plan_for(manifest: Manifest, f: Callable, init: Any, xs: Any) -> Plan:
    """The plan of the recorded run: its length and block layout, with this step and inputs."""
    ident = manifest.identity
    return make_plan(
        f,
        init,
        xs,
        length=ident["length"],
        block_size=ident["block_size"],
        unroll=ident["unroll"],
        reverse=ident["reverse"],
    )


def verify(store: Any, f: Callable, init: Any, xs: Any = None, *, blocks: str | int = "all") -> VerifyReport:
    """Verify an output written by :func:`write` with this ``f``, ``init`` and ``xs``.

    Raises :class:`VerifyError` naming the first bad block (in scan order) on any
    mismatch, missing chunk or inconsistent manifest.
    """
    target = open_target(store)
    manifest = load_manifest(target)
    ident = manifest.identity
    if describe_function(f) != ident.get("function"):
        raise VerifyError(f"{target.label} was written by {ident.get('function')}, not {describe_function(f)}")
    plan = plan_for(manifest, f, init, xs)
    return verify_plan(target, plan, manifest, blocks=blocks)
