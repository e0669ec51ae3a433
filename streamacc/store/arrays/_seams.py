"""The arrays' seam: a data chunk's write to a local folder, which no zarr store wrapper reaches.

A test replaces it through ``streamacc.testing`` (as ``store.write_new``) to make a write fail
(a full disk) or a writer die in the middle of one; it is replaced where it is called.
"""

from __future__ import annotations

from ...base import Seam
from . import _chunks

__all__ = ["SEAMS"]

SEAMS: dict[str, Seam] = {
    "write_new": Seam(
        "write_new(path, data): a data chunk written to a local folder, into a temp file renamed over it",
        (_chunks, "write_new"),
    ),
}
"""The arrays' seams by name."""
