"""Virtual outputs (``--virtual``: the carries stored, the data recomputed on read) against the stored write.

Three scenarios: the virtual writes against the carry-only scan of the same recurrence and
the bytes they store against the stored write's; random 2**20-step slices read back
through ``streamacc.open``; a whole virtual output read through dask against the stored
output read from a cold page cache.
"""

from __future__ import annotations

import shutil

import pytest
from _harness import disk_bytes, drop_cache, ratio, side_command, write_command

from streamacc.cli._expr import parse_int


@pytest.mark.benchmark(group="virtual-write")
@pytest.mark.sizes("2**24")
def test_virtual_write(scenario, size):
    """In each round: the carry-only scan, ``write --virtual --no-summaries``, ``write --virtual``; then a
    stored write once, of the same length up to 2**32 steps (32 GiB of values), for the bytes."""
    steps = parse_int(size, name="--size")
    nosum, virtual = scenario.folder / "virtual-nosummaries.zarr", scenario.folder / "virtual.zarr"
    kinds = (("virtual --no-summaries", nosum, ["--no-summaries"]), ("virtual", virtual, []))

    def one_round(i: int) -> None:
        scenario.run(side_command("carry", steps=steps), "carry-only scan", round=i + 1)
        for label, out, flags in kinds:
            shutil.rmtree(out, ignore_errors=True)
            scenario.run(write_command(out, steps, "--virtual", *flags), label, round=i + 1)
            scenario.rows[-1]["stored bytes"] = disk_bytes(out)

    scenario.rounds(one_round, default=2)
    stored, stored_steps = scenario.folder / "stored.zarr", min(steps, 2**32)
    scenario.run(write_command(stored, stored_steps), "stored write")
    stored_bytes = scenario.rows[-1]["stored bytes"] = disk_bytes(stored)
    shutil.rmtree(stored)
    scenario.figures["stored write: steps"] = stored_steps
    carry = scenario.medians("carry-only scan", "wall s", "CPU s")
    for label, out, _ in kinds:
        med = scenario.medians(label, "wall s", "CPU s")
        scenario.figures[f"{label}: wall / carry-only"] = ratio(med["wall s"], carry["wall s"])
        scenario.figures[f"{label}: CPU / carry-only"] = ratio(med["CPU s"], carry["CPU s"])
        share = 100 * disk_bytes(out) / stored_bytes
        scenario.figures[f"{label}: % of the bytes of the stored write"] = round(share, 4)
        scenario.figures[f"{label}: peak RSS MB"] = max(r["peak RSS MB"] for r in scenario.rows if r["side"] == label)
        shutil.rmtree(out)


@pytest.mark.benchmark(group="virtual-slices")
@pytest.mark.sizes("2**24")
def test_virtual_slices(scenario, size):
    """8 random 2**20-step slices of a virtual output through ``streamacc.open``, in one process per round
    (the first slice also pays for compiling the block and dask's imports)."""
    steps = parse_int(size, name="--size")
    virtual = scenario.folder / "virtual.zarr"
    scenario.run(write_command(virtual, steps, "--virtual"), "virtual write")
    scenario.rounds(lambda i: scenario.run(side_command("slices", out=str(virtual), count=8, seed=i), "slices",
                                           round=i + 1), default=2)  # fmt: skip
    rows = [r for r in scenario.rows if r["side"] == "slices"]
    scenario.figures.update({
        "first slice s (median)": round(sorted(r["first_s"] for r in rows)[len(rows) // 2], 3),
        "slice after the first s (median)": round(sorted(r["median_after_first_s"] for r in rows)[len(rows) // 2], 4),
        "slowest after the first s": round(max(r["max_after_first_s"] for r in rows), 4),
    })  # fmt: skip
    shutil.rmtree(virtual)


@pytest.mark.benchmark(group="virtual-read")
@pytest.mark.sizes("2**24")
def test_virtual_read(scenario, size):
    """All of a virtual output through dask against the same read of the stored output, every file of both
    dropped from the page cache first; the ratio is of the time from ``open`` to the result."""
    steps = parse_int(size, name="--size")
    virtual, stored = scenario.folder / "virtual-read.zarr", scenario.folder / "stored-read.zarr"
    for out, flags, label in ((virtual, ["--virtual"], "virtual write"), (stored, [], "stored write")):
        scenario.run(write_command(out, steps, *flags), label)
        scenario.rows[-1]["stored bytes"] = disk_bytes(out)

    def one_round(i: int) -> None:
        for out, label in ((stored, "read stored, cold"), (virtual, "read virtual")):
            drop_cache(out)
            scenario.run(side_command("read", out=str(out)), label, round=i + 1)

    scenario.rounds(one_round, default=2)
    v, s = scenario.medians("read virtual", "run_s", "wall s"), scenario.medians("read stored, cold", "run_s", "wall s")
    scenario.figures.update({
        "virtual / stored, open to result": ratio(v["run_s"], s["run_s"]),
        "virtual / stored, whole process": ratio(v["wall s"], s["wall s"]),
        "read virtual: peak RSS MB": max(r["peak RSS MB"] for r in scenario.rows if r["side"] == "read virtual"),
    })  # fmt: skip
    shutil.rmtree(virtual)
    shutil.rmtree(stored)
