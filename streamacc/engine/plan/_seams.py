"""The plan's seam: the platform JAX computes on, which a test answers to plan as on a chip this machine lacks."""

from __future__ import annotations

from ...base import Seam
from . import _platform

__all__ = ["SEAMS"]

SEAMS: dict[str, Seam] = {
    "platform": Seam(
        "platform(): the platform JAX computes on ('cpu', 'tpu', 'gpu', ...), whose defaults a run takes (the "
        "unroll chosen for a step, the recipes' unroll, the write's block bytes, a Stream's hand-over) and which "
        "computes a block ahead off the CPU",
        (_platform, "_platform"),
    ),
}
"""The plan's seams by name (``streamacc.testing`` calls them ``engine.NAME``)."""
