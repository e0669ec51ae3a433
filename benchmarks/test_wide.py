"""Wide states: a 2**20-member float32 ensemble and a 2048x2048 float32 field written, against their floors.

The aims (the wide-states issue): the ensemble's ``write`` within 1.3x the wall time of zarr
alone writing the same values with the same chunks and codec, at most 900 MB of peak RSS,
its bookkeeping (carries, records, manifest, summaries) at most 10% of its data, its commits
flat (the last tenth at most 1.5x the first); the field within 1.2 GB of peak RSS; an
Icechunk repository within 1.5x a plain folder; a mostly-zero field's bookkeeping at most 10% of
its stored data plus 1 MiB; and ``info``'s memory estimate against what each write holds beyond
the libraries' own memory.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from streamacc.cli._expr import parse_int

SIDES = Path(__file__).resolve().parent / "bench_wide.py"


def side(name: str, **kw: object) -> list:
    return [sys.executable, SIDES, name, json.dumps(kw)]


@pytest.mark.benchmark(group="wide")
@pytest.mark.sizes("2**4")
def test_wide(scenario, size):
    """In each round, in turn: the ensemble's compute alone, zarr alone, ``streamacc write`` to a folder and to an
    Icechunk repository; the field's compute and write (a fifth of the ensemble's steps, at least 2), and the
    write of a mostly-zero field; a baseline write of a few scalar steps."""
    pytest.importorskip("icechunk")
    steps = parse_int(size, name="--size")
    field_steps = max(2, steps * 96 // 512)
    folder = scenario.folder
    outs = {name: folder / f"{name}.zarr" for name in ("zarr", "write", "icechunk", "field", "sparse", "baseline")}

    def one_round(i: int) -> None:
        for out in outs.values():
            shutil.rmtree(out, ignore_errors=True)
        r = i + 1
        scenario.run(side("compute", steps=steps), "ensemble: compute", round=r)
        scenario.run(side("zarr", out=str(outs["zarr"]), steps=steps), "ensemble: zarr alone", round=r)
        scenario.run(side("write", out=str(outs["write"]), steps=steps), "ensemble: write", round=r)
        scenario.run(side("write", out=str(outs["icechunk"]), steps=steps, icechunk=True), "ensemble: icechunk",
                     round=r)  # fmt: skip
        scenario.run(side("compute", steps=field_steps, field=True), "field: compute", round=r)
        scenario.run(side("write", out=str(outs["field"]), steps=field_steps, field=True), "field: write", round=r)
        scenario.run(side("write", out=str(outs["sparse"]), steps=field_steps, field=True, sparse=True),
                     "mostly-zero field: write", round=r)  # fmt: skip
        scenario.run(side("baseline", out=str(outs["baseline"])), "baseline", round=r)

    scenario.rounds(one_round, default=2)
    for out in outs.values():
        shutil.rmtree(out, ignore_errors=True)
    rows = scenario.rows

    def of(label: str) -> list[dict]:
        return [r for r in rows if r["side"] == label]

    def med(label: str, key: str) -> float:
        return scenario.medians(label, key)[key]

    def ratios(a: str, b: str, key: str = "wall s") -> list[float]:
        return [round(x[key] / y[key], 3) for x, y in zip(of(a), of(b), strict=True)]

    writes, fields, base = of("ensemble: write"), of("field: write"), med("baseline", "peak RSS MB")
    sparse = of("mostly-zero field: write")
    figures = {"ensemble steps": steps, "field steps": field_steps}
    for label, a, b, key in [
        ("ensemble: write / zarr alone, wall", "ensemble: write", "ensemble: zarr alone", "wall s"),
        ("ensemble: write / zarr alone, work", "ensemble: write", "ensemble: zarr alone", "work_s"),
        ("ensemble: icechunk / folder, wall", "ensemble: icechunk", "ensemble: write", "wall s"),
    ]:
        each = ratios(a, b, key)
        figures[f"{label} (the round of the lowest)"] = min(each)
        figures[f"{label} (the round of the highest)"] = max(each)
    figures.update({
        "ensemble: write / compute, work (medians)": round(med("ensemble: write", "work_s")
                                                           / med("ensemble: compute", "work_s"), 2),
        "ensemble: write, peak RSS MB (largest)": max(r["peak RSS MB"] for r in writes),
        "ensemble: bookkeeping, % of the data (largest)": max(r["bookkeeping, % of the data"] for r in writes),
        "ensemble: carries kept every (blocks)": writes[0]["carries kept every"],
        "ensemble: commit, last tenth / first tenth (largest)": max(r["commit, last tenth / first tenth"]
                                                                    for r in writes),
        "field: write, peak RSS MB (largest)": max(r["peak RSS MB"] for r in fields),
        "field: write / compute, work (medians)": round(med("field: write", "work_s")
                                                        / med("field: compute", "work_s"), 2),
        "field: bookkeeping, % of the data (largest)": max(r["bookkeeping, % of the data"] for r in fields),
        "mostly-zero field: bookkeeping, % of the data (largest)": max(r["bookkeeping, % of the data"]
                                                                      for r in sparse),
        "mostly-zero field: bookkeeping MB beyond a tenth of the data (largest)": max(
            round(r["bookkeeping MB"] - r["data MB"] / 10, 2) for r in sparse),
        "baseline peak RSS MB (median)": base,
        "ensemble: info's estimate MB": writes[0]["memory estimate MB"],
        "ensemble: peak beyond the baseline MB (largest)": round(max(r["peak RSS MB"] for r in writes) - base, 1),
        "field: info's estimate MB": fields[0]["memory estimate MB"],
        "field: peak beyond the baseline MB (largest)": round(max(r["peak RSS MB"] for r in fields) - base, 1),
    })  # fmt: skip
    scenario.figures.update(figures)
