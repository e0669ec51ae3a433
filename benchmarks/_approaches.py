"""One approach of the benchmark suite, run in its own process; prints one JSON line.

    python benchmarks/_approaches.py NAME --size N --out DIR [--codec C] [--chunk K] ...

Every writing approach produces the same job, the geometric progression
``x[0] = 1, x[i] = x[i-1] * (1 + 1e-8)`` in float64, stored as array ``x`` of a Zarr v3
group at ``--out`` (the ``floor`` approach writes one raw file instead), with the same
codec and chunks, and ends with an fsync of every output file (timed) so that no
approach is flattered by the page cache. The ``logistic-*`` approaches compute only and
save samples of their output (first, middle and last values) for the suite to compare.

The printed JSON holds ``wall_s`` (the work, from after the imports to the end of the
final fsync, compile included), ``import_s``, ``sync_s`` (the final fsync alone) and
``peak_rss_kib`` (``ru_maxrss`` of the approach's process plus its children). Heavy
libraries are imported only by the approaches that use them, so each process pays only
for its own; approaches that do not use JAX load streamacc's codec table without JAX.

Linux carries a process's RSS across ``exec`` into ``ru_maxrss`` (the old image's high
water mark is kept), so a child started by a big process reports at least the parent's
RSS. This script therefore relaunches itself from its own small process (~20 MB) and
runs the approach in that grandchild; ``vmhwm_kib`` (``VmHWM`` of the final image, which
starts afresh at ``exec``) is recorded as a cross-check.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

RATIO = 1.0 + 1e-8
"""The geometric progression's ratio (the seed's job)."""

LOGISTIC_R = 3.7
LOGISTIC_X0 = 0.5

SAMPLE = 4096
"""Values kept at the start, middle and end of a compute-only output, for comparison."""

WRITERS = (
    "streamacc-cli",
    "streamacc-api",
    "seed-scan",
    "jnp-cumprod",
    "numpy-loop",
    "dask-cumprod",
    "dask-blelloch",
    "dask-blelloch-axisnone",
    "floor",
    "zarr-precomputed",
)
COMPUTE_ONLY = ("logistic-streamacc", "logistic-jit-scan", "logistic-python")

APPROACHES: dict[str, Callable[[argparse.Namespace], dict]] = {}


def approach(name: str) -> Callable:
    def register(fn: Callable[[argparse.Namespace], dict]) -> Callable[[argparse.Namespace], dict]:
        APPROACHES[name] = fn
        return fn

    return register


# --- helpers ----------------------------------------------------------------------------


def light_streamacc() -> None:
    """Make ``streamacc.store._codecs``, ``streamacc.store._files`` and
    ``streamacc.base._threads`` importable without running ``streamacc/__init__`` at all.

    Their wings need only the standard library, numpy and zarr; a stub package keeps
    the hand-written approaches free of anything streamacc's public face sets up. Not
    used when streamacc is imported.
    """
    if "streamacc" in sys.modules:
        return
    spec = importlib.util.find_spec("streamacc")
    stub = types.ModuleType("streamacc")
    stub.__path__ = list(spec.submodule_search_locations)
    sys.modules["streamacc"] = stub


def enable_x64() -> None:
    import jax
    import jax.numpy  # imported here so that the timed work excludes it

    jax.config.update("jax_enable_x64", True)


def import_zarr() -> None:
    """Import what :func:`create_x` needs, before the timed work starts."""
    light_streamacc()
    import numpy  # noqa: F401
    import zarr  # noqa: F401

    import streamacc.store._codecs  # noqa: F401


def fsync_tree(root: Path) -> None:
    """fsync every file under ``root``, then every directory (bottom-up)."""
    dirs = []
    for dirpath, _, filenames in os.walk(root):
        dirs.append(dirpath)
        for name in filenames:
            fd = os.open(os.path.join(dirpath, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    for dirpath in reversed(dirs):
        fd = os.open(dirpath, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def create_x(out: Path, n: int, chunk: int, codec: str):
    """The output array ``x`` as streamacc stores it: a shard a block of ``chunk`` steps, inner chunks of 2**19
    steps at most (a float64 series' default), the codec, each chunk's CRC-32C, and the fill value."""
    import numpy as np
    import zarr
    from zarr.codecs import Crc32cCodec

    from streamacc.store._codecs import compressors_for

    shard = min(chunk, n)
    group = zarr.open_group(str(out), mode="w")
    return group.create_array(
        "x",
        shape=(n,),
        chunks=(min(shard, 2**19),),
        shards=(shard,),
        dtype="float64",
        fill_value=np.nan,
        compressors=[*compressors_for(codec), Crc32cCodec()],
        dimension_names=["step"],
        config={"write_empty_chunks": True},
    )


def gp_block(start: int, stop: int, prev):
    """Steps ``[start, stop)`` of the progression by ``numpy.multiply.accumulate``, given x[start-1]."""
    import numpy as np

    values = np.full(stop - start, RATIO)
    values[0] = 1.0 if start == 0 else prev * RATIO
    return np.multiply.accumulate(values)


class Samples:
    """Collects the first, middle and last ``SAMPLE`` values of a length-``n`` output."""

    def __init__(self, n: int, size: int = SAMPLE) -> None:
        import numpy as np

        size = min(size, n)
        self.windows = {"first": 0, "middle": max(0, n // 2 - size // 2), "last": n - size}
        self.values = {k: np.full(size, np.nan) for k in self.windows}
        self.size = size

    def feed(self, start: int, values) -> None:
        stop = start + len(values)
        for key, w0 in self.windows.items():
            lo, hi = max(start, w0), min(stop, w0 + self.size)
            if lo < hi:
                self.values[key][lo - w0 : hi - w0] = values[lo - start : hi - start]

    def save(self, path: Path, only: tuple[str, ...] | None = None) -> None:
        import numpy as np

        keep = {k: v for k, v in self.values.items() if only is None or k in only}
        starts = {f"{k}_start": np.int64(self.windows[k]) for k in keep}
        np.savez(path, **keep, **starts)


# --- writers ----------------------------------------------------------------------------


@approach("streamacc-cli")
def run_cli(args: argparse.Namespace) -> dict:
    """``streamacc write`` as a subprocess; its RSS comes from ``os.wait4``."""
    exe = Path(sys.executable).with_name("streamacc")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "streamacc"]
    cmd += ["write", str(args.out), "--size", str(args.size), "--no-progress", "--codec", args.codec]
    cmd += ["--block-size", str(args.block)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    t1 = time.perf_counter()
    if proc.returncode:
        raise RuntimeError(f"streamacc write exited with {proc.returncode}")
    fsync_tree(args.out)
    t2 = time.perf_counter()
    return {
        "wall_s": t2 - t0,
        "sync_s": t2 - t1,
        "child_rss_kib": usage.ru_maxrss,
        "peak_rss_kib": usage.ru_maxrss,  # the CLI process; the wrapper's own RSS is reported apart
        "note": "whole CLI process: interpreter start and imports included",
        "command": " ".join(cmd),
    }


@approach("streamacc-api")
def run_api(args: argparse.Namespace) -> dict:
    enable_x64()
    import streamacc
    from streamacc.recipes import get_recipe

    t0 = time.perf_counter()
    job = get_recipe("gp").build(args.size, "float64")
    streamacc.write(
        str(args.out),
        job.f,
        job.init,
        job.xs,
        length=job.length,
        block_size=args.block,
        unroll=job.unroll,
        names=job.names,
        codec=args.codec,
        chunks={"step": min(args.chunk, args.block)},
        progress=False,
        attrs=job.attrs,
        inflight=args.inflight,
    )
    return {"t0": t0}


def _seed_gp(n: int):
    """The seed's answer: one jitted ``lax.scan`` of length N-1 plus a concatenate."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def calc_gp_size(size, x0, a):
        def scan_fun(carry, i):
            return (a * carry,) * 2

        _xn, x = lax.scan(scan_fun, x0, None, length=size - 1)
        return jnp.concatenate((x0[None], x))

    x0, a = jnp.array([1.0, RATIO], dtype="f8")
    return jax.jit(calc_gp_size, static_argnums=0)(n, x0, a)


def _write_full_buffer(args: argparse.Namespace, compute: Callable[[int], Any]) -> dict:
    """Compute the whole output in one buffer, then write it to Zarr in one assignment."""
    enable_x64()
    import numpy as np

    import_zarr()
    t0 = time.perf_counter()
    arr = create_x(args.out, args.size, args.chunk, args.codec)
    arr[:] = np.asarray(compute(args.size))
    return {"t0": t0}


def _jnp_cumprod(n: int) -> Any:
    import jax.numpy as jnp

    return jnp.cumprod(jnp.full(n, RATIO, dtype="f8").at[0].set(1.0))


@approach("seed-scan")
def run_seed(args: argparse.Namespace) -> dict:
    return _write_full_buffer(args, _seed_gp)


@approach("jnp-cumprod")
def run_cumprod(args: argparse.Namespace) -> dict:
    return _write_full_buffer(args, _jnp_cumprod)


@approach("numpy-loop")
def run_numpy(args: argparse.Namespace) -> dict:
    import_zarr()
    t0 = time.perf_counter()
    arr = create_x(args.out, args.size, args.chunk, args.codec)
    prev = None
    for start in range(0, args.size, args.block):
        stop = min(start + args.block, args.size)
        x = gp_block(start, stop, prev)
        arr[start:stop] = x
        prev = x[-1]
    return {"t0": t0}


def _dask(args: argparse.Namespace, method: str, axis: int | None = 0) -> dict:
    """``dask.array.cumprod`` of ``[1, r, r, ...]`` stored with ``to_zarr`` into the same array.

    ``axis=0`` (the same thing for a 1-D array) because with ``axis=None`` dask's
    Blelloch scan rechunks to chunks of ``npartitions`` elements (dask/dask#11872),
    a graph of ~6 tasks per ``npartitions`` steps: see ``dask-blelloch-axisnone``.
    """
    import dask.array as da

    import_zarr()
    t0 = time.perf_counter()
    arr = create_x(args.out, args.size, args.chunk, args.codec)
    x = da.full(args.size, RATIO, chunks=min(args.chunk, args.size), dtype="f8")
    x[0] = 1.0
    da.to_zarr(da.cumprod(x, axis=axis, method=method), arr)
    return {"t0": t0}


@approach("dask-cumprod")
def run_dask(args: argparse.Namespace) -> dict:
    return _dask(args, "sequential")


@approach("dask-blelloch")
def run_blelloch(args: argparse.Namespace) -> dict:
    return _dask(args, "blelloch")


@approach("dask-blelloch-axisnone")
def run_blelloch_axis_none(args: argparse.Namespace) -> dict:
    """As written in most examples, ``da.cumprod(x, method='blelloch')``: hits dask/dask#11872."""
    return _dask(args, "blelloch", axis=None)


@approach("floor")
def run_floor(args: argparse.Namespace) -> dict:
    """Raw ``tofile`` per block of one precomputed block, one final fsync: the disk floor."""
    import numpy  # noqa: F401

    t0 = time.perf_counter()
    block = gp_block(0, min(args.block, args.size), None)
    args.out.mkdir(parents=True)
    with open(args.out / "x.raw", "wb") as fh:
        for start in range(0, args.size, args.block):
            block[: min(args.block, args.size - start)].tofile(fh)
    return {"t0": t0, "note": "one precomputed block written N/B times, uncompressed"}


@approach("zarr-precomputed")
def run_precomputed(args: argparse.Namespace) -> dict:
    """Zarr alone: one precomputed block written N/B times, with streamacc's pipeline and fsyncs."""
    import_zarr()
    from streamacc.base._threads import run_ordered
    from streamacc.store._files import fsync_dir, fsync_file

    t0 = time.perf_counter()
    arr = create_x(args.out, args.size, args.chunk, args.codec)
    block = gp_block(0, min(args.block, args.size), None)
    chunk = (arr.shards or arr.chunks)[0]  # a stored object: a shard

    def work(start: int) -> None:
        stop = min(start + args.block, args.size)
        arr[start:stop] = block[: stop - start]
        for i in range(start // chunk, -(-stop // chunk)):
            fsync_file(args.out / "x" / arr.metadata.encode_chunk_key((i,)))
        fsync_dir(args.out / "x" / "c")

    def commit(start: int, result: None) -> None:
        pass

    run_ordered(range(0, args.size, args.block), work, commit, depth=args.inflight, workers=args.inflight)
    return {"t0": t0, "note": f"one precomputed block written N/B times; inflight {args.inflight}, fsync per block"}


# --- compute only: the logistic map with an inner loop ------------------------------------


def _logistic_job(args: argparse.Namespace):
    from streamacc.recipes import get_recipe

    return get_recipe("logistic").build(args.size, "float64", r=LOGISTIC_R, x0=LOGISTIC_X0, inner=args.inner)


@approach("logistic-streamacc")
def run_logistic_blocks(args: argparse.Namespace) -> dict:
    enable_x64()
    import streamacc

    t0 = time.perf_counter()
    job = _logistic_job(args)
    samples = Samples(args.size)
    blocks = streamacc.iter_blocks(job.f, job.init, job.xs, length=job.length, block_size=args.block, unroll=job.unroll)
    for block in blocks:
        samples.feed(block.start, block.ys)
    t1 = time.perf_counter()
    samples.save(args.samples)
    return {"t0": t0, "t1": t1, "unroll": job.unroll}


@approach("logistic-jit-scan")
def run_logistic_scan(args: argparse.Namespace) -> dict:
    enable_x64()
    import jax
    import numpy as np
    from jax import lax

    t0 = time.perf_counter()
    job = _logistic_job(args)

    def whole(carry):
        return lax.scan(job.f, carry, None, length=job.length, unroll=job.unroll)[1]

    ys = np.asarray(jax.jit(whole)(job.init))
    t1 = time.perf_counter()
    samples = Samples(args.size)
    samples.feed(0, ys)
    samples.save(args.samples)
    return {"t0": t0, "t1": t1, "unroll": job.unroll}


@approach("logistic-python")
def run_logistic_python(args: argparse.Namespace) -> dict:
    """A plain Python loop over floats (no vectorisation is possible), run on a prefix."""
    import numpy as np

    steps = min(args.size, args.python_steps)
    r, inner = LOGISTIC_R, args.inner
    t0 = time.perf_counter()
    x, out = LOGISTIC_X0, []
    append = out.append
    for _ in range(steps):
        append(x)
        for _ in range(inner):
            x = r * x * (1.0 - x)
    ys = np.array(out)
    t1 = time.perf_counter()
    samples = Samples(steps)
    samples.feed(0, ys)
    samples.save(args.samples, only=("first",))
    return {"t0": t0, "t1": t1, "steps_run": steps, "note": f"ran {steps} steps, wall scaled per step"}


# --- driver -----------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", choices=sorted(APPROACHES))
    p.add_argument("--size", type=int, required=True, help="steps (an integer)")
    p.add_argument("--out", type=Path, required=True, help="output directory (must not exist)")
    p.add_argument("--codec", default="blosc-lz4", help="a name from CODECS")
    p.add_argument("--chunk", type=int, default=2**22, help="zarr chunk length (capped at the size)")
    p.add_argument("--block", type=int, default=2**22, help="steps per block for blocked approaches")
    p.add_argument("--inflight", type=int, default=3, help="blocks written at once (streamacc's default is 3)")
    p.add_argument("--inner", type=int, default=32, help="logistic map applications per step")
    p.add_argument("--python-steps", type=int, default=2**16, help="steps the Python loop actually runs")
    p.add_argument("--samples", type=Path, help="where compute-only approaches save samples (.npz)")
    p.add_argument("--mem-limit-gib", type=float, default=None, help="RLIMIT_AS for this process")
    return p.parse_args(argv)


def relaunch(argv: list[str]) -> int:
    """Run this script again with ``--in-child`` from this small process; relay its JSON line."""
    proc = subprocess.Popen([sys.executable, __file__, *argv, "--in-child"], stdout=subprocess.PIPE, text=True)
    stdout = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = stdout.splitlines()
    for line in lines[:-1]:
        print(line)
    if lines:
        try:
            record = json.loads(lines[-1])
            record["rss_launcher_wait4_kib"] = usage.ru_maxrss
            print(json.dumps(record), flush=True)
        except json.JSONDecodeError:
            print(lines[-1], flush=True)
    return proc.returncode


def vmhwm_kib() -> int | None:
    with contextlib.suppress(OSError), open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return None


def main(argv: list[str] | None = None) -> int:
    t_start = time.perf_counter()
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--in-child" not in argv:
        return relaunch(argv)
    args = parse_args([a for a in argv if a != "--in-child"])
    if args.mem_limit_gib:
        limit = int(args.mem_limit_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if args.samples is None:
        args.samples = args.out.with_suffix(".samples.npz")
    record = {"approach": args.name, "size": args.size, "status": "ok"}
    try:
        result = APPROACHES[args.name](args)
        t0 = result.pop("t0", None)
        if t0 is not None:  # in-process approach: t0 is when the work began (imports done)
            t1 = result.pop("t1", None)
            if t1 is None:  # a writer: make its output durable, inside the timing
                t1 = time.perf_counter()
                fsync_tree(args.out)
                t2 = time.perf_counter()
                result.update(wall_s=t2 - t0, sync_s=t2 - t1)
            else:  # compute only: the timing ends when the last value is on the host
                result.update(wall_s=t1 - t0)
            result["import_s"] = t0 - t_start
        record.update(result)
    except MemoryError:
        record["status"] = "killed: memory"
    self_usage = resource.getrusage(resource.RUSAGE_SELF)
    child_usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    record["rss_self_kib"] = self_usage.ru_maxrss
    record["rss_children_kib"] = child_usage.ru_maxrss
    record["vmhwm_kib"] = vmhwm_kib()
    record.setdefault("peak_rss_kib", self_usage.ru_maxrss + child_usage.ru_maxrss)
    with contextlib.suppress(BrokenPipeError):
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
