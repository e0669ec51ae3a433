"""The root group's metadata: derived from the manifest, checked by every reader, repaired by resume.

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
from typing import Any

from ...errors import StoreError, one_line
from ...store import BOOKKEEPING, Target, array_document, is_virtual, netcdf_safe, progress_attrs
from ...summaries import LISTED_GROUP, listing
from ._manifest import MANIFEST_DESCRIPTION, Manifest

__all__ = ["bookkeeping_listing", "root_problem"]


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
    if attrs.get("streamacc_total_steps") != expected["streamacc_total_steps"]:
        return "gives another streamacc_total_steps than the manifest"
    start, done = attrs.get("streamacc_committed_start"), attrs.get("streamacc_committed_steps")
    low, high = manifest.span()
    if not (isinstance(start, int | float) and isinstance(done, int | float) and low <= start <= start + done <= high):
        return f"counts committed steps the manifest does not (it commits steps {low} to {high})"
    return None


def _consolidated_problem(target: Target, doc: dict[str, Any], manifest: Manifest, reading: bool) -> str | None:
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
    problem = _progress_problem(attrs if isinstance(attrs, dict) else {}, manifest, reading, settled)
    return problem or _consolidated_problem(target, doc, manifest, reading)
