"""The accelerator benchmark's scenarios of memory and output: writes and Streams of a scalar series and of a wide
ensemble, the seed's full-buffer scan against streamacc, and an ensemble larger than the device's memory.

Each takes the :class:`_accel.Context` and returns its figures and tables; ``accelerator.py``
runs them and records a failure instead.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _accel import RATIO, Context, DevicePeak, MiB, clock, gp_exact, job, timed
from _machine import disk_write
from jax import lax

import streamacc
from streamacc import testing
from streamacc.base import stream_piece_bytes, write_block_bytes
from streamacc.stream import pieces


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    return path


def _same_arrays(a: Path, b: Path, rows: int = 2**24) -> bool:
    """Whether two outputs hold the same bytes in every array, compared ``rows`` at a time."""
    import zarr

    ga, gb = zarr.open_group(str(a), mode="r"), zarr.open_group(str(b), mode="r")
    names = sorted(name for name, _ in ga.arrays())
    if names != sorted(name for name, _ in gb.arrays()):
        return False
    for name in names:
        x, y = ga[name], gb[name]
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        step = max(1, rows // max(1, int(np.prod(x.shape[1:]))))
        for start in range(0, x.shape[0], step):
            if x[start : start + step].tobytes() != y[start : start + step].tobytes():
                return False
    return True


def _write(ctx: Context, path: Path, f: Any, init: Any, n: int, unroll: int, block: int | None) -> dict[str, Any]:
    """``streamacc.write``, once for two blocks to compile, then timed: wall s and device peak."""
    size = block or _default_block(ctx, f, init, n, unroll)
    if n > 2 * size:
        streamacc.write(_fresh(ctx.folder / "warm.zarr"), f, init, length=2 * size, block_size=block, unroll=unroll,
                        progress=False)  # fmt: skip
        shutil.rmtree(ctx.folder / "warm.zarr", ignore_errors=True)
    with DevicePeak(ctx.device) as peak:
        elapsed = clock()
        streamacc.write(_fresh(path), f, init, length=n, block_size=block, unroll=unroll, progress=False)
        wall = elapsed()
    return {"wall s": wall, "block steps": size, **peak.result()}


def _default_block(ctx: Context, f: Any, init: Any, n: int, unroll: int) -> int:
    """The block a write sizes by default here."""
    plan = streamacc.ScanSpec(f, init, length=n, unroll=unroll).plan(block_bytes=write_block_bytes(ctx.platform))
    return int(plan.block_size)


def _stream(ctx: Context, path: Path, f: Any, init: Any, n: int, unroll: int, how: str) -> dict[str, Any]:
    """The job through a Stream whose blocks cross as ``how``: compile s apart, then run s and device peak."""
    with testing.patched("stream.handover", lambda: how), streamacc.Stream(
            _fresh(path), f, length=n, unroll=unroll, progress=False) as s:  # fmt: skip
        x0 = jax.tree_util.tree_map(jnp.asarray, init)
        elapsed = clock()
        compiled = jax.jit(s.scan).lower(x0).compile()
        compile_s = elapsed()
        with DevicePeak(ctx.device) as peak:
            elapsed = clock()
            jax.block_until_ready(compiled(x0))
            wall = elapsed()
    return {"compile s": compile_s, "wall s": wall, **peak.result()}


def _encode_gib_s(block: np.ndarray) -> float:
    """One thread's blosc-lz4 (byte shuffle, level 5: the default codec) encode of ``block``, GiB/s."""
    import numcodecs

    threads, numcodecs.blosc.use_threads = numcodecs.blosc.use_threads, False
    try:
        codec = numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)
        codec.encode(block[: 2**10])
        elapsed = clock()
        codec.encode(block)
        return block.nbytes / elapsed() / 2**30
    finally:
        numcodecs.blosc.use_threads = threads


def write(ctx: Context) -> dict[str, Any]:
    """gp in float32 over ``--write-steps``: compute alone (``iter_blocks``), ``write`` at the default block here
    and at ``--write-blocks``, the encode's and the disk's floors; then the wide ensemble (``--wide-members`` x
    ``--wide-steps``) written at the default block and at ``--wide-blocks``. The outputs at the default block
    stay for the Streams to be checked against."""
    n = ctx.sizes.write_steps
    j = job("gp", n, ctx.folder)
    rows: list[dict[str, Any]] = []
    block = _default_block(ctx, j.f, j.init, n, j.unroll)
    for _ in range(2):  # the first compiles
        with DevicePeak(ctx.device) as peak:
            elapsed = clock()
            for b in streamacc.iter_blocks(j.f, j.init, length=n, block_size=block, unroll=j.unroll):
                del b
            wall = elapsed()
    rows.append({"job": "scalar", "run": "iter_blocks (compute and copy)", "block steps": block, "wall s": wall,
                 **peak.result()})  # fmt: skip
    above = rows[-1]["device peak above before MB"]
    if above is not None:
        rows[-1]["blocks on the device at most"] = round(above * 1e6 / (block * 4), 2)
    written = ctx.folder / "write.zarr"
    rows.append({"job": "scalar", "run": "write", **_write(ctx, written, j.f, j.init, n, j.unroll, None)})
    ctx.shared["scalar"] = {"path": written, "wall s": rows[-1]["wall s"]}
    for size in ctx.sizes.write_blocks:
        rows.append({"job": "scalar", "run": "write", **_write(ctx, ctx.folder / "other.zarr", j.f, j.init, n,
                                                              j.unroll, size)})  # fmt: skip
    shutil.rmtree(ctx.folder / "other.zarr", ignore_errors=True)
    for r in rows:
        r["ns/step"] = 1e9 * r["wall s"] / n
    values = np.asarray(next(streamacc.iter_blocks(j.f, j.init, length=min(n, 2**23), unroll=j.unroll)).ys)
    figures = {"write ns/step": rows[1]["ns/step"], "block MiB here": block * 4 / MiB,
               "encode GiB/s, one thread": _encode_gib_s(values),
               "disk GiB/s": disk_write(ctx.folder / "disk", ctx.sizes.disk_mib * MiB)["gib_per_s"]}  # fmt: skip
    m, n = ctx.sizes.wide_members, ctx.sizes.wide_steps
    step, init = _wide_job(m)
    for size in (None, *ctx.sizes.wide_blocks):
        if ctx.out_of_time():
            break
        path = ctx.folder / ("wide.zarr" if size is None else "wide-other.zarr")
        row = {"job": f"wide, {m} members", "run": "write", **_write(ctx, path, step, init, n, 1, size)}
        rows.append(row | {"GiB/s of ys": m * n * 4 / row["wall s"] / 2**30})
        if size is None:
            ctx.shared["wide"] = {"path": path, "wall s": row["wall s"]}
    shutil.rmtree(ctx.folder / "wide-other.zarr", ignore_errors=True)
    return {"figures": figures, "tables": {"runs": rows}}


def _wide_job(members: int) -> tuple[Any, np.ndarray]:
    """The wide ensemble: ``x -> x * ratio`` for each of ``members`` float32 values."""
    r = np.float32(RATIO)

    def step(c: Any, _: Any) -> tuple[Any, Any]:
        return c * r, c

    return step, (1.0 + np.arange(members, dtype=np.float32) * np.float32(2.0**-24)).astype(np.float32)


def stream(how: str) -> Any:
    """The scenario of a Stream whose blocks cross as ``how``: the scalar job of ``write``, checked against its
    output (written here if ``write`` did not run), its wall against the write's."""

    def scenario(ctx: Context) -> dict[str, Any]:
        n = ctx.sizes.write_steps
        j = job("gp", n, ctx.folder)
        if "scalar" not in ctx.shared:
            path = ctx.folder / "write.zarr"
            ctx.shared["scalar"] = {"path": path, **_write(ctx, path, j.f, j.init, n, j.unroll, None)}
        row = _stream(ctx, ctx.folder / "stream.zarr", j.f, j.init, n, j.unroll, how)
        row["same bytes as write"] = _same_arrays(ctx.folder / "stream.zarr", ctx.shared["scalar"]["path"])
        shutil.rmtree(ctx.folder / "stream.zarr", ignore_errors=True)
        row |= {"ns/step": 1e9 * row["wall s"] / n, "/ write": row["wall s"] / ctx.shared["scalar"]["wall s"]}
        ctx.shared.setdefault("streams", {})[how] = row
        return {"figures": {"Stream / write": row["/ write"], "same bytes as write": row["same bytes as write"]},
                "tables": {"runs": [{"job": "scalar", "run": f"Stream, {how}", "steps": n, **row}]}}  # fmt: skip

    return scenario


def stream_wide(ctx: Context) -> dict[str, Any]:
    """The wide ensemble of ``write`` through a Stream whose blocks cross the fastest way a scalar Stream's did
    with the write's bytes (``ordered`` if none did), against the wide write."""
    done = {how: r for how, r in ctx.shared.get("streams", {}).items() if r["same bytes as write"]}
    how = min(done, key=lambda h: done[h]["wall s"]) if done else "ordered"
    m, n = ctx.sizes.wide_members, ctx.sizes.wide_steps
    step, init = _wide_job(m)
    if "wide" not in ctx.shared:
        path = ctx.folder / "wide.zarr"
        ctx.shared["wide"] = {"path": path, **_write(ctx, path, step, init, n, 1, None)}
    row = _stream(ctx, ctx.folder / "wide-stream.zarr", step, init, n, 1, how)
    row["same bytes as write"] = _same_arrays(ctx.folder / "wide-stream.zarr", ctx.shared["wide"]["path"])
    shutil.rmtree(ctx.folder / "wide-stream.zarr", ignore_errors=True)
    row |= {"GiB/s of ys": m * n * 4 / row["wall s"] / 2**30, "/ write": row["wall s"] / ctx.shared["wide"]["wall s"]}
    return {"figures": {"Stream / write": row["/ write"], "same bytes as write": row["same bytes as write"]},
            "tables": {"runs": [{"job": f"wide, {m} members", "run": f"Stream, {how}", "steps": n, **row}]}}


PIECE_KINDS = ("ys in pieces, ordered", "ys in pieces, carry from the host", "ys in pieces, carry computed")
"""The loop scenario's kinds whose ys cross as ``stream_piece_bytes`` pieces, as a Stream's do off the CPU."""


def loops(ctx: Context) -> dict[str, Any]:
    """The Stream's loop of blocks alone (gp in float32, ``--write-steps``), at the write's default block here and
    at 2**22 steps, each block handing over: one value by an ordered ``io_callback`` (the program's floor); its ys
    by an ordered one, by one a block late (does the copy of block k overlap the compute of k+1?), by an unordered
    one chained by a token, from pinned host memory so chained, and as pieces of ``stream_piece_bytes`` (the
    operands of one ordered callback): with the loop's carry as the program's own, as the buffer a callback
    returned, and as a select of that over the program's own (what a Stream does): what each way of crossing
    costs, the host doing nothing with what it gets. Median of 3 runs, the compile apart."""
    from jax.experimental import io_callback

    n = ctx.sizes.write_steps
    j = job("gp", n, ctx.folder)
    x0 = jnp.asarray(j.init)
    token = jax.ShapeDtypeStruct((), jnp.int32)
    most = stream_piece_bytes(ctx.platform)

    def nothing(*_: Any) -> None:
        return None

    def passed(t: Any, *_: Any) -> Any:
        return np.asarray(t)

    def program(kind: str, block: int) -> Any:
        cuts = pieces(block, 4, most)

        def body(k: Any, state: Any) -> Any:
            c, behind, t = state
            c, ys = lax.scan(j.f, c, None, length=block, unroll=j.unroll)
            if kind == "one value, ordered":
                io_callback(nothing, None, k, ys[-1:], ordered=True)
            elif kind == "ys, ordered":
                io_callback(nothing, None, k, ys, ordered=True)
            elif kind == "ys a block late, ordered":
                io_callback(nothing, None, k, behind, ordered=True)
                behind = ys
            elif kind in PIECE_KINDS:
                io_callback(nothing, None, k, *(lax.slice_in_dim(ys, a, b) for a, b in cuts), ordered=True)
            else:
                ys = jax.device_put(ys, jax.memory.Space.Host) if kind == "ys pinned, chained" else ys
                t = io_callback(passed, token, t, k, ys, ordered=False)
            return c, behind, t

        def run(x: Any) -> Any:
            c = x * jnp.ones((), x.dtype)
            if kind != "ys in pieces, ordered":
                sent = io_callback(lambda v: np.asarray(v), jax.ShapeDtypeStruct((), x.dtype), c, ordered=True)
                c = sent if kind == "ys in pieces, carry from the host" else lax.select(sent == sent, sent, c)
            init = (c, jnp.zeros((block,), x.dtype), jnp.int32(0))
            return lax.fori_loop(0, n // block, body, init)[0]  # whole blocks only

        return run

    rows = []
    for block in sorted(b for b in {_default_block(ctx, j.f, j.init, n, j.unroll), min(2**22, n // 4)} if b <= n // 2):
        steps = n // block * block
        kinds = ["one value, ordered", "ys, ordered", "ys a block late, ordered", "ys, chained", *PIECE_KINDS]
        if ctx.platform != "tpu":  # on a TPU v5e, JAX 0.10.2's XLA aborts compiling it (a failed check in its
            kinds.append("ys pinned, chained")  # host offloader), taking the process with it
        for kind in kinds:
            if ctx.out_of_time():
                return {"figures": {"stopped": "out of time"}, "tables": {"the Stream's loop alone": rows}}
            try:
                t = timed(program(kind, block), x0, reps=4, budget_s=10.0, compile_limit=ctx.compile_limit)
                rows.append({"block steps": block, "block MiB": block * 4 / MiB, "kind": kind,
                             "compile s": t["compile_s"], "wall s": t["wall_s"], "ms/block": 1e3 * t["wall_s"] * block
                             / steps, "ns/step": 1e9 * t["wall_s"] / steps})  # fmt: skip
            except Exception as exc:
                rows.append({"block steps": block, "kind": kind, "failed": f"{type(exc).__name__}: "
                             f"{(str(exc).strip().splitlines() or [''])[0][:300]}"})  # fmt: skip
    return {"figures": {}, "tables": {"the Stream's loop alone": rows}}


def _calc_gp_size(size: int, x0: Any, a: Any, unroll: int = 1) -> Any:
    """The seed's program, as its answer posted it (``unroll`` added)."""

    def scan_fun(carry: Any, i: Any) -> Any:
        return (a * carry,) * 2

    _xn, x = lax.scan(scan_fun, x0, None, length=size - 1, unroll=unroll)
    return jnp.concatenate((x0[None], x))


def seed(ctx: Context) -> dict[str, Any]:
    """The seed's question in float32 over ``--seed-steps``: streamacc (``iter_blocks``, ``write``) first, then
    the seed's full-buffer ``jax.jit(calc_gp_size, static_argnums=0)`` at unroll 1 (as posted) and at the recipe's
    unroll here, then ``jnp.cumprod``; wall (compile included), device peak, and the last value's error."""
    n = ctx.sizes.seed_steps
    want = float(gp_exact([n - 1])[0])
    j = job("gp", n, ctx.folder)
    rows = []
    with DevicePeak(ctx.device) as peak:
        elapsed = clock()
        last = None
        for b in streamacc.iter_blocks(j.f, j.init, length=n, unroll=j.unroll):
            last = float(np.asarray(b.ys)[-1])
        wall = elapsed()
    rows.append({"run": "streamacc.iter_blocks", "unroll": j.unroll, "wall s": wall, "last value": last,
                 **peak.result()})  # fmt: skip
    with DevicePeak(ctx.device) as peak:
        elapsed = clock()
        streamacc.write(_fresh(ctx.folder / "seed.zarr"), j.f, j.init, length=n, unroll=j.unroll, progress=False)
        wall = elapsed()
    shutil.rmtree(ctx.folder / "seed.zarr", ignore_errors=True)
    rows.append({"run": "streamacc.write", "unroll": j.unroll, "wall s": wall, "last value": last, **peak.result()})
    x0, a = jnp.array([1.0, RATIO], dtype=jnp.float32)
    for unroll in sorted({1, j.unroll}):
        if ctx.out_of_time():
            break
        program = jax.jit(_calc_gp_size, static_argnums=(0, 3))
        analysis = program.lower(n, x0, a, unroll).compile().memory_analysis()
        with DevicePeak(ctx.device) as peak:
            elapsed = clock()
            out = jax.jit(_calc_gp_size, static_argnums=(0, 3))(n, x0, a, unroll)
            last = float(np.asarray(out[-1]))
            wall = elapsed()
            del out
        compiled_mb = None if analysis is None else round((analysis.output_size_in_bytes + analysis.temp_size_in_bytes)
                                                          / 1e6, 1)  # fmt: skip
        rows.append({"run": "the seed's full buffer", "unroll": unroll, "wall s": wall, "last value": last,
                     "compiled output + temp MB": compiled_mb, **peak.result()})  # fmt: skip
    with DevicePeak(ctx.device) as peak:
        elapsed = clock()
        out = jnp.cumprod(jnp.full((n,), a, jnp.float32).at[0].set(x0))
        last = float(np.asarray(out[-1]))
        wall = elapsed()
        del out
    rows.append({"run": "jnp.cumprod", "wall s": wall, "last value": last, **peak.result()})
    for r in rows:
        r["last step's error %"] = 100 * abs(r["last value"] - want) / want
        r["ns/step"] = 1e9 * r["wall s"] / n
    return {"figures": {"steps": n, "exact last value": want}, "tables": {"runs": rows}}


def ensemble(ctx: Context) -> dict[str, Any]:
    """``--ensemble-steps`` of ``--ensemble-members`` float32 members, 16 GiB at the defaults: the full-buffer scan
    (which fails past the device's memory), then ``iter_blocks`` at the default block and at 64 steps."""
    m, n = ctx.sizes.ensemble_members, ctx.sizes.ensemble_steps
    r = np.float32(RATIO)

    def step(c: Any, _: Any) -> tuple[Any, Any]:
        return c * r, c

    init = jnp.ones((m,), jnp.float32)
    rows = []
    with DevicePeak(ctx.device) as peak:
        elapsed = clock()
        try:
            ys = jax.jit(lambda c: lax.scan(step, c, None, length=n)[1])(init)
            jax.block_until_ready(ys)
            outcome = "ran"
            del ys
        except Exception as exc:
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            outcome = f"{type(exc).__name__}: {text[:300]}"
        wall = elapsed()
    rows.append({"run": "one lax.scan, full buffer", "ys GiB": m * n * 4 / 2**30, "outcome": outcome,
                 "wall s": wall, **peak.result()})  # fmt: skip
    for block in (None, 64):
        if ctx.out_of_time():
            break
        with DevicePeak(ctx.device) as peak:
            elapsed = clock()
            blocks = 0
            for b in streamacc.iter_blocks(step, init, length=n, block_size=block):
                blocks += 1
                del b
            wall = elapsed()
        rows.append({"run": "streamacc.iter_blocks", "ys GiB": m * n * 4 / 2**30, "outcome": f"{blocks} blocks",
                     "block steps": block or n // blocks, "wall s": wall, **peak.result()})  # fmt: skip
    return {"figures": {"full buffer": rows[0]["outcome"]}, "tables": {"runs": rows}}
