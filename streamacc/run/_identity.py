"""A run's identity: everything that must match for a resumed run to give the same bytes."""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

import jax
import numpy as np

from .._version import __version__
from ..engine import Plan, to_host
from ..store import fingerprint_of

__all__ = ["describe_function", "run_identity"]


def describe_function(f: Any) -> str:
    """A stable description of a step function: its name, and its parameters or code digest.

    Recipes are frozen dataclasses, whose repr holds every parameter; a plain function is
    named and fingerprinted by its bytecode (values it closes over are not seen).
    """
    if dataclasses.is_dataclass(f):
        return repr(f)
    name = f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', type(f).__qualname__)}"
    code = getattr(f, "__code__", None)
    return name if code is None else f"{name} code:{zlib.crc32(code.co_code):08x}"


def _digest(leaves: list[tuple[np.ndarray, Any]]) -> str:
    crc = 0
    for array, impl in leaves:
        crc = zlib.crc32(f"{array.dtype.str}{array.shape}{impl}".encode() + array.tobytes(), crc)
    return f"{crc:08x}"


def _describe_xs(xs: Any) -> list[str]:
    def one(leaf: Any) -> str:
        where = getattr(leaf, "store_path", None) or getattr(leaf, "source", None)
        return f"{type(leaf).__name__}{list(leaf.shape)}:{np.dtype(leaf.dtype).str}" + (f"@{where}" if where else "")

    return [one(leaf) for leaf in jax.tree_util.tree_leaves(xs)]


def _input_contents(xs: Any) -> dict[str, list[str]]:
    """``{"input": [...]}``: a fingerprint of each stored Zarr array read as input (none: no field).

    A resume then refuses an input edited since the run started, whose new rows would
    join blocks committed from the old ones.
    """
    prints = [p for p in map(fingerprint_of, jax.tree_util.tree_leaves(xs)) if p is not None]
    return {"input": prints} if prints else {}


def run_identity(
    plan: Plan, *, arrays: dict[str, Any], codec: str, chunk: int, attrs: dict, summaries: list[int] | None = None
) -> dict[str, Any]:
    """The JSON-ready identity of a write: function, inputs, layout, codec and versions."""
    return {
        **_input_contents(plan.xs),
        "function": describe_function(plan.f),
        "recipe": attrs.get("recipe"),
        "params": attrs.get("params"),
        "init": _digest(to_host(plan.init)),
        "xs": _describe_xs(plan.xs),
        "length": plan.length,
        "block_size": plan.block_size,
        "chunk": chunk,
        "unroll": plan.unroll,
        "reverse": plan.reverse,
        "codec": codec,
        "arrays": arrays,
        "summaries": list(summaries or []),
        "versions": {"streamacc": __version__, "jax": jax.__version__, "backend": jax.default_backend()},
    }
