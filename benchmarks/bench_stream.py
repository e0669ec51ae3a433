"""The sides of the harness's scenario ``stream`` (``test_stream.py``): a Stream inside jit, and its loop alone.

    python benchmarks/bench_stream.py NAME '{"keyword": value, ...}'

prints one JSON object, what the side timed of its own work, which the harness adds to the
side's row beside what GNU time measured of the whole process. The job is the headline's:
the geometric progression ``x * (1 + 1e-8)`` in float64, the ``gp`` recipe's step, unroll
and attributes, as ``streamacc write OUT --size N`` runs it (default blocks of 32 MiB,
chunks, codec and summaries).

- ``stream``: the job through :class:`streamacc.Stream` in a jitted program whose initial
  carry is computed in the program; it also reports the CPU its block callbacks spent in
  the Stream's own host work (``time.thread_time`` inside them: the hand-over to the
  writers), and the output's manifest digest, to compare with the write's.
- ``loop``: the Stream's loop alone, the same block function in a ``lax.fori_loop``, each
  block handing one row of its ys to a callback that does nothing: the program's floor.
- ``callbacks``: that loop handing every block's ys to a callback that does nothing, by the
  callback the Stream uses (a ``buffer_callback`` on the CPU, which hands the program's own
  buffers over; an ordered ``io_callback`` elsewhere, or with ``"io": true``, which copies
  the ys into fresh host memory first): what JAX's callbacks cost.
"""

from __future__ import annotations

import json
import sys
import time
import zlib
from pathlib import Path
from typing import Any


def _job(steps: int) -> Any:
    from streamacc.recipes import get_recipe

    return get_recipe("gp").build(steps, "float64")


def manifest_digest(out: str) -> str:
    """A CRC-32 of the output's manifest: two runs of one job that wrote the same output give the same."""
    doc = json.loads((Path(out) / "_streamacc" / "zarr.json").read_text())
    return f"{zlib.crc32(doc['attributes']['streamacc_manifest'].encode()):08x}"


def stream(out: str, steps: int) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp

    import streamacc
    from streamacc.stream import _host

    jax.config.update("jax_enable_x64", True)
    job = _job(steps)
    attrs = {**job.attrs, "dtype": "float64"}  # as the command line records them
    array_attrs = {name: {"long_name": job.attrs["description"], "units": job.attrs["units"]} for name in job.names}
    layout = streamacc.Layout(names=job.names, attrs=attrs, array_attrs=array_attrs)
    spent = [0.0, 0]
    real = _host.StreamHost.block

    def block(self: Any, *args: Any) -> None:
        t = time.thread_time()
        try:
            real(self, *args)
        finally:
            spent[0] += time.thread_time() - t
            spent[1] += 1

    _host.StreamHost.block = block  # type: ignore[method-assign]  # timed, as the program calls it
    t0 = time.perf_counter()
    with streamacc.Stream(out, job.f, length=steps, unroll=job.unroll, layout=layout, progress=False) as s:

        @jax.jit
        def program(x0):  # type: ignore[no-untyped-def]
            return s.scan(x0 * jnp.ones((), x0.dtype))  # the initial carry computed in the program

        final = float(program(jnp.asarray(job.init)))
    return {"run_s": time.perf_counter() - t0, "final": final, "callback_cpu_s": round(spent[0], 3),
            "blocks": spent[1], "manifest": manifest_digest(out)}  # fmt: skip


def _loop(steps: int, full: bool, io: bool) -> dict[str, Any]:
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.experimental import io_callback
    from jax.experimental.buffer_callback import buffer_callback

    from streamacc.engine import block_function, make_plan, resize

    jax.config.update("jax_enable_x64", True)
    job = _job(steps)
    plan = resize(make_plan(job.f, job.init, length=steps, unroll=job.unroll), block_bytes=32 * 2**20)
    run_block = block_function(plan.f, plan.block_size, plan.unroll, False)
    blocks = steps // plan.block_size

    def nothing(*_: Any) -> None:
        return None

    token = jax.ShapeDtypeStruct((), jnp.int64)
    in_place = buffer_callback(nothing, token, has_side_effect=True)
    io = io or jax.default_backend() != "cpu"

    @jax.jit
    def program(x0):  # type: ignore[no-untyped-def]
        def body(k, state):  # type: ignore[no-untyped-def]
            c, t = state
            c, ys = run_block(c, None)
            handed = ys if full else [y[-1:] for y in ys]
            if io:
                io_callback(nothing, None, k, *handed, ordered=True)
            else:
                t = in_place(t, k, *handed)
            return c, t

        return lax.fori_loop(0, blocks, body, (x0 * jnp.ones((), x0.dtype), jnp.int64(0)))[0]

    t0 = time.perf_counter()
    final = float(program(jnp.asarray(job.init)))
    return {"run_s": time.perf_counter() - t0, "final": final, "blocks": blocks}


def loop(steps: int, io: bool = False) -> dict[str, Any]:
    return _loop(steps, full=False, io=io)


def callbacks(steps: int, io: bool = False) -> dict[str, Any]:
    return _loop(steps, full=True, io=io)


SIDES = {"stream": stream, "loop": loop, "callbacks": callbacks, "manifest": lambda out: {"manifest":
                                                                                        manifest_digest(out)}}

if __name__ == "__main__":
    print(json.dumps(SIDES[sys.argv[1]](**json.loads(sys.argv[2]))))
