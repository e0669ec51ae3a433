"""A run's identity as its manifest records it: :class:`RunIdentity`, read in one place, typed.

The identity is JSON: what must match for a resumed run to give the same bytes (the
function, inputs, block layout, arrays, chunks, codec, summaries, versions). It is kept as
it was read (an older output's upgraded: each field added since streamacc 0.2.0 with the
value its absence meant) or as a new run made it, and written back as it is, byte for byte;
its attributes read it. A manifest's identity is checked by the manifest
(``Manifest.inconsistency``): the attributes assume a readable one. Reading it imports no JAX.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any

from ..base import Blocking

__all__ = ["LEGACY_FIELDS", "RunIdentity"]

LEGACY_FIELDS: dict[str, Any] = {"save_every": 1, "dims": None, "time": None, "summaries": []}
"""Identity fields added after streamacc 0.2.0, with the value an identity without them means."""


def _upgraded(doc: dict[str, Any]) -> dict[str, Any]:
    """A stored identity in this version's form: each field added since 0.2.0 with the value its absence meant.

    An output written by 0.2.0 then compares equal to the same run today, so that it
    resumes and verifies (its chunks: ``chunk`` rows of whole trailing axes).
    """
    out = {**LEGACY_FIELDS, **doc}
    if "chunks" not in out:
        with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
            out["chunks"] = {name: [out["chunk"], *shape[1:]] for name, (_, shape) in out["arrays"].items()}
    return out


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    """What a run is: the JSON identity its manifest records, and its fields typed.

    ``doc`` is the JSON, as :meth:`to_json` gives it back. Two identities are equal when their
    JSON is.
    """

    doc: dict[str, Any]
    prefixes: dict[int, list[str]] = dataclasses.field(default_factory=dict, compare=False)
    """The digests of the inputs' values over shorter lengths, unrecorded (see ``run_identity``): by length."""

    @classmethod
    def from_json(cls, doc: Any) -> RunIdentity:
        """The identity a manifest holds, in this version's form (one that is not a JSON object is read as empty)."""
        return cls(_upgraded(doc if isinstance(doc, dict) else {}))

    def to_json(self) -> dict[str, Any]:
        """The identity as the manifest stores it."""
        return self.doc

    def with_init(self, digest: str) -> RunIdentity:
        """The identity with the digest of the initial carry (known once a program's carry is)."""
        return RunIdentity({**self.doc, "init": digest}, self.prefixes)

    def with_values(self, values: list[str] | None) -> RunIdentity:
        """The identity with the digests of its inputs' values (known once a program's inputs are; None: none)."""
        doc = {k: v for k, v in self.doc.items() if k != "xs_values"}
        return RunIdentity(doc if values is None else {**doc, "xs_values": values}, self.prefixes)

    @functools.cached_property
    def blocking(self) -> Blocking:
        """The run's length and blocks, unroll, direction and thinning (KeyError or TypeError: none recorded)."""
        doc = self.doc
        return Blocking(doc["length"], doc["block_size"], doc["unroll"], doc["reverse"], doc["save_every"])

    @property
    def unroll_chosen(self) -> bool:
        """Whether the unroll was chosen for the step where none was given (recorded since 1.1)."""
        return bool(self.doc.get("unroll_chosen", False))

    @property
    def rows(self) -> int:
        """The rows of the run's output arrays: one per step, or per ``save_every`` steps."""
        return self.blocking.rows

    @functools.cached_property
    def arrays(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Each output array's dtype name and shape (its rows first), by name, in the order of ``y``'s leaves."""
        return {name: (dtype, tuple(shape)) for name, (dtype, shape) in self.doc["arrays"].items()}

    @property
    def names(self) -> list[str]:
        """The output arrays' names."""
        return list(self.doc["arrays"])

    @property
    def codec(self) -> str:
        codec: str = self.doc["codec"]
        return codec

    @property
    def chunks(self) -> dict[str, tuple[int, ...]] | None:
        """Each array's chunk shape as recorded (before it is capped at a short output's length); None if unreadable."""
        try:
            return {name: tuple(int(n) for n in shape) for name, shape in self.doc["chunks"].items()}
        except (KeyError, TypeError, ValueError, AttributeError):
            return None

    @property
    def function(self) -> str | None:
        """The step function as ``describe_function`` describes it (a recipe's repr); None if none is recorded."""
        function: str | None = self.doc.get("function")
        return function

    @property
    def recipe(self) -> str | None:
        """The recipe that wrote the run; None for a run written from Python."""
        recipe: str | None = self.doc.get("recipe")
        return recipe

    @property
    def params(self) -> dict[str, Any] | None:
        """The recipe's parameters."""
        params: dict[str, Any] | None = self.doc.get("params")
        return params

    @property
    def time(self) -> dict[str, Any] | None:
        """The time axis asked for (``step``, ``start``, ``units``), if any."""
        time: dict[str, Any] | None = self.doc.get("time")
        return time

    @property
    def summaries(self) -> list[int]:
        """The window lengths (in rows) of the window summaries' levels; none without summaries."""
        return list(self.doc.get("summaries") or [])

    @property
    def over_state(self) -> tuple[str, ...]:
        """The outputs summarised over their whole state (none recorded before 1.1)."""
        return tuple(self.doc.get("summaries_over_state") or ())

    @property
    def virtual(self) -> bool:
        """Whether the run stores no data chunks: a reader recomputes them from the recorded carries."""
        return bool(self.doc.get("virtual", False))

    @property
    def versions(self) -> dict[str, str]:
        """The versions that wrote the run: streamacc, jax, and JAX's backend."""
        versions: dict[str, str] = self.doc["versions"]
        return versions
