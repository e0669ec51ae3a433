"""The lease's seam: the clock its renewals and checks read, which a test moves by hand."""

from __future__ import annotations

from ...base import Seam
from . import _lease

__all__ = ["SEAMS"]

SEAMS = {
    "time": Seam(
        "time: the module the lease reads its clock from (time.monotonic) and waits with (time.sleep)",
        (_lease, "time"),
    ),
}
"""The lease's seams by name (``streamacc.testing`` calls them ``store.lease.NAME``)."""
