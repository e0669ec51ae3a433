"""What every reader checks before it trusts an output: ``open``, ``info``, ``verify`` and resume alike.

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
"""

from __future__ import annotations

from typing import Any

from ...errors import NoOutputError, VerifyError, arg
from ...store import Target, array_document, is_virtual
from ._ledger import Ledger, load_manifest
from ._manifest import Manifest
from ._root import root_problem

__all__ = [
    "arrays_problem",
    "carries_problem",
    "check_settled_root",
    "check_structure",
    "contradicts_itself",
    "trusted_manifest",
]

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
        return f"{problem}; rewrite it as the manifest says with verify and {arg('repair', True)}"
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
