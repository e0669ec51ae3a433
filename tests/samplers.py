"""Samplers as streamacc steps, for the tests: an ensemble of chains in the carry, the kernel vmapped over them.

    python tests/samplers.py OUT LENGTH BLOCK [MODE]   # the Metropolis chains written to OUT (MODE: create, resume)

Each sampler's state is what its library makes (a NamedTuple of arrays: blackjax's
``RWState``, ``HMCState``; numpyro's ``HMCState``) or, for the hand-written Metropolis, a
NamedTuple of our own, beside a typed PRNG key (``jax.random.key``); the step splits the
key, vmaps the kernel over the chains and returns the positions (and the sampler's
statistics) as its y. Run as a script, it writes the Metropolis chains, for the tests that
kill the writer with SIGKILL and resume it.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import streamacc

CHAINS = 4
COVARIANCE = np.array([[1.0, 0.6], [0.6, 0.5]])
PRECISION = np.linalg.inv(COVARIANCE)
DIMS = {"x": ["chain", "dim"], "lp": ["chain"], "accepted": ["chain"]}


def logdensity(x: Any) -> Any:
    """A correlated 2-D Gaussian, up to its constant."""
    return -0.5 * x @ jnp.asarray(PRECISION, x.dtype) @ x


class Chains(NamedTuple):
    """The hand-written Metropolis's state: the chains' positions and log densities."""

    position: Any
    logdensity: Any


def metropolis(carry: Any, _: Any) -> tuple[Any, Any]:
    """One random-walk Metropolis step of every chain (proposal scale 0.7)."""
    state, key = carry
    key, k_move, k_accept = jax.random.split(key, 3)
    x = state.position
    proposal = x + 0.7 * jax.random.normal(k_move, x.shape, x.dtype)
    lp = jax.vmap(logdensity)(proposal)
    accepted = jnp.log(jax.random.uniform(k_accept, lp.shape, x.dtype)) < lp - state.logdensity
    state = Chains(jnp.where(accepted[:, None], proposal, x), jnp.where(accepted, lp, state.logdensity))
    return (state, key), {"x": state.position, "lp": state.logdensity, "accepted": accepted}


def metropolis_init() -> Any:
    x = jax.random.normal(jax.random.key(1), (CHAINS, 2), jnp.float64)
    return Chains(x, jax.vmap(logdensity)(x)), jax.random.key(2024)


def write_metropolis(out: str, length: int, block: int, mode: str = "create") -> Any:
    return streamacc.write(out, metropolis, metropolis_init(), length=length, block_size=block, save_every=2,
                           dims=DIMS, mode=mode, progress=False)  # fmt: skip


def blackjax_rwmh(scale: float = 0.7, *, warm: bool = True) -> tuple[Any, Any]:
    """blackjax's random-walk Metropolis: the step, and its carry after 200 steps of burn-in in memory (None
    without ``warm``)."""
    import blackjax

    kernel = blackjax.rmh(logdensity, blackjax.mcmc.random_walk.normal(jnp.full(2, scale)))

    def rwmh(carry: Any, _: Any) -> tuple[Any, Any]:
        states, key = carry
        key, sub = jax.random.split(key)
        states, info = jax.vmap(kernel.step)(jax.random.split(sub, CHAINS), states)
        return (states, key), {"x": states.position, "lp": states.logdensity, "accepted": info.is_accepted}

    if not warm:
        return rwmh, None

    @jax.jit  # one computation, not the dozens of small ones the burn-in makes run eagerly
    def burn_in(x: Any) -> Any:
        return jax.lax.scan(rwmh, (jax.vmap(kernel.init)(x), jax.random.key(3)), length=200)[0]

    return rwmh, burn_in(jax.random.normal(jax.random.key(1), (CHAINS, 2)))


@functools.cache
def _nuts_warmup() -> tuple[Any, Any]:
    import blackjax

    warmup = blackjax.window_adaptation(blackjax.nuts, logdensity)
    keys = jax.random.split(jax.random.key(5), CHAINS)
    run = jax.jit(jax.vmap(lambda k, x: warmup.run(k, x, num_steps=100)))  # one computation, not many small ones
    (states, params), _ = run(keys, jnp.zeros((CHAINS, 2)))
    return states, params


def blackjax_nuts(params_in_carry: bool = True) -> tuple[Any, Any]:
    """blackjax's NUTS, each chain's step size and mass matrix adapted in memory (window adaptation), carried
    beside the states (or, with ``params_in_carry=False``, closed over: constants of the compiled block)."""
    import blackjax

    states, params = _nuts_warmup()

    def one(k: Any, state: Any, p: Any) -> Any:
        return blackjax.nuts(logdensity, **p).step(k, state)

    def nuts(carry: Any, _: Any) -> tuple[Any, Any]:
        states, p, key = carry
        key, sub = jax.random.split(key)
        states, info = jax.vmap(one)(jax.random.split(sub, CHAINS), states, p)
        return (states, p, key), {"x": states.position, "lp": states.logdensity, "diverging": info.is_divergent,
                                  "acceptance_rate": info.acceptance_rate}  # fmt: skip

    def nuts_closed(carry: Any, x: Any) -> tuple[Any, Any]:
        (states, _, key), y = nuts((carry[0], params, carry[1]), x)
        return (states, key), y

    if params_in_carry:
        return nuts, (states, params, jax.random.key(6))
    return nuts_closed, (states, jax.random.key(6))


def numpyro_hmc(algo: str = "HMC", *, warm: bool = True) -> tuple[Any, Any]:
    """numpyro's HMC (or NUTS) through its functional interface (``hmc``'s ``init_kernel`` and ``sample_kernel``),
    warmed up in memory (None without ``warm``); the chains' states are numpyro's ``HMCState``, its raw PRNG key
    inside."""
    import numpyro
    import numpyro.distributions as dist
    from numpyro.infer import hmc, util

    def model() -> None:
        numpyro.sample("x", dist.MultivariateNormal(jnp.zeros(2), jnp.asarray(COVARIANCE)))

    kernels: list[Any] = []

    def warm_up(key: Any) -> Any:
        # traced once, under jax.jit (or only traced, by jax.eval_shape, without ``warm``): numpyro's initialisation
        # and warm-up compiled as one computation, not as the ~160 small ones they make run eagerly. The functions
        # they build hold no traced value (numpyro's own MCMC relies on it), so the step uses them after the trace.
        init_params, potential_fn, postprocess_fn, _ = util.initialize_model(key, model, dynamic_args=False)
        init_kernel, sample_kernel = hmc.hmc(potential_fn, algo=algo)
        kernels.append((sample_kernel, postprocess_fn))
        keys = jax.random.split(jax.random.PRNGKey(1), CHAINS)
        positions = jax.tree.map(lambda p: jnp.broadcast_to(p, (CHAINS, *p.shape)), init_params.z)
        states = jax.vmap(lambda z, k: init_kernel(z, num_warmup=50, rng_key=k))(positions, keys)
        return jax.lax.fori_loop(0, 50, lambda _, s: jax.vmap(sample_kernel)(s), states)

    states = jax.jit(warm_up)(jax.random.PRNGKey(0)) if warm else jax.eval_shape(warm_up, jax.random.PRNGKey(0))
    sample_kernel, postprocess_fn = kernels[0]

    def step(states: Any, _: Any) -> tuple[Any, Any]:
        states = jax.vmap(sample_kernel)(states)
        return states, {"x": jax.vmap(postprocess_fn)(states.z)["x"], "diverging": states.diverging}

    return step, states if warm else None


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    out, length, block, *mode = sys.argv[1:]
    write_metropolis(out, int(length), int(block), *mode)
