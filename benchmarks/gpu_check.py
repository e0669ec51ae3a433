"""The GPU path in one short run: device memory stays at a few blocks, and throughput.

Runs the geometric progression through ``streamacc.iter_blocks`` (compute only) and
``streamacc.write`` on the default JAX device, sampling the device's memory statistics
after every block, and prints one JSON document: device, peak device bytes in use, the
block size in bytes (peak / block says how many blocks were alive), steps/s and GiB/s.
On a CPU-only machine it runs too, and says that the device reports no memory stats.

    python benchmarks/gpu_check.py --size '2**30' --block '2**22' --out /tmp/gpu-check.zarr
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import streamacc  # noqa: E402
from streamacc.cli._expr import parse_int  # noqa: E402
from streamacc.recipes import get_recipe  # noqa: E402


def in_use(device: jax.Device) -> int | None:
    stats = device.memory_stats()
    return None if stats is None else int(stats.get("bytes_in_use", 0))


def compute_only(job, size: int, block: int, device: jax.Device) -> dict:
    peak, t0 = in_use(device), time.perf_counter()
    for b in streamacc.iter_blocks(job.f, job.init, length=size, block_size=block, unroll=job.unroll):
        used = in_use(device)
        peak = None if used is None else max(peak or 0, used)
        del b
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "steps_per_s": size / wall, "peak_device_bytes": peak}


def write(job, size: int, block: int, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    streamacc.write(out, job.f, job.init, length=size, block_size=block, unroll=job.unroll, names=job.names,
                    progress=False)  # fmt: skip
    wall = time.perf_counter() - t0
    shutil.rmtree(out)
    return {"wall_s": wall, "gib_per_s": size * 8 / wall / 2**30}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2**30")
    parser.add_argument("--block", default="2**22")
    parser.add_argument("--out", type=Path, default=Path("/tmp/streamacc-gpu-check.zarr"))
    args = parser.parse_args()
    size = parse_int(args.size, name="--size", minimum=1)
    block = parse_int(args.block, name="--block", minimum=1)
    device = jax.devices()[0]
    job = get_recipe("gp").build(size, "float64")
    baseline = in_use(device)
    report = {
        "device": str(device),
        "platform": device.platform,
        "size": size,
        "block_bytes": block * 8,
        "device_bytes_before": baseline,
        "compute_only": compute_only(job, size, block, device),
        "write": write(job, size, block, args.out),
    }
    peak = report["compute_only"]["peak_device_bytes"]
    if peak is None:
        report["note"] = "this device reports no memory statistics (CPU): device memory not measured"
    else:
        report["blocks_alive_at_peak"] = round((peak - (baseline or 0)) / (block * 8), 2)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
