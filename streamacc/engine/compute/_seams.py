"""The engine's seams: what it asks of the machine, which a test answers to reach a limit no machine has."""

from __future__ import annotations

from ...base import Seam
from . import _api, _memory, _run

__all__ = ["SEAMS"]

SEAMS: dict[str, Seam] = {
    "physical_memory": Seam(
        "physical_memory(): this machine's memory in bytes (None when unknown), which the block checks compare with",
        (_memory, "physical_memory"),
        (_api, "physical_memory"),
    ),
    "platform": Seam(
        "platform(): the platform JAX computes on ('cpu', 'tpu', 'gpu', ...), whose defaults a run takes (the "
        "recipes' unroll, the write's block bytes, a Stream's hand-over) and which computes a block ahead off the CPU",
        (_run, "_platform"),
    ),
}
"""The engine's seams by name (``streamacc.testing`` calls them ``engine.NAME``)."""
