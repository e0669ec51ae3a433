"""The output's seams: how often a run publishes and commits, which a test makes every block."""

from __future__ import annotations

from ...base import Seam
from . import _output

__all__ = ["SEAMS"]

SEAMS = {
    "PUBLISH_SECONDS": Seam(
        "PUBLISH_SECONDS: the least time between two refreshes of the root's progress attributes",
        (_output, "PUBLISH_SECONDS"),
    ),
    "SLOW_BLOCK_SECONDS": Seam(
        "SLOW_BLOCK_SECONDS: the seconds a block takes to compute and commit, past which the run says so once",
        (_output, "SLOW_BLOCK_SECONDS"),
    ),
    "VIRTUAL_COMMIT_SECONDS": Seam(
        "VIRTUAL_COMMIT_SECONDS: about how long a virtual run's blocks wait to commit together",
        (_output, "VIRTUAL_COMMIT_SECONDS"),
    ),
}
"""The output's seams by name (``streamacc.testing`` calls them ``run.output.NAME``)."""
