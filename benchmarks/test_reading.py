"""Reading outputs: small windows answered from one inner chunk of a shard, whole arrays as fast as before.

Two scenarios over the same layouts of the headline's job (``streamacc write OUT --size N``:
the ``gp`` recipe, float64, blocks of 2**22 steps), each written by the checkout under test:
the default (inner chunks of 2**19 steps in shards of a block), inner chunks of 2**18 and 2**17,
and one chunk a block (``--chunks 2**22``: the layout of streamacc 1.1 and before, unsharded);
with ``--ref CHECKOUT``, that checkout's default write joins them. ``reading-small``: random
1000-step slices, page cache warm, through zarr alone and through ``streamacc.open``, and the
writes' own times; ``reading-whole``: all of the output through dask and through zarr, from a
cold page cache and a warm one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _harness import disk_bytes, drop_cache, ratio, side_command, write_command

from streamacc.cli._expr import parse_int

LAYOUTS = {
    "default": [],
    "inner 2**18": ["--chunks", "2**18"],
    "inner 2**17": ["--chunks", "2**17"],
    "one chunk a block": ["--chunks", "2**22"],
}
"""The layouts compared, by the options that make them (the block is the default's, 2**22 steps)."""

UNSHARDED = "one chunk a block"


def layouts(scenario) -> dict[str, tuple[list[str], Path | None]]:
    """Each layout's write options and the checkout that writes it (None: the one under test)."""
    found: dict[str, tuple[list[str], Path | None]] = {name: (flags, None) for name, flags in LAYOUTS.items()}
    if scenario.ref is not None:
        found["ref checkout's default"] = ([], scenario.ref)
    return found


def written(scenario, steps: int, round_: int) -> dict[str, Path]:
    """Each layout written once (in rotation, each write a row of its own), its bytes on its row."""
    outs = {}
    for i, (name, (flags, root)) in enumerate(layouts(scenario).items()):
        out = scenario.folder / f"layout{i}.zarr"
        shutil.rmtree(out, ignore_errors=True)
        scenario.run(write_command(out, steps, *flags), f"write: {name}", root=root, round=round_)
        scenario.rows[-1]["stored bytes"] = disk_bytes(out)
        outs[name] = out
    return outs


@pytest.mark.benchmark(group="reading-small")
@pytest.mark.sizes("2**24")
def test_reading_small(scenario, size):
    """Per round, each layout written, then 30 random 1000-step slices of it read, the page cache warm."""
    steps = parse_int(size, name="--size")

    def one_round(i: int) -> None:
        for name, out in written(scenario, steps, i + 1).items():
            scenario.run(side_command("small", out=str(out), count=30, seed=i), f"slices: {name}", round=i + 1)
            shutil.rmtree(out)

    scenario.rounds(one_round, default=2)
    base = scenario.medians(f"write: {UNSHARDED}", "wall s", "CPU s")
    for name in layouts(scenario):
        small = scenario.medians(f"slices: {name}", "zarr ms", "open ms")
        wrote = scenario.medians(f"write: {name}", "wall s", "CPU s")
        scenario.figures[f"{name}: 1000-step slice through zarr, ms (median)"] = round(small["zarr ms"], 2)
        scenario.figures[f"{name}: 1000-step slice through streamacc.open, ms (median)"] = round(small["open ms"], 2)
        scenario.figures[f"{name}: write wall / one chunk a block's"] = ratio(wrote["wall s"], base["wall s"])
        scenario.figures[f"{name}: write CPU / one chunk a block's"] = ratio(wrote["CPU s"], base["CPU s"])
        scenario.figures[f"{name}: write peak RSS MB"] = max(
            r["peak RSS MB"] for r in scenario.rows if r["side"] == f"write: {name}"
        )


@pytest.mark.benchmark(group="reading-whole")
@pytest.mark.sizes("2**24")
def test_reading_whole(scenario, size):
    """Each layout written once; per round, all of each read through dask and zarr, first from a cold page cache
    (every file dropped from it), then warm."""
    steps = parse_int(size, name="--size")
    outs = written(scenario, steps, 0)

    def one_round(i: int) -> None:
        for name, out in outs.items():
            drop_cache(out)
            scenario.run(side_command("whole", out=str(out)), f"whole, cold: {name}", round=i + 1)
            scenario.run(side_command("whole", out=str(out)), f"whole, warm: {name}", round=i + 1)

    scenario.rounds(one_round, default=2)
    for cache in ("cold", "warm"):
        base = scenario.medians(f"whole, {cache}: {UNSHARDED}", "run_s", "zarr_s")
        for name in outs:
            read = scenario.medians(f"whole, {cache}: {name}", "run_s", "zarr_s")
            scenario.figures[f"{name}, {cache}: dask s (median)"] = round(read["run_s"], 3)
            scenario.figures[f"{name}, {cache}: dask / one chunk a block's"] = ratio(read["run_s"], base["run_s"])
            if cache == "warm":  # zarr reads after dask, so always from a warm cache
                scenario.figures[f"{name}, warm: zarr / one chunk a block's"] = ratio(read["zarr_s"], base["zarr_s"])
    for out in outs.values():
        shutil.rmtree(out)
