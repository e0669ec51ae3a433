"""The engine's seams: what it asks of the machine, which a test answers to reach a limit no machine has."""

from __future__ import annotations

from ...base import Seam
from ..plan import SEAMS as PLAN_SEAMS
from . import _api, _memory, _run

__all__ = ["SEAMS"]

SEAMS: dict[str, Seam] = {
    **PLAN_SEAMS,
    "physical_memory": Seam(
        "physical_memory(): this machine's memory in bytes (None when unknown), which the block checks compare with",
        (_memory, "physical_memory"),
        (_api, "physical_memory"),
    ),
    "copies_ahead": Seam(
        "copies_ahead(): whether a block's ys start to cross to the host as soon as computed (off the CPU), which "
        "the accelerator benchmark turns off to measure the copy made when the block is handed over",
        (_run, "_copies_ahead"),
    ),
}
"""The engine's seams by name (``streamacc.testing`` calls them ``engine.NAME``)."""
