"""Simulations against what a scientist writes by hand, each side in its own process under GNU time.

Workloads (``python benchmarks/bench_simulations.py WORKLOAD``):

  heat      a 1-D heat equation of 4096 float64 points, 2**18 steps (8 GiB), default settings: streamacc
            (durable, checksummed) against a jitted ``lax.scan`` per piece of 1024 steps appended with
            ``zarr.Array.append`` (same codec, blosc-lz4) and with xarray's ``to_zarr(append_dim="step")``
            (its default encoding); streamacc also without fsync, without a codec and computing only, and
            the disk's floor (the stored bytes written and fsynced), to say where the time goes
  ensemble  ``--recipe randomwalk --paths 1000 --size 2**18`` against one walk of 2**28 steps and the
            scalar headline's path (``gp``, 2**30 steps), in values per second
  lorenz    ``--recipe lorenz --size 2**30 --save-every 1000`` against the same RK4 scan computing its
            carry alone (no output)
  rng       what the ensemble's draws cost per value, and their parts (threefry, erf_inv)
  chunks    the chunk layouts a default could take, for three states (4096 points, a 1000-member
            ensemble, a 256x256 field; 1 GiB each): write time, and cold reads through
            ``streamacc.open`` of a snapshot (one step, all of the state) and of a time series (one
            value, every step)

Results: ``--json`` (default benchmarks/out/simulations/WORKLOAD.json) and a markdown table on stdout.
Outputs are written under ``--dir`` and deleted after each side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from _harness import disk_bytes, drop_cache
from _timing import time_command

from streamacc import base
from streamacc.cli._expr import parse_int

HERE = Path(__file__).resolve()
PIECE = 1024
"""Steps per piece of the hand-written loops: 32 MiB of a 4096-point state, streamacc's block."""


# --- step functions (imported by the sides, in their own processes) --------------------------


def heat_step(u, _):
    """One explicit step of the 1-D heat equation on a ring: u += r (u[i-1] - 2 u[i] + u[i+1]), r = 0.25."""
    import jax.numpy as jnp

    u = u + 0.25 * (jnp.roll(u, 1) - 2.0 * u + jnp.roll(u, -1))
    return u, u


def heat_init(points: int = 4096):
    import numpy as np

    return np.exp(-(np.linspace(-4.0, 4.0, points) ** 2))


def _x64() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)


# --- sides --------------------------------------------------------------------------------


def side_streamacc(out: str, steps: int, **options) -> dict:
    import streamacc

    _x64()
    t0 = time.perf_counter()
    streamacc.write(out, heat_step, heat_init(), length=steps, progress=False, **options)
    info = streamacc.info(out)
    chunks = info.arrays["y"].chunks
    return {"run_s": time.perf_counter() - t0, "block_size": info.block_size, "chunks": chunks}


def side_compute(out: str, steps: int) -> dict:
    """The blocks streamacc writes, computed and dropped: the compute floor of the job."""
    import numpy as np

    from streamacc.base import DEFAULT_WRITE_BLOCK_BYTES, pool_size
    from streamacc.engine import BlockPool, make_plan, run_plan

    _x64()
    t0 = time.perf_counter()
    plan = make_plan(heat_step, heat_init(), length=steps, block_bytes=DEFAULT_WRITE_BLOCK_BYTES)
    checksum = 0.0
    for block in run_plan(plan, pool=BlockPool(pool_size(base.DEFAULT_INFLIGHT))):
        checksum += float(np.asarray(block.ys)[-1, 0])
        block.release()
    return {"run_s": time.perf_counter() - t0, "block_size": plan.block_size, "checksum": checksum}


def _pieces(steps: int):
    import jax
    import numpy as np
    from jax import lax

    _x64()
    piece = jax.jit(lambda u: lax.scan(heat_step, u, None, length=PIECE))
    u = heat_init()
    for _ in range(steps // PIECE):
        u, ys = piece(u)
        yield np.asarray(ys)


def side_zarr_append(out: str, steps: int) -> dict:
    """What a scientist writes: a jitted scan per piece, appended with zarr (blosc-lz4, as streamacc)."""
    import zarr
    from zarr.codecs import BloscCodec

    t0 = time.perf_counter()
    array = zarr.create_array(out, shape=(0, 4096), chunks=(PIECE, 4096), dtype="float64", fill_value=float("nan"),
                              compressors=[BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")],
                              dimension_names=["step", "x"])  # fmt: skip
    for ys in _pieces(steps):
        array.append(ys)
    return {"run_s": time.perf_counter() - t0, "chunks": list(array.chunks)}


def side_xarray_append(out: str, steps: int) -> dict:
    """The same loop through xarray, with its default encoding."""
    import xarray as xr

    t0 = time.perf_counter()
    for i, ys in enumerate(_pieces(steps)):
        ds = xr.Dataset({"u": (("step", "x"), ys)})
        if i == 0:
            ds.to_zarr(out, mode="w")
        else:
            ds.to_zarr(out, append_dim="step")
    chunks = xr.open_zarr(out)["u"].encoding.get("chunks")
    return {"run_s": time.perf_counter() - t0, "chunks": list(chunks or ())}


def side_floor(out: str, nbytes: int) -> dict:
    """The disk's floor: ``nbytes`` written in 32 MiB pieces to one file and fsynced."""
    import numpy as np

    piece = np.random.default_rng(0).integers(0, 255, 32 * 2**20, dtype=np.uint8).tobytes()
    t0 = time.perf_counter()
    with open(out, "wb") as f:
        left = nbytes
        while left > 0:
            left -= f.write(piece[: min(left, len(piece))])
        f.flush()
        os.fsync(f.fileno())
    return {"run_s": time.perf_counter() - t0, "bytes": nbytes}


def side_lorenz_carry(out: str, steps: int) -> dict:
    """The Lorenz recipe's RK4 step in a jitted scan that computes its carry alone, in pieces of 2**26 steps."""
    import jax
    import numpy as np
    from jax import lax

    from streamacc.recipes import get_recipe

    _x64()
    job = get_recipe("lorenz").build(steps, "float64")
    t0 = time.perf_counter()
    piece = 2**26

    @jax.jit
    def run(u):
        return lax.scan(lambda c, x: (job.f(c, x)[0], None), u, None, length=piece)[0]

    u = job.init
    for _ in range(steps // piece):
        u = run(u)
    u = np.asarray(u)
    return {"run_s": time.perf_counter() - t0, "final": u.tolist()}


def side_rng(out: str, steps: int) -> dict:
    """ns per value of the ensemble's draws and of their parts, each a jitted, vectorised call (best of 5)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from streamacc.recipes._random import _draw, _key_data

    _x64()
    n, paths = 4096, 1000
    key_data, sigma = _key_data(0), np.float64(1.0)
    index = jnp.arange(n * paths, dtype=jnp.uint32)
    u = jnp.linspace(-0.99, 0.99, n * paths)

    def fold(kd, i):
        return jax.random.key_data(jax.vmap(lambda j: jax.random.fold_in(jax.random.wrap_key_data(kd), j))(i))

    def normal(kd):
        return jax.random.normal(jax.random.wrap_key_data(kd), (n * paths,), jnp.float64)

    parts = {
        "ensemble draw (fold_in(fold_in(key, p), k), normal, * sigma)": (_draw(n, "float64", paths),
                                                                        (key_data, sigma, np.uint32(1))),
        "fold_in of a key": (jax.jit(fold), (key_data, index)),
        "normal of a key": (jax.jit(normal), (key_data,)),
        "erf_inv (float64)": (jax.jit(jax.lax.erf_inv), (u,)),
        "the geometric progression's product": (jax.jit(lambda v: v * (1 + 1e-8)), (u,)),
    }  # fmt: skip
    out_ns = {}
    for label, (fn, args) in parts.items():
        jax.block_until_ready(fn(*args))
        best = min(_seconds(lambda fn=fn, args=args: jax.block_until_ready(fn(*args))) for _ in range(5))
        out_ns[label] = best / (n * paths) * 1e9
    return {"ns_per_value": out_ns}


def _seconds(call) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def side_read(out: str, name: str, point: str, repeat: int) -> dict:
    """Cold reads through streamacc.open: snapshots at spread steps, and the series of one value over every step."""
    import numpy as np

    import streamacc

    index = tuple(int(i) for i in point.split(","))
    ds = streamacc.open(out)
    array = ds[name]
    rows = array.sizes["step"]
    snapshots = []
    for k in range(repeat):
        drop_cache(Path(out))
        row = (2 * k + 1) * rows // (2 * repeat)
        t0 = time.perf_counter()
        np.asarray(array.isel(step=row).values)
        snapshots.append(time.perf_counter() - t0)
    drop_cache(Path(out))
    t0 = time.perf_counter()
    trailing = dict(zip(array.dims[1:], index, strict=True))
    series = np.asarray(array.isel(**trailing).values)
    return {"snapshot_s": float(np.median(snapshots)), "series_s": time.perf_counter() - t0, "series_len": len(series)}


def side_chunks_write(out: str, state: str, steps: int, chunks: str) -> dict:
    """Write ``state`` with chunks ``chunks``: 'default', JSON (a dict by dimension), or 'balanced:MiB'
    (the default's rule aiming at that many MiB)."""
    import numpy as np

    import streamacc
    from streamacc.base import DEFAULT_WRITE_BLOCK_BYTES
    from streamacc.base._axes import default_chunks
    from streamacc.engine import make_plan

    _x64()
    f, init, dims = STATES[state]()
    if chunks == "default":
        layout = None
    elif chunks.startswith("balanced:"):
        rows = make_plan(f, init, length=steps, block_bytes=DEFAULT_WRITE_BLOCK_BYTES).block_rows
        shape = default_chunks(init.shape, 8, rows, int(float(chunks.split(":")[1]) * 2**20))
        layout = dict(zip(["step", *dims["y"]], shape, strict=True))
    else:
        layout = json.loads(chunks)
    t0 = time.perf_counter()
    streamacc.write(out, f, init, length=steps, progress=False, chunks=layout, dims=dims)
    info = streamacc.info(out).arrays["y"]
    return {"run_s": time.perf_counter() - t0, "chunks": info.chunks, "stored": info.stored_bytes,
            "chunk_mib": float(np.prod(info.chunks)) * 8 / 2**20}  # fmt: skip


def _field():
    import jax.numpy as jnp
    import numpy as np

    def step(c, _):
        c = c + 0.1 * (jnp.roll(c, 1, axis=0) + jnp.roll(c, 1, axis=1) - 2.0 * c)
        return c, c

    return step, np.random.default_rng(2).normal(size=(256, 256)), {"y": ["i", "j"]}


def _ensemble():
    import jax.numpy as jnp
    import numpy as np

    def step(c, _):
        c = c + jnp.sin(c + jnp.arange(c.shape[0], dtype=c.dtype))  # 1000 cheap, different paths
        return c, c

    return step, np.zeros(1000), {"y": ["path"]}


STATES = {
    "heat": lambda: (heat_step, heat_init(), {"y": ["x"]}),
    "ensemble": _ensemble,
    "field": _field,
}

SIDES = {
    "streamacc": lambda a: side_streamacc(a.out, a.steps),
    "streamacc-nocodec": lambda a: side_streamacc(a.out, a.steps, codec="none"),
    "compute": lambda a: side_compute(a.out, a.steps),
    "zarr-append": lambda a: side_zarr_append(a.out, a.steps),
    "xarray-append": lambda a: side_xarray_append(a.out, a.steps),
    "floor": lambda a: side_floor(a.out, a.bytes),
    "lorenz-carry": lambda a: side_lorenz_carry(a.out, a.steps),
    "rng": lambda a: side_rng(a.out, a.steps),
    "read": lambda a: side_read(a.out, a.name, a.point, a.repeat),
    "chunks-write": lambda a: side_chunks_write(a.out, a.state, a.steps, a.chunks),
}


# --- the driver ---------------------------------------------------------------------------


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def timed(cmd: list[str], label: str, *, keep: Path | None = None) -> dict:
    """Run ``cmd`` under GNU time; its last stdout line, if JSON, joins the record."""
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent.parent), os.environ.get("PYTHONPATH")]))}
    print(f"  {label}: {' '.join(cmd)}", file=sys.stderr, flush=True)
    record = time_command(cmd, env=env, cwd=HERE.parent.parent)
    if record["returncode"] != 0:
        raise SystemExit(f"{label} failed: {record['stderr']}")
    lines = record.pop("stdout").strip().splitlines()
    if lines and lines[-1].startswith("{"):
        record.update(json.loads(lines[-1]))
    record.pop("stderr", None)
    record["label"], record["command"] = label, " ".join(cmd)
    if keep is not None and keep.exists():
        record["stored_bytes"] = disk_bytes(keep)
    return record


def side_cmd(side: str, out: Path, **kw) -> list[str]:
    cmd = [sys.executable, str(HERE), "side", side, "--out", str(out)]
    for key, value in kw.items():
        cmd += [f"--{key}", str(value)]
    return cmd


def cli_cmd(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "streamacc", "write", str(out), "--no-progress", "--overwrite", *args]


def run_heat(args: argparse.Namespace) -> list[dict]:
    out, steps, records = args.dir / "heat.zarr", args.steps or 2**18, []
    for side in args.sides or ["streamacc", "zarr-append", "xarray-append", "streamacc-nocodec",
                               "compute"]:  # fmt: skip
        remove(out)
        records.append(timed(side_cmd(side, out, steps=steps), side, keep=out))
        records[-1]["values"] = steps * 4096
        remove(out)
    stored = next((r["stored_bytes"] for r in records if r["label"] == "streamacc"), steps * 4096 * 8)
    floor = args.dir / "floor.bin"
    records.append(timed(side_cmd("floor", floor, bytes=stored), "floor (stored bytes, fsync)"))
    remove(floor)
    return records


def run_ensemble(args: argparse.Namespace) -> list[dict]:
    out, records = args.dir / "walk.zarr", []
    steps = args.steps or 2**18
    runs = [
        (f"randomwalk --paths 1000, {steps} steps", ["--recipe", "randomwalk", "--paths", "1000", "--size", str(steps)],
         steps * 1000),
        ("randomwalk, one path, 2**28 steps", ["--recipe", "randomwalk", "--size", "2**28"], 2**28),
        ("gp (the headline's path), 2**30 steps", ["--size", "2**30"], 2**30),
    ]  # fmt: skip
    for label, cli_args, values in runs:
        remove(out)
        records.append(timed(cli_cmd(out, *cli_args), label, keep=out))
        records[-1]["values"] = values
        remove(out)
    return records


def run_rng(args: argparse.Namespace) -> list[dict]:
    record = timed(side_cmd("rng", args.dir / "unused", steps=0), "draws, ns per value")
    print("\n".join(f"{label}: {ns:.1f} ns/value" for label, ns in record["ns_per_value"].items()))
    return [record]


def run_lorenz(args: argparse.Namespace) -> list[dict]:
    out, steps = args.dir / "lorenz.zarr", args.steps or 2**30
    remove(out)
    label = f"streamacc --recipe lorenz --save-every 1000, {steps} steps"
    records = [timed(cli_cmd(out, "--recipe", "lorenz", "--size", str(steps), "--save-every", "1000"), label, keep=out)]
    remove(out)
    records.append(timed(side_cmd("lorenz-carry", out, steps=steps), "the same scan, carry alone (no output)"))
    for r in records:
        r["values"] = steps
    return records


CHUNK_STATES = {"heat": (2**15, "2048"), "ensemble": (2**17, "500"), "field": (2**11, "128,128")}
"""Each state's steps (1 GiB of output) and the point whose time series is read."""

LAYOUTS = {
    "heat": {"whole rows, a block per chunk": {"step": None, "x": -1}, "whole rows, 4 MiB": {"step": 128, "x": -1},
             "balanced 1 MiB": "balanced:1", "balanced 2 MiB (default)": "default", "balanced 8 MiB": "balanced:8"},
    "ensemble": {"whole rows, a block per chunk": {"step": None, "path": -1},
                 "whole rows, 4 MiB": {"step": 512, "path": -1},
                 "balanced 1 MiB": "balanced:1", "balanced 2 MiB (default)": "default",
                 "balanced 8 MiB": "balanced:8"},
    "field": {"whole frames, a block per chunk": {"step": None, "i": -1, "j": -1},
              "whole frames, 4 MiB": {"step": 8, "i": -1, "j": -1}, "balanced 1 MiB": "balanced:1",
              "balanced 2 MiB (default)": "default", "balanced 8 MiB": "balanced:8"},
}  # fmt: skip
"""The layouts a default could take: whole rows (the scalar series' rule) or balanced tiles of a given size."""


def run_chunks(args: argparse.Namespace) -> list[dict]:
    records = []
    for state, (steps, point) in CHUNK_STATES.items():
        if args.states and state not in args.states:
            continue
        steps = min(steps, args.steps) if args.steps else steps  # --steps: at most that many (a quick run)
        for label, layout in LAYOUTS[state].items():
            out = args.dir / f"chunks-{state}.zarr"
            remove(out)
            spec = layout if isinstance(layout, str) else json.dumps(layout)
            record = timed(side_cmd("chunks-write", out, state=state, steps=steps, chunks=spec), f"{state}: {label}",
                           keep=out)  # fmt: skip
            read = timed(side_cmd("read", out, name="y", point=point, repeat=5), f"{state}: {label}: reads")
            record.update({k: read[k] for k in ("snapshot_s", "series_s", "series_len")})
            record["state"], record["layout"] = state, label
            records.append(record)
            remove(out)
    return records


def table(records: list[dict]) -> str:
    lines = [
        "| run | wall s | user s | sys s | peak RSS MiB | minor faults | values/s | stored GiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        rate = f"{r['values'] / r['wall_s']:.3g}" if r.get("values") else ""
        stored = f"{r['stored_bytes'] / 2**30:.2f}" if r.get("stored_bytes") else ""
        lines.append(f"| {r['label']} | {r['wall_s']:.1f} | {r['user_s']:.1f} | {r['sys_s']:.1f} | "
                     f"{r['max_rss_kib'] / 1024:.0f} | {r['minor_faults']} | {rate} | {stored} |")  # fmt: skip
    return "\n".join(lines)


def chunk_table(records: list[dict]) -> str:
    lines = [
        "| state | layout | chunk | chunk MiB | write s | snapshot read s | time-series read s |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in records:
        lines.append(f"| {r['state']} | {r['layout']} | {tuple(r['chunks'])} | {r['chunk_mib']:.1f} | "
                     f"{r['wall_s']:.1f} | {r['snapshot_s']:.3f} | {r['series_s']:.2f} |")  # fmt: skip
    return "\n".join(lines)


WORKLOADS = {"heat": run_heat, "ensemble": run_ensemble, "lorenz": run_lorenz, "chunks": run_chunks, "rng": run_rng}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in WORKLOADS:
        w = sub.add_parser(name)
        w.add_argument("--dir", type=Path, default=Path("benchmarks/out/simulations"))
        w.add_argument("--steps", type=lambda t: parse_int(t, name="--steps", minimum=1), default=None)
        w.add_argument("--sides", nargs="*", default=None)
        w.add_argument("--states", nargs="*", default=None)
        w.add_argument("--json", type=Path, default=None)
    s = sub.add_parser("side")
    s.add_argument("side", choices=SIDES)
    for flag in ("out", "name", "point", "state", "chunks"):
        s.add_argument(f"--{flag}")
    for flag in ("steps", "bytes", "repeat"):
        s.add_argument(f"--{flag}", type=int)
    args = p.parse_args()
    if args.command == "side":
        print(json.dumps(SIDES[args.side](args)))
        return
    args.dir.mkdir(parents=True, exist_ok=True)
    records = WORKLOADS[args.command](args)
    path = args.json or Path("benchmarks/out/simulations") / f"{args.command}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records, indent=1))
    if args.command != "rng":
        print(chunk_table(records) if args.command == "chunks" else table(records))


if __name__ == "__main__":
    main()
