"""The stream's seams: how a block crosses to the host (in place on the CPU, by a callback elsewhere), in pieces."""

from __future__ import annotations

from ...base import Seam
from . import _program

__all__ = ["SEAMS"]

SEAMS = {
    "handover": Seam(
        "handover(): how a block crosses to the host: 'in_place' (a buffer_callback reads the program's buffers, "
        "on the CPU), 'ordered' (an ordered io_callback, other platforms), 'chained' (an io_callback ordered by a "
        "token it passes on) or 'pinned' (as 'chained', the ys first moved to pinned host memory)",
        (_program, "_handover"),
    ),
    "piece_bytes": Seam(
        "piece_bytes(): the bytes of ys a block's callback takes as one operand at most, where a block crosses by "
        "io_callback ('ordered', 'chained', 'pinned'): each ys leaf crosses as pieces of consecutive rows",
        (_program, "_piece_bytes"),
    ),
}
"""The stream's seams by name (``streamacc.testing`` calls them ``run.stream.NAME``)."""
