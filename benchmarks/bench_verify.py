"""What checking an output costs against writing it: ``streamacc verify`` of a whole output vs its write.

For each length, writes the headline output (``streamacc write OUT --size N``), then
verifies every block (``streamacc verify OUT``), each a fresh process under
``/usr/bin/time -v``, ``--repeat`` times in turn; with ``--before DIR`` the same output is
also verified by the streamacc found at ``DIR`` (an older checkout), in the same run.
Prints a Markdown table with the ratio of each verify's wall time to the median write's.

    python benchmarks/bench_verify.py --sizes 2**28 2**31 --repeat 3 --dir /tmp/streamacc-verify
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _timing import time_command

from streamacc.cli._expr import parse_int


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", default=["2**28"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "streamacc-verify")
    parser.add_argument("--before", type=Path, default=None, help="a checkout of an older streamacc to compare")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    here = str(Path(__file__).resolve().parents[1])
    rows, results = [], {}
    for text in args.sizes:
        size = parse_int(text, name="--sizes", minimum=1)
        out = args.dir / "verify.zarr"
        runs: dict[str, list[dict]] = {"write": [], "verify": [], "verify before": []}
        try:
            for _ in range(args.repeat):
                cli = [sys.executable, "-m", "streamacc"]
                write = time_command([*cli, "write", str(out), "--size", str(size), "--no-progress", "--overwrite"],
                                     env={"PYTHONPATH": here}, cwd=args.dir)  # fmt: skip
                runs["write"].append(write)
                runs["verify"].append(time_command([*cli, "verify", str(out)], env={"PYTHONPATH": here}, cwd=args.dir))
                if args.before is not None:
                    env = {"PYTHONPATH": str(args.before.resolve())}
                    runs["verify before"].append(time_command([*cli, "verify", str(out)], env=env, cwd=args.dir))
        finally:
            shutil.rmtree(out, ignore_errors=True)
        for runs_of in runs.values():
            for r in runs_of:
                assert r["returncode"] == 0, r["stderr"]
        base = statistics.median(r["wall_s"] for r in runs["write"])
        results[text] = runs
        for label, measured in runs.items():
            for i, r in enumerate(measured, start=1):
                rows.append(
                    f"| {text} | {label} | {i} | {r['wall_s']:.2f} | {r['user_s']:.2f} | {r['sys_s']:.2f} | "
                    f"{r['minor_faults']} | {r['max_rss_kib'] / 1024:.0f} | {r['wall_s'] / base:.2f} |"
                )
    print("| steps | command | run | wall s | user s | sys s | minor faults | peak RSS MiB | wall / median write |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    print(f"\n{os.cpu_count()} CPUs; outputs under {args.dir}")


if __name__ == "__main__":
    main()
