"""Whether the store still holds what a run committed, asked before it is called complete or safe.

An output folder removed (or emptied) while a run writes is not always noticed by the
writes that follow: a chunk's write makes its folders again, and a manifest written after
the removal counts the blocks written before it. So before the run is marked complete,
and before a failed run is told that its steps are safely committed, the store is asked
for what every reader needs first, cheaply: the manifest, each array's and each summary
level's metadata, the kept carries' arrays, and the chunks of the first and the last
committed block and of the carries kept after them (4 bytes each, against their records).
"""

from __future__ import annotations

from ...errors import VerifyError
from ...store import Target, ZarrSink
from ...summaries import Summaries
from ..bookkeeping import MANIFEST_KEY, Ledger, Manifest, trailer_problem

__all__ = ["missing_from_store"]


def missing_from_store(target: Target, manifest: Manifest, sink: ZarrSink, summaries: Summaries | None) -> str | None:
    """What of the committed output ``manifest`` describes the store no longer holds, in words; None when it
    holds all that was asked."""
    keys = [MANIFEST_KEY, *(f"{name}/zarr.json" for name in sink.arrays)]
    if not manifest.v2:  # the kept carries' arrays, which a resume starts from
        carries = Ledger(target).carries(manifest)
        keys += [f"{carries.path(i)}/zarr.json" for i in range(len(carries.leaves))]
    if summaries is not None:
        keys += summaries.store.metadata_keys()
    for key in keys:
        if target.read(key) is None:
            return f"{key} is missing"
    last = manifest.committed_blocks - 1
    blocks = sorted({k for k in (0, last) if k >= 0 and manifest.stores(k)})
    if not blocks:
        return None
    try:
        problem = trailer_problem(target, Ledger(target), sink, blocks, manifest.identity.blocking.save_every, manifest)
    except VerifyError:  # a block's record, gone with the rest
        return f"the records of blocks {', '.join(map(str, blocks))} are missing or damaged"
    if problem is None:
        return None
    k, start, stop, what = problem
    return f"block {k} (steps {start}-{stop}): {what}"
