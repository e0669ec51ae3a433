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

__all__ = ["carry_digest", "describe_function", "fingerprint", "input_values", "run_identity"]

VALUES_PIECE_BYTES = 64 * 2**20
"""Bytes of an input read and checksummed at a time for its values' digest: its memory stays this, whatever the
input's size (a memmap or a Zarr array is read piece by piece)."""


def carry_digest(leaves: list[tuple[np.ndarray, Any]]) -> str:
    """The identity's digest of an initial carry, from its host leaves (see ``engine.to_host``)."""
    crc = 0
    for array, impl in leaves:
        crc = zlib.crc32(f"{array.dtype.str}{array.shape}{impl}".encode() + array.tobytes(), crc)
    return f"{crc:08x}"


def _describe_xs(xs: Any) -> list[str]:
    """Each input leaf by its shape and dtype alone (``array[N]:<f4``), whatever kind of array holds it (numpy, a
    memmap, JAX, Zarr, traced in a Stream's program) and wherever it lives: its values are ``xs_values``."""

    def one(leaf: Any) -> str:
        whole = getattr(leaf, "whole", None)  # a view of all of a stored array's rows is described as the array
        leaf = leaf if whole is None else whole
        return f"array{list(leaf.shape)}:{np.dtype(leaf.dtype).str}"

    return [one(leaf) for leaf in jax.tree_util.tree_leaves(xs)]


def _digestible(leaf: Any) -> bool:
    """Whether the values of input ``leaf`` are digested: an array (numpy's, a memmap, JAX's, Zarr's), not a reader of
    a stored input's rows (a recipe's ``--input``, known by its store's fingerprint, ``input``)."""
    if isinstance(leaf, (np.ndarray, jax.Array)):
        return not jax.numpy.issubdtype(leaf.dtype, jax.dtypes.prng_key)
    return type(leaf).__module__.split(".")[0] == "zarr" and type(leaf).__name__ == "Array"


def input_values(leaves: Sequence[Any], marks: Sequence[int]) -> dict[int, list[str]] | None:
    """The digest of each input leaf's values (``crc32:`` and 8 hex digits, CRC-32 of its rows' little-endian bytes
    in C order) over its first ``mark`` rows, for each of ``marks`` (a longer run's digest and the prefix it extends
    come from one read). None when a leaf is not an array whose values are digested (see :func:`_digestible`).

    Read ``VALUES_PIECE_BYTES`` at a time; the checksum runs at several GiB/s, beside a run that reads every row.
    """
    if not all(_digestible(leaf) for leaf in leaves):
        return None
    ends = sorted(set(marks))
    digests: dict[int, list[str]] = {end: [] for end in ends}
    for leaf in leaves:
        dtype = np.dtype(leaf.dtype)
        dtype = dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
        row_bytes = max(1, int(np.prod(leaf.shape[1:], dtype=np.int64)) * dtype.itemsize)
        step = max(1, VALUES_PIECE_BYTES // row_bytes)
        crc, done = 0, 0
        for end in ends:
            while done < end:
                upto = min(end, done + step)
                piece = np.ascontiguousarray(np.asarray(leaf[done:upto]), dtype=dtype)
                crc = zlib.crc32(piece.reshape(-1).view(np.uint8).data, crc)  # its bytes, not copied
                done = upto
            digests[end].append(f"crc32:{crc:08x}")
    return digests


def _input_contents(xs: Any) -> dict[str, list[str]]:
    """``{"input": [...]}``: a fingerprint of each stored Zarr array read as input (none: no field).

    A resume then refuses an input edited since the run started, whose new rows would
    join blocks committed from the old ones.
    """
    prints = [p for p in map(fingerprint_of, jax.tree_util.tree_leaves(xs)) if p is not None]
    return {"input": prints} if prints else {}


def _unchanged(
    stored: RunIdentity, contents: dict[str, list[str]], leaves: list[Any], length: int
) -> dict[int, list[str]] | None:
    """The digests of the stored run's inputs where this run's are the same Zarr arrays, their chunks unchanged
    (``contents``: their fingerprints): a resume need not read them again. None where any input is another kind,
    or the stored run recorded no digests, or its length differs."""
    doc = stored.to_json()
    if not leaves or "xs_values" not in doc or doc.get("length") != length or doc.get("input") != contents.get("input"):
        return None
    if any(fingerprint_of(leaf) is None for leaf in leaves):
        return None
    return {length: list(doc["xs_values"])}


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
    prefixes: Sequence[int] = (),
    stored: RunIdentity | None = None,
) -> RunIdentity:
    """The identity of a write: function, inputs, layout, codec and versions.

    ``chunks`` are the arrays' chunk shapes before they are capped at a short output's
    length (so that they do not depend on it); ``chunk`` repeats the first one's rows
    along ``step``, as streamacc 0.2.0 recorded it. ``dims`` and ``time`` are as asked;
    ``summaries`` the window lengths (in rows) of the window summaries, ``over_state`` the
    outputs summarised over their whole state (recorded where there are any). A virtual run
    (its data recomputed on reading, not stored) says so; a stored one records nothing of it.
    The inputs are recorded by shape and dtype (``xs``) and by their values (``xs_values``,
    see :func:`input_values`); ``prefixes`` are shorter lengths whose inputs' digests the
    identity keeps beside it, unrecorded (``RunIdentity.prefixes``: what an extension compares).
    ``stored`` is the identity of the run this one resumes, whose digests a Zarr input whose
    chunks are unchanged keeps, unread. An unroll chosen for the step (none given) says so.
    A run with a condition records it as its step (``until``, ``until_values``) and, where it
    is tested from a later step than the first (an extension), that step (``until_from``);
    one without records nothing of it.
    """
    function, values = fingerprint(plan.f)
    leaves = jax.tree_util.tree_leaves(plan.xs)
    contents = _input_contents(plan.xs)
    digests = _unchanged(stored, contents, leaves, plan.length) if stored is not None and not prefixes else None
    if digests is None and leaves:
        digests = input_values(leaves, [plan.length, *prefixes])
    xs_values = {} if digests is None else {"xs_values": digests[plan.length]}
    return RunIdentity(
        {
            **contents,
            "function": function,
            **({"function_values": values} if values else {}),
            "recipe": attrs.get("recipe"),
            "params": attrs.get("params"),
            "init": carry_digest(to_host(plan.init)),
            "xs": _describe_xs(plan.xs),
            **xs_values,
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
        },
        {n: digests[n] for n in prefixes} if digests is not None else {},
    )


def _condition(plan: Plan) -> dict[str, Any]:
    """The identity's fields of a run's condition (none without one)."""
    if plan.until is None:
        return {}
    description, values = fingerprint(plan.until.predicate)
    armed = plan.until.armed
    return {"until": description, **({"until_values": values} if values else {}),
            **({"until_from": armed} if armed else {})}  # fmt: skip
