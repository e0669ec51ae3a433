"""The store's seams: its own writes to local files, which no zarr store wrapper reaches; a commit's interval.

A test replaces one through ``streamacc.testing`` to make a write fail (a full disk) or a
writer die in the middle of one; each seam is replaced where it is called. Each room
declares its own (``arrays``: the chunk writes, ``targets``: the rest).
"""

from __future__ import annotations

from .arrays import SEAMS as ARRAYS
from .targets import SEAMS as TARGETS

__all__ = ["SEAMS"]

SEAMS = {"write_new": ARRAYS["write_new"], **TARGETS}
"""The store's seams by name (``streamacc.testing`` calls them ``store.NAME``)."""
