"""The engine's seams: what it asks of the machine, which a test answers to reach a limit no machine has."""

from __future__ import annotations

from .._seams import Seam
from . import _api, _memory

__all__ = ["SEAMS"]

SEAMS = {
    "physical_memory": Seam(
        "physical_memory(): this machine's memory in bytes (None when unknown), which the block checks compare with",
        (_memory, "physical_memory"),
        (_api, "physical_memory"),
    ),
}
"""The engine's seams by name (``streamacc.testing`` calls them ``engine.NAME``)."""
