"""Peak memory of the recipes that read an input (``cumsum``/``cumprod --input``) against those that read none."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path

import pytest

from streamacc.cli._expr import parse_int

SIDES = Path(__file__).resolve().parent / "_sides.py"
RECIPES = ("cumsum", "cumprod", "gp", "logistic")


@pytest.mark.benchmark(group="input-memory")
@pytest.mark.sizes("2**22")
def test_input_memory(scenario, size):
    """One input (float64 uniform in [0.5, 1), chunks of 2**22, zarr's default codec); in each round, in turn,
    ``cumsum --input``, ``cumprod --input``, ``gp`` (no input, an output that compresses) and ``logistic`` (no
    input, an output that hardly compresses, as a running sum's), each with ``--ref``'s code too."""
    steps = parse_int(size, name="--size")
    source, out = scenario.folder / "input.zarr", scenario.folder / "out.zarr"
    scenario.run([sys.executable, SIDES, "make_input", json.dumps({"path": str(source), "n": steps})], "make input")
    trees = {"this": None} | ({"ref": scenario.ref} if scenario.ref is not None else {})

    def one_round(i: int) -> None:
        for recipe in RECIPES:
            for tree, root in trees.items():
                shutil.rmtree(out, ignore_errors=True)
                extra = ["--input", source] if recipe in ("cumsum", "cumprod") else []
                cmd = [sys.executable, "-m", "streamacc", "write", out, "--recipe", recipe, "--size", steps,
                       "--no-progress", *extra]  # fmt: skip
                scenario.run(cmd, recipe if tree == "this" else f"{recipe} (ref)", root=root, round=i + 1)

    scenario.rounds(one_round, default=3)
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(source, ignore_errors=True)
    for recipe in RECIPES:
        for tree in trees:
            side = recipe if tree == "this" else f"{recipe} (ref)"
            rows = [r for r in scenario.rows if r["side"] == side]
            scenario.figures[f"{side}: median peak RSS MB"] = statistics.median(r["peak RSS MB"] for r in rows)
            scenario.figures[f"{side}: largest peak RSS MB"] = max(r["peak RSS MB"] for r in rows)
            scenario.figures[f"{side}: median CPU s"] = statistics.median(r["CPU s"] for r in rows)
