"""An output opened for writing: how a run starts, overwrites or resumes it, and how blocks commit.

The caller holds the output's writer lock. Opening decides from what is stored (nothing,
a streamacc output, an older streamacc output, anything else) whether the run may start
afresh or continue, refusing whatever would destroy data streamacc did not write or
continue from bookkeeping it cannot trust. Commits happen strictly in scan order: first
the block's record, then the manifest that counts it; the root group's public attributes
follow at the start, at the end, and every few seconds in between.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
import warnings
from collections.abc import Callable
from typing import Any

from ...engine import HostLeaf
from ...errors import LockedError, OutputExistsError, ResumeError, StoreError, StreamaccWarning, VerifyError, spell
from ...store import (
    BOOKKEEPING,
    LEASE_KEY,
    ArraySpec,
    Target,
    ZarrSink,
    describe_store_failure,
    is_store_failure,
    progress_attrs,
)
from ...summaries import Summaries, SummaryPlan
from ..record import (
    LEGACY_MANIFEST_KEY,
    MANIFEST_ATTR,
    MANIFEST_KEY,
    BlockRecord,
    Ledger,
    Manifest,
    decode_leaves,
    encode_leaves,
    node_attribute,
    require_same_run,
)
from ..threads import check_stop
from ..trust import root_problem
from ._extend import extend_manifest, finish_extension, nothing_to_extend

__all__ = ["PUBLISH_SECONDS", "BlockResult", "Output", "OutputSpec", "open_output", "probe"]

log = logging.getLogger("streamacc")

PUBLISH_SECONDS = 5.0
"""How often, at most, the root attributes are refreshed with the committed step count while writing."""


@dataclasses.dataclass(frozen=True)
class OutputSpec:
    """What a run's output must look like; built and checked before anything is touched."""

    identity: dict[str, Any]
    arrays: dict[str, ArraySpec]
    chunks: dict[str, tuple[int, ...]]
    dims: dict[str, tuple[str, ...]]
    codec: str
    attrs: dict[str, Any]
    array_attrs: dict[str, dict]
    total_blocks: int

    @property
    def names(self) -> list[str]:
        return list(self.arrays)


@dataclasses.dataclass(frozen=True)
class BlockResult:
    """A block made durable in the store, ready to commit: what its record needs."""

    index: int
    start: int
    stop: int
    carry_in: list[HostLeaf]
    carry_out: list[HostLeaf]
    crc32c: dict[str, list[int]]
    nbytes: int
    stored: int
    summary: dict | None = None  # each summarised output's pieces of the finest windows (see _summaries)

    def __len__(self) -> int:
        return self.stop - self.start


FIRST_TEMP = "zarr.json.streamacc-tmp"
"""All a writer killed before its first manifest can leave (in ``_streamacc/``), besides a lease."""


def _only_leftovers(target: Target) -> bool:
    """Whether ``target`` holds only what a writer killed before its first manifest leaves.

    Looks at two folder listings, never walks the tree: any other entry anywhere makes it
    not empty (a folder of a user's ``*.partial`` files is not ours to wipe).
    """
    if set(target.list_dir()) - {BOOKKEEPING}:
        return False
    for name in target.list_dir(BOOKKEEPING):
        lease = name == "lease" and target.list_keys(f"{BOOKKEEPING}/lease/") in ([], [LEASE_KEY])
        if name != FIRST_TEMP and not lease:
            return False
    return True


def written_by_a_run(names: list[str]) -> Callable[[str], bool]:
    """Whether a key is one a run with arrays ``names`` writes: root and array metadata, chunks, bookkeeping."""
    fixed = {"zarr.json", MANIFEST_KEY, *(f"{name}/zarr.json" for name in names)}
    chunks = re.compile(rf"^(?:{'|'.join(map(re.escape, names))})/c(?:/\d+)+$") if names else None
    records = re.compile(rf"^{BOOKKEEPING}/records_\d+/zarr\.json$")
    return lambda key: key in fixed or bool(records.match(key) or (chunks and chunks.match(key)))


def remove_temp_files(target: Target, names: list[str]) -> list[str]:
    """Remove the temp files that writers killed mid-write left among the keys of arrays ``names``; return them."""
    removed = target.clean_partials(written_by_a_run(names))
    if removed:
        log.info("removed %d temp file(s) left by a writer that died", len(removed))
    return removed


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
    return "empty" if _only_leftovers(target) else "foreign"


class Output:
    """An output open for writing under its lock: where the run starts, and its in-order commits."""

    def __init__(
        self, target: Target, spec: OutputSpec, manifest: Manifest, sink: ZarrSink, summaries: Summaries | None = None
    ) -> None:
        self.target = target
        self.spec = spec
        self.manifest = manifest
        self.sink = sink
        self.summaries = summaries
        self.ledger = Ledger(target)
        self.on_commit: Callable[[BlockResult], None] | None = None
        self._published = 0.0

    @property
    def first_block(self) -> int:
        """The first block (in scan order) still to compute."""
        return self.manifest.committed_blocks

    @property
    def carry(self) -> list[HostLeaf]:
        """The carry entering :attr:`first_block`, as host leaves."""
        return decode_leaves(self.manifest.carry or [])

    @property
    def complete(self) -> bool:
        return self.manifest.complete

    @property
    def summary_plan(self) -> SummaryPlan | None:
        """What a block's writer needs to cut its summary pieces (None: the run writes no summaries)."""
        return None if self.summaries is None else self.summaries.plan

    def _save(self, **changes: Any) -> None:
        """Durably save the manifest with ``changes``, then apply them in memory.

        The in-memory manifest changes only once the new one is durable, so that an error
        message never counts a block whose commit failed.
        """
        self.target.check_lock()
        self.ledger.save(dataclasses.replace(self.manifest, **changes))
        for name, value in changes.items():
            setattr(self.manifest, name, value)

    def publish(self, *, force: bool = False) -> None:
        """Refresh the root attributes with the committed steps (at most every few seconds unless forced)."""
        now = time.monotonic()
        if force or now - self._published >= PUBLISH_SECONDS:
            m = self.manifest
            self.sink.publish(progress_attrs(m.span(), m.length, m.complete))
            self._published = now

    def commit(self, *results: BlockResult) -> None:
        """Commit the next blocks in scan order: their records, then one manifest that counts them all."""
        check_stop()  # after Ctrl-C or SIGTERM nothing more is committed
        if not results:
            return
        first = self.manifest.committed_blocks
        if [r.index for r in results] != list(range(first, first + len(results))):
            raise AssertionError(f"blocks {[r.index for r in results]} committed out of order after {first}")
        recs = [BlockRecord(r.index, r.start, r.stop, encode_leaves(r.carry_in), r.crc32c) for r in results]
        changes = {}
        if self.summaries is not None:
            changes["summaries"] = self.summaries.commit(results)
        self.ledger.record(*recs)
        self._save(
            committed_blocks=first + len(results),
            committed_steps=self.manifest.committed_steps + sum(len(r) for r in results),
            carry=encode_leaves(results[-1].carry_out),
            **changes,
        )
        self.publish()
        if self.on_commit is not None:
            for result in results:
                self.on_commit(result)

    def remove_lost_writes(self) -> list[str]:
        """Remove the temp files of writers that died mid-write (a killed cluster worker); return them.

        Their blocks were written again by others, so only the debris is left; the writer
        lock keeps any other run out meanwhile.
        """
        return remove_temp_files(self.target, [*self.spec.names, *self.manifest.arrays])

    def finish(self) -> None:
        """Mark the run complete, in the manifest and then in the root attributes."""
        if self.summaries is None:
            self._save(complete=True)
        else:
            self._save(complete=True, summaries=self.summaries.finish())
        self.publish(force=True)

    def close(self) -> None:
        """Let background writes end (call before the writer lock is released, whatever happened)."""
        if self.summaries is not None:
            self.summaries.close()

    def _kept(self) -> tuple[int, bool] | None:
        """What the store's manifest still commits for this run, read back: its steps, and whether another
        run's manifest replaced it (a writer that took the output over); None when it cannot be read."""
        try:
            stored = Ledger(self.target).load()
        except Exception:
            return None
        if stored is None:
            return 0, False
        if stored.identity != self.manifest.identity:
            return 0, True
        return stored.committed_steps, False

    def failure(self, exc: Exception, length: int) -> StoreError | None:
        """The error for a store that failed mid-run, saying what is kept as the store itself now tells.

        Also for a lost lease whose store has lost this run's committed steps (the lease gone with
        the rest of the store, or another writer's output in their place). None for any other
        exception, which the caller raises as it is.
        """
        store_failed = is_store_failure(exc)
        if not (store_failed or isinstance(exc, LockedError)):
            return None
        committed = self.manifest.committed_steps
        kept = self._kept()
        if not store_failed and (kept is None or kept[0] >= committed):
            return None  # the lease alone was lost: its own message says what to do
        what = f"writing {self.target.label} failed after {committed} of {length} steps ({describe_store_failure(exc)})"
        resume = spell("resume", True)
        if kept is None:
            return StoreError(
                f"{what}, and the store cannot be read to confirm that those steps are kept; once it is reachable, "
                f"rerun with {resume}, which checks them first"
            )
        steps, replaced = kept
        if replaced:
            return StoreError(
                f"{what}, and another run's output now stands there (a writer that took the output over), so none "
                f"of this run's steps are kept and nothing more was written: leave that output, or write this run "
                "to another output path"
            )
        if steps < committed:
            return StoreError(
                f"{what}, and the store no longer holds them (its manifest is gone or commits {steps} steps): the "
                f"output is lost; start afresh with {spell('overwrite', True)}"
            )
        return StoreError(f"{what}; those steps are safely committed: fix the cause and rerun with {resume}")


def _create(target: Target, spec: OutputSpec, init: list[HostLeaf], ledger: Ledger) -> Output:
    """Start the run afresh: the new manifest first, so that any interruption leaves an output
    recognisably streamacc's that claims no block; then clear the rest; then create."""
    manifest = Manifest(spec.identity, total_blocks=spec.total_blocks, carry=encode_leaves(init))
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
    )
    dims = {name: sink.arrays[name].metadata.dimension_names for name in spec.arrays}
    summaries = Summaries.create(target, spec.identity, spec.arrays, spec.codec, dims)
    target.make_durable([f"{name}/zarr.json" for name in spec.arrays])
    manifest.arrays = {name: doc for name, doc in sink.documents().items() if doc is not None}
    ledger.save(manifest)
    output = Output(target, spec, manifest, sink, summaries)
    output.publish(force=True)
    return output


def open_output(
    target: Target,
    spec: OutputSpec,
    *,
    mode: str,
    init: list[HostLeaf],
    check_resumable: Callable[[Output], None],
) -> Output:
    """Open ``target`` for a run of ``spec`` (``mode`` 'new', 'overwrite', 'resume' or 'extend'); the lock is held.

    A resumed output is checked before anything is written: same run, a self-consistent
    manifest, safe contents, and ``check_resumable`` (which recomputes the last committed
    block). Resuming an output whose run never committed a block starts it afresh. An
    extended output (a finished run, to a longer length) becomes the longer run's, with
    every block but the last kept (see ``_extend``), and then resumes.
    """
    state = probe(target)
    ledger = Ledger(target)
    overwrite, resume = spell("overwrite", True), spell("resume", True)
    if state == "empty":
        if mode == "extend":
            raise nothing_to_extend(target.label)
        if mode == "resume":
            warnings.warn(
                f"nothing to resume at {target.label} (check the path if a run was expected there); starting a new run",
                StreamaccWarning,
                stacklevel=3,
            )
        return _create(target, spec, init, ledger)
    if mode == "new" and state != "foreign":
        raise OutputExistsError(
            f"{target.label} already exists; pass {overwrite} to replace it or {resume} to continue it"
        )
    if state == "foreign" and mode == "new":
        raise OutputExistsError(
            f"{target.label} exists and is not a streamacc output (it has no readable streamacc manifest); choose "
            "another output path"
        )
    if state == "foreign":
        what = "will not delete it" if mode == "overwrite" else "cannot continue it"
        raise (OutputExistsError if mode == "overwrite" else ResumeError)(
            f"{target.label} exists and is not a streamacc output (it has no readable streamacc manifest), so "
            f"{spell(mode, True)} {what}; choose another output path, or remove it yourself"
        )
    target.check_contents()
    if mode == "overwrite":
        return _create(target, spec, init, ledger)
    if state == "legacy":
        ledger.load()  # raises the legacy message
    manifest = ledger.load()
    assert manifest is not None
    extending = mode == "extend" and manifest.length != spec.identity["length"]
    if extending:
        extended = extend_manifest(target, spec.identity, manifest, spec.total_blocks)
        if extended is None:
            return _create(target, spec, init, ledger)  # the stored run was a single block: nothing to keep
        manifest = extended
    require_same_run(manifest, spec.identity, target.label)
    problem = manifest.inconsistency()
    if problem is not None:
        raise ResumeError(
            f"cannot resume {target.label}: its manifest contradicts itself ({problem}); its data cannot be trusted: "
            f"check it with `streamacc verify` or start afresh with {overwrite}"
        )
    finish_extension(target, manifest)
    remove_temp_files(target, [*spec.names, *manifest.arrays])
    if manifest.committed_blocks == 0:
        return _create(target, spec, init, ledger)  # killed before its first commit: the arrays may be half made
    try:
        summaries = Summaries.load(target, manifest.identity, manifest.summaries, manifest.committed_rows)
    except VerifyError as exc:
        raise ResumeError(f"cannot resume: {exc}") from None
    output = Output(target, spec, manifest, ZarrSink.open(target, spec.names), summaries)
    check_resumable(output)
    if summaries is not None:
        summaries.resume()
    problem = root_problem(target, manifest)
    if problem is not None:  # killed before the root caught up, or tampered with: it follows from the manifest
        if not extending:  # an extension's root still describes the shorter run, as it should until now
            log.info("rewrote the root metadata of %s, which %s", target.label, problem)
        output.sink.reset_root(spec.attrs)
        output.publish(force=True)
    return output
