"""Opening an output for a run: a table of what is stored and what the run asked for.

The caller holds the output's writer lock. What is stored is one of four things
(:func:`probe`): nothing, a streamacc output, an output of streamacc 0.1, or anything
else. Each pair of that and the run's ``mode`` has one opener in :data:`OPENERS`, which
starts the run afresh, continues it, or refuses, and never destroys data streamacc did not
write or continues from bookkeeping it cannot trust.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable

from ..base import HostLeaf, Mode, warn
from ..errors import OutputExistsError, ResumeError, StoreError, StreamaccWarning, VerifyError, arg, one_line
from ..record import (
    CARRY_CODEC,
    LEGACY_MANIFEST_KEY,
    MANIFEST_ATTR,
    MANIFEST_KEY,
    Ledger,
    Manifest,
    carry_description,
    carry_every,
    contradicts_itself,
    node_attribute,
    only_leftovers,
    remove_partial_writes,
    require_same_run,
    root_problem,
)
from ..store import LEASE_KEY, CarryArrays, Target, ZarrSink
from ..summaries import Summaries
from ._commit import BlockResult, Output
from ._extend import RowReader, apply_extension, finish_extension, nothing_to_extend, other_length, plan_extension
from ._planning import OutputSpec

__all__ = ["OPENERS", "Continuation", "Opening", "open_output", "prepare_output", "probe"]


log = logging.getLogger("streamacc")


def probe(target: Target) -> str:
    """What is stored at ``target``: 'empty', 'ours', 'legacy' (streamacc 0.1) or 'foreign'.

    Only a readable bookkeeping node that streamacc wrote makes an output 'ours'; a file
    name alone never does. The temp file of a writer killed before its first manifest
    counts as empty, and nothing else does.
    """
    if not target.exists():
        return "empty"
    raw = target.read(MANIFEST_KEY)
    if raw is not None:
        try:
            return "ours" if isinstance(node_attribute(raw, MANIFEST_ATTR), str) else "foreign"
        except ValueError:
            return "foreign"
    legacy = target.read(LEGACY_MANIFEST_KEY)
    if legacy is not None:
        try:
            return "legacy" if json.loads(legacy).get("format") == "streamacc-manifest/1" else "foreign"
        except (ValueError, AttributeError):
            return "foreign"
    return "empty" if only_leftovers(target) else "foreign"


@dataclasses.dataclass(frozen=True)
class Opening:
    """Everything an opener needs: the output, the run's spec and first carry, and its callbacks."""

    target: Target
    spec: OutputSpec
    mode: Mode
    init: list[HostLeaf]
    check_resumable: Callable[[Output], None]
    on_commit: Callable[[BlockResult], None] | None
    rows: RowReader | None = None  # the stored run's rows, for an extension of a virtual run (which stores none)

    @property
    def ledger(self) -> Ledger:
        return Ledger(self.target)


def _create(o: Opening) -> Output:
    """Start the run afresh: the new manifest first, so that any interruption leaves an output
    recognisably streamacc's that claims no block; then clear the rest; then create."""
    target, spec, ledger = o.target, o.spec, o.ledger
    leaves = carry_description(o.init)
    # until the first block is stored and its bytes tell (``Output``), judged against the raw bytes
    every = carry_every(sum(leaf.nbytes for leaf in leaves), spec.block_nbytes, virtual=spec.storage.virtual)
    carries = CarryArrays(target, leaves, codec=spec.codec, boundaries=spec.total_blocks + 1)
    init = [a for a, _ in o.init]
    kept = {"every": every, "leaves": [leaf.to_json() for leaf in leaves], "init": carries.checksums(init)}
    manifest = Manifest(
        spec.identity,
        total_blocks=spec.total_blocks,
        stored=spec.storage.stored_blocks(),
        carries={**kept, CARRY_CODEC: spec.codec},
    )
    keep = {MANIFEST_KEY, LEASE_KEY}
    clear = not set(target.list_keys()) <= keep
    if clear:
        target.check_clearable()  # before anything is written: never the current directory, never through a link
    ledger.save(manifest)
    if clear:
        target.clear(keep)
    sink = ZarrSink.create(
        target,
        spec.arrays,
        chunks=spec.chunks,
        dims=spec.dims,
        codec=spec.codec,
        attrs=spec.attrs,
        array_attrs=spec.array_attrs,
        virtual=spec.storage.virtual,
        shards=spec.shards,
    )
    summaries = Summaries.create(target, spec.identity, spec.arrays, spec.dims)
    carries.create()
    keys, _ = carries.write(0, init)
    target.make_durable([*keys, *(f"{name}/zarr.json" for name in spec.arrays)])
    manifest.arrays = {name: doc for name, doc in sink.documents().items() if doc is not None}
    ledger.save(manifest)
    output = Output(target, spec, manifest, sink, summaries, o.on_commit)
    output.publish(force=True)
    return output


def _nothing_to_resume(o: Opening) -> Output:
    warn(
        f"nothing to resume at {o.target.label} (check the path if a run was expected there); starting a new run",
        StreamaccWarning,
    )
    return _create(o)


def _nothing_to_extend(o: Opening) -> Output:
    raise nothing_to_extend(o.target.label)


def _exists(o: Opening) -> Output:
    """Refuse to create over a streamacc output, naming first what keeps its steps: resuming an unfinished run
    (an interrupted write or extension) with its length, extending a finished one."""
    label = o.target.label
    try:
        manifest = o.ledger.load()
    except Exception:  # what is wrong with it is for the command that continues it to say
        manifest = None
    if manifest is not None and not manifest.complete:
        raise OutputExistsError(
            f"{label} already exists and holds an unfinished run ({manifest.committed_steps} of {manifest.length} "
            f"steps committed); continue it with {arg('mode', 'resume')} and {arg('length', manifest.length)}, or "
            f"pass {arg('mode', 'overwrite')} to replace it"
        )
    if manifest is not None:
        raise OutputExistsError(
            f"{label} already exists and holds a finished run of {manifest.length} steps; lengthen it with "
            f"{arg('mode', 'extend')} and a longer {arg('length')}, or pass {arg('mode', 'overwrite')} to replace it"
        )
    raise OutputExistsError(
        f"{label} already exists; pass {arg('mode', 'overwrite')} to replace it or {arg('mode', 'resume')} to "
        "continue it"
    )


def _foreign(o: Opening) -> Output:
    what = "streamacc output (it has no readable streamacc manifest)"
    if o.mode == "create":
        raise OutputExistsError(f"{o.target.label} exists and is not a {what}; {o.target.elsewhere()}")
    refuse = "will not delete it" if o.mode == "overwrite" else "cannot continue it"
    raise (OutputExistsError if o.mode == "overwrite" else ResumeError)(
        f"{o.target.label} exists and is not a {what}, so {arg('mode', o.mode)} {refuse}; {o.target.elsewhere()}, "
        "or remove it yourself"
    )


def _overwrite(o: Opening) -> Output:
    o.target.check_contents(writing=False)  # links and special files: a folder where a file belongs is cleared
    return _create(o)


def _legacy(o: Opening) -> Output:
    o.target.check_contents()
    o.ledger.load()  # raises the message for an output of streamacc 0.1
    raise AssertionError("a legacy output has no manifest of this version")


def _continue(o: Opening) -> Output:
    """Resume the stored run, or extend it first (a finished run, to a longer length), after every check."""
    return prepare_continue(o).apply(None)


@dataclasses.dataclass(frozen=True)
class Continuation:
    """A stored run that a run continues, checked and not yet changed in any byte.

    ``checked`` is what the run keeps of it, as checked (its manifest, its first block to
    compute, the carry entering it once known); None where the run starts afresh (nothing
    committed, or a stored run of one block extended). :meth:`apply` makes the output the
    run's, durably, and returns the :class:`Output` it writes on: a Stream applies it only
    once its program has checked what only the program can (its inputs' values, the blocks
    it recomputes), so that a refusal leaves the output byte for byte as it was.
    """

    opening: Opening
    manifest: Manifest | None
    checked: Output | None
    extending: bool = False
    opener: Callable[[Opening], Output] | None = None  # what opens it where it is no stored run continued

    def apply(self, values: list[str] | None) -> Output:
        """The output made the run's; ``values`` are the digests of its inputs' values where its identity was made
        without them (a Stream's, known once its program starts): recorded with it, never dropped."""
        o = self.opening
        if values is not None:
            o = dataclasses.replace(o, spec=dataclasses.replace(o.spec, identity=o.spec.identity.with_values(values)))
        if self.opener is not None:
            return self.opener(o)
        if self.manifest is None or self.checked is None:
            return _create(o)
        target, spec, manifest = o.target, o.spec, self.manifest
        if self.extending:
            if values is not None:  # the longer run's digests, saved with its manifest: a kill after it keeps them
                manifest = dataclasses.replace(manifest, identity=manifest.identity.with_values(values))
            apply_extension(target, manifest)
        else:
            finish_extension(target, manifest)
        try:
            summaries = Summaries.load(target, manifest.identity, manifest.summaries, manifest.committed_rows)
        except VerifyError as exc:
            raise ResumeError(f"cannot resume: {one_line(exc)}") from None
        output = Output(target, spec, manifest, ZarrSink.open(target, spec.names), summaries, o.on_commit)
        output.continue_as(self.checked)
        remove_partial_writes(target, [*spec.names, *manifest.arrays])
        if not manifest.v2:  # a killed writer's carries past the commit, or an extended run's last: not the run's now
            output.ledger.carries(manifest).remove_past(manifest.committed_blocks)
        if summaries is not None:
            summaries.resume()
        if manifest.virtual and manifest.all_stored:  # a materialize stopped before the arrays said so
            output.sink.publish_arrays()
        problem = root_problem(target, manifest)
        if problem is not None:  # killed before the root caught up, or tampered with: it follows from the manifest
            if not self.extending:  # an extension's root claims nothing until now
                log.info("rewrote the root metadata of %s, which %s", target.label, problem)
            output.sink.reset_root(spec.attrs)
            output.publish(force=True)
        return output


def prepare_continue(o: Opening) -> Continuation:
    """Every check of a resume, or of an extension (a finished run, to a longer length), before anything is written.

    The same run, a self-consistent manifest, safe contents, and ``check_resumable`` (every
    committed chunk and kept carry, and the last committed block recomputed, where the caller
    can), as the output stands; an extension checks what it keeps of the stored run (see
    ``_extend``). A run that never committed a block starts afresh. Nothing is written until
    :meth:`Continuation.apply`: a refused run leaves the output as it was.
    """
    target, spec, ledger = o.target, o.spec, o.ledger
    left = "; the output is left as it was" if o.mode == "extend" else ""
    try:
        target.check_contents()
    except StoreError as exc:  # a link, a special file, a folder where a file belongs: named, nothing written
        raise ResumeError(f"cannot {o.mode}: {one_line(exc)}{left}") from None
    manifest = ledger.load()
    assert manifest is not None
    if manifest.identity.recipe is None and spec.identity.recipe is not None:
        raise ResumeError(_written_from_python(target.label, o.mode, manifest))
    # an extension lengthens a finished run, or continues one that ended on its condition past its end
    lengthened = manifest.length != spec.identity.blocking.length or manifest.ended_at is not None
    extending = o.mode == "extend" and lengthened
    if extending and manifest.ended_at is not None and not manifest.complete and _same_run(manifest, spec, target):
        extending = False  # this very run, killed as it ended (an extension's too): the same call finishes it
    if extending:
        extended = plan_extension(target, spec.identity, manifest, spec.total_blocks, o.rows)
        if extended is None:
            return Continuation(o, None, None)  # the stored run was a single block: nothing to keep
        manifest = extended
    elsewhere = other_length(target.label, manifest, spec.identity)
    if elsewhere is not None:
        raise elsewhere
    require_same_run(manifest, spec.identity, target.label)
    problem = manifest.inconsistency()
    if problem is not None:
        raise ResumeError(f"cannot resume: {contradicts_itself(target.label, problem)}")
    if manifest.committed_blocks == 0:
        return Continuation(o, None, None)  # killed before its first commit: the arrays may be half made, or not at all
    # checked as the output stands: an interrupted extension's lagging arrays and carries are read as readers read them
    checked = Output(target, spec, manifest, ZarrSink.open(target, spec.names), None, o.on_commit)
    checked.extending = extending
    o.check_resumable(checked)
    if not extending:  # an extension's summaries are the longer run's once it is applied
        try:
            Summaries.load(target, manifest.identity, manifest.summaries, manifest.committed_rows)
        except VerifyError as exc:
            raise ResumeError(f"cannot resume: {one_line(exc)}") from None
    return Continuation(o, manifest, checked, extending)


def _same_run(manifest: Manifest, spec: OutputSpec, target: Target) -> bool:
    try:
        require_same_run(manifest, spec.identity, target.label)
    except ResumeError:
        return False
    return True


def _written_from_python(label: str, mode: Mode, manifest: Manifest) -> str:
    """Why a recipe cannot continue an output written from Python, and how to continue it (never by overwriting)."""
    step = (manifest.identity.function or "?").split()[0]
    length, above = (", length=N", f" and N above {manifest.length}") if mode == "extend" else ("", "")
    return (
        f"cannot {mode} {label} with a recipe: it was written from Python (its step function {step}), and only "
        f"that function continues it; {mode} it from Python with "
        f'streamacc.write(path, f, init{length}, mode="{mode}"), passing the f and init that wrote it{above}'
    )


OPENERS: dict[tuple[str, Mode], Callable[[Opening], Output]] = {
    ("empty", "create"): _create,
    ("empty", "overwrite"): _create,
    ("empty", "resume"): _nothing_to_resume,
    ("empty", "extend"): _nothing_to_extend,
    ("ours", "create"): _exists,
    ("ours", "overwrite"): _overwrite,
    ("ours", "resume"): _continue,
    ("ours", "extend"): _continue,
    ("legacy", "create"): _exists,
    ("legacy", "overwrite"): _overwrite,
    ("legacy", "resume"): _legacy,
    ("legacy", "extend"): _legacy,
    ("foreign", "create"): _foreign,
    ("foreign", "overwrite"): _foreign,
    ("foreign", "resume"): _foreign,
    ("foreign", "extend"): _foreign,
}
"""How to open an output, by what is stored (:func:`probe`) and the run's mode."""


def open_output(
    target: Target,
    spec: OutputSpec,
    *,
    mode: Mode,
    init: list[HostLeaf],
    check_resumable: Callable[[Output], None],
    on_commit: Callable[[BlockResult], None] | None = None,
    rows: RowReader | None = None,
) -> Output:
    """Open ``target`` for a run of ``spec`` as ``mode`` asks; the writer lock is held.

    ``on_commit`` is called with each block once it is committed (a progress bar);
    ``rows`` reads the stored run's rows where its chunks do not hold them (see ``_extend``).
    """
    opening = Opening(target, spec, mode, init, check_resumable, on_commit, rows)
    return OPENERS[probe(target), mode](opening)


def prepare_output(
    target: Target,
    spec: OutputSpec,
    *,
    mode: Mode,
    init: list[HostLeaf],
    check_resumable: Callable[[Output], None],
    on_commit: Callable[[BlockResult], None] | None = None,
) -> Continuation:
    """:func:`open_output` for a run that continues a stored one (``mode`` resume or extend), checked and not yet
    applied (see :class:`Continuation`); a run of any other kind is opened as :func:`open_output` opens it, once
    applied."""
    opening = Opening(target, spec, mode, init, check_resumable, on_commit)
    stored = probe(target)
    if stored == "ours" and mode in ("resume", "extend"):
        return prepare_continue(opening)
    return Continuation(opening, None, None, opener=OPENERS[stored, mode])
