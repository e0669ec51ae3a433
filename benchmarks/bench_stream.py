"""A Stream inside jit against ``streamacc write`` of the same job: wall, CPU, faults, memory, the callbacks' share.

    python benchmarks/bench_stream.py --dir /tmp/bench_stream --size '2**30' --small '2**24' --repeat 2 \
        --json benchmarks/results/stream_2p30.json

The job is the headline's: the geometric progression ``x * (1 + 1e-8)`` in float64 (the
``gp`` recipe: its step, unroll and attributes), default blocks (32 MiB), chunks, codec
and summaries. Each side runs in a fresh process under GNU time (wall, user and system CPU,
minor faults, peak RSS), alternating, ``--repeat`` times:

1. ``write``: ``streamacc write OUT --size N``;
2. ``stream``: the same job through :class:`streamacc.Stream` in a jitted program whose
   initial carry is computed in the program (``program(x0) = stream.scan(x0 * 1)``);
3. ``stream-small``: the Stream at ``--small`` steps, for memory against length;
4. ``loop``: the Stream's loop alone, each block handing one row of its ys to a callback
   that does nothing (the floor of the program: the blocks' compute);
5. ``callbacks``: that loop handing every block's ys to a callback that does nothing
   (what JAX's callbacks cost: the ys copied out of the program, twice in jax 0.10).

The callbacks' share of the Stream's CPU is ``(callbacks - loop) / stream`` (user plus
system); the Stream's own host work in its callbacks (the hand-over to the writers) is
timed in the ``stream`` side itself (``time.thread_time`` inside them), and the writers'
work is the rest. Both outputs are checked to hold the same run (manifests equal).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

from _record import median, run, save
from headline import disk_bytes

from streamacc.cli._expr import parse_int

HERE = Path(__file__).resolve()


def _job(size: int):  # type: ignore[no-untyped-def]
    from streamacc.recipes import get_recipe

    return get_recipe("gp").build(size, "float64")


def side_stream(out: str, size: int) -> dict:
    import jax
    import jax.numpy as jnp

    import streamacc
    from streamacc.run.stream import _host

    jax.config.update("jax_enable_x64", True)
    job = _job(size)
    attrs = {**job.attrs, "dtype": "float64"}  # as the command line records them
    array_attrs = {name: {"long_name": job.attrs["description"], "units": job.attrs["units"]} for name in job.names}
    layout = streamacc.Layout(names=job.names, attrs=attrs, array_attrs=array_attrs)
    spent = [0.0, 0]
    real = _host.StreamHost.block.__wrapped__  # type: ignore[attr-defined]

    def block(self, *args):  # type: ignore[no-untyped-def]
        t = time.thread_time()
        try:
            return real(self, *args)
        finally:
            spent[0] += time.thread_time() - t
            spent[1] += 1

    _host.StreamHost.block = _host._guarded(block)  # type: ignore[method-assign]
    t0 = time.perf_counter()
    with streamacc.Stream(out, job.f, length=size, unroll=job.unroll, layout=layout, progress=False) as stream:

        @jax.jit
        def program(x0):
            return stream.scan(x0 * jnp.ones((), x0.dtype))

        carry = float(program(jnp.asarray(job.init)))
    return {"run_s": time.perf_counter() - t0, "final": carry, "callback_cpu_s": spent[0], "blocks": spent[1]}


def side_loop(size: int, full: bool) -> dict:
    """The Stream's loop of blocks (its block function, its block size) with a callback that does nothing."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import io_callback

    from streamacc.engine import block_function, make_plan, resize

    jax.config.update("jax_enable_x64", True)
    job = _job(size)
    plan = resize(make_plan(job.f, job.init, length=size, unroll=job.unroll), block_bytes=32 * 2**20)
    run_block = block_function(plan.f, plan.block_size, plan.unroll, False)
    blocks = size // plan.block_size

    def nothing(*_):  # type: ignore[no-untyped-def]
        return None

    @jax.jit
    def program(x0):
        def body(k, c):
            c, ys = run_block(c, None)
            io_callback(nothing, None, k, *(ys if full else [y[-1:] for y in ys]), ordered=True)
            return c

        return lax.fori_loop(0, blocks, body, x0 * jnp.ones((), x0.dtype))

    t0 = time.perf_counter()
    carry = float(program(jnp.asarray(job.init)))
    return {"run_s": time.perf_counter() - t0, "final": carry, "blocks": blocks}


def side(name: str, **kw: object) -> list[str]:
    cmd = [sys.executable, str(HERE), "side", name]
    for key, value in kw.items():
        cmd += [f"--{key}", str(value)]
    return cmd


def cpu(r: dict) -> float:
    return float(r["user_s"] + r["sys_s"])


def manifest(out: Path) -> dict:
    doc = json.loads((out / "_streamacc" / "zarr.json").read_text())
    return json.loads(doc["attributes"]["streamacc_manifest"])


def summarize(records: list[dict]) -> dict:
    def med(label: str, key: str) -> float:
        return median(records, label, key)

    def cpu_of(label: str) -> float:
        return float(statistics.median(cpu(r) for r in records if r["label"] == label))

    streams = [r for r in records if r["label"] == "stream"]
    writes = [r for r in records if r["label"] == "write"]
    stream_cpu = cpu_of("stream")
    ratios = [round(s["wall_s"] / w["wall_s"], 3) for s, w in zip(streams, writes, strict=True)]
    return {
        "wall_ratio_stream_to_write": ratios,
        "median_wall_ratio": round(med("stream", "wall_s") / med("write", "wall_s"), 3),
        "cpu_ratio_stream_to_write": round(stream_cpu / cpu_of("write"), 3),
        "callbacks_cpu_share_of_stream": round((cpu_of("callbacks") - cpu_of("loop")) / stream_cpu, 3),
        "stream_callback_host_cpu_share": round(med("stream", "callback_cpu_s") / stream_cpu, 3),
        "peak_rss_mb": {label: med(label, "peak_rss_mb") for label in LABELS},
        "minor_faults": {label: med(label, "minor_faults") for label in LABELS},
        "cpu_s": {label: round(cpu_of(label), 2) for label in LABELS},
    }


LABELS = ("write", "stream", "stream-small", "loop", "callbacks")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", nargs="?", default="all", choices=["all", "side"])
    p.add_argument("name", nargs="?", choices=["stream", "loop", "callbacks"])
    p.add_argument("--dir", type=Path, default=Path("/tmp/bench_stream"))
    p.add_argument("--size", default="2**30")
    p.add_argument("--small", default="2**24")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--out")
    p.add_argument("--steps", type=int)
    args = p.parse_args()
    if args.mode == "side":
        if args.name == "stream":
            result = side_stream(args.out, args.steps)
        else:
            result = side_loop(args.steps, full=args.name == "callbacks")
        print(json.dumps(result))
        return
    size, small = parse_int(args.size, name="--size"), parse_int(args.small, name="--small")
    args.dir.mkdir(parents=True, exist_ok=True)
    written, streamed, little = args.dir / "write.zarr", args.dir / "stream.zarr", args.dir / "small.zarr"
    records: list[dict] = []
    for _ in range(args.repeat):
        for out in (written, streamed, little):
            shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "streamacc", "write", str(written), "--size", str(size), "--no-progress"]
        records.append(run(cmd, "write"))
        records.append(run(side("stream", out=streamed, steps=size), "stream"))
        records.append(run(side("stream", out=little, steps=small), "stream-small"))
        records.append(run(side("loop", steps=size), "loop"))
        records.append(run(side("callbacks", steps=size), "callbacks"))
        for r, out in ((records[-5], written), (records[-4], streamed)):
            r["stored_bytes"] = disk_bytes(out)
    same = manifest(written) == manifest(streamed)
    body = {"size": size, "small": small, "same_output": same, "records": records, **summarize(records)}
    print(json.dumps({k: v for k, v in body.items() if k != "records"}, indent=1))
    if args.json is not None:
        save(args.json, " ".join(sys.argv), body)
    for out in (written, streamed, little):
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
