"""The manifest: the durable record that makes a run resumable and verifiable.

It holds the run's identity, the metadata its arrays were created with, how many blocks
(in scan order) are committed, and the carry after them. Per-block records (the carry
entering each block and the CRC-32C of each stored chunk) live in segments of
``SEGMENT`` blocks, so a commit rewrites a bounded amount whatever the length. Each
block's record is written before the manifest that counts it, so the manifest never
claims a block it cannot describe.

Everything is stored as Zarr v3 group nodes under ``_streamacc/`` (the payload is JSON
text in one attribute), so every Zarr reader sees a normal hierarchy.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._callsite import warn
from ..._dtypes import dtype_from_name, dtype_name
from ...engine import block_count, committed_span, rows_in
from ...errors import NoOutputError, ResumeError, StreamaccWarning, VerifyError, arg
from ...store import BOOKKEEPING, Target

if TYPE_CHECKING:
    from ...engine import HostLeaf  # a type only: reading a manifest never imports JAX

__all__ = [
    "FORMAT",
    "MANIFEST_DESCRIPTION",
    "MANIFEST_KEY",
    "SEGMENT",
    "BlockRecord",
    "Ledger",
    "Manifest",
    "describe_nonfinite",
    "group_node",
    "identity_differences",
    "load_manifest",
    "node_attribute",
    "same_function",
    "upgrade_identity",
]

FORMAT = "streamacc-manifest/2"
SEGMENT = 64
MANIFEST_KEY = f"{BOOKKEEPING}/zarr.json"
MANIFEST_DESCRIPTION = "streamacc's bookkeeping of this output (manifest); the data are in the sibling arrays"
"""The ``description`` attribute of the manifest's group, beside the manifest."""
LEGACY_MANIFEST_KEY = f"{BOOKKEEPING}/manifest.json"  # format 1, streamacc 0.1
MANIFEST_ATTR = "streamacc_manifest"
RECORDS_ATTR = "streamacc_records"

LEGACY_FIELDS: dict[str, Any] = {"save_every": 1, "dims": None, "time": None, "summaries": []}
"""Identity fields added after streamacc 0.2.0, with the value an identity without them means."""


def upgrade_identity(identity: Any) -> Any:
    """A stored identity in this version's form: each field added since 0.2.0 with the value its absence meant.

    An output written by 0.2.0 then compares equal to the same run today, so that it
    resumes and verifies (its chunks: ``chunk`` rows of whole trailing axes). Anything
    that is not a readable identity is returned as it is, for the manifest's checks.
    """
    if not isinstance(identity, dict):
        return identity
    out = {**LEGACY_FIELDS, **identity}
    if "chunks" not in out:
        with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
            out["chunks"] = {name: [out["chunk"], *shape[1:]] for name, (_, shape) in out["arrays"].items()}
    return out


def group_node(attributes: dict[str, Any]) -> bytes:
    """The ``zarr.json`` of a Zarr v3 group with ``attributes``."""
    return json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attributes}, indent=1).encode()


def text_node(name: str, text: str, **attributes: str) -> bytes:
    """``group_node({name: text, **attributes})`` for a ``text`` that ``json.dumps`` wrote, the same bytes.

    Such a text is ASCII with its control characters escaped, so its JSON string is the
    text with its backslashes and quotes escaped: two ``str.replace`` instead of the
    encoder's look at every character of the manifest and the block records that each
    commit writes (the summaries' tail makes a manifest tens of KiB).
    """
    quoted = b'"' + text.replace("\\", "\\\\").replace('"', '\\"').encode() + b'"'
    return group_node({name: "\0", **attributes}).replace(b'"\\u0000"', quoted, 1)  # no other part holds a NUL


def node_attribute(raw: bytes, name: str) -> Any:
    """Attribute ``name`` of a stored ``zarr.json``; ValueError when the document is not one."""
    doc = json.loads(raw)
    if not isinstance(doc, dict) or doc.get("zarr_format") != 3 or name not in doc.get("attributes", {}):
        raise ValueError(f"no attribute {name!r}")
    return doc["attributes"][name]


def encode_leaves(leaves: list[HostLeaf]) -> list[dict[str, Any]]:
    """JSON form of host carry leaves: dtype, shape, exact bytes, PRNG key implementation."""
    return [
        {"dtype": dtype_name(a.dtype), "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode(),
         "key": impl}
        for a, impl in leaves
    ]


def decode_leaves(records: list[dict[str, Any]]) -> list[HostLeaf]:
    """Inverse of :func:`encode_leaves`."""
    out = []
    for r in records:
        raw = base64.b64decode(r["data"], validate=True)
        out.append((np.frombuffer(raw, dtype=dtype_from_name(r["dtype"])).reshape(r["shape"]).copy(), r["key"]))
    return out


@dataclasses.dataclass(frozen=True)
class BlockRecord:
    """What it takes to recompute and check one block alone."""

    index: int
    start: int
    stop: int
    carry_in: list[dict[str, Any]]
    crc32c: dict[str, list[int]]  # per array, the CRC-32C of each stored chunk (as zarr's crc32c codec appends it)


@dataclasses.dataclass
class Manifest:
    """The committed state of one run."""

    identity: dict[str, Any]
    total_blocks: int
    arrays: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    committed_blocks: int = 0
    committed_steps: int = 0
    carry: list[dict[str, Any]] | None = None
    complete: bool = False
    summaries: dict[str, Any] | None = None  # the summaries' tail: rows in no durable chunk yet, and the open window
    stored: list[list[int]] | None = None
    """A virtual output's blocks whose data chunks are stored (materialized), as sorted, disjoint ``[first,
    stop)`` ranges of block indices in scan order; None for an output that stores every committed block."""
    nonfinite: dict[str, Any] | None = None
    """The first step, in scan order, found holding a NaN or an infinity among the committed blocks:
    ``{"step": s, "array": name}``, the step whose y in output ``name`` holds one, or ``"array": None``
    where no ys were computed (a virtual run without summaries): the carry after step ``s``, the end of
    the first block whose carry holds one. None (and absent from the stored manifest, as in outputs
    written before it was recorded) when none was found."""

    def to_json(self) -> bytes:
        # its fields hold JSON values alone, so a shallow dict serializes as ``asdict``'s deep copy would
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for optional in ("stored", "nonfinite"):
            if fields[optional] is None:
                del fields[optional]  # recorded as before the field existed: older readers read it
        doc = json.dumps({"format": FORMAT, **fields}, sort_keys=True)
        return text_node(MANIFEST_ATTR, doc, description=MANIFEST_DESCRIPTION)

    @property
    def virtual(self) -> bool:
        """Whether the run stores no data chunks: a reader recomputes them from the recorded carries."""
        return bool(self.identity.get("virtual", False))

    def stores(self, block: int) -> bool:
        """Whether committed block ``block`` (in scan order) has its data chunks stored."""
        if self.stored is None:
            return True
        return any(first <= block < stop for first, stop in self.stored)

    def with_stored(self, blocks: range) -> list[list[int]]:
        """The stored ranges with ``blocks`` added (merged, sorted)."""
        spans = sorted([*(self.stored or []), [blocks.start, blocks.stop]])
        merged: list[list[int]] = []
        for first, stop in spans:
            if first >= stop:
                continue
            if merged and first <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], stop)
            else:
                merged.append([first, stop])
        return merged

    @property
    def recomputes(self) -> bool:
        """Whether a reader recomputes some of the run's data (a virtual run not wholly materialized)."""
        return self.virtual and not self.all_stored

    @property
    def all_stored(self) -> bool:
        """Whether every block of the run (committed or not) has its data stored."""
        return self.stored is None or self.stored == [[0, self.total_blocks]]

    @classmethod
    def from_json(cls, raw: bytes, label: str) -> Manifest:
        try:
            doc = json.loads(node_attribute(raw, MANIFEST_ATTR))
            if doc.pop("format") != FORMAT:
                raise ValueError("unknown format")
            manifest = cls(**doc)
            manifest.identity = upgrade_identity(manifest.identity)
            if not _nonfinite_form(manifest.nonfinite):
                raise ValueError("a malformed record of the first non-finite step")
            if manifest.carry is not None:
                decode_leaves(manifest.carry)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise VerifyError(
                f"the manifest of {label} is damaged or not a streamacc manifest; its data cannot be trusted: "
                f"rewrite it with {arg('mode', 'overwrite')}"
            ) from None
        return manifest

    @property
    def length(self) -> int:
        length: int = self.identity["length"]
        return length

    def span(self, blocks: int | None = None) -> tuple[int, int]:
        """The steps covered by the first ``blocks`` committed blocks (default: all committed)."""
        ident = self.identity
        count = self.committed_blocks if blocks is None else blocks
        return committed_span(ident["length"], ident["block_size"], ident["reverse"], count, ident["unroll"])

    def rows(self, blocks: int | None = None) -> tuple[int, int]:
        """The output rows the first ``blocks`` committed blocks (default: all committed) fill."""
        return rows_in(*self.span(blocks), self.identity.get("save_every", 1))

    @property
    def committed_rows(self) -> int:
        """How many output rows the committed blocks fill (the committed steps, unless thinned)."""
        first, last = self.rows()
        return last - first

    def inconsistency(self) -> str | None:
        """Why this manifest contradicts itself, or None when its counts agree with its layout."""
        ident = self.identity
        try:
            total = block_count(ident["length"], ident["block_size"], ident["unroll"])
        except (KeyError, TypeError, ZeroDivisionError):
            return "its identity has no valid layout"
        if self.total_blocks != total:
            return f"it counts {self.total_blocks} blocks where its layout has {total}"
        if not 0 <= self.committed_blocks <= total:
            return f"it commits {self.committed_blocks} of {total} blocks"
        start, stop = self.span()
        if self.committed_steps != stop - start:
            held = stop - start
            return f"it counts {self.committed_steps} committed steps where {self.committed_blocks} blocks hold {held}"
        if self.complete and self.committed_blocks != total:
            return f"it says complete with only {self.committed_blocks} of {total} blocks committed"
        if self.carry is None:
            return "it holds no carry"
        if self.virtual != (self.stored is not None) or not _ranges_in(self.stored, self.committed_blocks):
            return "its record of the blocks whose data are stored does not fit its run"
        if not _step_in(self.nonfinite, start, stop, list(ident.get("arrays", {}))):
            return "its record of the first step holding a NaN or an infinity does not fit its run"
        return None


def _nonfinite_form(found: Any) -> bool:
    """Whether ``found`` has the form of a manifest's ``nonfinite``: None, or a step and an output name or None."""
    if found is None:
        return True
    if not isinstance(found, dict) or set(found) != {"step", "array"}:
        return False
    step, array = found["step"], found["array"]
    return isinstance(step, int) and not isinstance(step, bool) and (array is None or isinstance(array, str))


def _step_in(found: dict[str, Any] | None, start: int, stop: int, names: list[str]) -> bool:
    """Whether ``found`` (a manifest's ``nonfinite``) names a committed step, and an output of the run or the carry."""
    return found is None or (start <= found["step"] < stop and (found["array"] is None or found["array"] in names))


def describe_nonfinite(found: dict[str, Any]) -> str:
    """A manifest's ``nonfinite`` in words: ``y holds a NaN or an infinity at step 12``."""
    if found["array"] is None:
        return (
            f"the carry holds a NaN or an infinity after step {found['step']}, the end of the first block whose carry "
            "does; a virtual run without summaries computes no ys, so only its carry is checked, at each block's end"
        )
    return f"{found['array']} holds a NaN or an infinity at step {found['step']}, the first such step in scan order"


def _ranges_in(ranges: Any, blocks: int) -> bool:
    """Whether ``ranges`` (None, or sorted disjoint ``[first, stop)`` pairs) lie within ``blocks`` blocks."""
    if ranges is None:
        return True
    if not isinstance(ranges, list) or not all(isinstance(r, list) and len(r) == 2 for r in ranges):
        return False
    ends = [v for r in ranges for v in r]
    return all(isinstance(v, int) for v in ends) and ends == sorted(ends) and (not ends or ends[0] >= 0) and (
        not ends or ends[-1] <= blocks
    )


def _flatten(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


LATER_FIELDS = ("input",)
"""Identity fields newer than some outputs: one that an output does not record is not compared."""


NOT_COMPARED = frozenset({"versions.streamacc"})
"""Identity fields a continued run may change: the release of streamacc that wrote the output.
A later release continues any output of the manifest format it reads (``FORMAT``); the bits
it writes are checked by recomputing the last committed block before anything is written."""


def identity_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Each field where two run identities differ, as 'field: stored X, now Y'."""
    current = {k: v for k, v in current.items() if k in stored or k not in LATER_FIELDS}
    a, b = _flatten(stored), _flatten(json.loads(json.dumps(current)))
    fields = sorted((a.keys() | b.keys()) - NOT_COMPARED)
    return [f"{k}: stored {a.get(k)!r}, now {b.get(k)!r}" for k in fields if a.get(k) != b.get(k)]


class Ledger:
    """Reads and writes a target's manifest and block records."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._segment: tuple[int, list[dict[str, Any]]] | None = None

    def load(self) -> Manifest | None:
        """The manifest, or None when there is none (a legacy one is refused with the fix)."""
        raw = self.target.read(MANIFEST_KEY)
        if raw is None:
            if self.target.read(LEGACY_MANIFEST_KEY) is not None:
                raise NoOutputError(
                    f"{self.target.label} was written by streamacc 0.1 (bookkeeping format 1), which this version "
                    f"cannot resume or verify; rewrite it with {arg('mode', 'overwrite')} (its arrays still open "
                    "with xarray)"
                )
            return None
        return Manifest.from_json(raw, self.target.label)

    def save(self, manifest: Manifest) -> None:
        self.target.write(MANIFEST_KEY, manifest.to_json())

    @staticmethod
    def segment_key(seg: int) -> str:
        return f"{BOOKKEEPING}/records_{seg:06d}/zarr.json"

    def _damaged(self, what: str) -> VerifyError:
        return VerifyError(
            f"block records of {self.target.label} are damaged ({what}); rewrite the output with "
            f"{arg('mode', 'overwrite')}"
        )

    def _read_segment(self, seg: int) -> list[dict[str, Any]]:
        if self._segment is not None and self._segment[0] == seg:
            return self._segment[1]
        raw = self.target.read(self.segment_key(seg))
        try:
            records = [] if raw is None else json.loads(node_attribute(raw, RECORDS_ATTR))
            if not isinstance(records, list):
                raise TypeError
        except (ValueError, TypeError):
            raise self._damaged(f"segment {seg}") from None
        self._segment = (seg, records)
        return records

    def record(self, *recs: BlockRecord) -> None:
        """Durably store the records of consecutive blocks (in scan order), one write per segment."""
        for seg in sorted({rec.index // SEGMENT for rec in recs}):
            records = self._read_segment(seg)
            for rec in recs:
                pos = rec.index - seg * SEGMENT
                if not 0 <= pos < SEGMENT:
                    continue
                if len(records) < pos:
                    raise self._damaged(f"they end at block {seg * SEGMENT + len(records)}, before block {rec.index}")
                records = [*records[:pos], dataclasses.asdict(rec)]  # drops records written past an interrupted commit
            self._segment = (seg, records)
            self.target.write(self.segment_key(seg), text_node(RECORDS_ATTR, json.dumps(records)))

    def update(self, *recs: BlockRecord) -> None:
        """Durably replace the records of committed blocks (their stored chunks' checksums), one write per segment."""
        for seg in sorted({rec.index // SEGMENT for rec in recs}):
            records = list(self._read_segment(seg))
            for rec in recs:
                pos = rec.index - seg * SEGMENT
                if 0 <= pos < SEGMENT:
                    if pos >= len(records):
                        raise self._damaged(f"block {rec.index} has no record to update")
                    records[pos] = dataclasses.asdict(rec)
            self._segment = (seg, records)
            self.target.write(self.segment_key(seg), text_node(RECORDS_ATTR, json.dumps(records)))

    def block(self, index: int) -> BlockRecord:
        """The record of committed block ``index`` (in scan order)."""
        seg, pos = divmod(index, SEGMENT)
        records = self._read_segment(seg)
        try:
            rec = BlockRecord(**records[pos])
            if rec.index != index:
                raise ValueError
            decode_leaves(rec.carry_in)
        except (IndexError, TypeError, ValueError, KeyError):
            raise VerifyError(
                f"the record of block {index} of {self.target.label} is missing or damaged; rewrite the output "
                f"with {arg('mode', 'overwrite')}"
            ) from None
        return rec


def load_manifest(target: Target) -> Manifest:
    """The manifest of ``target``, or an error saying why there is none."""
    manifest = Ledger(target).load()
    if manifest is None:
        if not target.exists():
            raise NoOutputError(f"{target.label} {target.absence()}; check the path")
        raise NoOutputError(f"{target.label} has no streamacc manifest; it was not written by streamacc or is empty")
    return manifest


def _same_but_run_as_a_script(stored: Any, current: str) -> bool:
    """Whether two descriptions differ only in that one function's module was run as a script.

    ``python heat.py`` records ``__main__.heat``; ``from heat import heat`` describes
    ``heat.heat``: the same code and values, under another module name.
    """
    script = "__main__."
    if not isinstance(stored, str) or " code:" not in stored or stored.startswith(script) == current.startswith(script):
        return False
    ran, imported = (stored, current) if stored.startswith(script) else (current, stored)
    return imported.endswith("." + ran[len(script) :])


def same_function(stored: Any, current: str, label: str) -> bool:
    """Whether the step function recorded as ``stored`` is ``current`` (both from ``describe_function``).

    streamacc 0.2.0 recorded a plain function by name and code alone; such a record
    matches a function of that name and code, with a warning that the values it uses
    (closed-over parameters, constants) cannot be compared.
    """
    if stored == current or _same_but_run_as_a_script(stored, current):
        return True
    if isinstance(stored, str) and " values:" not in stored and current.startswith(f"{stored} values:"):
        warn(
            f"{label} was written by streamacc 0.2.0, which recorded its step function {stored.split()[0]} by its "
            "code alone: the values the function uses cannot be compared, and a change to them is caught only by "
            "recomputing blocks",
            StreamaccWarning,
        )
        return True
    return False


def require_same_run(stored: Manifest, identity: dict[str, Any], label: str) -> None:
    """Refuse to continue a run whose identity differs, naming every difference."""
    if same_function(stored.identity.get("function"), identity["function"], label):
        identity = {**identity, "function": stored.identity.get("function")}
    diffs = identity_differences(stored.identity, identity)
    if diffs:
        raise ResumeError(
            f"cannot resume {label}: it was written by a different run ({'; '.join(diffs)}); "
            f"rerun with the original settings, or use {arg('mode', 'overwrite')} to start afresh"
        )
