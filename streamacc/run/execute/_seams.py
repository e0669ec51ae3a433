"""The executors' seam: the block pool the local executor makes, which a test records."""

from __future__ import annotations

from ...base import Seam
from . import _local

__all__ = ["SEAMS"]

SEAMS = {
    "BlockPool": Seam(
        "BlockPool(size): the class of the pool of block buffers a local run makes", (_local, "BlockPool")
    ),
}
"""The executors' seams by name (``streamacc.testing`` calls them ``run.execute.NAME``)."""
