"""What checking an output costs against writing it: ``streamacc verify`` of a whole output vs its write.

For each length, writes the headline output (``streamacc write OUT --size N``), then
verifies every block (``streamacc verify OUT``), each a fresh process under
``/usr/bin/time -v``, ``--repeat`` times in turn; with ``--before DIR`` the streamacc found
at ``DIR`` (an older checkout) then writes and verifies an output of its own, in the same
run. Prints a Markdown table with the ratio of each command's wall time to the median write
of the same side (``/ median write``).

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
    sides = {"": here} if args.before is None else {"": here, " before": str(args.before.resolve())}
    for text in args.sizes:
        size = parse_int(text, name="--sizes", minimum=1)
        runs: dict[str, list[dict]] = {}
        for side, path in sides.items():  # an older checkout writes and checks its own output (its own format)
            out = args.dir / f"verify{side.strip()}.zarr"
            cli, env = [sys.executable, "-m", "streamacc"], {"PYTHONPATH": path}
            try:
                for _ in range(args.repeat):
                    write = [*cli, "write", str(out), "--size", str(size), "--no-progress", "--overwrite"]
                    runs.setdefault(f"write{side}", []).append(time_command(write, env=env, cwd=args.dir))
                    verify = [*cli, "verify", str(out)]
                    runs.setdefault(f"verify{side}", []).append(time_command(verify, env=env, cwd=args.dir))
            finally:
                shutil.rmtree(out, ignore_errors=True)
        for runs_of in runs.values():
            for r in runs_of:
                assert r["returncode"] == 0, r["stderr"]
        results[text] = runs
        for label, measured in runs.items():
            side = " before" if label.endswith(" before") else ""
            base = statistics.median(r["wall_s"] for r in runs[f"write{side}"])
            for i, r in enumerate(measured, start=1):
                rows.append(
                    f"| {text} | {label} | {i} | {r['wall_s']:.2f} | {r['user_s']:.2f} | {r['sys_s']:.2f} | "
                    f"{r['minor_faults']} | {r['max_rss_kib'] / 1024:.0f} | {r['wall_s'] / base:.2f} |"
                )
    print("| steps | command | run | wall s | user s | sys s | minor faults | peak RSS MiB | / median write |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    print(f"\n{os.cpu_count()} CPUs; outputs under {args.dir}")


if __name__ == "__main__":
    main()
