"""The sides of the harness's scenarios that are not a ``streamacc`` command, each run as a child process.

    python benchmarks/_sides.py NAME '{"keyword": value, ...}'

prints one JSON object: what the side timed of its own work (``run_s`` and the like), which
the harness adds to the side's row beside what GNU time measured of the whole process.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from typing import Any

SLICE = 2**20


def carry(steps: int, recipe: str = "gp") -> dict[str, Any]:
    """The recipe's step in a jitted scan that keeps only its carry, unrolled as the recipe is: the floor of a write."""
    import jax
    from jax import lax

    from streamacc.recipes import get_recipe

    jax.config.update("jax_enable_x64", True)
    job = get_recipe(recipe).build(steps, "float64")
    piece = min(steps, 2**26)

    @jax.jit
    def run_piece(c):
        return lax.scan(lambda c, x: (job.f(c, x)[0], None), c, None, length=piece, unroll=job.unroll)[0]

    t0 = time.perf_counter()
    c = job.init
    for _ in range(steps // piece):
        c = run_piece(c)
    final = float(c)
    return {"run_s": time.perf_counter() - t0, "final": final}


def slices(out: str, count: int, seed: int) -> dict[str, Any]:
    """``count`` random 2**20-step slices of an output through ``streamacc.open``, each timed."""
    import numpy as np

    import streamacc

    t0 = time.perf_counter()
    x = streamacc.open(out).x
    opened = time.perf_counter() - t0
    rng = random.Random(seed)
    times = []
    for _ in range(count):
        start = rng.randrange(0, max(1, x.sizes["step"] - SLICE))
        t = time.perf_counter()
        values = np.asarray(x[start : start + SLICE].values)
        times.append(time.perf_counter() - t)
        assert values.size == min(SLICE, x.sizes["step"])
    return {"open_s": opened, "first_s": times[0], "median_after_first_s": statistics.median(times[1:] or times),
            "max_after_first_s": max(times[1:] or times)}  # fmt: skip


def read(out: str) -> dict[str, Any]:
    """All of an output through dask: ``streamacc.open(OUT).x.data.max().compute()``."""
    import streamacc

    t0 = time.perf_counter()
    top = float(streamacc.open(out).x.data.max().compute())
    return {"run_s": time.perf_counter() - t0, "max": top}


def small(out: str, count: int, seed: int, steps: int = 1000) -> dict[str, Any]:
    """``count`` random slices of ``steps`` steps of output ``x``, after one read of all of it (the page cache warm):
    through zarr alone (``zarr.open_array(OUT/x)[a:b]``) and through ``streamacc.open`` (its checks and dask),
    alternating; each median in milliseconds."""
    import numpy as np
    import zarr

    import streamacc

    array = zarr.open_array(f"{out}/x", mode="r")
    x = streamacc.open(out).x
    n = array.shape[0]
    np.asarray(array[:])  # warm
    rng = random.Random(seed)
    zarr_ms, open_ms = [], []
    for _ in range(count):
        for kind, times in (("zarr", zarr_ms), ("open", open_ms)):
            start = rng.randrange(0, max(1, n - steps))
            t = time.perf_counter()
            values = array[start : start + steps] if kind == "zarr" else x[start : start + steps].values
            times.append(1e3 * (time.perf_counter() - t))
            assert len(values) == min(steps, n)
    return {"zarr ms": statistics.median(zarr_ms), "open ms": statistics.median(open_ms),
            "open slowest ms": max(open_ms)}  # fmt: skip


def whole(out: str) -> dict[str, Any]:
    """All of output ``x``: through dask (``streamacc.open(OUT).x.data.max().compute()``, ``run_s``), then through
    zarr alone (``zarr.open_array(OUT/x)[:]``, ``zarr_s``)."""
    import zarr

    import streamacc

    t0 = time.perf_counter()
    top = float(streamacc.open(out).x.data.max().compute())
    t1 = time.perf_counter()
    values = zarr.open_array(f"{out}/x", mode="r")[:]
    t2 = time.perf_counter()
    assert float(values.max()) == top
    return {"run_s": t1 - t0, "zarr_s": t2 - t1, "max": top}


def make_input(path: str, n: int) -> dict[str, Any]:
    """An input for ``cumsum``/``cumprod --input``: float64 uniform in [0.5, 1), chunks of 2**22, zarr's codec."""
    import numpy as np
    import zarr

    a = zarr.create_array(path, shape=(n,), chunks=(min(n, 2**22),), dtype="f8", fill_value=0.0)
    rng = np.random.default_rng(0)
    for i in range(0, n, 2**24):
        a[i : i + 2**24] = rng.uniform(0.5, 1.0, min(2**24, n - i))
    return {"n": n}


def never_held(x: Any, y: Any) -> Any:
    """A condition that is one comparison and never holds: the run goes on to its length."""
    return x < 0.0


def until(mode: str, steps: int, condition: bool, out: str = "") -> dict[str, Any]:
    """The headline's job (the ``gp`` recipe's float64 step and unroll) with a condition that never holds, or none:
    ``mode`` ``"write"``, ``streamacc.write`` into ``out`` as ``streamacc write OUT --size N`` writes it; ``"blocks"``,
    ``iter_blocks`` consumed in memory (the compute alone). ``run_s`` excludes importing JAX and streamacc."""
    import jax

    import streamacc
    from streamacc.recipes import get_recipe

    jax.config.update("jax_enable_x64", True)
    job = get_recipe("gp").build(steps, "float64")
    condition_given = {"until": never_held} if condition else {}
    t0 = time.perf_counter()
    if mode == "write":
        attrs = {**job.attrs, "dtype": "float64"}  # as the command line records them
        streamacc.write(out, job.f, job.init, length=steps, unroll=job.unroll, names=job.names, attrs=attrs,
                        progress=False, **condition_given)  # fmt: skip
        last = None
    else:
        for block in streamacc.iter_blocks(job.f, job.init, length=steps, unroll=job.unroll, **condition_given):
            last = float(block.carry)
    return {"run_s": time.perf_counter() - t0, **({"final": last} if last is not None else {})}


SIDES = {"carry": carry, "slices": slices, "read": read, "small": small, "whole": whole, "make_input": make_input,
         "until": until}

if __name__ == "__main__":
    print(json.dumps(SIDES[sys.argv[1]](**json.loads(sys.argv[2]))))
    sys.stdout.flush()
