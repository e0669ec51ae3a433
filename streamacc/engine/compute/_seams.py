"""The engine's seams: what it asks of the machine, which a test answers to reach a limit no machine has."""

from __future__ import annotations

from ...base import Seam
from ..plan import SEAMS as PLAN_SEAMS
from . import _api, _memory

__all__ = ["SEAMS"]

SEAMS: dict[str, Seam] = {
    **PLAN_SEAMS,
    "physical_memory": Seam(
        "physical_memory(): this machine's memory in bytes (None when unknown), which the block checks compare with",
        (_memory, "physical_memory"),
        (_api, "physical_memory"),
    ),
}
"""The engine's seams by name (``streamacc.testing`` calls them ``engine.NAME``)."""
