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


def from_host(leaves: list[HostLeaf], like: Any) -> Any:
    """Rebuild a carry with the tree structure of ``like`` from :func:`to_host` leaves."""
    treedef = jax.tree_util.tree_structure(like)
    arrays = [jax.random.wrap_key_data(jnp.asarray(a), impl=impl) if impl else jnp.asarray(a) for a, impl in leaves]
    return jax.tree_util.tree_unflatten(treedef, arrays)


def same_leaves(a: list[HostLeaf], b: list[HostLeaf]) -> bool:
    """Whether two host carries are the same bit for bit (dtypes, shapes, bytes and key implementations)."""
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() and i == j
        for (x, i), (y, j) in zip(a, b, strict=True)
    )
