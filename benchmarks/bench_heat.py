"""The heat equation (a 4096-point float64 state) with defaults against the hand-written loops, alternating.

    python benchmarks/bench_heat.py --steps '2**17' --repeat 3 --dir /tmp/heat --json benchmarks/results/heat_2p17.json

The sides are ``bench_simulations.py``'s, each in its own process under GNU time: ``streamacc``
(``streamacc.write`` with defaults), ``zarr-append`` (a jitted scan per 1024 steps appended with
``zarr.Array.append``, blosc-lz4 as streamacc, whole-row chunks) and ``xarray-append`` (the same
loop through ``to_zarr(append_dim="step")``), run in turn ``--repeat`` times; the ratios are of
median wall times (the loops' over streamacc's: above 1, streamacc is faster).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import statistics
import sys
from pathlib import Path

from _harness import disk_bytes
from _record import median, run, save
from bench_simulations import side_cmd

from streamacc.cli._expr import parse_int

SIDES = ("streamacc", "zarr-append", "xarray-append")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", default="2**17")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dir", type=Path, default=Path("/tmp/bench_heat"))
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    steps = parse_int(args.steps, name="--steps")
    args.dir.mkdir(parents=True, exist_ok=True)
    out = args.dir / "heat.zarr"
    records = []
    for _ in range(args.repeat):
        for side in SIDES:
            shutil.rmtree(out, ignore_errors=True)
            record = run(side_cmd(side, out, steps=steps), side)
            record["stored_bytes"] = disk_bytes(out)
            records.append(record)
    shutil.rmtree(out, ignore_errors=True)
    mine = median(records, "streamacc")
    summary = {
        "zarr_append_over_streamacc": round(median(records, "zarr-append") / mine, 3),
        "xarray_append_over_streamacc": round(median(records, "xarray-append") / mine, 3),
        "streamacc_max_peak_rss_mb": max(r["peak_rss_mb"] for r in records if r["label"] == "streamacc"),
        "streamacc_median_cpu_s": statistics.median(
            r["user_s"] + r["sys_s"] for r in records if r["label"] == "streamacc"
        ),
    }
    body = {"steps": steps, "state_points": 4096, "summary": summary, "records": records}
    if args.json:
        save(args.json, "python benchmarks/bench_heat.py " + shlex.join(sys.argv[1:]), body)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
