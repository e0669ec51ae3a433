"""The accelerator benchmark's scenario of what a feature costs a cheap step when used: a condition and the window
summaries, for the one-multiply and oscillator steps of ``_user_steps`` at the unroll the rule gives them.

For each step, with nothing else given: its compute alone at that unroll (one jitted ``lax.scan``, compiled
first); ``streamacc.write`` with the defaults, with ``summaries=False``, with a condition that never holds and
reads what the step outputs (tested on the plain scan's outputs), and, for the oscillator, with one that reads
its velocity, which the step keeps to itself (tested inside the steps); each write's programs compiled first by
a short write of the same blocks, then timed in ``--rounds`` alternating rounds (medians). Whether the
condition changed a stored value: every write's data chunks against the plain write's, and a run that ends
at the step a third of the way in (where its y first takes that step's value) against the plain run's values
cut there.
"""

from __future__ import annotations

import hashlib
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import zarr
from _accel import Context, clock, timed
from _user_steps import STEPS
from jax import lax

import streamacc
import streamacc.base

COST_STEPS = ("one float32 multiply", "a 2-value oscillator")


def never_y(c: Any, y: Any) -> Any:
    """Never holds (the multiply overflows to infinity, never to NaN); reads the step's y."""
    return jnp.isnan(y)


def never_velocity(c: Any, y: Any) -> Any:
    """Never holds; reads the oscillator's velocity, which its y does not hold."""
    return jnp.isnan(c[1])


def _chunks_digest(out: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted((out / "x" / "c").rglob("*")) if (out / "x" / "c").exists() else []:
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


def _values(out: Path) -> np.ndarray:
    return np.asarray(zarr.open_group(str(out), mode="r")["x"][...])


def _variants(name: str) -> dict[str, dict[str, Any]]:
    variants: dict[str, dict[str, Any]] = {
        "defaults": {}, "summaries=False": {"summaries": False}, "until on y": {"until": never_y},
    }  # fmt: skip
    if "oscillator" in name:
        variants["until on a carry"] = {"until": never_velocity}
    return variants


def _write(path: Path, step: Any, n: int, **kw: Any) -> float:
    shutil.rmtree(path, ignore_errors=True)
    elapsed = clock()
    streamacc.write(path, step.f, step.init(), length=n, names="x", progress=False, **kw)
    return elapsed()


def _one(ctx: Context, step: Any, rounds: int) -> dict[str, Any]:
    n = step.length if ctx.sizes.user_length == 0 else ctx.sizes.user_length
    spec = streamacc.ScanSpec(step.f, step.init(), length=n)
    u = int(spec.unroll)
    size = spec.plan(block_bytes=streamacc.base.write_block_bytes(ctx.platform)).block_size
    m = min(n, ctx.sizes.compute_steps)  # as the user-steps scenario times it
    compute = timed(lambda c: lax.scan(step.f, c, None, length=m, unroll=u), step.init(), budget_s=1.0)
    row: dict[str, Any] = {"step": step.name, "length": n, "unroll": u, "block steps": size,
                           "compute ns/step": 1e9 * compute["wall_s"] / m}  # fmt: skip
    variants = _variants(step.name)
    for kw in variants.values():  # each write's programs compiled first, on two blocks of the same layout
        _write(ctx.folder / "warm.zarr", step, min(n, 2 * size), unroll=u, block_size=size, **kw)
    walls: dict[str, list[float]] = {name: [] for name in variants}
    digests: dict[str, str] = {}
    for i in range(rounds):
        for name, kw in variants.items() if i % 2 == 0 else reversed(list(variants.items())):
            out = ctx.folder / f"cost-{len(digests)}.zarr"
            walls[name].append(_write(out, step, n, **kw))
            digests[name] = _chunks_digest(out)
            if name == "defaults" and i == 0:
                plain = _values(out)
            shutil.rmtree(out, ignore_errors=True)
            if ctx.out_of_time():
                break
    med = {name: statistics.median(w) for name, w in walls.items() if w}
    for name, wall in med.items():
        row[f"{name}: write ns/step"] = 1e9 * wall / n
    if "defaults" in med:
        row["write / compute"] = med["defaults"] / n / (compute["wall_s"] / m)
        if "summaries=False" in med:
            row["summaries' share of the write"] = 1 - med["summaries=False"] / med["defaults"]
        for name in ("until on y", "until on a carry"):
            if name in med:
                row[f"{name} / defaults"] = med[name] / med["defaults"]
    row["data chunks identical"] = len(set(digests.values())) == 1
    target = plain[n // 3]  # a condition that holds a third of the way in, or where that value first comes
    first = int(np.argmax(plain == target))
    out = ctx.folder / "ended.zarr"
    _write(out, step, n, until=lambda c, y, target=target: y == target)
    ended = _values(out)
    row["ended at"], row["first step of its value"] = len(ended) - 1, first
    row["ended run = the plain run cut"] = len(ended) == first + 1 and ended.tobytes() == plain[: first + 1].tobytes()
    if "oscillator" in step.name:  # a condition on the velocity, tested inside the steps: the stored ys the plain's
        velocity = np.float32(-0.5)
        _write(out, step, n, until=lambda c, y: c[1] < velocity)
        ended = _values(out)
        row["ended on a carry at"] = len(ended) - 1
        row["ended on a carry = the plain run cut"] = ended.tobytes() == plain[: len(ended)].tobytes()
    shutil.rmtree(out, ignore_errors=True)
    return row


def costs(ctx: Context) -> dict[str, Any]:
    """The one-multiply and oscillator steps: compute, write, and the write with each feature, and the bits."""
    rounds = 2 if ctx.sizes.user_length == 0 else 1
    rows = []
    for name in COST_STEPS:
        if ctx.out_of_time():
            break
        try:
            rows.append(_one(ctx, STEPS[name], rounds))
        except Exception as exc:  # recorded, and the next step measured
            rows.append({"step": name, "error": f"{type(exc).__name__}: {str(exc).strip()[:300]}"})
        print(f"  costs: {rows[-1]}", file=sys.stderr, flush=True)
    ok = [r for r in rows if "error" not in r]
    return {"figures": {
        "steps": len(ok),
        "worst until on y / defaults": max((r.get("until on y / defaults", 0) for r in ok), default=None),
        "until on a carry / defaults": max((r.get("until on a carry / defaults", 0) for r in ok), default=None),
        "worst summaries' share": max((r.get("summaries' share of the write", 0) for r in ok), default=None),
        "stored values unchanged by a condition": all(
            r["data chunks identical"] and r["ended run = the plain run cut"]
            and r.get("ended on a carry = the plain run cut", True) for r in ok) if ok else None,
    }, "tables": {"costs": rows}}  # fmt: skip
