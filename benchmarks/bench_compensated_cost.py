"""What compensation costs: ``streamacc write`` of each recipe, plain and ``--compensated``.

Each run is the command a user types, at the default settings (float64, the default
block size and codec, fsync per block), timed as a whole by ``/usr/bin/time -v``: wall,
user and system CPU, peak RSS, page faults. ``cumsum`` and ``cumprod`` read an input
array made once per size (values in [0.5, 1), and factors within 2**-21 of 1, both
random), outside the timings. Plain and compensated runs alternate, ``--repeat`` times,
and each output is deleted after its run. The ratio of throughputs (compensated over
plain, medians of one run of this script) is the figure to compare. Last, each recipe's
blocks run once more through ``streamacc.iter_blocks`` with nothing written, to show the
compute alone::

    python benchmarks/bench_compensated_cost.py --sizes 2**20 2**22 --repeat 1   # check it works
    python benchmarks/bench_compensated_cost.py --sizes 2**28 2**30 --repeat 3   # the measurement

Needs free disk for one output plus the inputs: about 2 x 8 GiB of inputs and 8 GiB of
output at 2**30 (``--work`` picks the folder). Results: ``compensated_cost.json`` and
``compensated_cost.md`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import sys
from pathlib import Path

import numpy as np
from _timing import time_command

from streamacc import base

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RECIPES = ("gp", "affine", "cumsum", "cumprod")
TIME_FIELDS = {"wall": "wall_s", "user": "user_s", "sys": "sys_s", "max_rss_kb": "max_rss_kib",
               "major_faults": "major_faults", "minor_faults": "minor_faults"}  # fmt: skip
"""A row's name of each measure of :func:`_timing.time_command` it records."""


def measured(timed: dict) -> dict:
    """The row's measures from GNU time's, each a float."""
    for key, name in TIME_FIELDS.items():
        if timed.get(name) is None:
            raise RuntimeError(f"/usr/bin/time -v printed no {key!r}:\n{timed['stderr']}")
    return {key: float(timed[name]) for key, name in TIME_FIELDS.items()}


def make_input(path: Path, n: int, kind: str, block: int = 2**22) -> None:
    """A float64 zarr array of ``n`` random values, written block by block (never whole)."""
    import zarr

    if path.exists():
        return
    array = zarr.create_array(str(path), shape=(n,), chunks=(min(n, block),), dtype="float64")
    rng = np.random.default_rng(n)
    for start in range(0, n, block):
        u = rng.random(min(block, n - start))
        array[start : start + len(u)] = 0.5 + 0.5 * u if kind == "cumsum" else 1 + (u - 0.5) * 2.0**-20


def run_once(recipe: str, n: int, compensated: bool, args: argparse.Namespace) -> dict:
    out = args.work / f"{recipe}-{n}-{'c' if compensated else 'p'}.zarr"
    shutil.rmtree(out, ignore_errors=True)
    command = [sys.executable, "-m", "streamacc", "write", str(out), "--recipe", recipe, "--size", str(n)]
    if recipe in ("cumsum", "cumprod"):
        command += ["--input", str(args.work / f"input-{recipe}-{n}.zarr")]
    command += ["--no-progress"] + (["--compensated"] if compensated else [])
    timed = time_command(command, cwd=REPO, timeout=None)
    shutil.rmtree(out, ignore_errors=True)
    if timed["returncode"] != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({timed['returncode']}):\n{timed['stderr']}")
    row = {"recipe": recipe, "n": n, "mode": "compensated" if compensated else "plain", **measured(timed)}
    row["gib_per_s"] = n * 8 / 2**30 / row["wall"]
    print(json.dumps(row), flush=True)
    return row


SUMMARY_FIELDS = ("wall", "user", "sys", "gib_per_s", "max_rss_kb", "minor_faults")


def compute_only(recipe: str, n: int, compensated: bool, args: argparse.Namespace) -> dict:
    """Run the recipe's blocks through ``streamacc.iter_blocks`` and drop them: the compute alone."""
    import time

    import jax

    jax.config.update("jax_enable_x64", True)
    import streamacc
    from streamacc.recipes import get_recipe

    params = {"compensated": compensated}
    if recipe in ("cumsum", "cumprod"):
        params["input"] = str(args.work / f"input-{recipe}-{n}.zarr")
    job = get_recipe(recipe).build(n, "float64", **params)
    block = base.DEFAULT_WRITE_BLOCK_SIZE
    warm = min(n, block)  # compiles the block function outside the timing
    xs = None if job.xs is None else job.xs[:warm]
    for _ in streamacc.iter_blocks(job.f, job.init, xs, length=warm, block_size=block, unroll=job.unroll):
        pass
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in streamacc.iter_blocks(job.f, job.init, job.xs, length=n, block_size=block, unroll=job.unroll):
        pass
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    row = {"recipe": recipe, "n": n, "mode": "compensated" if compensated else "plain", "compute_only": True}
    row.update(wall=wall, cpu=cpu, ns_per_step=1e9 * wall / n)
    print(json.dumps(row), flush=True)
    return row


def summarise(rows: list[dict]) -> list[dict]:
    """Per recipe and size: the median of each field for each mode, and the throughput ratio."""
    out = []
    for recipe in dict.fromkeys(r["recipe"] for r in rows):
        for n in dict.fromkeys(r["n"] for r in rows):
            entry = {"recipe": recipe, "n": n}
            for mode in ("plain", "compensated"):
                mine = [r for r in rows if (r["recipe"], r["n"], r["mode"]) == (recipe, n, mode) and "user" in r]
                entry["runs"] = len(mine)
                for key in SUMMARY_FIELDS:
                    entry[f"{mode}_{key}"] = statistics.median(r[key] for r in mine) if mine else float("nan")
            entry["ratio"] = entry["compensated_gib_per_s"] / entry["plain_gib_per_s"]
            for mode in ("plain", "compensated"):
                mine = [r for r in rows if (r["recipe"], r["n"], r["mode"]) == (recipe, n, mode) and "cpu" in r]
                entry[f"{mode}_compute_ns"] = (
                    statistics.median(r["ns_per_step"] for r in mine) if mine else float("nan")
                )
            out.append(entry)
    return out


def label(n: int) -> str:
    return f"2**{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def table(summary: list[dict]) -> str:
    lines = [
        "| recipe | steps | plain wall | plain user / sys | compensated wall | compensated user / sys "
        "| minor faults (p / c) | peak RSS (p / c) | compute only, ns/step (p / c) | compensated / plain throughput |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for s in summary:
        lines.append(
            f"| {s['recipe']} | {label(s['n'])} "
            f"| {s['plain_wall']:.1f} s | {s['plain_user']:.1f} / {s['plain_sys']:.1f} s "
            f"| {s['compensated_wall']:.1f} s | {s['compensated_user']:.1f} / {s['compensated_sys']:.1f} s "
            f"| {s['plain_minor_faults']:,.0f} / {s['compensated_minor_faults']:,.0f} "
            f"| {s['plain_max_rss_kb'] / 1024:.0f} / {s['compensated_max_rss_kb'] / 1024:.0f} MiB "
            f"| {s['plain_compute_ns']:.1f} / {s['compensated_compute_ns']:.1f} | {s['ratio']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    sys.path.insert(0, str(REPO))
    from streamacc.cli._expr import parse_int

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", nargs="+", default=["2**28", "2**30"], help="steps, e.g. 2**28 2**30")
    p.add_argument("--recipes", nargs="+", choices=RECIPES, default=list(RECIPES))
    p.add_argument("--repeat", type=int, default=3, help="runs of each mode (medians reported)")
    p.add_argument("--work", type=Path, default=Path("/tmp/streamacc-cost"), help="inputs and outputs go here")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results", help="where the results go")
    args = p.parse_args(argv)
    sizes = [parse_int(s, name="--sizes", minimum=1) for s in args.sizes]
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in sizes:
        for recipe in args.recipes:
            if recipe in ("cumsum", "cumprod"):
                make_input(args.work / f"input-{recipe}-{n}.zarr", n, recipe)
            for _ in range(args.repeat):
                for compensated in (False, True):
                    rows.append(run_once(recipe, n, compensated, args))
            for compensated in (False, True):
                rows.append(compute_only(recipe, n, compensated, args))
    summary = summarise(rows)
    meta = {"command": " ".join(sys.argv), "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}"}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compensated_cost.json").write_text(
        json.dumps({"meta": meta, "runs": rows, "summary": summary}, indent=1) + "\n"
    )
    (args.out / "compensated_cost.md").write_text(f"`{meta['command']}`\n\n" + table(summary))
    print(table(summary))


if __name__ == "__main__":
    main()
