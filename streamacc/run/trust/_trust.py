"""What every reader checks before it trusts an output: ``open``, ``info``, ``verify`` and resume alike.

Outputs get copied, synced and extracted from archives, so their structure is checked
before any value is read: nothing inside the output is a link or a special file (a named
pipe would hang a reader), the run's arrays still have the metadata they were created
with (attributes that change decoded values included, see ``array_document``), and the
root metadata agrees with the manifest (``_root.py``). Knows no JAX, so that reading an
output never imports it.
"""

from __future__ import annotations

from ...errors import VerifyError, arg
from ...store import Target, array_document, is_virtual
from ..record import Manifest
from ._root import root_problem

__all__ = ["arrays_problem", "check_structure"]


def arrays_problem(target: Target, manifest: Manifest) -> str | None:
    """How the run's arrays' stored metadata differs from what the manifest recorded, or None."""
    recorded = manifest.arrays
    for name in manifest.identity["arrays"]:
        raw = target.read(f"{name}/zarr.json")
        if manifest.recomputes and raw is not None and not is_virtual(raw):
            return (
                f"array {name!r} is declared a plain array ({name}/zarr.json) though some of its chunks are not "
                "stored, so plain Zarr readers would read fill values as data"
            )
        stored = array_document(raw)
        if stored is None:
            return f"the metadata of array {name!r} ({name}/zarr.json) is missing or unreadable"
        if name not in recorded:
            return f"the manifest records no metadata for array {name!r}"
        changed = sorted(k for k in recorded[name].keys() | stored.keys() if recorded[name].get(k) != stored.get(k))
        if changed:
            return f"the metadata of array {name!r} changed since it was written ({', '.join(changed)})"
    return None


def check_structure(target: Target, manifest: Manifest) -> None:
    """Raise (StoreError, VerifyError) unless ``target`` may be read: no links, unchanged arrays, a true root."""
    target.check_contents()
    problem = arrays_problem(target, manifest)
    if problem is not None:
        raise VerifyError(f"{target.label}: {problem}; rewrite the output with {arg('mode', 'overwrite')}")
    problem = root_problem(target, manifest)
    if problem is not None:
        raise VerifyError(
            f"{target.label}: its root metadata (zarr.json) {problem}; resume the run with {arg('mode', 'resume')} "
            "to rewrite it from the manifest"
        )
