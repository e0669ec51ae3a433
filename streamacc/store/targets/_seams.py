"""The targets' seams: their own writes to local files, which no zarr store wrapper reaches; a commit's interval.

A test replaces one through ``streamacc.testing`` (as ``store.NAME``) to make a write fail
(a full disk) or a writer die in the middle of one; each seam is replaced where it is called.
"""

from __future__ import annotations

from ...base import Seam
from . import _files, _icechunk, _localtarget

__all__ = ["SEAMS"]

SEAMS: dict[str, Seam] = {
    "write_all": Seam(
        "write_all(fd, view): the bytes of a local file written to its descriptor, by write_new and atomic_write",
        (_files, "_write_all"),
    ),
    "atomic_write": Seam(
        "atomic_write(path, data): each key a local folder's target writes itself (metadata, manifests), durably",
        (_localtarget, "atomic_write"),
    ),
    "remove_tree_contents": Seam(
        "remove_tree_contents(root, keep): an overwritten local output's old files deleted, walking the folder",
        (_localtarget, "remove_tree_contents"),
    ),
    "icechunk_commit_seconds": Seam(
        "COMMIT_SECONDS: the most seconds an Icechunk writer goes between two commits (0: a commit every block)",
        (_icechunk, "COMMIT_SECONDS"),
    ),
}
"""The targets' seams by name."""
