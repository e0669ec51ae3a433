"""A run's identity made from its plan: everything that must match for a resumed run to give the same bytes."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np

from ..._version import __version__
from ...engine import Plan, to_host
from ...store import fingerprint_of
from ._fingerprint import describe_function, fingerprint
from ._runidentity import RunIdentity

__all__ = ["carry_digest", "describe_function", "fingerprint", "run_identity"]

_JAX_ARRAY = "ArrayImpl"
"""The type name of a concrete ``jax.Array``, as an input that is one is described."""


def carry_digest(leaves: list[tuple[np.ndarray, Any]]) -> str:
    """The identity's digest of an initial carry, from its host leaves (see ``engine.to_host``)."""
    crc = 0
    for array, impl in leaves:
        crc = zlib.crc32(f"{array.dtype.str}{array.shape}{impl}".encode() + array.tobytes(), crc)
    return f"{crc:08x}"


def _describe_xs(xs: Any) -> list[str]:
    def one(leaf: Any) -> str:
        whole = getattr(leaf, "whole", None)  # a view of all of a stored array's rows is named as the array
        leaf = leaf if whole is None else whole
        where = getattr(leaf, "store_path", None) or getattr(leaf, "source", None)
        # an input known by its shape alone is a jax.Array traced inside a program (a Stream's)
        kind = _JAX_ARRAY if isinstance(leaf, jax.ShapeDtypeStruct) else type(leaf).__name__
        return f"{kind}{list(leaf.shape)}:{np.dtype(leaf.dtype).str}" + (f"@{where}" if where else "")

    return [one(leaf) for leaf in jax.tree_util.tree_leaves(xs)]


def _input_contents(xs: Any) -> dict[str, list[str]]:
    """``{"input": [...]}``: a fingerprint of each stored Zarr array read as input (none: no field).

    A resume then refuses an input edited since the run started, whose new rows would
    join blocks committed from the old ones.
    """
    prints = [p for p in map(fingerprint_of, jax.tree_util.tree_leaves(xs)) if p is not None]
    return {"input": prints} if prints else {}


def run_identity(
    plan: Plan,
    *,
    arrays: dict[str, Any],
    codec: str,
    chunks: dict[str, tuple[int, ...]],
    attrs: dict[str, Any],
    dims: Mapping[str, Sequence[str]] | None = None,
    time: Mapping[str, Any] | None = None,
    summaries: list[int] | None = None,
    over_state: list[str] | None = None,
    virtual: bool = False,
) -> RunIdentity:
    """The identity of a write: function, inputs, layout, codec and versions.

    ``chunks`` are the arrays' chunk shapes before they are capped at a short output's
    length (so that they do not depend on it); ``chunk`` repeats the first one's rows
    along ``step``, as streamacc 0.2.0 recorded it. ``dims`` and ``time`` are as asked;
    ``summaries`` the window lengths (in rows) of the window summaries, ``over_state`` the
    outputs summarised over their whole state (recorded where there are any). A virtual run
    (its data recomputed on reading, not stored) says so; a stored one records nothing of it.
    An unroll chosen for the step (none given) says so too.
    A run with a condition records it as its step (``until``, ``until_values``) and, where it
    is tested from a later step than the first (an extension), that step (``until_from``);
    one without records nothing of it.
    """
    function, values = fingerprint(plan.f)
    return RunIdentity({
        **_input_contents(plan.xs),
        "function": function,
        **({"function_values": values} if values else {}),
        "recipe": attrs.get("recipe"),
        "params": attrs.get("params"),
        "init": carry_digest(to_host(plan.init)),
        "xs": _describe_xs(plan.xs),
        "length": plan.length,
        "block_size": plan.block_size,
        "chunk": next(iter(chunks.values()))[0] if chunks else plan.block_rows,
        "chunks": {name: list(shape) for name, shape in chunks.items()},
        "save_every": plan.save_every,
        "dims": None if dims is None else {name: list(names) for name, names in dims.items()},
        "time": time,
        "unroll": plan.unroll,
        **({"unroll_chosen": True} if plan.unroll_chosen else {}),
        "reverse": plan.reverse,
        "codec": codec,
        "arrays": arrays,
        "summaries": list(summaries or []),
        **({"summaries_over_state": list(over_state)} if over_state else {}),
        "versions": {"streamacc": __version__, "jax": jax.__version__, "backend": jax.default_backend()},
        **({"virtual": True} if virtual else {}),
        **_condition(plan),
    })


def _condition(plan: Plan) -> dict[str, Any]:
    """The identity's fields of a run's condition (none without one)."""
    if plan.until is None:
        return {}
    description, values = fingerprint(plan.until.predicate)
    armed = plan.until.armed
    return {"until": description, **({"until_values": values} if values else {}),
            **({"until_from": armed} if armed else {})}  # fmt: skip
