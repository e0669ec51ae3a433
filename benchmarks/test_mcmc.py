"""Long MCMC chains: blackjax's random-walk Metropolis streamed by streamacc against blackjax's own
``run_inference_algorithm``, which keeps every draw in memory; and ArviZ reading the streamed chains.

The sides are in ``bench_mcmc.py``: 4 chains on a correlated 2-D Gaussian in float32, 1000
steps of burn-in in memory, then the draws.
"""

from __future__ import annotations

import shutil
import statistics
import sys
from pathlib import Path

import pytest

from streamacc.cli import parse_int

SIDES = Path(__file__).resolve().parent / "bench_mcmc.py"
GIB2 = 2 * 2**30


def side(name: str, draws: int, out: Path) -> list:
    return [sys.executable, SIDES, name, "--draws", str(draws), "--out", out]


@pytest.mark.benchmark(group="mcmc")
@pytest.mark.sizes("2**16")
def test_mcmc_memory(scenario, size):
    """In each round, at the draws asked for and at a quarter of them: streamacc writing the chains, then
    blackjax keeping them. The quarter gives each side's peak RSS per draw, and blackjax's, whose history grows
    with the draws, the draws it would hold in 2 GiB at that slope."""
    draws = parse_int(size, name="--size")
    out = scenario.folder / "chains.zarr"
    counts = (draws // 4, draws)

    def one_round(i: int) -> None:
        for n in counts:
            for name in ("streamacc", "blackjax"):
                shutil.rmtree(out, ignore_errors=True)
                scenario.run(side(name, n, out), f"{name}, {n} draws", round=i + 1, draws=n)

    scenario.rounds(one_round, default=2)
    shutil.rmtree(out, ignore_errors=True)
    med = {(name, n): scenario.medians(f"{name}, {n} draws", "wall s", "CPU s", "peak RSS MB")
           for name in ("streamacc", "blackjax") for n in counts}  # fmt: skip
    for name in ("streamacc", "blackjax"):
        low, high = med[name, counts[0]]["peak RSS MB"], med[name, counts[1]]["peak RSS MB"]
        slope = (high - low) * 1e6 / (counts[1] - counts[0])
        scenario.figures[f"{name}: peak RSS MB"] = high
        scenario.figures[f"{name}: peak RSS bytes per draw (from a quarter of the draws)"] = round(slope, 1)
        if name == "blackjax" and slope > 0:
            fits = int(counts[1] + (GIB2 - high * 1e6) / slope)
            scenario.figures["blackjax: draws within 2 GiB at that slope"] = fits
    for key in ("wall s", "CPU s"):
        ratio = med["streamacc", draws][key] / med["blackjax", draws][key]
        scenario.figures[f"streamacc / blackjax: {key.split()[0]}"] = round(ratio, 2)
    for name in ("streamacc", "blackjax"):
        rows = [r for r in scenario.rows if r["side"] == f"{name}, {draws} draws"]
        scenario.figures[f"{name}: mean position"] = f"{rows[0]['mean x0']}, {rows[0]['mean x1']}"
        scenario.figures[f"{name}: acceptance"] = rows[0]["acceptance"]


@pytest.mark.benchmark(group="mcmc-arviz")
@pytest.mark.sizes("2**16")
def test_mcmc_arviz(scenario, size):
    """The chains written once by streamacc; in each round, ``to_arviz``, ``arviz.summary`` and
    ``arviz.plot_trace`` of them in a fresh process."""
    draws = parse_int(size, name="--size")
    out = scenario.folder / "chains.zarr"
    shutil.rmtree(out, ignore_errors=True)
    scenario.run(side("streamacc", draws, out), "streamacc write", draws=draws)
    scenario.rounds(lambda i: scenario.run(side("arviz", draws, out), "arviz", round=i + 1, draws=draws), default=2)
    shutil.rmtree(out, ignore_errors=True)
    rows = [r for r in scenario.rows if r["side"] == "arviz"]
    for key in ("to_arviz s", "summary s", "plot_trace s", "peak RSS MB"):
        scenario.figures[f"arviz: median {key}"] = statistics.median(r[key] for r in rows)
