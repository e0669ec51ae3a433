"""What the window summaries cost: the write with and without them, and their reductions alone; and what a
run's condition (``until``) costs: the write, and the compute alone, with one that never holds and without."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from _harness import chunk_digest

from streamacc.cli._expr import parse_int


def write(out, size: str, *flags: str) -> list:
    return [sys.executable, "-m", "streamacc", "write", out, "--size", str(parse_int(size, name="--size")),
            "--no-progress", *flags]  # fmt: skip


@pytest.mark.benchmark(group="summaries-cost")
@pytest.mark.sizes("2**20")
def test_summaries_cost(scenario, size):
    """``streamacc write`` with summaries and with ``--no-summaries``, alternating (with ``--ref``, the other
    checkout's write with summaries joins the rotation); the medians of their CPU, and whether the two
    outputs' data chunks are the same bytes."""
    sides = {"summaries": ([], None), "no-summaries": (["--no-summaries"], None)}
    if scenario.ref is not None:
        sides["ref"] = ([], scenario.ref)
    digests: dict[str, str] = {}

    def one_round(i: int) -> None:
        order = list(sides.items())
        for name, (flags, root) in order if i % 2 == 0 else reversed(order):
            out = scenario.folder / f"{name}.zarr"
            shutil.rmtree(out, ignore_errors=True)
            scenario.run(write(out, size, *flags), name, root=root, round=i + 1)
            digests[name] = chunk_digest(out)
            shutil.rmtree(out)

    scenario.rounds(one_round, default=3)
    med = {name: scenario.medians(name, "CPU s", "wall s") for name in sides}
    base = med["no-summaries"]
    scenario.figures.update({
        "median CPU s, summaries": med["summaries"]["CPU s"],
        "median CPU s, no summaries": base["CPU s"],
        "summaries' extra CPU %": round(100 * (med["summaries"]["CPU s"] / base["CPU s"] - 1), 1),
        "summaries' extra wall %": round(100 * (med["summaries"]["wall s"] / base["wall s"] - 1), 1),
        "data chunks identical": digests["summaries"] == digests["no-summaries"],
    })  # fmt: skip
    if "ref" in med:
        extra = med["ref"]["CPU s"] / base["CPU s"] - 1
        scenario.figures["ref's extra CPU over no summaries %"] = round(100 * extra, 1)
    assert scenario.figures["data chunks identical"]


def until(**kw: object) -> list:
    return [sys.executable, Path(__file__).resolve().parent / "_sides.py", "until", json.dumps(kw)]


@pytest.mark.benchmark(group="until-cost")
@pytest.mark.sizes("2**20")
def test_until_cost(scenario, size):
    """The headline's job with a condition that is one comparison and never holds (``x < 0``, so the whole
    length runs), and without one, alternating: ``streamacc.write`` (the whole write, chunks, summaries and
    commits) and ``iter_blocks`` consumed in memory (the compute alone); the medians of their wall and CPU, the
    ratios with to without, round by round, and whether the two writes' data chunks are the same bytes."""
    steps = parse_int(size, name="--size")
    sides = {
        "write, until": {"mode": "write", "condition": True},
        "write": {"mode": "write", "condition": False},
        "blocks, until": {"mode": "blocks", "condition": True},
        "blocks": {"mode": "blocks", "condition": False},
    }
    digests: dict[str, str] = {}

    def one_round(i: int) -> None:
        order = list(sides.items())
        for name, kw in order if i % 2 == 0 else reversed(order):
            out = scenario.folder / f"{name.replace(', ', '-')}.zarr"
            shutil.rmtree(out, ignore_errors=True)
            scenario.run(until(steps=steps, out=str(out), **kw), name, round=i + 1)
            if kw["mode"] == "write":
                digests[name] = chunk_digest(out)
                shutil.rmtree(out)

    scenario.rounds(one_round, default=3)
    for base in ("write", "blocks"):
        med = {name: scenario.medians(name, "wall s", "CPU s", "run_s") for name in (f"{base}, until", base)}
        mine = [r for r in scenario.rows if r["side"] == f"{base}, until"]
        theirs = [r for r in scenario.rows if r["side"] == base]
        ratios = [round(a["run_s"] / b["run_s"], 3) for a, b in zip(mine, theirs, strict=True)]
        scenario.figures.update({
            f"{base}: median run s, until": round(med[f"{base}, until"]["run_s"], 2),
            f"{base}: median run s, none": round(med[base]["run_s"], 2),
            f"{base}: until / none, run s (medians)": round(med[f"{base}, until"]["run_s"] / med[base]["run_s"], 3),
            f"{base}: until / none, CPU (medians)": round(med[f"{base}, until"]["CPU s"] / med[base]["CPU s"], 3),
            f"{base}: until / none, run s (each round)": ", ".join(map(str, ratios)),
        })  # fmt: skip
    scenario.figures["data chunks identical"] = digests["write, until"] == digests["write"]
    assert scenario.figures["data chunks identical"]


SLICES = (2**18, 2**20, 2**22, 2**25)


@pytest.mark.benchmark(group="summaries-slices", timer=time.thread_time)
@pytest.mark.parametrize("block", ["cold", "just-written"])
@pytest.mark.parametrize("slice_bytes", SLICES, ids=[f"{n // 1024}KiB" for n in SLICES])
def test_summaries_slices(benchmark, request, block, slice_bytes, monkeypatch):
    """The reductions alone on one headline block (2**22 float64 steps, 32 MiB), in this thread's CPU time,
    per slice size: evicted from the caches before each round (*cold*), or right after it was computed, as a
    writer finds it (*just-written*)."""
    import numpy as np

    from streamacc.summaries import _pyramid, _reduce

    monkeypatch.setattr(_reduce, "SLICE_BYTES", slice_bytes)
    step = np.full(2**22, 1 + 1e-8)
    values = np.multiply.accumulate(step)
    evict = np.ones(2**26)  # 512 MiB, more than the caches hold

    def setup() -> tuple[tuple, dict]:
        evict.__iadd__(1.0)
        if block == "just-written":
            np.multiply.accumulate(step, out=values)
        return (values, 0, 4096, 2**32), {}

    rounds = request.config.getoption("repeat") or 15
    benchmark.pedantic(_pyramid.block_pieces, setup=setup, rounds=rounds, iterations=1)
    benchmark.extra_info.update({
        "commands": {"reductions": "streamacc.summaries._pyramid.block_pieces(block, 0, 4096, 2**32)"},
        "reproduce": "python -m pytest benchmarks/test_summaries.py::test_summaries_slices --benchmark-autosave",
        "figures": {"slice bytes": slice_bytes, "block": block},
        "tables": {},
    })  # fmt: skip
