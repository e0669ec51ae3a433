"""Extending a finished output to a longer length, as one run of that length would have written it.

Only the last block of the stored run is not what the longer run writes: it ends at the
old length (its last chunk padded), or holds a short tail that a longer run puts in a
block of its own (the unroll rule of ``base.block_count``). So the extension
keeps every block before it, and recomputes from it on, from the carry its record holds.
What the resume after it checks (every committed chunk read whole, the kept carries, the
blocks since the last kept carry recomputed) is checked first, so that a damaged output is
refused as it stands rather than after its manifest became the longer run's.

The root metadata is first rewritten to claim nothing (no progress, no consolidated
metadata), so that it agrees with the output at every step that follows. The new
manifest (the longer run's identity, the kept blocks, that carry) is saved next and the
arrays' metadata (their longer shape) after it, so an interruption anywhere leaves an
output that ``resume`` continues and that readers read (its committed steps, through
arrays whose shape may lag the manifest): :func:`finish_extension` completes the arrays'
metadata and rebuilds the summary arrays (every document compared, so a rebuild
interrupted half way is done again) if the manifest got ahead of them. Window summaries
are cut back to the kept rows (see ``summaries.extension_tail``). An extension that would change any byte
already written (another parameter, dtype, layout, ``save_every``) is refused before
anything is touched.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from ..base import dtype_from_name
from ..errors import NoOutputError, ResumeError, arg
from ..record import Ledger, Manifest, RunIdentity, contradicts_itself, identity_differences, same_function
from ..store import Target, ZarrSink, array_document, resize_arrays
from ..summaries import extension_tail, rebuild_stale_arrays

__all__ = ["apply_extension", "finish_extension", "plan_extension"]

_LEADING = re.compile(r"^(\w+)\[\d+")


CONDITION = ("until", "until_values", "until_from", "until_tested")
"""The identity's fields of a run's condition, which an extension may change: it tests its own from its first step."""


def _without_length(identity: dict[str, Any]) -> dict[str, Any]:
    """``identity`` (as JSON) without what its length decides: the length, the arrays' rows, the inputs' rows and
    values (an extension compares those of the rows it keeps: :func:`_changed_inputs`), and the condition that
    may end it."""
    out = {k: v for k, v in identity.items() if k not in ("length", "xs_values") and k not in CONDITION}
    out["arrays"] = {name: [dtype, shape[1:]] for name, (dtype, shape) in identity.get("arrays", {}).items()}
    out["xs"] = [_LEADING.sub(r"\1[N", str(x)) for x in identity.get("xs", [])]
    return out


def _changed_inputs(old: RunIdentity, new: RunIdentity) -> list[str]:
    """The difference between the values of the stored run's inputs and those of the longer run's first rows (none
    where either run's are not known: an output written before they were recorded, a Stream's before it starts)."""
    stored, now = old.to_json().get("xs_values"), new.prefixes.get(old.blocking.length)
    if stored is None or now is None or stored == now:
        return []
    return [f"xs_values: stored {stored!r}, now {now!r} for its first {old.blocking.length} steps"]


def _refuse(label: str, why: str) -> ResumeError:
    return ResumeError(f"cannot extend {label}: {why}; the output is left as it was")


RowReader = Callable[[str, int, int], Any]
"""``rows(name, a, b)``: rows ``[a, b)`` of output ``name`` of the stored run."""


def plan_extension(
    target: Target, identity: RunIdentity, manifest: Manifest, total_blocks: int, read_rows: RowReader | None = None
) -> Manifest | None:
    """The manifest of the longer run ``identity`` that ``manifest`` (a finished run) becomes; nothing is written.

    Returns None when no block can be kept (the stored run was one block): the longer run
    then simply starts afresh. ``read_rows`` reads the stored run's rows (for its summaries'
    open window); by default from its chunks, which a virtual run does not store: it passes a
    reader that recomputes them. Refuses an unfinished or inconsistent run, a shorter length,
    a reverse scan, and any other difference between the runs. What is kept is checked
    before :func:`apply_extension` changes anything, as the resume that follows checks it.
    """
    label, old, new = target.label, manifest.identity, identity
    problem = manifest.inconsistency()
    if problem is not None:
        raise ResumeError(f"cannot extend: {contradicts_itself(label, problem)}")
    if not manifest.complete:
        ended = "" if manifest.ended_at is None else f", ended on its condition at step {manifest.ended_at}"
        length = old.blocking.length  # the run's own: a resume asks for it, whether or not it ended before it
        raise _refuse(
            label,
            f"its run is not finished ({manifest.committed_steps} of {manifest.length} steps committed{ended}); "
            f"finish it first with {arg('mode', 'resume')} and {arg('length', length)}, then extend it",
        )
    held = manifest.length
    if new.blocking.length < held or (manifest.ended_at is not None and new.blocking.length == held):
        raise _refuse(
            label,
            f"{arg('length', new.blocking.length)} is {'shorter than' if new.blocking.length < held else 'all of'} the "
            f"{held} steps it holds, and extending only lengthens; pass a {arg('length')} above {held}",
        )
    if old.blocking.reverse:
        raise _refuse(label, "a reverse scan starts from its last step, so a longer one changes every value; rerun "
                             f"it with {arg('mode', 'overwrite')}")  # fmt: skip
    stored, asked = old.to_json(), dict(new.to_json())
    if same_function(stored.get("function"), asked["function"], label):  # a script's step imported, as a resume
        asked["function"] = stored.get("function")
    diffs = identity_differences(_without_length(stored), _without_length(asked))
    diffs += _changed_inputs(old, new)
    if diffs:
        raise _refuse(label, f"the longer run would differ in more than its length ({'; '.join(diffs)}); pass the "
                             "original settings")  # fmt: skip
    _check_condition(label, old, new)
    kept = manifest.committed_blocks - 1
    if kept <= 0:
        return None  # nothing kept: the longer run starts afresh
    ledger = Ledger(target)
    every = old.blocking.save_every
    sink = ZarrSink.open(target, new.names)
    carry = ledger.block(kept, manifest).carry_in if manifest.v2 else None  # format 3 keeps it apart
    rows = new.rows
    arrays = {name: {**doc, "shape": [rows, *doc["shape"][1:]]} for name, doc in manifest.arrays.items()}
    extended = dataclasses.replace(
        manifest,
        identity=new,
        total_blocks=total_blocks,
        arrays=arrays,
        committed_blocks=kept,
        committed_steps=0,
        carry=carry,
        complete=False,
        ended_at=None,  # the longer run goes on past it, testing its own condition from the step after
        stored=None if manifest.stored is None else [[a, min(b, kept)] for a, b in manifest.stored if a < kept],
    )
    start, stop = extended.span()
    extended.committed_steps = stop - start
    if extended.nonfinite is not None and not start <= extended.nonfinite["step"] < stop:
        extended.nonfinite = None  # in the block computed again: found there again, as the first
    block_rows = new.blocking.size // every
    read = read_rows if read_rows is not None else (lambda name, a, b: sink.arrays[name][a:b])
    extended.summaries = extension_tail(target, manifest, extended.committed_rows, block_rows, read)
    return extended


def apply_extension(target: Target, extended: Manifest) -> None:
    """Make the output the longer run's whose manifest :func:`plan_extension` made, durably; the lock is held.

    The root first claims nothing; a virtual run's arrays are declared virtual again before
    anything else changes (its new blocks are not stored); then the manifest, then the
    arrays' shapes (:func:`finish_extension`).
    """
    sink = ZarrSink.open(target, extended.identity.names)
    target.check_lock()
    sink.retract_root()  # from here until the resume publishes it, readers read the arrays' own metadata
    if extended.virtual:
        sink.declare_virtual()
    Ledger(target).save(extended)
    finish_extension(target, extended)


def _check_condition(label: str, old: RunIdentity, new: RunIdentity) -> None:
    """Refuse an extension that changes the condition of a run that 1.1.0 wrote with its steps unrolled.

    1.1.0 compiled the condition into the steps (its identity records no ``until_tested``),
    and with ``unroll`` > 1 XLA compiles the unrolled steps with it, so the blocks the
    extension recomputes (the stored run's last, and the blocks it checks first) would not
    give the stored bits under another condition; with ``unroll=1`` they do. A condition
    tested since stores the plain scan's bits, which no condition changes.
    """
    unroll = old.blocking.unroll
    if unroll is False or (unroll == 1 and unroll is not True):
        return
    if old.to_json().get("until") is None or "until_tested" in old.to_json():
        return
    stored, asked = ({k: ident.to_json().get(k) for k in CONDITION[:2]} for ident in (old, new))
    if isinstance(asked["until"], str) and same_function(stored["until"], asked["until"], label):
        asked["until"] = stored["until"]  # a script's condition imported
    if stored != asked:
        raise _refuse(
            label,
            f"its run has {arg('unroll', unroll)} and a condition that streamacc 1.1.0 compiled into every step "
            f"(see {arg('until')}), so its steps recompute to the same bits only with the same condition; pass the "
            f"{arg('until')} it was written with, or rewrite it with {arg('mode', 'overwrite')}",
        )


def finish_extension(target: Target, manifest: Manifest) -> None:
    """Give each array the rows ``manifest`` records where only its shape lags behind (an interrupted extension),
    the summaries their longer arrays, and the kept carries as many boundaries as the run's blocks plus one."""
    if not manifest.v2:
        carries = Ledger(target).carries(manifest)
        # fewer where the extension was cut short, more where the run ended on its condition before a longer length;
        # none readable is for the checks to refuse
        if 0 < carries.boundaries() != manifest.carry_boundaries:
            carries.resize(manifest.carry_boundaries)
    if manifest.recomputes:  # a virtual run's arrays stay declared so while blocks are not stored
        ZarrSink.open(target, manifest.identity.names).declare_virtual()
    _grow_arrays(target, manifest)
    ident = manifest.identity
    specs = {name: ((shape[0], *shape[1:]), dtype_from_name(dtype)) for name, (dtype, shape) in ident.arrays.items()}
    dims = {name: tuple(doc.get("dimension_names") or ()) for name, doc in manifest.arrays.items()}
    rebuild_stale_arrays(target, ident, manifest.summaries, specs, dims)


def _grow_arrays(target: Target, manifest: Manifest) -> None:
    grow = {}
    for name, recorded in manifest.arrays.items():
        stored = array_document(target.read(f"{name}/zarr.json"))
        if stored is None or stored == recorded or not isinstance(recorded.get("shape"), list):
            continue
        shape, want = stored.get("shape"), recorded["shape"]
        same_else = {**stored, "shape": want} == recorded
        if same_else and isinstance(shape, list) and shape[1:] == want[1:] and shape[:1] < want[:1]:
            grow[name] = tuple(want)
    if grow:
        resize_arrays(target, grow)


def other_length(label: str, manifest: Manifest, identity: RunIdentity) -> ResumeError | None:
    """The error for a resume asked for another length than the stored run's, where nothing else differs.

    Each names the command that keeps the committed steps: an extension for a finished
    run asked to go on, the stored length for a run still to finish (an extension that was
    interrupted included). None where the length is the same, or more than it differs.
    """
    stored, asked = manifest.identity.blocking.length, identity.blocking.length
    if stored == asked:
        return None
    old, new = dict(manifest.identity.to_json()), identity.to_json()
    if same_function(old.get("function"), new["function"], label):
        old["function"] = new["function"]
    if identity_differences(_without_length(old), _without_length(new)):
        return None
    if manifest.ended_at is not None:
        return ResumeError(
            f"cannot resume {label}: its run ended on its condition at step {manifest.ended_at} (of at most {stored} "
            f"steps), and {arg('length', asked)} asks for another run; continue it past that step with "
            f"{arg('mode', 'extend')} and the condition to end it now, or pass {arg('length', stored)} to resume it"
        )
    if manifest.complete and asked > stored:
        return ResumeError(
            f"cannot resume {label}: it holds a finished run of {stored} steps, and {arg('length', asked)} asks for "
            f"more; lengthen it with {arg('mode', 'extend')}, which keeps its steps"
        )
    if manifest.complete:
        return ResumeError(
            f"cannot resume {label}: it holds a finished run of {stored} steps, not {asked}; it is complete as it is "
            "(a shorter run is another output: choose another output path)"
        )
    return ResumeError(
        f"cannot resume {label}: its run is {stored} steps long ({manifest.committed_steps} committed), not {asked}; "
        f"continue it with {arg('length', stored)}"
    )


def nothing_to_extend(label: str) -> NoOutputError:
    """The error for an extension of an output that does not exist."""
    return NoOutputError(
        f"{label} holds no output to extend; write it first without {arg('mode', 'extend')}, then extend it"
    )
