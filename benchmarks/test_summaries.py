"""What the window summaries cost: the write with and without them, and their reductions alone."""

from __future__ import annotations

import shutil
import sys
import time

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


SLICES = (2**18, 2**20, 2**22, 2**25)


@pytest.mark.benchmark(group="summaries-slices", timer=time.thread_time)
@pytest.mark.parametrize("block", ["cold", "just-written"])
@pytest.mark.parametrize("slice_bytes", SLICES, ids=[f"{n // 1024}KiB" for n in SLICES])
def test_summaries_slices(benchmark, request, block, slice_bytes, monkeypatch):
    """The reductions alone on one headline block (2**22 float64 steps, 32 MiB), in this thread's CPU time,
    per slice size: evicted from the caches before each round (*cold*), or right after it was computed, as a
    writer finds it (*just-written*)."""
    import numpy as np

    from streamacc.summaries import _pyramid

    monkeypatch.setattr(_pyramid, "SLICE_BYTES", slice_bytes)
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
