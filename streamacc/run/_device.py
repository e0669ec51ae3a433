"""A write's window statistics computed on the device that computes its blocks (a TPU or GPU), not on the host.

Each block's summarised outputs are reduced by ``engine.window_stats``, a jitted function of the block's outputs
dispatched right after the block (``run_plan``'s ``dispatched``), so that the writer that takes the block receives
each piece's minimum, maximum and sum instead of passing over every value (``summaries.SummaryPlan.pieces``).
"""

from __future__ import annotations

import logging
import threading

import jax

from ..base import ACCELERATORS, rows_in
from ..engine import Block, WindowStats, window_stats
from ..summaries import Reduced, SummaryPlan

__all__ = ["DeviceSummaries", "summaries_on_device"]

log = logging.getLogger("streamacc")


def summaries_on_device(platform: str) -> bool:
    """Whether a local write computes its outputs' window statistics on the device where JAX computes on
    ``platform``: on a TPU or GPU, where the host would otherwise pass over every value of each block for them
    (a jitted function of the block's outputs, queued behind the block: see ``engine.window_stats``); on a CPU the
    host's numpy passes cost no more than XLA's there (``python benchmarks/bench_summaries.py --xla``)."""
    return platform in ACCELERATORS


class DeviceSummaries:
    """Each block's window statistics, computed on the device right after the block, for the summarised outputs the
    device reduces (float32, bfloat16, float16: ``engine.device_reducible``); the host reduces the others.

    The device's function compiles once for the pieces of a block (whole windows, or one piece of a window
    longer than a block), the first block's: a block cut otherwise (a layout whose blocks are no whole number
    of windows, the output's last block, a block cut by its condition) is reduced by the host, rather than
    compiled for."""

    def __init__(self, names: list[str], summary: SummaryPlan, save_every: int) -> None:
        self.names, self.summary, self.save_every = names, summary, save_every
        self._lock = threading.Lock()
        self._computing: dict[int, tuple[range, dict[str, WindowStats]]] = {}
        self._runs: tuple[tuple[int, int], ...] | None = None  # the pieces the device's function compiled for

    def dispatched(self, start: int, stop: int, out: list[jax.Array]) -> None:
        """Start the statistics of the block of steps ``[start, stop)`` whose outputs are ``out`` (leaves in the
        order of ``names``)."""
        rows = range(*rows_in(start, stop, self.save_every))
        runs = self.summary.runs(rows.start, len(rows))
        if self._runs is None and len(runs) == 1:
            self._runs = runs
        if runs != self._runs:
            return
        stats = {}
        try:
            for name, leaf in zip(self.names, out, strict=True):
                if name in self.summary.names:
                    found = window_stats(leaf, runs, whole=name in self.summary.over_state)
                    if found is not None:
                        stats[name] = found
        except Exception:  # the host reduces the block, as it does without this
            log.debug("window statistics of steps %d to %d not computed on the device", start, stop, exc_info=True)
            return
        with self._lock:
            self._computing[start] = (rows, stats)

    def take(self, block: Block) -> dict[str, Reduced] | None:
        """The statistics of ``block``'s pieces, on the host (None where the block is not the one they were
        computed for: cut after the step where its condition held; or where the device failed to compute them:
        the host reduces the block then, as it does without this)."""
        with self._lock:
            rows, stats = self._computing.pop(block.start, (None, {}))
        if rows != block.rows or not stats:
            return None
        try:
            return {name: found.fetch() for name, found in stats.items()}
        except Exception:  # likewise
            log.debug("window statistics of steps %d to %d not fetched", block.start, block.stop, exc_info=True)
            return None
