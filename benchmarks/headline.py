"""The headline job end to end: ``streamacc write OUT --size N`` then check it from xarray.

Runs the CLI as a child process and records its wall time and peak RSS, measures the
bytes on disk, then opens the output with ``xarray.open_zarr`` and compares sampled
blocks bit for bit against a numpy block loop (``multiply.accumulate`` per block,
carrying the last value), which computes every block but keeps only the sampled ones.

    python benchmarks/headline.py --size '2**32' --out /tmp/headline.zarr
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from streamacc._expr import parse_int

RATIO = 1 + 1e-8
REF_BLOCK = 2**22


def run_cli(out: Path, size: int, extra: list[str]) -> dict:
    cmd = [sys.executable, "-m", "streamacc", "write", str(out), "--size", str(size), "--no-progress", *extra]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    wall = time.perf_counter() - t0
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"command": " ".join(cmd), "wall_s": wall, "peak_rss_mib": peak_kib / 1024}


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2**32")
    parser.add_argument("--out", type=Path, default=Path("/tmp/streamacc-headline.zarr"))
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--keep", action="store_true", help="keep the output afterwards")
    args, extra = parser.parse_known_args()
    size = parse_int(args.size, name="--size", minimum=1)
    shutil.rmtree(args.out, ignore_errors=True)
    result = {"size": size, **run_cli(args.out, size, extra)}
    result["gib_per_s"] = size * 8 / result["wall_s"] / 2**30
    result["disk_bytes"] = disk_bytes(args.out)
    result["compression_ratio"] = size * 8 / result["disk_bytes"]
    result.update(check_samples(args.out, size, args.samples))
    print(json.dumps(result, indent=1))
    if not args.keep:
        shutil.rmtree(args.out)


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
