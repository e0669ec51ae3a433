"""What the test suite costs, and where its CPU goes.

Runs the README's test command (``python -m pytest -q``, from the checkout's root) under
``/usr/bin/time -v``, ``--repeat`` times, with the plugin ``_tests_cpu.py`` loaded in
every pytest process: the wall time, user and system CPU, page faults and peak RSS of the
whole command, and, from the plugin, the CPU of each test (its process's and that of the
processes it waited for), grouped by test file, the tests that took the most, and the
seconds JAX spent compiling. What no test accounts for (the interpreters starting and
importing, collection, the session's dask cluster, S3 server and forked writers) is the
whole command's CPU less the tests'.

    python benchmarks/bench_tests.py --repeat 2 --json benchmarks/results/tests_cpu.json

Arguments after ``--`` go to pytest (``-- -n 0`` for one process, ``-- -m 'not slow'``).
The figure the project aims at is 200 CPU-seconds (user + system) on the 2-core machine;
the same tests take 1.5x more CPU in a slower hour of that machine, so compare runs made
one after the other.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _record import load, save
from _timing import time_command

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent


def measure(pytest_args: list[str], top: int) -> dict[str, Any]:
    """One run of the test command: GNU time's figures and the plugin's, summed over its processes."""
    with tempfile.TemporaryDirectory(prefix="bench-tests-") as folder:
        env = {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
            "STREAMACC_TESTS_CPU_DIR": folder,
        }
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "_tests_cpu", *pytest_args]
        before = load()
        r = time_command(cmd, env=env, cwd=ROOT)
        docs = [json.loads(p.read_text()) for p in sorted(Path(folder).glob("*.json"))]
    tail = r["stdout"][-3000:]
    if r["returncode"]:
        raise SystemExit(f"the tests failed ({r['returncode']}): {shlex.join(cmd)}\n{tail}\n{r['stderr']}")
    passed = re.search(r"(\d+) passed", tail)
    tests = [t for d in docs for t in d["tests"]]
    compile_s: collections.Counter[str] = collections.Counter()
    for d in docs:
        compile_s.update(d["compile_s"])
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0, 0.0])
    for nodeid, me, children, wall in tests:
        row = by_file[nodeid.split("::")[0]]
        row[0] += me
        row[1] += children
        row[2] += 1
        row[3] += wall
    cpu = r["user_s"] + r["sys_s"]
    in_tests = sum(me + children for _, me, children, _ in tests)
    files = sorted(by_file.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))
    slowest = sorted(tests, key=lambda t: -(t[1] + t[2]))[:top]
    return {
        "wall_s": r["wall_s"],
        "user_s": r["user_s"],
        "sys_s": r["sys_s"],
        "cpu_s": round(cpu, 2),
        "minor_faults": r["minor_faults"],
        "major_faults": r["major_faults"],
        "peak_rss_mb": round(r["max_rss_kib"] * 1024 / 1e6, 1),
        "load_before": before,
        "passed": int(passed[1]) if passed else None,
        "tests": len(tests),
        "in_tests_cpu_s": round(in_tests, 2),
        "outside_tests_cpu_s": round(cpu - in_tests, 2),
        "compile_s": {k.rsplit("/", 1)[-1]: round(v, 2) for k, v in compile_s.items()},
        "by_file": [
            {"file": f, "cpu_s": round(v[0] + v[1], 2), "children_cpu_s": round(v[1], 2), "tests": v[2],
             "wall_s": round(v[3], 2)}
            for f, v in files[:top]
        ],
        "slowest": [{"test": t[0], "cpu_s": round(t[1] + t[2], 2), "wall_s": round(t[3], 2)} for t in slowest],
        "buckets": {
            label: {"tests": len(chosen), "cpu_s": round(sum(t[1] + t[2] for t in chosen), 2)}
            for label, chosen in (
                ("under 0.1 s", [t for t in tests if t[1] + t[2] < 0.1]),
                ("0.1 to 0.5 s", [t for t in tests if 0.1 <= t[1] + t[2] < 0.5]),
                ("0.5 s or more", [t for t in tests if t[1] + t[2] >= 0.5]),
            )
        },
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ours, pytest_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--top", type=int, default=15, help="test files and tests listed by their CPU")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(ours)
    runs = []
    for i in range(args.repeat):
        run = measure(pytest_args, args.top)
        runs.append(run)
        print(f"run {i + 1}: {run['passed']} passed, {run['wall_s']:.0f} s wall, {run['user_s']:.0f} s user + "
              f"{run['sys_s']:.0f} s system; in tests {run['in_tests_cpu_s']:.0f} s, outside them "
              f"{run['outside_tests_cpu_s']:.0f} s", flush=True)  # fmt: skip
    if args.json:
        command = shlex.join(["python", "benchmarks/bench_tests.py", *ours] + (["--", *pytest_args] if pytest_args
                                                                               else []))  # fmt: skip
        save(args.json, command, {"pytest_args": pytest_args, "runs": runs})


if __name__ == "__main__":
    main()
