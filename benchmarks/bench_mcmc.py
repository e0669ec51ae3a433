"""The sides of the MCMC scenarios (``benchmarks/test_mcmc.py``), each run as a child process by the harness.

    python benchmarks/bench_mcmc.py SIDE --draws N --out PATH    # SIDE: streamacc, blackjax or arviz

- ``streamacc``: blackjax's random-walk Metropolis (``blackjax.rmh``, a normal proposal of
  scale 1, float32, JAX's default), 4 chains on a correlated 2-D Gaussian, 1000 steps of
  burn-in in memory, then N steps of the 4 chains written by ``streamacc.write`` to PATH
  (the carry: blackjax's ``RWState`` of the chains and a typed key; the ys: the positions,
  log densities and acceptances), in blocks of the default size, blosc-lz4;
- ``blackjax``: the same kernel and burn-in, then ``jax.vmap`` over the chains of
  ``blackjax.util.run_inference_algorithm`` (jitted), keeping the same three of every draw
  in memory;
- ``arviz``: ``streamacc.to_arviz`` of PATH, ``arviz.summary`` of it (through
  ``arviz.from_datatree`` on ArviZ 0.x) and ``arviz.plot_trace`` into a PNG beside it.

Each prints one JSON object of what it timed of its own work, which the harness adds to
its row: the samplers their sampling's seconds, draws per second, mean position and
acceptance over every draw of every chain (the same kernel, its PRNG streams split
differently, so the two agree within Monte Carlo error); streamacc's read back chunk by
chunk, so that the check holds a chunk at a time, as the write does.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

CHAINS = 4
BURN_IN = 1000


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
    mean = total / (draws * CHAINS)
    return {"sampling s": round(seconds, 2), "draws per s": round(draws / seconds), "mean x0": round(float(mean[0]), 4),
            "mean x1": round(float(mean[1]), 4), "acceptance": round(taken / (draws * CHAINS), 4)}  # fmt: skip


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
    mean, taken = x.mean(axis=(0, 1), dtype=np.float64), float(np.asarray(accepted).mean())
    return {"sampling s": round(seconds, 2), "draws per s": round(draws / seconds), "mean x0": round(float(mean[0]), 4),
            "mean x1": round(float(mean[1]), 4), "acceptance": round(taken, 4)}  # fmt: skip


def side_arviz(out: Path) -> dict:
    import warnings

    import matplotlib

    matplotlib.use("Agg")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # ArviZ 0.x announcing 1.x
        import arviz as az

    import streamacc

    timings: dict = {}
    start = time.perf_counter()
    tree = streamacc.to_arviz(out, sample_stats=["lp", "accepted"])
    data = az.from_datatree(tree) if hasattr(az, "from_datatree") else tree
    timings["to_arviz s"] = round(time.perf_counter() - start, 3)
    start = time.perf_counter()
    summary = az.summary(data, var_names=["x"])
    timings["summary s"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    axes = az.plot_trace(data, var_names=["x"])
    figure = axes.ravel()[0].figure
    figure.savefig(out.with_suffix(".trace.png"), dpi=60)
    timings["plot_trace s"] = round(time.perf_counter() - start, 2)
    return {**timings, "ess_bulk x0": round(float(summary["ess_bulk"].iloc[0])),
            "r_hat x0": round(float(summary["r_hat"].iloc[0]), 3), "draws": int(tree["posterior"].sizes["draw"])}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("side", choices=["streamacc", "blackjax", "arviz"])
    p.add_argument("--draws", type=int, required=True, help="steps of each chain")
    p.add_argument("--out", type=Path, required=True, help="the streamed chains (written by streamacc, read by arviz)")
    args = p.parse_args()
    sides = {"streamacc": lambda: side_streamacc(args.out, args.draws), "blackjax": lambda: side_blackjax(args.draws),
             "arviz": lambda: side_arviz(args.out)}  # fmt: skip
    print(json.dumps(sides[args.side]()), flush=True)


if __name__ == "__main__":
    main()
