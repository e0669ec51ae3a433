"""The accelerator path in one short run: device memory at a few blocks, throughput, and what a Stream costs there.

Runs the geometric progression on the default JAX device and prints one JSON document:

- ``compute_only``: ``streamacc.iter_blocks`` (compute only), sampling the device's memory
  statistics after every block: the peak device bytes in use against the block's bytes
  say how many blocks were alive;
- ``write``: ``streamacc.write`` of the job (steps/s and GiB/s);
- ``stream``: the job through a ``streamacc.Stream`` inside ``jax.jit``, and whether its
  output holds the write's bytes;
- ``loop``, ``callbacks``, ``callbacks_behind``: the Stream's loop of blocks alone (each
  block handing one value to an ordered ``io_callback``), the loop handing every block's
  ys to a callback that does nothing, and the loop handing each block's ys over one block
  late (after the next block is computed): against the loop alone, what bringing the
  blocks to the host costs, and whether the transfer of block k overlaps the compute of
  block k+1;
- ``device_get_s``: the median time of one block's ``jax.device_get``.

On a CPU-only machine it runs too, and says that the device reports no memory stats.
``--dtype`` defaults to float64 where the device computes in 64 bits (CPU, GPU) and
float32 on a TPU, where the ratio is ``1 + 2**-20`` (``1 + 1e-8`` rounds to 1 in float32)::

    python benchmarks/gpu_check.py --size '2**30' --block '2**22' --out /tmp/gpu-check.zarr
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np


def in_use(device: jax.Device) -> int | None:
    stats = device.memory_stats()
    return None if stats is None else int(stats.get("bytes_in_use", 0))


def compute_only(streamacc: Any, job: Any, size: int, block: int, device: jax.Device) -> dict[str, Any]:
    peak, t0 = in_use(device), time.perf_counter()
    for b in streamacc.iter_blocks(job.f, job.init, length=size, block_size=block, unroll=job.unroll):
        used = in_use(device)
        peak = None if used is None else max(peak or 0, used)
        del b
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "steps_per_s": size / wall, "peak_device_bytes": peak}


def write(streamacc: Any, job: Any, size: int, block: int, out: Path, itemsize: int) -> dict[str, Any]:
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    streamacc.write(out, job.f, job.init, length=size, block_size=block, unroll=job.unroll, names=job.names,
                    progress=False)  # fmt: skip
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "gib_per_s": size * itemsize / wall / 2**30}


def stream(streamacc: Any, job: Any, size: int, block: int, out: Path, written: Path) -> dict[str, Any]:
    import jax.numpy as jnp
    import zarr

    shutil.rmtree(out, ignore_errors=True)
    t0 = time.perf_counter()
    with streamacc.Stream(out, job.f, length=size, block_size=block, unroll=job.unroll, names=job.names,
                          progress=False) as s:  # fmt: skip

        @jax.jit
        def program(x0: Any) -> Any:
            return s.scan(x0 * jnp.ones((), x0.dtype))

        program(jnp.asarray(job.init)).block_until_ready()
    wall = time.perf_counter() - t0
    same = all(
        np.array_equal(np.asarray(a[...]), np.asarray(zarr.open_array(str(written), path=name, mode="r")[...]))
        for name, a in zarr.open_group(str(out), mode="r").arrays()
    )
    shutil.rmtree(out, ignore_errors=True)
    return {"wall_s": wall, "steps_per_s": size / wall, "same_bytes_as_write": same}


def loops(job: Any, size: int, block: int) -> dict[str, Any]:
    """The Stream's loop alone, with every block's ys handed over, and handed over one block late."""
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import io_callback

    blocks = size // block
    x0 = jnp.asarray(job.init)

    def nothing(*_: Any) -> None:
        return None

    def run_block(c: Any) -> Any:
        return lax.scan(job.f, c, None, length=block, unroll=job.unroll)

    def program(kind: str) -> Any:
        def body(k: Any, state: Any) -> Any:
            c, behind = state
            c, ys = run_block(c)
            if kind == "loop":
                io_callback(nothing, None, k, ys[-1:], ordered=True)
            elif kind == "callbacks":
                io_callback(nothing, None, k, ys, ordered=True)
            else:  # the block before, handed over after this one is computed
                io_callback(nothing, None, k, behind, ordered=True)
                behind = ys
            return c, behind

        def run(x: Any) -> Any:
            init = (x * jnp.ones((), x.dtype), jnp.zeros((block,), x.dtype))
            return lax.fori_loop(0, blocks, body, init)[0]

        return jax.jit(run)

    report: dict[str, Any] = {}
    for kind in ("loop", "callbacks", "callbacks_behind"):
        p = program(kind)
        p(x0).block_until_ready()  # compiled, and run once
        walls = []
        for _ in range(3):
            t0 = time.perf_counter()
            p(x0).block_until_ready()
            walls.append(time.perf_counter() - t0)
        report[kind] = {"wall_s": statistics.median(walls), "ms_per_block": 1e3 * statistics.median(walls) / blocks}
    ys = jax.jit(run_block)(x0)[1]
    ys.block_until_ready()
    gets = []
    for _ in range(5):
        t0 = time.perf_counter()
        jax.device_get(ys)
        gets.append(time.perf_counter() - t0)
    report["device_get_s"] = statistics.median(gets)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2**30")
    parser.add_argument("--block", default="2**22")
    parser.add_argument("--dtype", choices=("float32", "float64"), default=None)
    parser.add_argument("--out", type=Path, default=Path("/tmp/streamacc-gpu-check.zarr"))
    args = parser.parse_args()
    device = jax.devices()[0]
    dtype = args.dtype or ("float32" if device.platform == "tpu" else "float64")
    jax.config.update("jax_enable_x64", dtype == "float64")

    import streamacc
    from streamacc.cli import parse_int
    from streamacc.recipes import get_recipe

    size = parse_int(args.size, name="--size", minimum=1)
    block = parse_int(args.block, name="--block", minimum=1)
    ratio = {} if dtype == "float64" else {"ratio": 1.0 + 2.0**-20}  # 1 + 1e-8 rounds to 1 in float32
    job = get_recipe("gp").build(size, dtype, **ratio)
    itemsize = np.dtype(dtype).itemsize
    baseline = in_use(device)
    written = args.out.with_suffix(".write.zarr")
    report: dict[str, Any] = {
        "device": str(device),
        "platform": device.platform,
        "jax": jax.__version__,
        "dtype": dtype,
        "size": size,
        "block_bytes": block * itemsize,
        "device_bytes_before": baseline,
        "compute_only": compute_only(streamacc, job, size, block, device),
        "write": write(streamacc, job, size, block, written, itemsize),
        "stream": stream(streamacc, job, size, block, args.out, written),
        **loops(job, size, block),
    }
    shutil.rmtree(written, ignore_errors=True)
    peak = report["compute_only"]["peak_device_bytes"]
    if peak is None:
        report["note"] = "this device reports no memory statistics (CPU): device memory not measured"
    else:
        report["blocks_alive_at_peak"] = round((peak - (baseline or 0)) / (block * itemsize), 2)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
