"""What writers killed mid-write leave behind, told apart from what they did not write.

A killed writer can leave a temp file of the chunk or document it was writing (zarr's
``*.partial``, streamacc's own ``*.streamacc-tmp``), and, killed before its first
manifest, nothing else that says the output is streamacc's. These are removed only among
the keys a run writes, so that nothing of a user's is ever touched.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from ...store import BOOKKEEPING, LEASE_KEY, Target
from ..bookkeeping import MANIFEST_KEY

__all__ = ["FIRST_TEMP", "only_leftovers", "remove_partial_writes", "written_by_a_run"]

log = logging.getLogger("streamacc")

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
        log.info("removed %d temp file(s) left by a writer that died", len(removed))
    return removed
