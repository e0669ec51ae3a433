"""``streamacc plot`` and ``streamacc.overview`` of a large output from a cold page cache, in fresh processes.

    python benchmarks/bench_plot.py --size '2**30' --dir /tmp/plot --repeat 5 --json benchmarks/results/plot_2p30.json

Writes the headline output of ``--size`` steps (or uses ``--out``), then alternates, ``--repeat``
times, each after dropping every file of the output from the page cache
(``posix_fadvise(DONTNEED)``, as far as a process without root can): ``streamacc plot OUT``
(process start to PNG), ``overview(OUT, points=4096)`` in a fresh process that has imported
streamacc (timed from the call: the first call imports xarray and pandas, which the Dataset it
returns needs) and the same call in a process that has imported xarray already. Each under GNU
time (wall, user and system CPU, faults, peak RSS). ``--ref`` names another checkout run
alternately with this one. ``--importtime`` keeps ``python -X importtime`` of one plot.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import _record
from _harness import drop_cache
from _record import run, save

from streamacc.cli._expr import parse_int

OVERVIEW = """
import sys, time
{pre}
import streamacc
t0 = time.perf_counter()
ds = streamacc.overview(sys.argv[1], points=4096)
import json
print(json.dumps({{"call_s": time.perf_counter() - t0, "windows": ds.sizes["step"]}}))
"""


def importtime(cmd: list[str]) -> dict[str, float]:
    """Cumulative import seconds of the top-level packages a command imports (``-X importtime``)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], capture_output=True, text=True,
                          env={**_record.os.environ, **_record.ENV}, cwd=_record.NEUTRAL)  # fmt: skip
    out: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)$", line)
        if m and len(m[2]) == 1:
            out[m[3]] = out.get(m[3], 0) + int(m[1]) / 1e6
    return dict(sorted(out.items(), key=lambda kv: -kv[1])[:15])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", default="2**30")
    p.add_argument("--dir", type=Path, default=Path("/tmp/bench_plot"))
    p.add_argument("--out", type=Path, default=None, help="an existing output to draw (else one is written)")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--ref", type=Path, default=None)
    p.add_argument("--importtime", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    out = args.out
    records: list[dict] = []
    if out is None:
        out = args.dir / "headline.zarr"
        shutil.rmtree(out, ignore_errors=True)
        size = parse_int(args.size, name="--size")
        records.append(run([sys.executable, "-m", "streamacc", "write", str(out), "--size", str(size),
                            "--no-progress"], "write"))  # fmt: skip
    png = args.dir / "plot.png"
    trees = {"this": _record.ROOT} | ({"ref": args.ref.resolve()} if args.ref else {})
    cases = {
        "plot": [sys.executable, "-m", "streamacc", "plot", str(out), "-o", str(png)],
        "overview (first call)": [sys.executable, "-c", OVERVIEW.format(pre=""), str(out)],
        "overview (xarray imported)": [sys.executable, "-c", OVERVIEW.format(pre="import xarray"), str(out)],
    }
    for _ in range(args.repeat):
        for label, cmd in cases.items():
            for tree, root in trees.items():
                _record.ENV["PYTHONPATH"] = str(root)
                drop_cache(out)
                records.append(run(cmd, label, tree=tree))
    _record.ENV["PYTHONPATH"] = str(_record.ROOT)
    summary = {}
    for tree in trees:
        for label in cases:
            rs = [r for r in records if r["label"] == label and r["tree"] == tree]
            key = "wall_s" if label == "plot" else "call_s"
            summary[f"{tree}: {label}"] = {
                f"median_{key}": round(statistics.median(r[key] for r in rs), 3),
                f"range_{key}": [round(min(r[key] for r in rs), 3), round(max(r[key] for r in rs), 3)],
                "median_process_wall_s": round(statistics.median(r["wall_s"] for r in rs), 3),
                "median_cpu_s": round(statistics.median(r["user_s"] + r["sys_s"] for r in rs), 3),
                "median_peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs),
            }
    body: dict = {"out": str(out), "summary": summary, "records": records}
    if args.importtime:
        body["importtime_plot_s"] = importtime(cases["plot"])
    if args.json:
        save(args.json, "python benchmarks/bench_plot.py " + shlex.join(sys.argv[1:]), body)
    print(json.dumps(summary, indent=1))
    if args.out is None:
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
