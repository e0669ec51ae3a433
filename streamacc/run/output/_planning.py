"""A run's plan and the output it must produce, from its scan spec and request, as every writer derives them.

What a continued run (resumed or extended) leaves to the defaults is the stored run's: its
block size (for the same ``save_every``), its summaries' windows and its chunks, so that a
change of the defaults never strands an output. :func:`streamacc.write` and
:class:`streamacc.Stream` both plan here, so that the same job gets the same blocks, chunks
and identity whichever of them runs it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from ...base import DEFAULT_SUMMARY_WINDOWS, warn, write_block_bytes
from ...engine import Plan, ScanSpec, compute_platform
from ...errors import InputError, StreamaccWarning, arg
from ...store import Target
from ..bookkeeping import Manifest, RunIdentity
from ._decodable import check_decodable
from ._layout import chunk_rows, stored_chunks
from ._options import Mode, Request, Storage, check_written_length
from ._spec import OutputSpec, output_spec, stored_manifest

__all__ = ["Planned", "again", "block_bytes_here", "plan_output"]


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
    armed = manifest.identity.to_json().get("until_from", 0)
    lengthened = manifest.ended_at is not None or plan.length > manifest.length
    if request.mode == "extend" and manifest.complete and lengthened:
        armed = manifest.length
    if not isinstance(armed, int) or armed <= 0:
        return plan
    return dataclasses.replace(plan, until=dataclasses.replace(plan.until, armed=armed))


def again(target: Target, mode: Mode) -> str:
    """How to rerun a command whose output failed before any block: as it was, unless it left an output behind."""
    if mode != "create":
        return f"rerun with {arg('mode', mode)}"
    with contextlib.suppress(Exception):  # the store just failed: it may fail to answer this too
        if target.exists():
            return f"rerun with {arg('mode', 'resume')}"  # a run that claims no block: resuming starts it afresh
    return "rerun"
