"""The sides of the harness's scenario ``wide`` (``test_wide.py``): wide states written, against their floors.

    python benchmarks/bench_wide.py NAME '{"keyword": value, ...}'

prints one JSON object, what the side timed of its own work, which the harness adds to the
side's row beside what GNU time measured of the whole process. The job is a state of
``members`` float32 values from a random initial value (seed 0), each step
``c * 0.999 + 0.001``: values that do not compress, as an ensemble's or a field's rarely
do, so the bytes written are the data's. ``field`` is a 2048x2048 float32 field (16 MiB a
step) under a five-point diffusion step; with ``sparse`` it is zero but for a square of heat,
so that its data and carries compress some hundredfold.

- ``compute``: ``streamacc.iter_blocks`` of the job in the blocks ``write`` would choose,
  the ys brought to the host and dropped: the compute alone.
- ``zarr``: the same blocks computed and written by zarr alone (``array[a:b] = ys``) into an
  array with the chunks and codec ``write`` chooses, every file fsynced at the end.
- ``baseline``: ``streamacc.write`` of 16 steps of a float32 scalar, nothing else: the memory that
  Python, JAX, zarr and streamacc take themselves, which ``test_wide.py`` subtracts from each
  write's peak ("peak beyond the baseline") to compare it with ``info``'s estimate.
- ``write``: ``streamacc.write`` of the job with its defaults, to a folder or (``"icechunk":
  true``) an Icechunk repository; it reports each commit's time (the first and the last
  tenth of them), the bookkeeping's share of the data's stored bytes, and what
  ``streamacc.info`` estimates of the memory the write holds.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

FIELD = (2048, 2048)


def _job(members: int, field: bool, sparse: bool = False) -> tuple[Any, Any]:
    import jax.numpy as jnp

    rng = np.random.default_rng(0)
    if field:
        init = rng.random(FIELD, dtype=np.float32)
        if sparse:  # mostly zero: heat in one 48x48 square of the field, which compresses as the field does
            init = np.zeros(FIELD, dtype=np.float32)
            init[1000:1048, 1000:1048] = 1.0

        def diffuse(u: Any, _: Any) -> tuple[Any, Any]:
            around = jnp.roll(u, 1, 0) + jnp.roll(u, -1, 0) + jnp.roll(u, 1, 1) + jnp.roll(u, -1, 1)
            u = u + jnp.float32(0.1) * (around - 4 * u)
            return u, u

        return diffuse, init
    init = rng.random(members, dtype=np.float32)

    def relax(c: Any, _: Any) -> tuple[Any, Any]:
        c = c * jnp.float32(0.999) + jnp.float32(0.001)
        return c, c

    return relax, init


def _block_size(init: np.ndarray) -> int:
    """The steps of the blocks ``write`` chooses for this state (its default bytes per block)."""
    from streamacc.base import DEFAULT_WRITE_BLOCK_BYTES

    return max(1, DEFAULT_WRITE_BLOCK_BYTES // init.nbytes)


def compute(steps: int, members: int = 2**20, field: bool = False) -> dict[str, Any]:
    import streamacc

    f, init = _job(members, field)
    begin = time.perf_counter()
    for block in streamacc.iter_blocks(f, init, length=steps, block_size=_block_size(init)):
        np.asarray(block.ys)
    return {"work_s": round(time.perf_counter() - begin, 3)}


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        fd = os.open(folder, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)


def zarr_alone(out: str, steps: int, members: int = 2**20, field: bool = False) -> dict[str, Any]:
    import zarr
    from zarr.codecs import BloscCodec, Crc32cCodec

    import streamacc

    f, init = _job(members, field)
    block = _block_size(init)
    begin = time.perf_counter()
    array = zarr.create_array(
        out,
        shape=(steps, *init.shape),
        chunks=(min(block, steps), *init.shape),
        dtype=init.dtype,
        fill_value=np.nan,
        compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle", typesize=4), Crc32cCodec()],
    )
    for b in streamacc.iter_blocks(f, init, length=steps, block_size=block):
        array[b.start : b.stop] = np.asarray(b.ys)
    _fsync_tree(Path(out))
    return {"work_s": round(time.perf_counter() - begin, 3)}


def _timed_commits() -> list[float]:
    """Each commit's seconds, as ``Output`` commits them (wrapped here for this process alone)."""
    from streamacc.run import _commit

    times: list[float] = []
    real = _commit.Output._commit

    def commit(self: Any, results: Any) -> None:
        begin = time.perf_counter()
        real(self, results)
        times.append(time.perf_counter() - begin)

    _commit.Output._commit = commit  # type: ignore[method-assign]
    return times


def _tree_bytes(root: Path) -> tuple[int, int]:
    """(bytes of the data arrays, bytes beside them: the bookkeeping and the summaries) of a local output."""
    data = other = 0
    for folder, _, files in os.walk(root):
        size = sum(os.path.getsize(os.path.join(folder, name)) for name in files)
        if Path(folder).relative_to(root).parts[:1] == ("_streamacc",):
            other += size
        else:
            data += size
    return data, other


def write(
    out: str, steps: int, members: int = 2**20, field: bool = False, icechunk: bool = False, sparse: bool = False
) -> dict[str, Any]:
    import streamacc

    f, init = _job(members, field, sparse)
    times = _timed_commits()
    target = f"icechunk://{out}" if icechunk else out
    begin = time.perf_counter()
    streamacc.write(target, f, init, length=steps, progress=False)
    work = time.perf_counter() - begin
    tenth = max(1, len(times) // 10)
    first, last = statistics.median(times[:tenth]), statistics.median(times[-tenth:])
    about = streamacc.info(target)
    row: dict[str, Any] = {
        "work_s": round(work, 3),
        "commits": len(times),
        "commit ms, first tenth (median)": round(1e3 * first, 2),
        "commit ms, last tenth (median)": round(1e3 * last, 2),
        "commit, last tenth / first tenth": round(last / first, 3),
        "carries kept every": about.carries_every,
        "memory estimate MB": round(about.memory.total / 1e6, 1),
    }
    if not icechunk:
        data, other = _tree_bytes(Path(out))
        row["bookkeeping, % of the data"] = round(100 * other / data, 2)
        row["data MB"] = round(data / 1e6, 2)
        row["bookkeeping MB"] = round(other / 1e6, 2)
    return row


def baseline(out: str) -> dict[str, Any]:
    """A write of a few steps of a scalar: the memory of Python, JAX, zarr and streamacc themselves."""
    import jax.numpy as jnp

    import streamacc

    streamacc.write(out, lambda c, _: (c * jnp.float32(0.999), c), np.float32(1.0), length=16, progress=False)
    return {}


SIDES = {"compute": compute, "zarr": zarr_alone, "write": write, "baseline": baseline}

if __name__ == "__main__":
    print(json.dumps(SIDES[sys.argv[1]](**json.loads(sys.argv[2]))))
