"""What summaries cost and what they buy, on the headline job.

1. Cost: ``streamacc write OUT --size N`` with summaries (the default) and with
   ``--no-summaries``, alternating, ``--pairs`` times, in one run: wall, user and system
   CPU, page faults and peak RSS of each (``getrusage`` of the child, as ``/usr/bin/time -v``
   reports them), and the bytes the summaries take against the data's.
2. Gain: with the output's pages dropped from the page cache (``posix_fadvise(DONTNEED)`` on
   every file, as the writer does after each fsync), in fresh processes:
   ``streamacc.overview(OUT, points=4096)``, ``streamacc plot OUT``, and the same picture made
   the usual way, reading the data through xarray and dask (``coarsen(step=W).min/max/mean``
   over the window ``overview`` chose).

    python benchmarks/bench_overview.py --size '2**32' --dir /scratch --pairs 2 --png docs/headline.png

The output with summaries is left at DIR/headline.zarr (``--keep``) or deleted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _harness import disk_bytes, drop_cache

from streamacc.cli._expr import parse_int


def timed(cmd: list[str]) -> dict:
    """Run ``cmd`` in a fresh process: wall time, CPU, page faults and peak RSS of that process alone
    (``wait4``, as ``/usr/bin/time -v`` reports them), and the last line it printed."""
    with tempfile.TemporaryFile("w+") as printed:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=printed)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, cmd)
        printed.seek(0)
        lines = printed.read().strip().splitlines()
    return {
        "command": " ".join(cmd),
        "wall_s": round(wall, 3),
        "user_s": round(usage.ru_utime, 3),
        "sys_s": round(usage.ru_stime, 3),
        "minflt": usage.ru_minflt,
        "majflt": usage.ru_majflt,
        "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),
        "printed": lines[-1] if lines else "",
    }


OVERVIEW = """
import sys, time
t0 = time.perf_counter()
import streamacc
ds = streamacc.overview(sys.argv[1], points=4096)
print(f"window={ds.attrs['window']} windows={ds.sizes['step']} in_process_s={time.perf_counter() - t0:.3f}")
"""

XARRAY = """
import sys, time
t0 = time.perf_counter()
import xarray as xr
window = int(sys.argv[2])
x = xr.open_zarr(sys.argv[1]).x
c = x.coarsen(step=window, boundary="pad")
ds = xr.Dataset({"lo": c.min(), "hi": c.max(), "mean": c.mean()}).compute()  # one pass over the chunks
lo, hi, mean = ds["lo"], ds["hi"], ds["mean"]
import numpy as np
from matplotlib.figure import Figure
fig = Figure(figsize=(10, 4.8), dpi=110)
ax = fig.add_subplot()
steps = np.arange(lo.sizes["step"]) * window
ax.fill_between(steps, lo, hi, step="post", alpha=0.35)
ax.step(steps, mean, where="post", linewidth=0.8)
fig.savefig(sys.argv[3])
print(f"windows={lo.sizes['step']} in_process_s={time.perf_counter() - t0:.3f}")
"""


def markdown(result: dict) -> str:
    """The tables RESULTS.md copies."""
    lines = ["| pair | summaries | wall | user | system | minor faults | peak RSS |", "|---|---|--:|--:|--:|--:|--:|"]
    for w in result["writes"]:
        state = "on" if w["summaries"] else "off"
        lines.append(f"| {w['pair'] + 1} | {state} | {w['wall_s']:.1f} s | {w['user_s']:.1f} s | {w['sys_s']:.1f} s "
                     f"| {w['minflt']:,} | {w['peak_rss_mib']:.0f} MiB |")  # fmt: skip
    lines += ["", "| pair | wall on/off | user on/off | system on/off |", "|---|--:|--:|--:|"]
    for i, q in enumerate(result["ratios_on_over_off"]):
        lines.append(f"| {i + 1} | {q['wall_s']:.3f} | {q['user_s']:.3f} | {q['sys_s']:.3f} |")
    on = [w for w in result["writes"] if w["summaries"]][-1]
    share = f"{on['summary_bytes']:,} ({on['summary_percent']}%)"
    lines += ["", f"Bytes: data {on['data_bytes']:,}, summaries {share}.", ""]
    lines += ["| cold, fresh process | wall | user | system | major faults | peak RSS | printed |"]
    lines += ["|---|--:|--:|--:|--:|--:|---|"]
    for name, r in result["reads_cold"].items():
        lines.append(f"| {name} | {r['wall_s']:.2f} s | {r['user_s']:.2f} s | {r['sys_s']:.2f} s | {r['majflt']} "
                     f"| {r['peak_rss_mib']:.0f} MiB | {r['printed'].split('/')[-1]} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2**32")
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--png", type=Path, default=None, help="also keep streamacc plot's picture here")
    parser.add_argument("--keep", action="store_true", help="keep DIR/headline.zarr")
    parser.add_argument("--skip-xarray", action="store_true", help="leave out the xarray/dask comparison")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    size = parse_int(args.size, name="--size", minimum=1)
    args.dir.mkdir(parents=True, exist_ok=True)
    on, off = args.dir / "headline.zarr", args.dir / "nosummaries.zarr"
    writes = []
    for pair in range(args.pairs):
        for summaries in (False, True):
            out = on if summaries else off
            shutil.rmtree(out, ignore_errors=True)
            flags = [] if summaries else ["--no-summaries"]
            result = timed([sys.executable, "-m", "streamacc", "write", str(out), "--size", str(size), "--no-progress",
                            *flags])  # fmt: skip
            result["summaries"] = summaries
            result["pair"] = pair
            if summaries:
                data = disk_bytes(on / "x")
                kept = disk_bytes(on / "_streamacc" / "summaries")
                result.update(data_bytes=data, summary_bytes=kept, summary_percent=round(100 * kept / data, 4))
            else:
                shutil.rmtree(off)  # 10 GB at 2**32: gone before the next write
            writes.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "command"}), flush=True)
    ratios = []
    for pair in range(args.pairs):
        a, b = (next(w for w in writes if w["pair"] == pair and w["summaries"] is s) for s in (False, True))
        ratios.append({k: round(b[k] / a[k], 4) for k in ("wall_s", "user_s", "sys_s")})
    png = args.dir / "headline-x.png"
    reads = {}
    drop_cache(on)
    reads["overview"] = timed([sys.executable, "-c", OVERVIEW, str(on)])
    drop_cache(on)
    reads["plot"] = timed([sys.executable, "-m", "streamacc", "plot", str(on), "-o", str(png)])
    window = int(reads["overview"]["printed"].split()[0].split("=")[1])
    if not args.skip_xarray:
        drop_cache(on)
        reads["xarray_dask"] = timed([sys.executable, "-c", XARRAY, str(on), str(window), str(args.dir / "xr.png")])
    for name, r in reads.items():
        print(name, json.dumps(r), flush=True)
    if args.png:
        shutil.copyfile(png, args.png)
    result = {"size": size, "writes": writes, "ratios_on_over_off": ratios, "reads_cold": reads}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
        args.json.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))
    if not args.keep:
        shutil.rmtree(on)


if __name__ == "__main__":
    main()
