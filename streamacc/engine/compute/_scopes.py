"""The calling thread's JAX configuration, carried to the thread that computes for it.

``jax.enable_x64``, ``jax.numpy_dtype_promotion``, ``jax.default_matmul_precision`` and
``jax.default_device`` are context managers that set a value for the current thread
only. A caller who writes ``with jax.enable_x64(True): streamacc.write(...)`` expects
float64 even though the blocks are computed on another thread (so that the main thread
stays free to honour signals): :func:`caller_scopes` reads the effective values here and
returns a context manager that enters them there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import jax

from ..plan import x64_scope

__all__ = ["caller_scopes", "jax_option"]


def jax_option(name: str) -> Any:
    """This thread's value of the JAX option ``name``, as ``jax.config.<name>`` reads it.

    ``jax.config`` defines its options as properties at run time, out of a type checker's
    sight; the caller states the option's type.
    """
    return getattr(jax.config, name)


def caller_scopes() -> Callable[[], contextlib.AbstractContextManager[None]]:
    """A context manager factory that re-enters this thread's JAX scopes on another thread."""
    x64 = bool(jax_option("jax_enable_x64"))
    promotion: object = jax_option("jax_numpy_dtype_promotion")
    precision: object = jax_option("jax_default_matmul_precision")
    device: object = jax_option("jax_default_device")

    @contextlib.contextmanager
    def enter() -> Iterator[None]:
        with (
            x64_scope(x64),
            jax.numpy_dtype_promotion(promotion),
            jax.default_matmul_precision(precision),
            jax.default_device(device),
        ):
            yield

    return enter
