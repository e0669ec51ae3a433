"""The stream's seam: whether a block's callback reads the program's buffers in place, as it does on the CPU."""

from __future__ import annotations

from ..._seams import Seam
from . import _program

__all__ = ["SEAMS"]

SEAMS = {
    "buffers_on_host": Seam(
        "buffers_on_host(): whether a block's callback reads the program's buffers in place (a buffer_callback, on "
        "the CPU) rather than as an ordered io_callback hands them over (other platforms)",
        (_program, "_buffers_on_host"),
    ),
}
"""The stream's seams by name (``streamacc.testing`` calls them ``run.stream.NAME``)."""
