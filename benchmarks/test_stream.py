"""A Stream inside jit against ``streamacc write`` of the same job: wall, CPU, page faults, peak memory, and
the share of its CPU that JAX's callbacks take. The aims: within 1.15x the write's wall time, at most 450 MB
at 2**30 steps and within 5% of a 2**24-step Stream's peak."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from streamacc.cli._expr import parse_int

SIDES = Path(__file__).resolve().parent / "bench_stream.py"


def side(name: str, **kw: object) -> list:
    return [sys.executable, SIDES, name, json.dumps(kw)]


@pytest.mark.benchmark(group="stream")
@pytest.mark.sizes("2**24")
def test_stream(scenario, size):
    """In each round, in turn: ``streamacc write`` of the headline's job; the job through a Stream inside jit;
    the Stream of 2**24 steps (memory against length: the aim compares 2**30 with 2**24); the Stream's loop
    with a callback of one row per block (the program's floor); the loop handing every block's ys to a callback
    that does nothing (what JAX's callbacks cost)."""
    steps = parse_int(size, name="--size")
    small = min(steps, 2**24)
    written, streamed, little = (scenario.folder / name for name in ("write.zarr", "stream.zarr", "small.zarr"))

    def one_round(i: int) -> None:
        for out in (written, streamed, little):
            shutil.rmtree(out, ignore_errors=True)
        write = [sys.executable, "-m", "streamacc", "write", written, "--size", steps, "--no-progress"]
        scenario.run(write, "write", round=i + 1)
        scenario.run(side("manifest", out=str(written)), "write's manifest", round=i + 1)
        scenario.run(side("stream", out=str(streamed), steps=steps), "stream", round=i + 1)
        scenario.run(side("stream", out=str(little), steps=small), f"stream of {small} steps", round=i + 1)
        scenario.run(side("loop", steps=steps), "loop", round=i + 1)
        scenario.run(side("callbacks", steps=steps), "callbacks", round=i + 1)

    scenario.rounds(one_round, default=2)
    for out in (written, streamed, little):
        shutil.rmtree(out, ignore_errors=True)
    rows = scenario.rows

    def med(label: str, key: str) -> float:
        return scenario.medians(label, key)[key]

    streams = [r for r in rows if r["side"] == "stream"]
    writes = [r for r in rows if r["side"] == "write"]
    same = {r["manifest"] for r in rows if r["side"] in ("stream", "write's manifest")}
    ratios = [round(s["wall s"] / w["wall s"], 3) for s, w in zip(streams, writes, strict=True)]
    scenario.figures.update({
        "stream / write, wall (the round of the lowest)": min(ratios),
        "stream / write, wall (the round of the highest)": max(ratios),
        "stream / write, wall (medians)": round(med("stream", "wall s") / med("write", "wall s"), 3),
        "stream / write, CPU (medians)": round(med("stream", "CPU s") / med("write", "CPU s"), 3),
        "JAX's callbacks, share of the stream's CPU": round((med("callbacks", "CPU s") - med("loop", "CPU s"))
                                                            / med("stream", "CPU s"), 3),
        "the stream's own callback work, share of its CPU": round(med("stream", "callback_cpu_s")
                                                                  / med("stream", "CPU s"), 4),
        "stream: peak RSS MB (largest)": max(r["peak RSS MB"] for r in streams),
        f"stream of {small} steps: peak RSS MB (largest)": max(r["peak RSS MB"] for r in rows
                                                               if r["side"] == f"stream of {small} steps"),
        "write: peak RSS MB (largest)": max(r["peak RSS MB"] for r in writes),
        "stream / write, minor faults (medians)": round(med("stream", "minor faults") / med("write", "minor faults"),
                                                        2),
        "the stream's output is the write's (manifests equal)": len(same) == 1,
    })  # fmt: skip
