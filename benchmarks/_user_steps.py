"""Steps as users write them, with nothing tuned: the accelerator benchmark's ``user-steps`` scenario and the
unroll rule's tests run the same ones.

Each :class:`UserStep` is a step ``f(carry, x) -> (carry, y)``, its initial carry and, where
it reads one, a function that makes ``n`` rows of its input. JAX and numpy only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


@dataclasses.dataclass(frozen=True)
class UserStep:
    name: str
    f: Callable[[Any, Any], tuple[Any, Any]]
    init: Callable[[], Any]
    xs: Callable[[int], Any] | None = None
    """``n`` rows of the step's input (None: the step reads none)."""
    length: int = 2**24
    """The run's length on a chip: a second or more of compute at its fastest unroll (a TPU v5e's)."""
    table: bool = False
    """One of the unroll issue's table (its five steps, measured first)."""


def multiply(c: Any, _: Any) -> tuple[Any, Any]:
    c = c * jnp.float32(1.0 + 2.0**-20)
    return c, c


def oscillator(c: Any, _: Any) -> tuple[Any, Any]:
    x, v = c
    dt = jnp.float32(1e-3)
    v = v - dt * x
    x = x + dt * v
    return (x, v), x


def euler3(c: Any, _: Any) -> tuple[Any, Any]:
    """One explicit Euler step of Lorenz-63, its state a 3-vector built with ``jnp.stack``."""
    x, y, z = c[0], c[1], c[2]
    d = jnp.stack([10.0 * (y - x), x * (28.0 - z) - y, x * y - (8.0 / 3.0) * z])
    c = c + jnp.float32(1e-3) * d
    return c, c


def euler3_scalars(c: Any, _: Any) -> tuple[Any, Any]:
    """The same step with its state as three scalars."""
    x, y, z = c
    dt = jnp.float32(1e-3)
    c = (x + dt * (10.0 * (y - x)), y + dt * (x * (28.0 - z) - y), z + dt * (x * y - (8.0 / 3.0) * z))
    return c, c


def normal64(c: Any, _: Any) -> tuple[Any, Any]:
    """64 members of an Ornstein-Uhlenbeck process, a normal variate each a step."""
    key, x = c
    key, sub = jax.random.split(key)
    x = jnp.float32(0.99) * x + jnp.float32(0.1) * jax.random.normal(sub, x.shape, jnp.float32)
    return (key, x), x


def diffusion(c: Any, _: Any) -> tuple[Any, Any]:
    """One explicit step of the heat equation on a ring of points."""
    c = c + jnp.float32(0.2) * (jnp.roll(c, 1) - 2 * c + jnp.roll(c, -1))
    return c, c


def cumsum(c: Any, x: Any) -> tuple[Any, Any]:
    c = c + x
    return c, c


def muladd(c: Any, x: Any) -> tuple[Any, Any]:
    c = jnp.float32(0.999) * c + jnp.float32(0.01) * jnp.sin(x) + x * c * jnp.float32(1e-3)
    return c, c


def logistic(c: Any, _: Any) -> tuple[Any, Any]:
    c = jnp.float32(3.7) * c * (1 - c)
    return c, c


def members(c: Any, _: Any) -> tuple[Any, Any]:
    c = c * jnp.float32(1.0 + 2.0**-20) + jnp.float32(1e-7)
    return c, c


def matvec(c: Any, _: Any) -> tuple[Any, Any]:
    """A linear system of 64 states: a matrix-vector product a step."""
    a = jnp.eye(64, dtype=jnp.float32) * 0.999 + jnp.float32(1e-4)
    c = a @ c
    return c, c


def newton(c: Any, x: Any) -> tuple[Any, Any]:
    """A square root by eight Newton iterations of an inner loop, a step."""
    r = lax.fori_loop(0, 8, lambda _, r: 0.5 * (r + x / r), jnp.maximum(x, 1.0))
    c = c + r
    return c, r


def switch(c: Any, x: Any) -> tuple[Any, Any]:
    c = lax.cond(x > 0, lambda c: c * jnp.float32(1.001), lambda c: c * jnp.float32(0.999), c)
    return c, c


def walk(c: Any, _: Any) -> tuple[Any, Any]:
    """A scalar random walk, a normal variate a step."""
    key, x = c
    key, sub = jax.random.split(key)
    x = x + jax.random.normal(sub, (), jnp.float32)
    return (key, x), x


def stack2(c: Any, _: Any) -> tuple[Any, Any]:
    """The oscillator with its state as a 2-vector built with ``jnp.array``."""
    dt = jnp.float32(1e-3)
    v = c[1] - dt * c[0]
    c = jnp.array([c[0] + dt * v, v])
    return c, c


def elementwise3(c: Any, _: Any) -> tuple[Any, Any]:
    c = c * jnp.float32(0.999) + jnp.float32(1e-3)
    return c, c


def _normals(shape: tuple[int, ...]) -> Callable[[int], Any]:
    return lambda n: np.random.default_rng(5).normal(size=(n, *shape)).astype(np.float32)


STEPS: dict[str, UserStep] = {s.name: s for s in (
    UserStep("one float32 multiply", multiply, lambda: jnp.float32(1.0), length=2**28, table=True),
    UserStep("a 2-value oscillator", oscillator, lambda: (jnp.float32(1.0), jnp.float32(0.0)), length=2**27,
             table=True),
    UserStep("a 3-vector Euler step (jnp.stack)", euler3, lambda: jnp.array([1.0, 1.0, 1.0], jnp.float32),
             length=2**19, table=True),
    UserStep("64 members, a normal variate each", normal64,
             lambda: (jax.random.key(0), jnp.zeros(64, jnp.float32)), length=2**19, table=True),
    UserStep("a 4096-point diffusion", diffusion, lambda: jnp.sin(jnp.linspace(0, 6.28, 4096, dtype=jnp.float32)),
             length=2**20, table=True),
    UserStep("eight Newton iterations a step", newton, lambda: jnp.float32(0.0),
             lambda n: np.abs(_normals(())(n)) + 1, length=2**19),
    UserStep("a 3-vector multiply-add", elementwise3, lambda: jnp.ones(3, jnp.float32), length=2**24),
    UserStep("a float32 running sum", cumsum, lambda: jnp.float32(0.0), _normals(()), length=2**22),
    UserStep("a multiply-add with sin", muladd, lambda: jnp.float32(0.5), _normals(()), length=2**21),
    UserStep("a 3-scalar Euler step", euler3_scalars, lambda: tuple(jnp.float32(1.0) for _ in range(3)),
             length=2**25),
    UserStep("a 2-vector oscillator (jnp.array)", stack2, lambda: jnp.array([1.0, 0.0], jnp.float32), length=2**22),
    UserStep("the logistic map", logistic, lambda: jnp.float32(0.3), length=2**27),
    UserStep("a scalar random walk", walk, lambda: (jax.random.key(0), jnp.float32(0.0)), length=2**18),
    UserStep("a 64-state matrix-vector product", matvec, lambda: jnp.ones(64, jnp.float32), length=2**22),
    UserStep("a branch a step (lax.cond)", switch, lambda: jnp.float32(1.0), _normals(()), length=2**22),
    UserStep("1024 members, a multiply-add", members, lambda: jnp.ones(1024, jnp.float32), length=2**25),
    UserStep("2**20 members, a multiply-add", members, lambda: jnp.ones(2**20, jnp.float32), length=2**13),
)}  # fmt: skip
"""The table's five steps first (the unroll issue's), then steps of the same kinds written otherwise."""
