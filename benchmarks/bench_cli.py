"""Benchmarks of the command line: start-up time, and ``streamacc write`` for every recipe.

    python benchmarks/bench_cli.py startup [--repeat 20]
    python benchmarks/bench_cli.py recipes [--size 2**22] [--repeat 3] [--out DIR]
    python benchmarks/bench_cli.py walk [--size 2**22] [--repeat 3]

startup  runs each command in a fresh interpreter --repeat times (after one warm-up run)
         and reports mean / min / max wall time, hyperfine style, and which of jax, zarr
         and numpy the command imported (checked in a separate run).
recipes  runs ``streamacc write OUT --recipe R --size N`` for each recipe under
         ``/usr/bin/time -v`` and reports wall, user and system CPU, minor page faults and
         peak RSS, plus the line the command printed; the best of --repeat by wall time.
walk     compute only (no I/O): the random walk as it is now (increments drawn vectorised
         for a whole block, the scan adds) against the former step that drew its normal
         inside the scan, both through ``streamacc.scan``, in ns per step.

Each prints a Markdown table and the command line for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _timing import time_command

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}

STARTUP = {
    "python -c pass": ["-c", "pass"],
    "import streamacc": ["-c", "import streamacc"],
    "streamacc --help": ["-m", "streamacc", "--help"],
    "streamacc write --help": ["-m", "streamacc", "write", "--help"],
    "streamacc recipes": ["-m", "streamacc", "recipes"],
    "streamacc write o.zarr --size lambda (usage error)": ["-m", "streamacc", "write", "o.zarr", "--size", "lambda"],
    "streamacc write o.zarr --size 10 --dtype float32 (refused)": [
        "-m", "streamacc", "write", "o.zarr", "--size", "10", "--dtype", "float32",
    ],
}  # fmt: skip


def _heavy(args: list[str]) -> str:
    """Which of jax, zarr and numpy the command imports (run again, in-process, in a fresh interpreter)."""
    code = f"from streamacc.cli._main import main; main({args[2:]!r})" if args[0] == "-m" else args[1]
    probe = f"{code}\nimport sys; print('HEAVY', *[m for m in ('jax', 'zarr', 'numpy') if m in sys.modules])"
    proc = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=ENV, cwd=tempfile.gettempdir()
    )
    found = re.search(r"^HEAVY(.*)$", proc.stdout, re.MULTILINE)
    return ", ".join(found[1].split()) if found else "?"


def startup(repeat: int) -> None:
    print(f"`python benchmarks/bench_cli.py startup --repeat {repeat}`\n")
    print("| command | mean s | min s | max s | imports |")
    print("|---|---|---|---|---|")
    for name, args in STARTUP.items():
        cmd = [sys.executable, *args]
        subprocess.run(cmd, capture_output=True, env=ENV, cwd=tempfile.gettempdir())  # warm the page cache
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            subprocess.run(cmd, capture_output=True, env=ENV, cwd=tempfile.gettempdir())
            times.append(time.perf_counter() - start)
        mean, low, high = statistics.mean(times), min(times), max(times)
        print(f"| `{name}` | {mean:.3f} | {low:.3f} | {high:.3f} | {_heavy(args) or '-'} |")


def _time_v(cmd: list[str], cwd: Path) -> dict:
    timed = time_command(cmd, env=ENV, cwd=cwd, timeout=None)
    if timed["returncode"]:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{timed['stderr']}")
    return {
        "wall": timed["wall_s"],
        "user": timed["user_s"],
        "sys": timed["sys_s"],
        "minor_faults": timed["minor_faults"],
        "max_rss_mb": timed["max_rss_kib"] / 1024,
        "line": timed["stdout"].strip(),
    }


def recipes(size: str, repeat: int, out: Path | None) -> None:
    base = Path(out or tempfile.mkdtemp(prefix="bench_cli_"))
    base.mkdir(parents=True, exist_ok=True)
    source = base / "input.zarr"
    make = (
        "import numpy as np, zarr, sys; n = int(sys.argv[2]); "
        "a = zarr.create_array(sys.argv[1], shape=(n,), chunks=(2**22,), dtype='f8', fill_value=0.0); "
        "a[:] = np.random.default_rng(0).uniform(0.5, 1.0, n)"
    )
    subprocess.run([sys.executable, "-c", make, str(source), str(_count(size))], check=True, env=ENV)
    print(f"`python benchmarks/bench_cli.py recipes --size '{size}' --repeat {repeat}`\n")
    print("| recipe | wall s | user s | sys s | minor faults | peak RSS MB | summary line |")
    print("|---|---|---|---|---|---|---|")
    for recipe in ("gp", "affine", "logistic", "randomwalk", "cumsum", "cumprod"):
        extra = ["--input", str(source)] if recipe in ("cumsum", "cumprod") else []
        cmd = [sys.executable, "-m", "streamacc", "write", "out.zarr", "--recipe", recipe, "--size", size, *extra]
        runs = []
        for _ in range(repeat):
            shutil.rmtree(base / "out.zarr", ignore_errors=True)
            runs.append(_time_v([*cmd, "--no-progress"], base))
        r = min(runs, key=lambda run: run["wall"])
        print(
            f"| {recipe} | {r['wall']:.2f} | {r['user']:.2f} | {r['sys']:.2f} | {r['minor_faults']} | "
            f"{r['max_rss_mb']:.0f} | {r['line']} |"
        )
    if out is None:
        shutil.rmtree(base, ignore_errors=True)


def walk(size: int, repeat: int) -> None:
    sys.path.insert(0, str(ROOT))
    import jax
    import jax.numpy as jnp
    import numpy as np

    jax.config.update("jax_enable_x64", True)
    import streamacc
    from streamacc.recipes import get_recipe

    def scalar_draw_step(carry, _):  # the former step: one fold_in and one normal inside the scan, per step
        value, index = carry
        index = index + jnp.asarray(1, jnp.uint64)
        noise = jax.random.normal(jax.random.fold_in(jax.random.key(0), index), dtype="float64")
        return (value + jnp.asarray(1.0, "float64") * noise, index), value

    job = get_recipe("randomwalk").build(size, "float64")
    cases = {
        "vectorised increments + add scan (now)": lambda: streamacc.scan(
            job.f, job.init, job.xs, length=size, block_size=2**20
        ),
        "normal drawn inside the scan (before)": lambda: streamacc.scan(
            scalar_draw_step, (np.float64(0.0), np.uint64(0)), length=size, block_size=2**20
        ),
    }
    print(f"`python benchmarks/bench_cli.py walk --size {size} --repeat {repeat}` (best of {repeat} after a warm-up)\n")
    print("| random walk | s | ns/step |")
    print("|---|---|---|")
    for name, run in cases.items():
        run()
        best = min(_timed(run) for _ in range(repeat))
        print(f"| {name} | {best:.3f} | {best / size * 1e9:.1f} |")


def _timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def _count(text: str) -> int:
    sys.path.insert(0, str(ROOT))
    from streamacc.cli._expr import parse_int

    return parse_int(text, name="--size", minimum=1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=["startup", "recipes", "walk"])
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--size", default="2**22", help="steps, e.g. 2**22 (recipes, walk)")
    p.add_argument("--out", type=Path, default=None, help="keep the outputs here (recipes)")
    args = p.parse_args()
    if args.mode == "startup":
        startup(args.repeat or 20)
    elif args.mode == "recipes":
        recipes(args.size, args.repeat or 3, args.out)
    else:
        walk(_count(args.size), args.repeat or 3)


if __name__ == "__main__":
    main()
