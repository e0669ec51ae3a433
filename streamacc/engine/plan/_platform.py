"""The platform JAX computes on, as the defaults chosen per platform ask it (the ``engine.platform`` seam)."""

from __future__ import annotations

import jax

__all__ = ["compute_platform"]


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
