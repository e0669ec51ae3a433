"""What every reader checks before it trusts an output, and what a writer killed mid-write leaves behind.

Outputs get copied, synced and extracted from archives, so their structure is checked
before any value is read: nothing inside the output is a link or a special file (a named
pipe would hang a reader), the run's arrays still have the metadata they were created
with (attributes that change decoded values included, see ``array_document``), and the
root metadata agrees with the manifest (``_root.py``). Knows no JAX, so that reading an
output never imports it.

A writer may be moving the output on while it is read: each of its steps leaves a state a
reader reads (an array whose shape lags the manifest of an extension, a root that lags the
manifest), and one that reads the manifest before a step and the rest after it reads the
manifest again (:func:`trusted_manifest`).

The root group's metadata: derived from the manifest, checked by every reader, repaired by resume.

The root ``zarr.json`` is what plain Zarr readers (xarray, dask) see first: its attributes
say whether the output is complete and how many steps are committed, and its consolidated
metadata describes the arrays xarray shows. A kill between the manifest's last save and
the root's refresh leaves the root behind; tampering (a deleted root, a shrunk shape in
the consolidated metadata, a forged ``streamacc_complete``) makes it lie. Everything in it
follows from the manifest and the arrays' own metadata, so readers check it against them
and a resume rewrites it.

While a run writes, the root's count is refreshed every few seconds: it may lag the
manifest, never lead it. So the root may count fewer committed steps than the manifest,
but never more, and never say complete before the manifest does. A root without any of
these attributes claims nothing and is no lie (appending a variable with xarray drops
them), nor is one without consolidated metadata (a plain reader then reads each array's
own metadata): an extension writes such a root before it changes the arrays' shapes.

Readers ask whether the root *lies* (``reading=True``): a root that lags, as a writer
alive or killed leaves it, is read. ``verify`` asks, once it has checked the blocks,
whether the root has *settled* (``settled=True``): a writer refreshes the root right
after it saves the manifest complete, so a root that still lags a complete manifest was
left by a writer killed in between, or edited, and plain Zarr readers take the finished
run for an unfinished one. A writer asks whether it is *out of date*: it rewrites any
root that is not what it would write, so that a finished output is the bytes of one
never interrupted.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

from ..base import counted
from ..errors import NoOutputError, StoreError, VerifyError, arg, one_line
from ..store import BOOKKEEPING, LEASE_KEY, Target, array_document, is_virtual, netcdf_safe, progress_attrs
from ..summaries import LISTED_GROUP, listing
from ._ledger import Ledger, load_manifest
from ._manifest import MANIFEST_DESCRIPTION, MANIFEST_KEY, Manifest

__all__ = [
    "FIRST_TEMP",
    "arrays_problem",
    "bookkeeping_listing",
    "carries_misdescribed",
    "carries_problem",
    "check_settled_root",
    "check_structure",
    "contradicts_itself",
    "only_leftovers",
    "remove_partial_writes",
    "root_problem",
    "trusted_manifest",
    "written_by_a_run",
]

log = logging.getLogger("streamacc")


def bookkeeping_listing(target: Target, manifest: Manifest) -> dict[str, dict[str, Any]]:
    """streamacc's bookkeeping as the root's consolidated metadata lists it, by path from the root.

    The groups a Zarr reader may open by name, ``_streamacc`` and the summaries' (with their arrays), so
    that a reader opening the root with its consolidated metadata finds them. The attributes that hold
    the run's state (the manifest) change at every commit and grow with the run: they are not copied,
    and a reader reads them from the group's own ``zarr.json``. The block records' groups and the lease
    are not listed (one record group per 64 blocks would grow the root, which every reader reads, with
    the run).
    """
    root = {"attributes": {"description": MANIFEST_DESCRIPTION}, "zarr_format": 3, "node_type": "group"}
    summaries = listing(target, manifest.identity.summaries)
    return {BOOKKEEPING: {**root, "consolidated_metadata": LISTED_GROUP}, **summaries}


def _progress_problem(attrs: dict[str, Any], manifest: Manifest, reading: bool, settled: bool) -> str | None:
    expected = netcdf_safe(
        progress_attrs(manifest.span(), manifest.length, manifest.complete, virtual=manifest.recomputes)
    )
    if not expected.keys() & attrs.keys():
        return None  # it claims nothing (xarray's to_zarr(mode="a") drops the root's attributes): no lie
    # the writer saved the last commit, not yet the root
    lagging = reading and not settled and attrs.get("streamacc_complete") == 0
    if manifest.complete and not lagging:
        differ = sorted(k for k, v in expected.items() if attrs.get(k) != v)
        return f"has out-of-date attributes ({', '.join(differ)}) though the run is complete" if differ else None
    if attrs.get("streamacc_complete") != 0:
        return "says the run is complete, which its manifest does not"
    totals = {expected["streamacc_total_steps"]}
    if lagging and manifest.ended_at is not None:  # published before the run ended on its condition: its length then
        totals.add(manifest.identity.blocking.length)
    if attrs.get("streamacc_total_steps") not in totals:
        return "gives another streamacc_total_steps than the manifest"
    start, done = attrs.get("streamacc_committed_start"), attrs.get("streamacc_committed_steps")
    low, high = manifest.span()
    if not (isinstance(start, int | float) and isinstance(done, int | float) and low <= start <= start + done <= high):
        return f"counts committed steps the manifest does not (it commits steps {low} to {high})"
    return None


def _cut_since(listed: dict[str, Any] | None, stored: dict[str, Any] | None, manifest: Manifest) -> bool:
    """Whether array metadata ``listed`` (a lagging root's) is ``stored`` before the run that ended on its condition
    cut it after its last step: the same but for more rows, the run's whole length's."""
    if listed is None or stored is None or manifest.ended_at is None:
        return False
    shape, cut = listed.get("shape"), stored.get("shape")
    if not (isinstance(shape, list) and isinstance(cut, list) and shape and cut):
        return False
    return {**listed, "shape": cut} == stored and shape[0] == manifest.identity.rows and cut[0] == manifest.rows()[1]


def _consolidated_problem(
    target: Target, doc: dict[str, Any], manifest: Manifest, reading: bool, lagging: bool = False
) -> str | None:
    names = manifest.identity.names
    consolidated = doc.get("consolidated_metadata")
    members = consolidated.get("metadata") if isinstance(consolidated, dict) else None
    if consolidated is None and reading:
        return None  # it lists nothing: plain readers read each array's own metadata
    if not isinstance(members, dict):
        return "has no consolidated metadata of the arrays"
    missing = [name for name in names if name not in members]
    if missing:
        return f"lists no array {missing[0]!r} in its consolidated metadata"
    bookkeeping = bookkeeping_listing(target, manifest)
    unlisted = [path for path in bookkeeping if path not in members]
    if unlisted and not reading:  # a root of streamacc 0.3 or older: readers read it, a writer lists them
        return f"lists no node {unlisted[0]!r} of streamacc's bookkeeping in its consolidated metadata"
    for name, member in sorted(members.items()):
        if not isinstance(member, dict) or member.get("node_type") != "array":
            continue  # groups hold no values (xarray consolidates streamacc's bookkeeping too)
        if name in bookkeeping:  # as its level's own consolidated metadata describes it
            if array_document(json.dumps(member).encode()) != array_document(json.dumps(bookkeeping[name]).encode()):
                return f"describes array {name!r} otherwise than {name}/zarr.json does (consolidated metadata)"
            continue
        raw = target.read(f"{name}/zarr.json")
        listed = json.dumps(member).encode()
        stored = array_document(raw)
        declared = is_virtual(listed) != is_virtual(raw)
        if reading:  # listed virtual: a plain reader refuses it; listed plain: it reads stored chunks, all but unstored
            declared = not is_virtual(listed) and is_virtual(raw) and manifest.recomputes
        if lagging and not declared and _cut_since(array_document(listed), stored, manifest):
            continue  # published before the run ended: readers read the arrays' own metadata, cut since
        if stored is None or array_document(listed) != stored or declared:
            return f"describes array {name!r} otherwise than {name}/zarr.json does (consolidated metadata)"
    return None


def root_problem(target: Target, manifest: Manifest, *, reading: bool = False, settled: bool = False) -> str | None:
    """How the root ``zarr.json`` of ``target`` contradicts its manifest and arrays, or None when it does not.

    With ``reading``, only what misleads a reader (see the module's docstring): a root
    that lags the manifest, or lists no arrays, is read. With ``settled`` as well, a root
    that lags a complete manifest is a problem too. The answer completes a sentence whose
    subject is the root metadata ("... is missing").
    """
    try:
        raw = target.read("zarr.json")
    except StoreError as exc:
        return f"cannot be read ({one_line(exc)})"
    if raw is None:
        return "is missing"
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or doc.get("zarr_format") != 3 or doc.get("node_type") != "group":
        return "is not the metadata of a Zarr v3 group"
    attrs = doc.get("attributes")
    attrs = attrs if isinstance(attrs, dict) else {}
    problem = _progress_problem(attrs, manifest, reading, settled)
    lagging = reading and not settled and attrs.get("streamacc_complete") == 0
    return problem or _consolidated_problem(target, doc, manifest, reading, lagging)


ATTEMPTS = 5
"""Times a reader reads the manifest again when what it read disagrees with a newer manifest."""


def _lagging(recorded: dict[str, Any], stored: dict[str, Any], manifest: Manifest) -> bool:
    """Whether ``stored`` is ``recorded`` with fewer rows that still hold every committed one: an extension
    saved the longer run's manifest and has not yet given the array its longer shape."""
    want, shape = recorded.get("shape"), stored.get("shape")
    if not (isinstance(want, list) and isinstance(shape, list) and want and shape):
        return False
    same_else = {**stored, "shape": want} == recorded and shape[1:] == want[1:]
    return same_else and isinstance(shape[0], int) and manifest.rows()[1] <= shape[0] < want[0]


def arrays_problem(target: Target, manifest: Manifest, *, declared: bool = True) -> str | None:
    """How the run's arrays' stored metadata differs from what the manifest recorded, or None.

    Arrays some of whose chunks are not stored must be declared virtual; not asked without
    ``declared`` (an extension of a materialized virtual output declares them so later).
    """
    recorded = manifest.arrays
    for name in manifest.identity.names:
        raw = target.read(f"{name}/zarr.json")
        if declared and manifest.recomputes and raw is not None and not is_virtual(raw):
            return (
                f"array {name!r} is declared a plain array ({name}/zarr.json) though some of its chunks are not "
                "stored, so plain Zarr readers would read fill values as data"
            )
        stored = array_document(raw)
        if stored is None:
            return f"the metadata of array {name!r} ({name}/zarr.json) is missing or unreadable"
        if name not in recorded:
            return f"the manifest records no metadata for array {name!r}"
        if _lagging(recorded[name], stored, manifest):
            continue
        changed = sorted(k for k in recorded[name].keys() | stored.keys() if recorded[name].get(k) != stored.get(k))
        if changed:
            return f"the metadata of array {name!r} changed since it was written ({', '.join(changed)})"
    return None


def carries_problem(
    target: Target, manifest: Manifest, ledger: Ledger | None = None, *, metadata: bool = True
) -> str | None:
    """What is wrong with how the kept carries are stored and how to mend it, in words, or None (format 2:
    nothing to check).

    Their arrays' metadata must be what the manifest's leaves, the run's blocks and the
    carries' codec make it (anything else would read, or write, every carry in another
    form; not asked without ``metadata``), and the committed blocks' records must name a
    carry exactly after the blocks where the manifest's spacing keeps one (every K-th, and
    the run's last).
    """
    if manifest.v2:
        return None
    ledger = ledger or Ledger(target)
    problem = ledger.carries(manifest).metadata_problem(manifest.committed_blocks) if metadata else None
    if problem is not None:
        return carries_misdescribed(manifest, ledger) or (
            f"{problem}; rewrite it as the manifest says with verify and {arg('repair', True)}"
        )
    assert manifest.carries is not None
    every = manifest.carries["every"]
    for k in range(manifest.committed_blocks):
        kept, keeps = ledger.block(k, manifest).carry is not None, manifest.keeps_carry(k + 1)
        if kept != keeps:
            return (
                f"its manifest keeps a carry after every {every} blocks (carries.every) and the run's last, but the "
                f"record of block {k} names {'one' if kept else 'none'} after it: the manifest and the records "
                f"disagree, so neither can be trusted; rewrite the output with {arg('mode', 'overwrite')}"
            )
    return None


MISDESCRIBED_TRIES = 8
"""Kept carries read, at most, to tell whether the manifest describes them (those damaged tell nothing)."""


def carries_misdescribed(manifest: Manifest, ledger: Ledger) -> str | None:
    """Why the manifest's record of the kept carries (``carries``: their codec, dtypes and shapes) is not what wrote
    them, in words with the fix, or None where it is (or no kept carry can tell).

    Asked where the carries' stored metadata and the manifest disagree, before anything is
    rewritten: a kept chunk that is intact and that the manifest's description does not
    decode and encode back to its bytes says the manifest is the damaged one, and rewriting
    the metadata as it says would only make the carries unreadable.
    """
    carries = ledger.carries(manifest)
    tries = 0
    for boundary in range(manifest.committed_blocks + 1):
        crcs = ledger.carry_checksums(manifest, boundary)
        if crcs is None:
            continue
        described = carries.described(boundary, crcs)
        if described is False:
            return (
                f"its manifest's record of the kept carries (carries: their codec, dtypes and shapes) is not what "
                f"wrote them ({', '.join(carries.keys(boundary))}, intact, is no carry it describes), so the manifest "
                f"is damaged and its carries cannot be read; rewrite the output with {arg('mode', 'overwrite')}"
            )
        tries += 1
        if described or tries >= MISDESCRIBED_TRIES:
            return None
    return None


def contradicts_itself(label: str, problem: str) -> str:
    """The one diagnosis and advice for a manifest whose counts contradict each other or its layout (edited by
    hand, or damaged): no reader can tell which of its blocks are committed."""
    return (
        f"the manifest of {label} contradicts itself ({problem}), so which of its blocks are committed cannot be "
        f"told; start afresh with {arg('mode', 'overwrite')}"
    )


def check_structure(target: Target, manifest: Manifest) -> None:
    """Raise (StoreError, VerifyError) unless ``target`` may be read: no links, unchanged arrays, a true root.

    A run that has committed no block yet, whose arrays and root are still being made (or
    were left half made by a writer stopped before its first block), has nothing to read:
    NoOutputError says so.
    """
    target.check_contents()
    contradiction = manifest.inconsistency()  # first: its counts bound every loop over its blocks
    if contradiction is not None:
        raise VerifyError(contradicts_itself(target.label, contradiction))
    problem = arrays_problem(target, manifest)
    if problem is None:
        root = root_problem(target, manifest, reading=True)
        if root is not None:
            problem = f"its root metadata (zarr.json) {root}"
            fix = f"resume the run with {arg('mode', 'resume')} to rewrite it from the manifest"
    else:
        fix = f"rewrite the output with {arg('mode', 'overwrite')}"
    if problem is None:
        return
    if manifest.committed_blocks == 0:
        raise NoOutputError(
            f"{target.label} holds no committed step yet (its run is making its arrays, or stopped before its first "
            "block); read it once a block is committed"
        )
    raise VerifyError(f"{target.label}: {problem}; {fix}")


def check_settled_root(target: Target, manifest: Manifest) -> None:
    """Raise VerifyError when the root of a complete run still lags its manifest (``_root.py``: settled).

    Asked by ``verify`` once it has checked the blocks of ``manifest``, by then long after
    a live writer's last refresh. A writer that moved the output on since (an extension)
    leaves nothing to judge here: the root is judged against the manifest it follows.
    """
    if not manifest.complete:
        return
    problem = root_problem(target, manifest, reading=True, settled=True)
    if problem is None or load_manifest(target) != manifest:
        return
    raise VerifyError(
        f"{target.label}: its root metadata (zarr.json) {problem}; resume the run with {arg('mode', 'resume')} to "
        "rewrite it from the manifest"
    )


def trusted_manifest(target: Target) -> Manifest:
    """The manifest of ``target``, once the output's structure agrees with it (:func:`check_structure`).

    What disagrees with the manifest because a writer moved the output on after the manifest
    was read is read again with the newer manifest; only what disagrees with the manifest
    as it stands is refused.
    """
    manifest = load_manifest(target)
    for _ in range(ATTEMPTS):
        try:
            check_structure(target, manifest)
            return manifest
        except (VerifyError, NoOutputError):
            newer = load_manifest(target)
            if newer == manifest:
                raise
            manifest = newer
    check_structure(target, manifest)
    return manifest


FIRST_TEMP = "zarr.json.streamacc-tmp"
"""All a writer killed before its first manifest can leave (in ``_streamacc/``), besides a lease."""


def only_leftovers(target: Target) -> bool:
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
    """Whether a key is one a run with arrays ``names`` writes: root and array metadata, chunks, and the nodes and
    chunks of the bookkeeping (the manifest, block records, summaries: every ``zarr.json`` and chunk under it)."""
    fixed = {"zarr.json", MANIFEST_KEY, *(f"{name}/zarr.json" for name in names)}
    chunks = re.compile(rf"^(?:{'|'.join(map(re.escape, names))})/c(?:/\d+)+$") if names else None
    bookkeeping = re.compile(rf"^{BOOKKEEPING}/(?:[A-Za-z0-9_]+/)*(?:zarr\.json|c(?:/\d+)+)$")
    return lambda key: key in fixed or bool(bookkeeping.match(key) or (chunks and chunks.match(key)))


def remove_partial_writes(target: Target, names: list[str]) -> list[str]:
    """Remove the temp files that writers killed mid-write left among the keys of arrays ``names``; return them."""
    removed = target.clean_partials(written_by_a_run(names))
    if removed:
        log.info("removed %s left by a writer that died", counted(len(removed), "temp file"))
    return removed
