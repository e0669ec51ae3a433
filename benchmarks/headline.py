"""The headline job end to end: ``streamacc write OUT --size N`` then check it from xarray.

Runs the CLI as a child process and records what ``/usr/bin/time -v`` would: wall time,
user and system CPU, minor page faults (also per 1000 steps) and peak RSS, from
``getrusage(RUSAGE_CHILDREN)`` of this small process (numpy only, so the child's peak
RSS is its own). Then measures the bytes on disk, opens the output with
``xarray.open_zarr`` and compares sampled blocks bit for bit against a numpy block loop
(``multiply.accumulate`` per block, carrying the last value), which computes every block
but keeps only the sampled ones. Extra arguments go to ``streamacc write``.

    python benchmarks/headline.py --size '2**32' --out /tmp/headline.zarr
    python benchmarks/headline.py --size '2**32' --compensated   # samples against exact values (mpmath)

Prints one JSON document on stdout (the command's own summary line goes to stderr, and into
the JSON), so ``python benchmarks/headline.py | jq .wall_s`` works.

With ``--floor``, the same run also measures this machine's floor for the job, right after
the write: the disk's (as many bytes as the output stores, written into fresh fsynced files
of the output's mean chunk size, :func:`_machine.disk_write`, by one writer and by as many
as the write keeps (``DEFAULT_INFLIGHT``), whichever was faster) and the compute's (the
carry-only scan of as many steps, unrolled as the recipe runs it, in a process of its own,
timed from its first block to its last); ``floor_ratio`` is the write's wall time over the
larger of the two. ``--json FILE`` also writes the document there, with the machine's facts.

    python benchmarks/headline.py --size '2**32' --out /tmp/headline.zarr --floor \
        --json benchmarks/results/headline_2p32_floor.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streamacc.base import DEFAULT_INFLIGHT
from streamacc.cli._expr import parse_int

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import disk_bytes
from _machine import load, machine

RATIO = 1 + 1e-8
REF_BLOCK = 2**22
TARGETS = {"minflt_per_1000_steps": 0.2, "sys_s": 15.0, "wall_s": 45.0, "peak_rss_mb": 450.0}
"""The headline's targets at 2**32 steps (page faults, system CPU, wall, peak RSS in 10**6 bytes)."""


def run_cli(out: Path, size: int, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "streamacc", "write", str(out), "--size", str(size), "--no-progress", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    summary = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    wall = time.perf_counter() - t0
    print(summary, file=sys.stderr)  # stdout is the JSON alone
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    minflt = after.ru_minflt - before.ru_minflt
    return {
        "command": " ".join(cmd),
        "summary": summary,
        "wall_s": wall,
        "user_s": after.ru_utime - before.ru_utime,
        "sys_s": after.ru_stime - before.ru_stime,
        "minflt": minflt,
        "minflt_per_1000_steps": 1000 * minflt / size,
        "majflt": after.ru_majflt - before.ru_majflt,
        "peak_rss_mib": after.ru_maxrss / 1024,
        "peak_rss_mb": after.ru_maxrss * 1024 / 1e6,
    }


CARRY_ONLY = """
import os, sys, time
os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax
jax.config.update("jax_enable_x64", True)
from streamacc.engine import carry_pass, make_plan
from streamacc.recipes import get_recipe
size = int(sys.argv[1])
job = get_recipe("gp").make(size, "float64", {})
plan = make_plan(job.f, job.init, None, length=size, block_size=2**22, unroll=job.unroll,
                 reverse=False, save_every=1, block_bytes=2**25, rows_multiple=1)
warm = make_plan(job.f, job.init, None, length=2**22, block_size=2**22, unroll=job.unroll,
                 reverse=False, save_every=1, block_bytes=2**25, rows_multiple=1)
for _ in carry_pass(warm):  # compiles the block function
    pass
t0, c0 = time.perf_counter(), time.process_time()
for _ in carry_pass(plan):
    pass
print(time.perf_counter() - t0, time.process_time() - c0, job.unroll)
"""


def carry_only(size: int) -> dict:
    """The carry-only scan of ``size`` steps of the recipe (its unroll), timed in a process of its own."""
    out = subprocess.run([sys.executable, "-c", CARRY_ONLY, str(size)], check=True, stdout=subprocess.PIPE, text=True)
    wall, cpu, unroll = out.stdout.split()
    return {"wall_s": float(wall), "cpu_s": float(cpu), "unroll": int(unroll), "ns_per_step": float(wall) / size * 1e9}


def floor(out: Path, size: int, stored: int) -> dict:
    """This machine's floor for the job, now: the disk's for ``stored`` bytes, the carry-only scan's."""
    from _machine import disk_write

    chunks = [f for f in (out / "x").rglob("*") if f.is_file() and f.name != "zarr.json"]
    file_bytes = max(2**20, stored // max(len(chunks), 1))
    ways = [disk_write(out.parent / "streamacc-floor", stored, file_bytes=file_bytes, writers=n)
            for n in (1, DEFAULT_INFLIGHT)]  # fmt: skip
    (out.parent / "streamacc-floor").rmdir()
    disk = min(ways, key=lambda way: way["seconds"])  # the disk at its fastest, one stream or as many as the write
    carry = carry_only(size)
    return {"disk": disk, "disk_ways": ways, "carry_only": carry, "floor_s": max(disk["seconds"], carry["wall_s"])}


def verdicts(result: dict) -> dict:
    """Each target with the measured value and whether it is met (they are set for 2**32 steps)."""
    return {key: {"target": limit, "measured": round(result[key], 3), "met": result[key] <= limit}
            for key, limit in TARGETS.items()}  # fmt: skip


def check_samples(out: Path, size: int, samples: int) -> dict:
    import xarray as xr

    x = xr.open_zarr(out)["x"]
    blocks = -(-size // REF_BLOCK)
    wanted = set(np.linspace(0, blocks - 1, samples).round().astype(int).tolist())
    carry, checked = 1.0, 0
    for k in range(blocks):
        n = min(REF_BLOCK, size - k * REF_BLOCK)
        factors = np.full(n, RATIO)
        factors[0] = carry if k == 0 else carry * RATIO
        ref = np.multiply.accumulate(factors)
        carry = ref[-1]
        if k in wanted:
            got = x[k * REF_BLOCK : k * REF_BLOCK + n].values
            if got.tobytes() != ref.tobytes():
                raise SystemExit(f"block {k} differs from the numpy block loop")
            checked += 1
    return {"sampled_blocks": checked, "of_blocks": blocks, "bit_identical": True, "last_value": float(carry)}


def check_exact(out: Path, size: int, samples: int) -> dict:
    """For ``--compensated``: sampled steps (the last included) against ``x0 * ratio**i`` by mpmath at 256 bits."""
    import mpmath
    import xarray as xr

    mpmath.mp.prec = 256
    x = xr.open_zarr(out)["x"]
    steps = sorted(set(np.linspace(0, size - 1, samples).round().astype(np.int64).tolist()))
    got = x.isel(step=steps).values
    ratio = mpmath.mpf(RATIO)  # the float64 ratio, exactly
    exact = [float(ratio**i) for i in steps]  # mpf -> float rounds to nearest
    wrong = [i for i, g, e in zip(steps, got, exact, strict=True) if g != e]
    if wrong:
        raise SystemExit(f"steps {wrong[:5]} differ from the correctly rounded exact values")
    return {"sampled_steps": len(steps), "correctly_rounded": True, "last_value": float(got[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2**32")
    parser.add_argument("--out", type=Path, default=None, help="where to write (default: a new temporary folder)")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--keep", action="store_true", help="keep the output afterwards")
    parser.add_argument("--floor", action="store_true", help="also measure the disk's and the compute's floor")
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON document here")
    args, extra = parser.parse_known_args()
    size = parse_int(args.size, name="--size", minimum=1)
    if args.out is None:
        args.out = Path(tempfile.mkdtemp(prefix="streamacc-headline-")) / "out.zarr"
    shutil.rmtree(args.out, ignore_errors=True)
    info = machine(args.out.parent)
    result = {"size": size, **run_cli(args.out, size, extra)}
    result["gib_per_s"] = size * 8 / result["wall_s"] / 2**30
    result["disk_bytes"] = disk_bytes(args.out)
    result["compression_ratio"] = size * 8 / result["disk_bytes"]
    if "--compensated" in extra:
        result.update(check_exact(args.out, size, 4 * args.samples))
    else:
        result.update(check_samples(args.out, size, args.samples))
    result["targets"] = verdicts(result)
    if args.floor:
        result["floor"] = floor(args.out, size, result["disk_bytes"])
        result["floor_ratio"] = result["wall_s"] / result["floor"]["floor_s"]
    result["machine"] = {**info, "load_end": load()}
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    if not args.keep:
        shutil.rmtree(args.out)
        if args.out.parent.name.startswith("streamacc-headline-"):
            args.out.parent.rmdir()


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
