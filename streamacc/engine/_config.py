"""Where and how JAX computes: the platform, 64-bit types, and the calling thread's configuration.

The defaults chosen per platform ask :func:`compute_platform` (the ``engine.platform`` seam).
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

__all__ = ["caller_scopes", "compute_platform", "jax_option", "x64_scope"]


def compute_platform() -> str:
    """The platform JAX computes on from the calling thread (``jax.default_device`` included): ``cpu``, ``tpu``,
    ``gpu`` ..., which the defaults chosen per platform ask (``streamacc.base``)."""
    return _platform()


def _platform() -> str:
    device: jax.Device | str | None = getattr(jax.config, "jax_default_device")  # noqa: B009 (a run-time option)
    if device is None:
        return jax.default_backend()
    if isinstance(device, str):  # a platform name
        return device
    platform: str = device.platform  # jaxlib's Device comes without type information
    return platform


def x64_scope(on: bool) -> Any:
    """A context manager in which JAX computes with (or without) 64-bit types, on this thread only.

    Used where streamacc must not depend on the process's setting (a cluster worker, a
    64-bit seed); jax < 0.8 has it only under ``jax.experimental``.
    """
    scope: Any = getattr(jax, "enable_x64", None)
    if scope is None:
        from jax import experimental

        scope = experimental.enable_x64  # type: ignore[attr-defined]
    return scope(on)


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
