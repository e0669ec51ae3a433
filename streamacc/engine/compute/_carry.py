"""Carries as plain host data, so that a run can be recorded and continued elsewhere.

A carry is a pytree of small JAX arrays, possibly typed PRNG keys. Here it becomes a
list of (numpy array, key implementation or None) leaves and back, exactly.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import numpy.typing as npt

__all__ = ["HostLeaf", "from_host", "same_leaves", "to_host"]

HostLeaf = tuple[npt.NDArray[Any], str | None]


def _leaf_to_host(leaf: Any) -> HostLeaf:
    leaf = jnp.asarray(leaf)
    if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(leaf)), str(jax.random.key_impl(leaf))
    return np.asarray(leaf), None


def to_host(carry: Any) -> list[HostLeaf]:
    """The leaves of ``carry`` as host arrays, each tagged with its PRNG key implementation."""
    return [_leaf_to_host(leaf) for leaf in jax.tree_util.tree_leaves(carry)]


def _placed(array: npt.NDArray[Any], like: Any) -> jax.Array:
    """``array`` on the device, sharded as ``like`` where that is a ``jax.Array`` sharded over several devices."""
    sharding = getattr(like, "sharding", None) if isinstance(like, jax.Array) else None
    if sharding is None or len(sharding.device_set) < 2:
        return jnp.asarray(array)
    placed: jax.Array = jax.device_put(array, sharding)
    return placed


def from_host(leaves: list[HostLeaf], like: Any) -> Any:
    """Rebuild a carry with the tree structure of ``like`` from :func:`to_host` leaves.

    A leaf whose counterpart in ``like`` is sharded over several devices (an ensemble's members
    spread over the devices of a mesh) is sharded so again; any other goes to the default device.
    """
    treedef = jax.tree_util.tree_structure(like)
    arrays = []
    for (a, impl), model in zip(leaves, jax.tree_util.tree_leaves(like), strict=True):
        if impl:
            data = model if not isinstance(model, jax.Array) else jax.random.key_data(model)
            arrays.append(jax.random.wrap_key_data(_placed(a, data), impl=impl))
        else:
            arrays.append(_placed(a, model))
    return jax.tree_util.tree_unflatten(treedef, arrays)


def same_leaves(a: list[HostLeaf], b: list[HostLeaf]) -> bool:
    """Whether two host carries are the same bit for bit (dtypes, shapes, bytes and key implementations)."""
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() and i == j
        for (x, i), (y, j) in zip(a, b, strict=True)
    )
