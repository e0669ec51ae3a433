"""Peak memory of the recipes that read an input (``cumsum``/``cumprod --input``) against those that read none.

    python benchmarks/bench_input.py --dir /tmp/input --sizes '2**26' '2**28' --repeat 3 \
        --json benchmarks/results/input_memory.json

Makes one input of the largest size (float64 uniform in [0.5, 1), chunks of 2**22 values, zarr's
default codec) and writes, alternating, ``--repeat`` times per size, each in its own process under
GNU time: ``cumsum --input``, ``cumprod --input``, then ``gp`` (no input, compressible output) and
``logistic`` (no input, an output that hardly compresses, as a running sum's): wall, user and
system CPU, page faults, peak RSS, and what each stores: its bytes on disk and a SHA-256 of its
data chunks (the output array's chunk files in key order), the same from every checkout when
a change keeps the bytes. ``--ref`` names another checkout whose ``streamacc`` runs the same
commands alternately with this one (``--ref /work/main``: before and after a change).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import _record
from _harness import disk_bytes
from _record import run, save

from streamacc.cli._expr import parse_int

RECIPES = ("cumsum", "cumprod", "gp", "logistic")


def make_input(path: Path, n: int) -> None:
    code = (
        "import sys, numpy as np, zarr; n = int(sys.argv[2]); "
        "a = zarr.create_array(sys.argv[1], shape=(n,), chunks=(2**22,), dtype='f8', fill_value=0.0); "
        "rng = np.random.default_rng(0)\n"
        "for i in range(0, n, 2**24): a[i:i + 2**24] = rng.uniform(0.5, 1.0, min(2**24, n - i))"
    )
    subprocess.run([sys.executable, "-c", code, str(path), str(n)], check=True)


def data_digest(out: Path) -> str:
    """SHA-256 of the chunk files of the output's data array (``x`` or ``y``), in key order."""
    digest = hashlib.sha256()
    for name in ("x", "y"):
        for chunk in sorted((out / name / "c").rglob("*")) if (out / name / "c").is_dir() else ():
            if chunk.is_file():
                digest.update(chunk.relative_to(out).as_posix().encode() + b"\0" + chunk.read_bytes())
    return digest.hexdigest()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dir", type=Path, default=Path("/tmp/bench_input"))
    p.add_argument("--sizes", nargs="+", default=["2**28"])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--recipes", nargs="+", default=list(RECIPES), choices=RECIPES)
    p.add_argument("--ref", type=Path, default=None, help="another checkout to run alternately (its PYTHONPATH)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    sizes = [parse_int(s, name="--sizes") for s in args.sizes]
    args.dir.mkdir(parents=True, exist_ok=True)
    source = args.dir / "input.zarr"
    if not source.exists():
        make_input(source, max(sizes))
    trees = {"this": _record.ROOT} | ({"ref": args.ref.resolve()} if args.ref else {})
    records = []
    out = args.dir / "out.zarr"
    for size in sizes:
        for _ in range(args.repeat):
            for recipe in args.recipes:
                for tree, root in trees.items():
                    shutil.rmtree(out, ignore_errors=True)
                    extra = ["--input", str(source)] if recipe in ("cumsum", "cumprod") else []
                    cmd = [sys.executable, "-m", "streamacc", "write", str(out), "--recipe", recipe, "--size",
                           str(size), "--no-progress", *extra]  # fmt: skip
                    _record.ENV["PYTHONPATH"] = str(root)
                    records.append(run(cmd, recipe, size=size, tree=tree))
                    records[-1].update(stored_bytes=disk_bytes(out), data_sha256=data_digest(out))
    shutil.rmtree(out, ignore_errors=True)
    _record.ENV["PYTHONPATH"] = str(_record.ROOT)
    summary = {}
    for size in sizes:
        for tree in trees:
            for recipe in args.recipes:
                rs = [r for r in records if r["size"] == size and r["tree"] == tree and r["label"] == recipe]
                summary[f"{tree} {recipe} {size}"] = {
                    "median_peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs),
                    "max_peak_rss_mb": max(r["peak_rss_mb"] for r in rs),
                    "median_wall_s": statistics.median(r["wall_s"] for r in rs),
                    "median_cpu_s": statistics.median(r["user_s"] + r["sys_s"] for r in rs),
                    "median_minor_faults": statistics.median(r["minor_faults"] for r in rs),
                    "stored_bytes": sorted({r["stored_bytes"] for r in rs}),
                    "data_sha256": sorted({r["data_sha256"][:16] for r in rs}),
                }
    body = {"sizes": sizes, "trees": {k: str(v) for k, v in trees.items()}, "summary": summary, "records": records}
    if args.json:
        save(args.json, "python benchmarks/bench_input.py " + shlex.join(sys.argv[1:]), body)
    print(json.dumps(summary, indent=1))
    if os.environ.get("KEEP_INPUT") is None:
        shutil.rmtree(source, ignore_errors=True)


if __name__ == "__main__":
    main()
