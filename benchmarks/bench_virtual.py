"""Virtual outputs (``--virtual``: the carries stored, the data recomputed on read) against the stored write.

    python benchmarks/bench_virtual.py --dir /tmp/virtual --size '2**34' --read-size '2**30' --repeat 2 \
        --json benchmarks/results/virtual.json

Each side runs in a fresh process under GNU time (wall, user and system CPU, page faults, peak
RSS), alternating, ``--repeat`` times:

1. **Write**: the headline recurrence (``gp``) of ``--size`` steps as a jitted scan of its carry
   alone, in pieces of 2**26 steps, unrolled as the recipe runs it (the floor of any write);
   ``streamacc write --virtual --no-summaries``; ``streamacc write --virtual`` (default summaries);
   ``--writes`` leaves either out. The bytes each virtual output stores, against those of the
   stored write of ``--stored-size`` (written once, measured, deleted; or given with
   ``--stored-bytes``). The target of a virtual write without summaries is at most 1.2 times the
   carry-only scan's run (``run_s``, compiled first: ``compile_s``) plus 2 s of start-up (import and
   compile): ``virtual_no_summaries_budget_s``. Start-up is measured too, as the process's wall time
   less its run for the scan, and as a virtual write of one block (``--startup-size``) for the write.
   ``--folded`` also runs the recurrence written plainly, ``lax.scan(lambda c, _: (c * ratio, None),
   ...)`` unrolled 8: XLA folds the eight products of an unrolled group into one by ``ratio**8``
   (its final value is recorded beside the recurrence's, which it is not), so it is no floor of a
   write that keeps the recurrence's bits. ``--ref`` names another checkout whose ``streamacc`` runs
   the virtual writes too, alternately with this one (its figures carry ``_ref``).
2. **A slice**: ``--slices`` random 2**20-step slices of the virtual ``--size`` output through
   ``streamacc.open`` in one process, each timed (the first pays for compiling the block).
3. **A full read**: all of a virtual ``--read-size`` output through dask
   (``streamacc.open(OUT).x.data.max().compute()``, dask's threads) against the same read of
   the stored output of that size with every file dropped from the page cache first
   (``posix_fadvise(DONTNEED)``; the virtual output's few files too); the ratio is of the
   time from ``open`` to the result (each process also imports: JAX only for the virtual one).
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path

import _record
from _harness import disk_bytes, drop_cache
from _record import median, run, save

from streamacc.cli._expr import parse_int

HERE = Path(__file__).resolve()
SLICE = 2**20


def side_carry(steps: int) -> dict:
    """The recipe's step in a jitted scan that keeps only its carry, unrolled as the recipe is."""
    import jax
    from jax import lax

    from streamacc.recipes import get_recipe

    jax.config.update("jax_enable_x64", True)
    job = get_recipe("gp").build(steps, "float64")
    piece = min(steps, 2**26)

    def run_piece(c):
        return lax.scan(lambda c, x: (job.f(c, x)[0], None), c, None, length=piece, unroll=job.unroll)[0]

    return _timed(run_piece, job.init, steps // piece)


def _timed(run_piece, init, pieces: int) -> dict:
    """``run_piece`` jitted, compiled (``compile_s``), then run ``pieces`` times from ``init`` (``run_s``)."""
    import jax
    import jax.numpy as jnp

    t0 = time.perf_counter()
    carry = jnp.asarray(init)
    compiled = jax.jit(run_piece).lower(carry).compile()
    t1 = time.perf_counter()
    for _ in range(pieces):
        carry = compiled(carry)
    final = float(carry)
    return {"compile_s": t1 - t0, "run_s": time.perf_counter() - t1, "final": final}


def side_folded(steps: int) -> dict:
    """The recurrence written plainly, without the recipe's optimization barrier: XLA reassociates its products."""
    import jax
    from jax import lax

    from streamacc.recipes import get_recipe

    jax.config.update("jax_enable_x64", True)
    job = get_recipe("gp").build(steps, "float64")
    ratio, piece = job.f.ratio, min(steps, 2**26)

    def run_piece(c):
        return lax.scan(lambda c, _: (c * ratio, None), c, None, length=piece, unroll=job.unroll)[0]

    return _timed(run_piece, job.init, steps // piece)


def side_slices(out: str, count: int, seed: int) -> dict:
    import numpy as np

    import streamacc

    t0 = time.perf_counter()
    x = streamacc.open(out).x
    opened = time.perf_counter() - t0
    rng = random.Random(seed)
    times = []
    for _ in range(count):
        start = rng.randrange(0, x.sizes["step"] - SLICE)
        t = time.perf_counter()
        values = np.asarray(x[start : start + SLICE].values)
        times.append(time.perf_counter() - t)
        assert values.shape == (SLICE,)
    after = statistics.median(times[1:]) if len(times) > 1 else None
    return {"open_s": opened, "slice_s": times, "first_s": times[0], "median_after_first_s": after}


def side_read(out: str) -> dict:
    import streamacc

    t0 = time.perf_counter()
    top = float(streamacc.open(out).x.data.max().compute())
    return {"run_s": time.perf_counter() - t0, "max": top}


SIDES = {"carry": side_carry, "folded": side_folded, "slices": side_slices, "read": side_read}


def cli(out: Path, size: int, *flags: str) -> list[str]:
    return [sys.executable, "-m", "streamacc", "write", str(out), "--size", str(size), "--no-progress", *flags]


def side(name: str, **kw: object) -> list[str]:
    cmd = [sys.executable, str(HERE), "side", name]
    for key, value in kw.items():
        cmd += [f"--{key}", str(value)]
    return cmd


def cpu(r: dict) -> float:
    return float(r["user_s"] + r["sys_s"])


def write_ratios(records: list[dict]) -> dict:
    """The virtual writes over the carry-only scan: medians of wall time, and of CPU (user + system),
    which depends less on what else the machine runs; the budget of a virtual write without summaries
    (1.2 times the scan's run plus 2 s of start-up) and whether its median wall time kept to it."""
    carry, carry_cpu = (
        median(records, "carry-only scan"),
        statistics.median(map(cpu, _runs(records, "carry-only scan"))),
    )
    carry_run = median(records, "carry-only scan", "run_s")
    startup = statistics.median(r["wall_s"] - r["run_s"] for r in _runs(records, "carry-only scan"))
    out: dict = {"carry_run_s": round(carry_run, 3), "carry_startup_s": round(startup, 3)}
    kinds = (("virtual --no-summaries", "virtual_no_summaries"), ("virtual", "virtual"))
    for label, key in [*kinds, *((f"{label} (ref)", f"{key}_ref") for label, key in kinds)]:
        if not _runs(records, label):
            continue
        out[f"{key}_over_carry"] = round(median(records, label) / carry, 3)
        out[f"{key}_over_carry_run"] = round(median(records, label) / carry_run, 3)
        out[f"{key}_over_carry_cpu"] = round(statistics.median(map(cpu, _runs(records, label))) / carry_cpu, 3)
        out[f"{key}_peak_rss_mb"] = max(r["peak_rss_mb"] for r in _runs(records, label))
    if _runs(records, "virtual --no-summaries"):
        budget = 1.2 * carry_run + 2.0
        wall = median(records, "virtual --no-summaries")
        out["virtual_no_summaries_wall_s"] = round(wall, 3)
        out["virtual_no_summaries_budget_s"] = round(budget, 3)
        out["virtual_no_summaries_within_budget"] = wall <= budget
    if _runs(records, "virtual --no-summaries, one block"):
        out["virtual_startup_s"] = round(median(records, "virtual --no-summaries, one block"), 3)
    folded = _runs(records, "folded scan")
    if folded:
        out["folded_run_s"] = round(statistics.median(r["run_s"] for r in folded), 3)
        finals = {r["final"] for r in _runs(records, "carry-only scan")}
        out["folded_final"], out["recurrence_final"] = repr(folded[0]["final"]), repr(sorted(finals)[0])
        out["folded_same_bits"] = all(r["final"] in finals for r in folded)
    return out


def read_ratios(records: list[dict]) -> dict:
    """The virtual read over the stored one: medians of the time from ``open`` to the result, and of the process."""
    virtual, stored = "read virtual", "read stored, cold"
    return {
        "virtual_over_stored_cold": round(median(records, virtual, "run_s") / median(records, stored, "run_s"), 3),
        "virtual_over_stored_cold_process_wall": round(median(records, virtual) / median(records, stored), 3),
        "virtual_run_s": [round(r["run_s"], 2) for r in _runs(records, virtual)],
        "stored_cold_run_s": [round(r["run_s"], 2) for r in _runs(records, stored)],
        "peak_rss_mb": max(r["peak_rss_mb"] for r in _runs(records, virtual)),
    }


def _runs(records: list[dict], label: str) -> list[dict]:
    return [r for r in records if r["label"] == label]


def summarize(path: Path) -> None:
    """Recompute the ratios of an existing JSON from its records (files written before the ratios of CPU
    existed, or before ``stored_bytes`` was measured after each write: those zeros are dropped)."""
    doc = json.loads(path.read_text())
    for r in doc["records"]:
        if r.get("stored_bytes") == 0:
            del r["stored_bytes"]
    if "write" in doc:
        doc["write"].update(write_ratios(doc["records"]))
    if "read" in doc:
        doc["read"] = read_ratios(doc["records"])
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps({k: doc[k] for k in ("write", "slice", "read") if k in doc}, indent=1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", nargs="?", default="all", choices=["all", "side"])
    p.add_argument("name", nargs="?", choices=list(SIDES))
    p.add_argument("--dir", type=Path, default=Path("/tmp/bench_virtual"))
    p.add_argument("--size", default="2**34")
    p.add_argument("--stored-size", default="2**32")
    p.add_argument("--stored-bytes", type=int, default=None, help="bytes the stored write of --stored-size stores")
    p.add_argument("--read-size", default="2**30")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--slices", type=int, default=8)
    p.add_argument("--skip", nargs="*", default=[], choices=["write", "slice", "read"])
    p.add_argument("--writes", nargs="+", default=["no-summaries", "summaries"], choices=["no-summaries", "summaries"],
                   help="the virtual writes timed against the carry-only scan")  # fmt: skip
    p.add_argument("--folded", action="store_true", help="also time the recurrence as XLA folds it (not its bits)")
    p.add_argument("--startup-size", default="2**22", help="steps of the one-block virtual write timed for start-up")
    p.add_argument("--ref", type=Path, default=None, help="another checkout whose virtual writes run alternately")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--summarize", type=Path, default=None, help="recompute the ratios of this JSON from its records")
    p.add_argument("--steps", type=int)
    p.add_argument("--out")
    p.add_argument("--count", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.summarize:
        summarize(args.summarize)
        return
    if args.mode == "side":
        kw = {"carry": {"steps": args.steps}, "folded": {"steps": args.steps},
              "slices": {"out": args.out, "count": args.count, "seed": args.seed},
              "read": {"out": args.out}}[args.name]  # fmt: skip
        print(json.dumps(SIDES[args.name](**kw)))
        return
    size, read_size = parse_int(args.size, name="--size"), parse_int(args.read_size, name="--read-size")
    stored_size = parse_int(args.stored_size, name="--stored-size")
    args.dir.mkdir(parents=True, exist_ok=True)
    virtual, nosum = args.dir / "virtual.zarr", args.dir / "virtual-nosummaries.zarr"
    records: list[dict] = []
    body: dict = {"size": size, "read_size": read_size, "stored_size": stored_size, "records": records}
    writes = [(nosum, "virtual --no-summaries", ["--no-summaries"])] if "no-summaries" in args.writes else []
    writes += [(virtual, "virtual", [])] if "summaries" in args.writes else []
    startup = parse_int(args.startup_size, name="--startup-size")
    if "write" not in args.skip:
        for _ in range(args.repeat):
            records.append(run(side("carry", steps=size), "carry-only scan"))
            for out, label, flags in writes:
                for tree in [None, args.ref] if args.ref else [None]:
                    shutil.rmtree(out, ignore_errors=True)
                    _record.ENV["PYTHONPATH"] = str(_record.ROOT if tree is None else tree.resolve())
                    records.append(run(cli(out, size, "--virtual", *flags), label + ("" if tree is None else " (ref)")))
                    records[-1]["stored_bytes"] = disk_bytes(out)
                _record.ENV["PYTHONPATH"] = str(_record.ROOT)
            if "no-summaries" in args.writes:
                one = args.dir / "virtual-one-block.zarr"
                shutil.rmtree(one, ignore_errors=True)
                label = "virtual --no-summaries, one block"
                records.append(run(cli(one, startup, "--virtual", "--no-summaries"), label))
                shutil.rmtree(one)
            if args.folded:
                records.append(run(side("folded", steps=size), "folded scan"))
        stored_bytes = args.stored_bytes
        if stored_bytes is None:
            stored = args.dir / "stored.zarr"
            shutil.rmtree(stored, ignore_errors=True)
            records.append(run(cli(stored, stored_size), f"stored write of {stored_size}"))
            stored_bytes = records[-1]["stored_bytes"] = disk_bytes(stored)
            shutil.rmtree(stored)
        body["write"] = {**write_ratios(records), "stored_bytes_of_stored_write": stored_bytes}
        for out, key in ((nosum, "virtual_no_summaries"), (virtual, "virtual")):
            if out.exists():
                body["write"][f"{key}_percent_of_stored"] = round(100 * disk_bytes(out) / stored_bytes, 4)
        shutil.rmtree(nosum, ignore_errors=True)
    if "slice" not in args.skip:
        if not virtual.exists():
            records.append(run(cli(virtual, size, "--virtual"), "virtual"))
        for seed in range(args.repeat):
            records.append(run(side("slices", out=virtual, count=args.slices, seed=seed), "slices"))
        slices = [r for r in records if r["label"] == "slices"]
        body["slice"] = {
            "first_s": [round(r["first_s"], 3) for r in slices],
            "median_after_first_s": statistics.median(r["median_after_first_s"] for r in slices),
            "max_after_first_s": max(max(r["slice_s"][1:]) for r in slices),
        }
    shutil.rmtree(virtual, ignore_errors=True)
    if "read" not in args.skip:
        small, stored = args.dir / "virtual-read.zarr", args.dir / "stored-read.zarr"
        for out, flags in ((small, ["--virtual"]), (stored, [])):
            shutil.rmtree(out, ignore_errors=True)
            records.append(run(cli(out, read_size, *flags), f"write {out.name}"))
            records[-1]["stored_bytes"] = disk_bytes(out)
        for _ in range(args.repeat):
            for out, label in ((stored, "read stored, cold"), (small, "read virtual")):
                drop_cache(out)
                records.append(run(side("read", out=out), label))
        body["read"] = read_ratios(records)
        shutil.rmtree(small)
        shutil.rmtree(stored)
    command = "python benchmarks/bench_virtual.py " + shlex.join(sys.argv[1:])
    if args.json:
        save(args.json, command, body)
    print(json.dumps({k: v for k, v in body.items() if k != "records"}, indent=1))


if __name__ == "__main__":
    main()
