"""The summaries' seam: the slice a large block is reduced in, which a test makes small."""

from __future__ import annotations

from ..base import Seam
from . import _reduce

__all__ = ["SEAMS"]

SEAMS = {
    "SLICE_BYTES": Seam(
        "SLICE_BYTES: the bytes of rows a block's windows are reduced in at a time", (_reduce, "SLICE_BYTES")
    ),
}
"""The summaries' seams by name (``streamacc.testing`` calls them ``summaries.NAME``)."""
