"""blackjax's random-walk Metropolis, 4 chains on a 2-D Gaussian: streamed by streamacc against blackjax's own
``run_inference_algorithm``, which keeps every draw in memory; and ArviZ reading the streamed chains.

    python benchmarks/bench_mcmc.py --draws '2**18' '2**20' --repeat 2 --json benchmarks/results/mcmc_2p18.json
    python benchmarks/bench_mcmc.py --draws '2**22' --repeat 2 --json benchmarks/results/mcmc_2p22.json

Each side runs in a process of its own under GNU time (wall, user and system CPU, page
faults, peak RSS), the sides alternating, ``--repeat`` times per number of draws:

- ``streamacc``: the kernel (``blackjax.rmh`` with a normal proposal of scale 1, float32,
  JAX's default) and 1000 steps of burn-in in memory, then ``--draws`` steps of the 4
  chains written by ``streamacc.write`` (the carry: blackjax's ``RWState`` of the 4 chains
  and a typed key; the ys: the positions, log densities and acceptances), in blocks of
  the default size, blosc-lz4;
- ``blackjax``: the same kernel and burn-in, then ``jax.vmap`` over the chains of
  ``blackjax.util.run_inference_algorithm`` (jitted), keeping the same three of every draw;
- ``arviz``: ``streamacc.to_arviz`` of the streamacc side's output, ``arviz.summary`` of it
  (through ``arviz.from_datatree`` on ArviZ 0.x) and ``arviz.plot_trace`` into a PNG.

Both samplers print the mean position over every draw of every chain (the same kernel,
with PRNG streams split differently, so the means agree within Monte Carlo error), and the
draws per second of their sampling. From two or more numbers of draws, the JSON also gives
each sampler's peak RSS per draw between the smallest and the largest (the slope), and for
blackjax, whose history grows with the draws, the draws it would complete in 2 GiB at that
slope (streamacc's blocks stop growing at their default size, about 640,000 draws here).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

CHAINS = 4
BURN_IN = 1000
GIB2 = 2 * 2**30


def _problem():
    import blackjax
    import jax
    import jax.numpy as jnp

    precision = jnp.linalg.inv(jnp.array([[1.0, 0.6], [0.6, 0.5]]))

    def logdensity(x):
        return -0.5 * x @ precision @ x

    kernel = blackjax.rmh(logdensity, blackjax.mcmc.random_walk.normal(jnp.ones(2)))
    states = jax.vmap(kernel.init)(jax.random.normal(jax.random.key(0), (CHAINS, 2)))
    return kernel, states


def side_streamacc(out: Path, draws: int) -> dict:
    import jax

    import streamacc

    kernel, states = _problem()

    def step(carry, _):
        states, key = carry
        key, sub = jax.random.split(key)
        states, info = jax.vmap(kernel.step)(jax.random.split(sub, CHAINS), states)
        return (states, key), {"x": states.position, "lp": states.logdensity, "accepted": info.is_accepted}

    carry, _ = jax.lax.scan(step, (states, jax.random.key(1)), length=BURN_IN)  # warm-up in memory
    jax.block_until_ready(carry)
    start = time.perf_counter()
    streamacc.write(out, step, carry, length=draws, dims={"x": ["chain", "dim"], "lp": ["chain"],
                    "accepted": ["chain"]}, progress=False)  # fmt: skip
    seconds = time.perf_counter() - start
    import numpy as np
    import zarr

    group = zarr.open_group(out, mode="r")  # the mean chunk by chunk: a check that holds one chunk, as the write
    x, accepted = group["x"], group["accepted"]
    rows = x.chunks[0]
    total = sum(x[i : i + rows].sum(axis=(0, 1), dtype=np.float64) for i in range(0, draws, rows))
    taken = sum(int(accepted[i : i + rows].sum()) for i in range(0, draws, rows))
    return {"mean_x": [round(float(v), 4) for v in total / (draws * CHAINS)], "sampling_s": round(seconds, 2),
            "draws_per_s": round(draws / seconds), "acceptance": round(taken / (draws * CHAINS), 4)}  # fmt: skip


def side_blackjax(draws: int) -> dict:
    import blackjax
    import jax
    import numpy as np

    kernel, states = _problem()

    def burn(carry, _):
        states, key = carry
        key, sub = jax.random.split(key)
        return (jax.vmap(kernel.step)(jax.random.split(sub, CHAINS), states)[0], key), None

    (states, key), _ = jax.lax.scan(burn, (states, jax.random.key(1)), length=BURN_IN)

    @jax.jit
    def sample(keys, states):
        def one(k, s):
            return blackjax.util.run_inference_algorithm(
                k, kernel, draws, initial_state=s,
                transform=lambda state, info: (state.position, state.logdensity, info.is_accepted),
            )[1]  # fmt: skip

        return jax.vmap(one)(keys, states)

    jax.block_until_ready(states)
    start = time.perf_counter()
    x, _, accepted = jax.block_until_ready(sample(jax.random.split(key, CHAINS), states))
    seconds = time.perf_counter() - start
    x = np.asarray(x)
    return {"mean_x": [round(float(v), 4) for v in x.mean(axis=(0, 1), dtype=np.float64)],
            "sampling_s": round(seconds, 2), "draws_per_s": round(draws / seconds),
            "acceptance": round(float(np.asarray(accepted).mean()), 4)}  # fmt: skip


def side_arviz(out: Path) -> dict:
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # ArviZ 0.x announcing 1.x
        import arviz as az

    import streamacc

    timings = {}
    start = time.perf_counter()
    tree = streamacc.to_arviz(out, sample_stats=["lp", "accepted"])
    data = az.from_datatree(tree) if hasattr(az, "from_datatree") else tree
    timings["open_s"] = round(time.perf_counter() - start, 3)
    start = time.perf_counter()
    summary = az.summary(data, var_names=["x"])
    timings["summary_s"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    axes = az.plot_trace(data, var_names=["x"])
    figure = axes.ravel()[0].figure
    figure.savefig(out.with_suffix(".trace.png"), dpi=60)
    timings["plot_trace_s"] = round(time.perf_counter() - start, 2)
    return {**timings, "ess_bulk": [round(float(v)) for v in summary["ess_bulk"]],
            "r_hat": [round(float(v), 3) for v in summary["r_hat"]],
            "draws": int(tree["posterior"].sizes["draw"])}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--draws", nargs="+", default=["2**18"], help="steps of each chain, one run per number")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--sides", nargs="+", default=["streamacc", "blackjax", "arviz"],
                   choices=["streamacc", "blackjax", "arviz"])  # fmt: skip
    p.add_argument("--dir", type=Path, default=Path("/tmp/bench_mcmc"))
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--side", default=None, help=argparse.SUPPRESS)  # a child process: run one side and print it
    p.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    from streamacc.cli._expr import parse_int

    sizes = [parse_int(s, name="--draws") for s in args.draws]
    if args.side is not None:
        figures = {"streamacc": lambda: side_streamacc(args.out, sizes[0]), "blackjax": lambda: side_blackjax(sizes[0]),
                   "arviz": lambda: side_arviz(args.out)}[args.side]()  # fmt: skip
        print(json.dumps(figures), flush=True)
        return

    import _record
    from _record import run, save

    args.dir.mkdir(parents=True, exist_ok=True)
    out = args.dir / "chains.zarr"
    load_before = _record.load()
    records = []
    for size in sizes:
        for _ in range(args.repeat):
            for side in args.sides:
                if side == "streamacc":
                    shutil.rmtree(out, ignore_errors=True)
                cmd = [sys.executable, str(Path(__file__).resolve()), "--side", side, "--draws", str(size), "--out",
                       str(out)]  # fmt: skip
                records.append(run(cmd, side, size=size))
    shutil.rmtree(out, ignore_errors=True)
    summary: dict = {}
    for side in args.sides:
        for size in sizes:
            rs = [r for r in records if r["label"] == side and r["size"] == size]
            summary[f"{side} {size} draws"] = {
                "median_wall_s": statistics.median(r["wall_s"] for r in rs),
                "median_peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in rs),
                "median_cpu_s": round(statistics.median(r["user_s"] + r["sys_s"] for r in rs), 2),
            }
        if len(sizes) > 1 and side != "arviz":
            lo, hi = min(sizes), max(sizes)
            rss = {s: statistics.median(r["peak_rss_mb"] for r in records if r["label"] == side and r["size"] == s)
                   for s in (lo, hi)}  # fmt: skip
            slope = (rss[hi] - rss[lo]) * 1e6 / (hi - lo)  # bytes of peak RSS per draw of the 4 chains
            summary[f"{side} memory"] = {"peak_rss_bytes_per_draw": round(slope, 2)}
            if side == "blackjax":  # its history grows with the draws: where that slope reaches 2 GiB
                summary[f"{side} memory"]["draws_within_2_gib"] = int(hi + (GIB2 - rss[hi] * 1e6) / slope)
    if args.json:
        command = "python benchmarks/bench_mcmc.py --draws " + " ".join(f"'{d}'" for d in args.draws) + \
            f" --repeat {args.repeat}" + (f" --sides {' '.join(args.sides)}" if args.sides != p.get_default("sides")
                                          else "") + f" --json {args.json}"  # fmt: skip
        save(args.json, command, {"summary": summary, "records": records, "load_before": load_before})


if __name__ == "__main__":
    main()
