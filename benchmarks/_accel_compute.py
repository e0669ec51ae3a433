"""The accelerator benchmark's scenarios of compute and numbers: copies to the host, compute per unroll, blocked
against one scan bit for bit, errors against exact values, float64 beside compensated float32.

Each takes the :class:`_accel.Context` and returns its figures and tables (a dict of
scalars, and lists of rows); ``accelerator.py`` runs them and records a failure instead.
"""

from __future__ import annotations

import statistics
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from _accel import (
    CASES,
    RATIO,
    Context,
    MiB,
    TooSlow,
    bounded,
    clock,
    device_xs,
    error_row,
    exact_series,
    first_difference,
    gp_exact,
    job,
    leaves,
    timed,
)
from _user_steps import STEPS
from jax import lax

import streamacc
from streamacc.base import ACCELERATOR_COMPENSATED_UNROLL, ACCELERATOR_UNROLL, recipe_unroll


def d2h(ctx: Context) -> dict[str, Any]:
    """Device-to-host copies of a fresh float32 array per size: ``jax.device_get``; ``copy_to_host_async``, then
    read; four quarters at once, each by ``copy_to_host_async`` (do copies overlap?). Median of 3."""
    fill = jax.jit(lambda k, n: jnp.full((n,), k, jnp.float32), static_argnums=1)
    rows = []
    for mib in ctx.sizes.d2h_mib:
        n = mib * MiB // 4
        for how in ("device_get", "copy_to_host_async", "4 quarters at once"):
            walls = []
            for rep in range(3):
                parts = [fill(float(rep + 1), n // 4) for _ in range(4)] if how.startswith("4") else [fill(rep, n)]
                jax.block_until_ready(parts)
                elapsed = clock()
                if how != "device_get":
                    for p in parts:
                        p.copy_to_host_async()
                hosts = [np.asarray(jax.device_get(p)) for p in parts]
                walls.append(elapsed())
                del parts, hosts
            wall = statistics.median(walls)
            rows.append({"MiB": mib, "how": how, "median s": wall, "GiB/s": mib / 1024 / wall})
        if ctx.out_of_time():
            break
    best = max(rows, key=lambda r: r["GiB/s"])
    return {"figures": {"fastest GiB/s": best["GiB/s"], "at MiB": best["MiB"], "by": best["how"]},
            "tables": {"device to host": rows}}  # fmt: skip


def _unrolls(case: str, ctx: Context) -> list[int]:
    """A recipe's unroll on a CPU and here, ``--recipe-unrolls``, and for gp ``--sweep-unrolls`` (and 2, 16 and 32
    for the compensated one, whose compile grows fastest with the unroll)."""
    cpu = 2 if case.endswith("compensated") else {"gp": 8, "cumsum": 8, "cumprod": 8}.get(case, 1)
    here = 1 if case == "lorenz" else ACCELERATOR_UNROLL
    if case.endswith("compensated"):
        here = ACCELERATOR_COMPENSATED_UNROLL
    mine = [cpu, recipe_unroll(cpu, ctx.platform, here),
            *ctx.sizes.recipe_unrolls]  # fmt: skip
    if case == "gp":
        mine += ctx.sizes.sweep_unrolls
    if case == "gp-compensated":
        mine += [u for u in (*ctx.sizes.sweep_unrolls, 2, 16, 32) if u <= max(ctx.sizes.sweep_unrolls)]
    return sorted(set(mine))


def compute(ctx: Context) -> dict[str, Any]:
    """One jitted ``lax.scan`` of each recipe (its ys kept on the device), per unroll: compile s and ns a step.

    Steps: ``--compute-steps``, a sixteenth of it at unroll 1 (a loop trip is dear on a chip). A compile longer
    than ``--compile-limit`` is recorded as such, and the recipe's larger unrolls are left out."""
    rows: list[dict[str, Any]] = []
    for case in ctx.cases or CASES:
        for unroll in _unrolls(case, ctx):
            if ctx.out_of_time():
                return {"figures": {"stopped": "out of time"}, "tables": {"compute": rows}}
            n = ctx.sizes.compute_steps // (16 if unroll == 1 else 1)
            j = job(case, n, ctx.folder)
            xs, init = device_xs(j), jax.tree_util.tree_map(jnp.asarray, j.init)

            def scan(c: Any, x: Any, j: Any = j, n: int = n, unroll: int = unroll) -> Any:
                return lax.scan(j.f, c, x, length=n, unroll=unroll)

            try:
                t = timed(scan, init, xs, compile_limit=ctx.compile_limit)
            except TooSlow as exc:
                rows.append({"recipe": case, "unroll": unroll, "steps": n, "compile s": f"> {ctx.compile_limit:.0f}",
                             "recipe's default here": unroll == j.unroll, "note": str(exc)})  # fmt: skip
                break
            ys_bytes = sum(s.size * s.dtype.itemsize for s in jax.tree_util.tree_leaves(
                jax.eval_shape(scan, init, xs)[1]))  # fmt: skip
            rows.append({"recipe": case, "unroll": unroll, "steps": n, "compile s": t["compile_s"],
                         "ns/step": 1e9 * t["wall_s"] / n, "ys GiB/s": ys_bytes / t["wall_s"] / 2**30,
                         "recipe's default here": unroll == j.unroll})  # fmt: skip
    figures = {}
    for case in ("gp", "gp-compensated"):
        mine = [r for r in rows if r["recipe"] == case and "ns/step" in r]
        if mine:
            best = min(mine, key=lambda r: r["ns/step"])
            figures[f"{case}: fastest unroll"] = best["unroll"]
            figures[f"{case}: its ns/step"] = best["ns/step"]
    return {"figures": figures, "tables": {"compute": rows}}


def _muladd(c: Any, x: Any) -> tuple[Any, Any]:
    return 0.999 * c + 0.01 * jnp.sin(x) + x * c * 1e-3, c


def _check(name: str, f: Any, init: Any, xs: Any, n: int, unroll: int, blocks: list[int]) -> list[dict[str, Any]]:
    """Rows of ``f`` blocked by ``streamacc.scan`` at each of ``blocks`` against one ``lax.scan`` at ``unroll``."""
    whole_xs = None if xs is None else jnp.asarray(np.asarray(xs[0:n]))
    one = jax.jit(lambda c, x: lax.scan(f, c, x, length=n, unroll=unroll))
    carry, ys = one(jax.tree_util.tree_map(jnp.asarray, init), whole_xs)
    want_ys, want_carry = leaves(ys), leaves(carry)
    rows = []
    for block in blocks:
        got_carry, got_ys = streamacc.scan(f, init, xs, length=n, block_size=block, unroll=unroll)
        differs = [k for a, b in zip(leaves(got_ys), want_ys, strict=True) if (k := first_difference(a, b)) is not None]
        same_carry = all(a.tobytes() == b.tobytes() for a, b in zip(leaves(got_carry), want_carry, strict=True))
        rows.append({"step": name, "unroll": unroll, "block": block, "steps": n, "ys identical": not differs,
                     "first differing step": min(differs) if differs else None,
                     "carry identical": same_carry})  # fmt: skip
    return rows


USER_EXACT = ("a multiply-add with sin", "a 3-scalar Euler step")
"""Users' steps checked beside the unroll issue's table: the multiply-add-heavy ones."""


def _user_cases(ctx: Context, n: int) -> list[tuple[str, Any, Any, Any, int]]:
    """Users' steps (``USER_EXACT``, then the table's, ``user_steps`` of them at most beside ``USER_EXACT``), each
    at the unroll chosen for its run here."""
    cases = []
    chosen = [STEPS[name] for name in USER_EXACT] + [s for s in STEPS.values() if s.table and s.name not in USER_EXACT]
    for step in chosen[: len(USER_EXACT) + ctx.sizes.user_steps]:
        length = step.length if ctx.sizes.user_length == 0 else ctx.sizes.user_length
        run_xs = None if step.xs is None else step.xs(length)
        own = int(streamacc.ScanSpec(step.f, step.init(), run_xs, length=length).unroll)
        cases.append((f"user: {step.name}", step.f, step.init(), None if step.xs is None else step.xs(n), own))
    return cases


def exact(ctx: Context) -> dict[str, Any]:
    """Each recipe (float32), a multiply-add step on a scalar and on 256 members, and users' steps, blocked by
    ``streamacc.scan`` against one jitted ``lax.scan`` with the same unroll: the ys and the carry, bit for bit.
    Unrolls: ``--exact-unrolls`` and each recipe's own here (64 besides, for the multiply-add on a chip), and
    for a user's step the one chosen for its run here."""
    n = ctx.sizes.exact_length
    rng = np.random.default_rng(7)
    cases: list[tuple[str, Any, Any, Any, int]] = []
    for case in CASES:
        j = job(case, n, ctx.folder)
        cases.append((case, j.f, j.init, j.xs, j.unroll))
    here = recipe_unroll(ctx.sizes.exact_unrolls[0], ctx.platform)
    cases.append(("multiply-add", _muladd, np.float32(0.5), rng.normal(size=n).astype(np.float32), here))
    cases.append(("multiply-add, 256 members", _muladd, np.linspace(0, 1, 256, dtype=np.float32),
                  rng.normal(size=(n, 256)).astype(np.float32), here))  # fmt: skip
    cases += _user_cases(ctx, n)
    rows: list[dict[str, Any]] = []
    for name, f, init, xs, own in cases:
        for unroll in sorted({*ctx.sizes.exact_unrolls, own}):
            if ctx.out_of_time():
                return {"figures": {"stopped": "out of time", "all identical": False},
                        "tables": {"blocked against one scan": rows}}  # fmt: skip
            blocks = [b for b in ctx.sizes.exact_blocks if b % unroll == 0 and b >= 2 * unroll]
            try:
                rows += bounded(lambda f=f, init=init, xs=xs, unroll=unroll, blocks=blocks, name=name: _check(
                    name, f, init, xs, n, unroll, blocks), 2 * ctx.compile_limit, f"{name} at unroll {unroll}")
            except TooSlow as exc:
                rows.append({"step": name, "unroll": unroll, "note": str(exc)})
    checked = [r for r in rows if "ys identical" in r]
    identical = all(r["ys identical"] and r["carry identical"] for r in checked)
    return {"figures": {"all identical": identical, "checked": len(checked), "too slow to compile": len(rows) -
                        len(checked)}, "tables": {"blocked against one scan": rows}}  # fmt: skip


def compensated(ctx: Context) -> dict[str, Any]:
    """Every step of gp, affine, cumsum and cumprod in float32, plain and compensated, at the recipe's unroll and
    block here, against its exact value: the largest error in ulp (compensated: at most 1 on the CPU)."""
    n = ctx.sizes.ulp_steps
    rows = []
    for case in CASES:
        if case.partition("-")[0] not in ("gp", "affine", "cumsum", "cumprod"):
            continue
        j = job(case, n, ctx.folder)
        elapsed = clock()
        _, ys = streamacc.scan(j.f, j.init, j.xs, length=n, unroll=j.unroll)
        wall = elapsed()
        rows.append({"recipe": case, "steps": n, "unroll": j.unroll, **error_row(np.asarray(ys), exact_series(case, n)),
                     "wall s (compile included)": wall})  # fmt: skip
    worst = max((r["largest ulp"] for r in rows if r["recipe"].endswith("compensated")), default=None)
    return {"figures": {"compensated: largest ulp": worst, "within 1 ulp": worst is not None and worst <= 1.0},
            "tables": {"errors": rows}}  # fmt: skip


def _samples(j: Any, at: np.ndarray) -> tuple[np.ndarray, float]:
    """The values of job ``j`` at steps ``at`` (sorted), computed block by block; and the wall time."""
    got, k = np.empty(len(at)), 0
    elapsed = clock()
    for block in streamacc.iter_blocks(j.f, j.init, j.xs, length=j.length, unroll=j.unroll):
        ys = np.asarray(block.ys)
        while k < len(at) and at[k] < block.stop:
            got[k] = ys[at[k] - block.start]
            k += 1
    return got, elapsed()


def accuracy(ctx: Context) -> dict[str, Any]:
    """gp in float32 over ``--accuracy-steps``: plain, compensated, and ``jnp.cumprod`` (a tree), against the
    exact ``ratio**k`` at 65 steps spread evenly (the last among them)."""
    n = ctx.sizes.accuracy_steps
    at = np.unique(np.linspace(0, n - 1, 65).astype(np.int64))
    want = gp_exact(at.tolist())
    rows = []
    for case in ("gp", "gp-compensated"):
        j = job(case, n, ctx.folder)
        _samples(j, at[:1])  # compiled
        got, wall = _samples(j, at)
        rows.append({"method": case, "unroll": j.unroll, "steps": n, **error_row(got, want), "wall s": wall,
                     "ns/step": 1e9 * wall / n})  # fmt: skip
    ones = jnp.full((n,), RATIO, jnp.float32).at[0].set(1.0)
    t = timed(jnp.cumprod, ones, reps=2)
    values = np.asarray(jnp.cumprod(ones))[at]
    rows.append({"method": "jnp.cumprod", "steps": n, **error_row(values, want), "wall s": t["wall_s"],
                 "ns/step": 1e9 * t["wall_s"] / n})  # fmt: skip
    figures = {f"{r['method']}: last step's error %": r["last step's error %"] for r in rows}
    figures["compensated / plain wall"] = rows[1]["wall s"] / rows[0]["wall s"]
    return {"figures": figures, "tables": {"errors at 65 steps": rows}}


def float64(ctx: Context) -> dict[str, Any]:
    """gp in float64 (emulated on a TPU) beside float32, plain and compensated: ns a step of one jitted scan at
    unroll 1 (a sixteenth of the steps) and at the recipe's unroll here, and the error of each at its last step
    against the exact value."""
    rows = []
    with jax.enable_x64(True):
        for case, dtype in (("gp", "float64"), ("gp", "float32"), ("gp-compensated", "float32")):
            for unroll in sorted({1, job(case, 16, ctx.folder, dtype).unroll}):
                if ctx.out_of_time():
                    return {"figures": {"stopped": "out of time"}, "tables": {"float64 beside float32": rows}}
                n = ctx.sizes.f64_steps // (16 if unroll == 1 else 1)
                want = gp_exact([n - 1])
                j = job(case, n, ctx.folder, dtype)
                init = jax.tree_util.tree_map(jnp.asarray, j.init)

                def scan(c: Any, j: Any = j, n: int = n, unroll: int = unroll) -> Any:
                    return lax.scan(j.f, c, None, length=n, unroll=unroll)

                t = timed(scan, init, reps=2)
                last = float(np.asarray(jax.jit(scan)(init)[1])[-1])
                bits = 53 if dtype == "float64" else 24
                rows.append({"dtype": dtype, "recipe": case, "unroll": unroll, "steps": n,
                             "ns/step": 1e9 * t["wall_s"] / n, **error_row(np.array([last]), want, bits)})  # fmt: skip
    return {"figures": {}, "tables": {"float64 beside float32": rows}}
