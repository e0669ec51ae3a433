"""The accelerator benchmark's scenario of steps as users write them (``_user_steps``), with nothing given: the
unroll streamacc chooses against each unroll's compute, and ``write``'s time against the fastest compute.

For each step: the rule's unroll for the step's run (``ScanSpec(f, init, xs, length=n).unroll``, what
``write`` takes with nothing given) and the program it read; one jitted ``lax.scan`` per unroll of
``--user-unrolls`` and the chosen one (compile s, ns a step, the compile left out; past
``--compile-limit`` a compile is recorded as too slow and the larger unrolls are left out); then, for a
step whose ys fit ``--user-write-mib``, ``streamacc.write`` of the whole run with nothing but ``f``,
``init`` (and ``xs``) and its length, timed once compiled, against the fastest unroll's compute.
"""

from __future__ import annotations

import shutil
import sys
from typing import Any

import jax
import numpy as np
from _accel import Context, TooSlow, clock, timed
from _user_steps import STEPS
from jax import lax

import streamacc
import streamacc.base
from streamacc.engine import step_program


def _chosen(step: Any, n: int, xs: Any) -> tuple[int, dict[str, Any]]:
    """The unroll the rule chooses for the run here, and what it read of the step's program."""
    init = step.init()
    spec = streamacc.ScanSpec(step.f, init, xs, length=n)
    carry = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(np.shape(a), jax.numpy.asarray(a).dtype), init)
    x = None if xs is None else jax.ShapeDtypeStruct(xs.shape[1:], xs.dtype)
    program = step_program(step.f, carry, x, jax.devices()[0].platform)
    return int(spec.unroll), {"operations": program.operations, "loops": program.loops,
                              "largest value": program.largest, "largest moved": program.moved}  # fmt: skip


SWEEP_BYTES = 2**30
"""Bytes of ys one timed scan of the sweep keeps on the device at most (a wide step's scan is that much shorter)."""


def _y_bytes(step: Any, xs: Any) -> int:
    """Bytes of one step's y."""
    y = jax.eval_shape(step.f, step.init(), None if xs is None else xs[0])[1]
    return sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in jax.tree_util.tree_leaves(y))


def _compute(step: Any, n: int, unroll: int, limit: float) -> dict[str, Any]:
    """One jitted ``lax.scan`` of ``n`` steps at ``unroll`` (a sixteenth of them at 1): compile s, ns a step."""
    n = max(2 * unroll, n // 16 if unroll == 1 else n)
    xs = None if step.xs is None else jax.numpy.asarray(step.xs(n))

    def scan(c: Any, x: Any) -> Any:
        return lax.scan(step.f, c, x, length=n, unroll=unroll)

    t = timed(scan, step.init(), xs, compile_limit=limit, budget_s=1.0)
    return {"unroll": unroll, "steps": n, "compile s": t["compile_s"], "ns/step": 1e9 * t["wall_s"] / n}


def _write(ctx: Context, step: Any, n: int, unroll: int, xs: Any) -> dict[str, Any]:
    """``streamacc.write`` of the run with nothing given, its blocks compiled first (two blocks, the same unroll
    given), then timed: ns a step."""
    spec = streamacc.ScanSpec(step.f, step.init(), xs, length=n)
    size = spec.plan(block_bytes=streamacc.base.write_block_bytes(ctx.platform)).block_size
    if n > 2 * size:
        warm = ctx.folder / "warm.zarr"
        shutil.rmtree(warm, ignore_errors=True)
        head = None if xs is None else xs[: 2 * size]
        streamacc.write(warm, step.f, step.init(), head, length=2 * size, unroll=unroll, progress=False)
        shutil.rmtree(warm, ignore_errors=True)
    out = ctx.folder / "user.zarr"
    shutil.rmtree(out, ignore_errors=True)
    elapsed = clock()
    streamacc.write(out, step.f, step.init(), xs, length=n, progress=False)
    wall = elapsed()
    recorded = streamacc.info(out).unroll
    shutil.rmtree(out, ignore_errors=True)
    return {"write ns/step": 1e9 * wall / n, "write s": wall, "block steps": size, "unroll recorded": recorded}


def user_steps(ctx: Context) -> dict[str, Any]:
    """Each user step: the chosen unroll's compute and the write with nothing given, against the fastest unroll."""
    sweep_rows: list[dict[str, Any]] = []
    rows: list[dict[str, Any]] = []
    steps = [s for s in STEPS.values() if s.table] + [s for s in STEPS.values() if not s.table]
    for step in steps[: ctx.sizes.user_steps]:
        if ctx.out_of_time():
            break
        try:
            rows.append(_one(ctx, step, sweep_rows))
        except Exception as exc:  # recorded, and the next step measured
            rows.append({"step": step.name, "the issue's table": step.table, "chosen / fastest": None,
                         "error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"})  # fmt: skip
        print(f"  user-steps: {rows[-1]}", file=sys.stderr, flush=True)
    within = [r["chosen / fastest"] for r in rows if r["chosen / fastest"] is not None]
    writes = [r["write / fastest compute"] for r in rows if "write / fastest compute" in r]
    table = [r for r in rows if r["the issue's table"]]
    return {"figures": {
        "steps": len(rows), "worst chosen / fastest": max(within, default=None),
        "worst chosen / fastest, the table's steps": max(
            (r["chosen / fastest"] for r in table if r["chosen / fastest"] is not None), default=None),
        "worst write / fastest compute": max(writes, default=None),
    }, "tables": {"user steps": rows, "compute per unroll": sweep_rows}}  # fmt: skip


def _one(ctx: Context, step: Any, sweep_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One user step's row (its rows of the sweep added to ``sweep_rows``)."""
    n = step.length if ctx.sizes.user_length == 0 else ctx.sizes.user_length
    xs = None if step.xs is None else step.xs(n)
    chosen, program = _chosen(step, n, xs)
    sweep_n = max(1, min(n, ctx.sizes.compute_steps, SWEEP_BYTES // _y_bytes(step, xs)))
    mine, too_slow = [], False
    for unroll in sorted({*ctx.sizes.user_unrolls, chosen}):
        if ctx.out_of_time() or (too_slow and unroll != chosen):
            continue  # past a compile too slow, only the chosen unroll is measured
        try:
            r = _compute(step, sweep_n, unroll, ctx.compile_limit)
        except TooSlow as exc:
            sweep_rows.append({"step": step.name, "unroll": unroll, "note": str(exc), "chosen": unroll == chosen})
            too_slow = True
            continue
        mine.append(r)
        sweep_rows.append({"step": step.name, **r, "chosen": unroll == chosen})
    if not mine:
        return {"step": step.name, "the issue's table": step.table, "chosen unroll": chosen,
                "chosen / fastest": None, "error": "no unroll compiled in time"}  # fmt: skip
    best = min(mine, key=lambda r: r["ns/step"])
    at = next((r for r in mine if r["unroll"] == chosen), None)
    row: dict[str, Any] = {
        "step": step.name, "the issue's table": step.table, "length": n, "chosen unroll": chosen, **program,
        "chosen ns/step": None if at is None else at["ns/step"],
        "chosen compile s": None if at is None else at["compile s"],
        "fastest unroll": best["unroll"], "fastest ns/step": best["ns/step"],
        "chosen / fastest": None if at is None else at["ns/step"] / best["ns/step"],
    }  # fmt: skip
    if n * _y_bytes(step, xs) <= ctx.sizes.user_write_mib * 2**20 and not ctx.out_of_time():
        w = _write(ctx, step, n, chosen, xs)
        row.update(w, **{"write / fastest compute": w["write ns/step"] / best["ns/step"]})
    return row
