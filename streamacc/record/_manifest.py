"""The manifest and the block records: the durable record that makes a run resumable and verifiable.

The manifest holds the run's identity, the metadata its arrays were created with, how many
blocks (in scan order) are committed, and how its carries are kept. Per-block records (the
CRC-32C of each stored chunk, and of the carry kept after the block, if any) live in
segments of ``SEGMENT`` blocks; the carries themselves are binary arrays of their own
(``store.CarryArrays``), written once. A commit therefore writes a bounded number of small
bytes whatever the state's size and the run's length. Format 4 (streamacc 1.2) is format 3
(1.1) whose data arrays may be sharded: a block's record then keeps, for each shard, each of
its inner chunks' CRC-32C and its index's. Format 2 (streamacc 0.2 to 1.0) held each block's
entering carry as base64 text in its record, and the carry after the committed blocks in the
manifest; such outputs are read, resumed and verified as they are, and formats 2 and 3 stay so.

Everything is stored as Zarr v3 nodes under ``_streamacc/`` (the payload is JSON text in one
attribute), so every Zarr reader sees a normal hierarchy. The ledger that reads and writes
them is ``_ledger``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from ..base import CODEC_NAMES, dtype_from_name, dtype_name, warn
from ..errors import ResumeError, StreamaccWarning, VerifyError, arg
from ..store import BOOKKEEPING, CarryLeaf
from ._runidentity import RunIdentity

if TYPE_CHECKING:
    from ..base import Blocking, HostLeaf

__all__ = [
    "FORMAT",
    "FORMAT_2",
    "FORMAT_3",
    "MANIFEST_DESCRIPTION",
    "MANIFEST_KEY",
    "SEGMENT",
    "BlockRecord",
    "Manifest",
    "changed_values",
    "describe_nonfinite",
    "group_node",
    "identity_differences",
    "node_attribute",
    "same_function",
]

FORMAT = "streamacc-manifest/4"
"""The format of streamacc 1.2 and later: format 3's, whose data arrays may be sharded (a block's rows one object
of inner chunks, its record keeping each inner chunk's CRC-32C and its index's)."""
FORMAT_3 = "streamacc-manifest/3"
"""The format of streamacc 1.1: carries as arrays of their own, every data chunk an object of its own."""
FORMAT_2 = "streamacc-manifest/2"
"""The format of streamacc 0.2 to 1.0: carries as base64 in the records and the manifest."""
SEGMENT = 64
MANIFEST_KEY = f"{BOOKKEEPING}/zarr.json"
MANIFEST_DESCRIPTION = "streamacc's bookkeeping of this output (manifest); the data are in the sibling arrays"
"""The ``description`` attribute of the manifest's group, beside the manifest."""
LEGACY_MANIFEST_KEY = f"{BOOKKEEPING}/manifest.json"  # format 1, streamacc 0.1
MANIFEST_ATTR = "streamacc_manifest"
RECORDS_ATTR = "streamacc_records"

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
    """What it takes to check one block: where it lies, its chunks' checksums, and the carry kept after it."""

    index: int
    start: int
    stop: int
    crc32c: dict[str, list[int]]
    """Per array, the CRC-32C of each stored chunk (as zarr's crc32c codec appends it); of a shard, each of its
    inner chunks' and then its index's (see ``store.ChunkWriter.split_record``)."""
    carry: list[int] | None = None
    """Format 3: the CRC-32C of each leaf's chunk of the carry kept after the block, or None where none is kept."""
    carry_in: list[dict[str, Any]] | None = None
    """Format 2: the carry entering the block, as JSON leaves (:func:`encode_leaves`)."""

    def to_json(self) -> dict[str, Any]:
        """The record as its format stores it: format 2's keys for a format 2 record, format 3's otherwise."""
        doc: dict[str, Any] = {"index": self.index, "start": self.start, "stop": self.stop}
        if self.carry_in is not None:
            doc["carry_in"] = self.carry_in
        doc["crc32c"] = self.crc32c
        if self.carry_in is None:
            doc["carry"] = self.carry
        return doc

    @classmethod
    def from_json(cls, doc: Any, v2: bool) -> BlockRecord:
        """A stored record of a format 2 (``v2``) or 3 output; TypeError, ValueError or KeyError when malformed."""
        keys = {"index", "start", "stop", "crc32c", "carry_in" if v2 else "carry"}
        if not isinstance(doc, dict) or set(doc) != keys:
            raise ValueError("not a block record")
        rec = cls(**doc)
        if v2:
            decode_leaves(rec.carry_in or [])
        elif rec.carry is not None and not (isinstance(rec.carry, list) and all(_is_int(c) for c in rec.carry)):
            raise ValueError("a malformed carry checksum")
        return rec


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


CARRY_KEYS = frozenset({"every", "leaves", "init"})
CARRY_CODEC = "codec"
"""The key of a manifest's ``carries`` that names the codec its carries are compressed with (the data's); absent
where they are not compressed (outputs written before they were)."""


@dataclasses.dataclass
class Manifest:
    """The committed state of one run."""

    identity: RunIdentity
    total_blocks: int
    arrays: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    committed_blocks: int = 0
    committed_steps: int = 0
    carry: list[dict[str, Any]] | None = None
    """Format 2: the carry after the committed blocks, as JSON leaves (:func:`encode_leaves`)."""
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
    carries: dict[str, Any] | None = None
    """Format 3: how the run keeps its carries: ``{"every": K, "leaves": [leaf, ...], "init": [crc, ...],
    "codec": name}``, a carry kept after every K-th block (and the last), each leaf as ``CarryLeaf.to_json``
    describes it, the CRC-32C of each leaf's chunk of the initial carry (boundary 0), and the codec their chunks
    are compressed with (absent: not compressed, as outputs written before they were)."""
    ended_at: int | None = None
    """The step where the run's condition (``until``) held, its last: recorded with the block that holds it, whose
    record ends after it; the run's blocks are then those up to that block (``total_blocks``). None (and absent
    from the stored manifest) for a run that has not ended on its condition."""
    format: str = FORMAT

    def to_json(self) -> bytes:
        # its fields hold JSON values alone, so a shallow dict serializes as ``asdict``'s deep copy would
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "format"}
        fields["identity"] = self.identity.to_json()
        for optional in ("stored", "nonfinite", "carries", "ended_at"):
            if fields[optional] is None:
                del fields[optional]  # recorded as before the field existed: older readers read it
        if self.format != FORMAT_2:
            del fields["carry"]
        doc = json.dumps({"format": self.format, **fields}, sort_keys=True)
        return text_node(MANIFEST_ATTR, doc, description=MANIFEST_DESCRIPTION)

    @property
    def v2(self) -> bool:
        """Whether the output keeps format 2's bookkeeping (streamacc 0.2 to 1.0: carries in the records)."""
        return self.format == FORMAT_2

    @property
    def carries_codec(self) -> str | None:
        """The codec the kept carries are compressed with (format 3), or None where they are not."""
        assert self.carries is not None
        codec: str | None = self.carries.get(CARRY_CODEC)
        return codec

    @property
    def carry_leaves(self) -> list[CarryLeaf]:
        """The leaves of the run's carry as they are stored (format 3)."""
        assert self.carries is not None
        return [CarryLeaf.from_json(doc) for doc in self.carries["leaves"]]

    def keeps_carry(self, boundary: int, every: int | None = None) -> bool:
        """Whether a writer keeps the carry after ``boundary`` blocks: every K-th (``every``, or as the manifest
        says), and the run's last (format 3)."""
        assert self.carries is not None
        return boundary % (every or self.carries["every"]) == 0 or boundary == self.total_blocks

    @property
    def virtual(self) -> bool:
        """Whether the run stores no data chunks: a reader recomputes them from the recorded carries."""
        return self.identity.virtual

    def stores(self, block: int) -> bool:
        """Whether committed block ``block`` (in scan order) has its data chunks stored."""
        if self.stored is None:
            return True
        return any(first <= block < stop for first, stop in self.stored)

    def stored_count(self) -> int:
        """How many committed blocks have their data stored (by arithmetic on the stored ranges)."""
        if self.stored is None:
            return self.committed_blocks
        return sum(max(0, min(stop, self.committed_blocks) - first) for first, stop in self.stored)

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
            form = doc.pop("format")
            if form not in (FORMAT, FORMAT_3, FORMAT_2) or ("carries" in doc) == (form == FORMAT_2) or "format" in doc:
                raise ValueError("unknown format")
            if form != FORMAT_2 and "carry" in doc:
                raise ValueError("a format 3 or 4 manifest holds no carry")
            manifest = cls(RunIdentity.from_json(doc.pop("identity")), **doc, format=form)
            if not _nonfinite_form(manifest.nonfinite):
                raise ValueError("a malformed record of the first non-finite step")
            if manifest.ended_at is not None and not _is_int(manifest.ended_at):
                raise ValueError("a malformed record of the step where the run ended")
            if manifest.carry is not None:
                decode_leaves(manifest.carry)
            if manifest.carries is not None:
                _check_carries(manifest.carries)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise VerifyError(
                f"the manifest of {label} is damaged or not a streamacc manifest; its data cannot be trusted: "
                f"rewrite it with {arg('mode', 'overwrite')}"
            ) from None
        return manifest

    @property
    def blocking(self) -> Blocking:
        """The run's blocks as its identity lays them out, up to the step where it ended on its condition, if it did."""
        blocking = self.identity.blocking
        return blocking if self.ended_at is None else blocking.ended(self.ended_at + 1)

    @property
    def carry_boundaries(self) -> int:
        """The boundaries its kept carries' arrays have room for: its blocks plus one (a run that ended on its
        condition cuts them to its own as it finishes; readers accept its length's, as 1.1.0 left them)."""
        return self.blocking.block_count + 1

    @property
    def length(self) -> int:
        """The run's steps: its length, or those up to the step where it ended on its condition."""
        return self.blocking.steps

    def span(self, blocks: int | None = None) -> tuple[int, int]:
        """The steps covered by the first ``blocks`` committed blocks (default: all committed)."""
        return self.blocking.span(self.committed_blocks if blocks is None else blocks)

    def rows(self, blocks: int | None = None) -> tuple[int, int]:
        """The output rows the first ``blocks`` committed blocks (default: all committed) fill."""
        return self.blocking.rows_of(self.committed_blocks if blocks is None else blocks)

    @property
    def committed_rows(self) -> int:
        """How many output rows the committed blocks fill (the committed steps, unless thinned)."""
        first, last = self.rows()
        return last - first

    def inconsistency(self) -> str | None:
        """Why this manifest contradicts itself, or None when its counts agree with its layout."""
        try:
            total = self.blocking.block_count
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
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
        if self.ended_at is not None and self.committed_blocks != total:
            return f"it says its run ended at step {self.ended_at} before the block holding it was committed"
        if self.v2 and self.carry is None:
            return "it holds no carry"
        if self.virtual != (self.stored is not None) or not _ranges_in(self.stored, self.committed_blocks):
            return "its record of the blocks whose data are stored does not fit its run"
        if not _step_in(self.nonfinite, start, stop, list(self.identity.to_json().get("arrays", {}))):
            return "its record of the first step holding a NaN or an infinity does not fit its run"
        return None


def _check_carries(carries: Any) -> None:
    """Raise ValueError, KeyError or TypeError unless ``carries`` has the form of a manifest's ``carries``."""
    if not isinstance(carries, dict) or set(carries) - {CARRY_CODEC} != CARRY_KEYS:
        raise ValueError("a malformed record of the carries")
    if CARRY_CODEC in carries and carries[CARRY_CODEC] not in CODEC_NAMES:
        raise ValueError("an unknown codec of the carries")
    every, leaves, init = carries["every"], carries["leaves"], carries["init"]
    if not (_is_int(every) and every >= 1 and isinstance(leaves, list) and isinstance(init, list)):
        raise ValueError("a malformed record of the carries")
    for leaf in leaves:
        CarryLeaf.from_json(leaf)
    if len(init) != len(leaves) or not all(_is_int(c) for c in init):
        raise ValueError("a malformed record of the initial carry")


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


LATER_FIELDS = ("input", "function_values", "xs_values")
"""Identity fields newer than some outputs: one that an output does not record is not compared."""


NOT_COMPARED = frozenset({"versions.streamacc", "unroll_chosen"})
"""Identity fields a continued run may change: the release of streamacc that wrote the output
(a later release continues any output of the manifest format it reads, ``FORMAT``; the bits
it writes are checked by recomputing the last committed block before anything is written),
and whether its unroll was chosen or given (the unroll itself is compared)."""


FUNCTIONS = ("function", "until")
"""The identity's fields that describe a function (the step, the condition), each with its values in
``FIELD_values``."""


_XS_KIND = re.compile(r"^\w+(\[[^\]]*\]:[^@]*)(@.*)?$")


def _by_values(stored: dict[str, Any], current: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Two identities as their inputs compare: by shape and dtype whatever kind of array held them and wherever it
    lived (streamacc 1.0 recorded ``ndarray[N]:<f4``, a Stream ``ArrayImpl[N]:<f4``, a Zarr input ``Array[N]:<f4@
    file://in.zarr``), and by their values where both record them (a stored input's fingerprint, ``input``, then
    says no more). Where the current run does not know its inputs' values yet (a Stream's, until its program
    starts), they are left to it to compare."""
    stored, current = dict(stored), dict(current)
    for ident in (stored, current):
        if isinstance(ident.get("xs"), list):
            ident["xs"] = [_XS_KIND.sub(r"array\1", x) if isinstance(x, str) else x for x in ident["xs"]]
    if "xs_values" in stored and "xs_values" in current:
        stored.pop("input", None)
        current.pop("input", None)
    elif "xs_values" not in current:
        stored.pop("xs_values", None)
    return stored, current


def identity_differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """Each field where two run identities differ, as 'field: stored X, now Y' (inputs by their values, see
    :func:`_by_values`)."""
    stored, current = _by_values(stored, current)
    current = {k: v for k, v in current.items() if k in stored or k not in LATER_FIELDS}
    a, b = _flatten(stored), _flatten(json.loads(json.dumps(current)))
    fields = sorted((a.keys() | b.keys()) - NOT_COMPARED)
    diffs = {k: f"{k}: stored {a.get(k)!r}, now {b.get(k)!r}" for k in fields if a.get(k) != b.get(k)}
    for function in FUNCTIONS:
        values = [k for k in diffs if k.startswith(f"{function}_values.")]
        for k in values:
            del diffs[k]
        changed = changed_values(stored, current, function) if values and function in diffs else None
        if changed is not None:
            diffs[function] = f"{function}: {changed}"
    return list(diffs.values())


def changed_values(stored: dict[str, Any], current: dict[str, Any], function: str = "function") -> str | None:
    """The values a step function (or the ``function`` field's other function: ``until``) uses that changed, named,
    where only they differ (its name and code the same)."""
    old, new = stored.get(f"{function}_values"), current.get(f"{function}_values")
    name, now = (str(ident.get(function)).partition(" values:")[0] for ident in (stored, current))
    if not (isinstance(old, dict) and isinstance(new, dict)) or name != now:
        return None
    changed = [label for label in sorted(old.keys() | new.keys()) if old.get(label) != new.get(label)]
    return f"{name.split()[0]}'s {', '.join(changed)} changed" if changed else None


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


def require_same_run(stored: Manifest, identity: RunIdentity, label: str) -> None:
    """Refuse to continue a run whose identity differs, naming every difference."""
    current = identity.to_json()
    if same_function(stored.identity.function, current["function"], label):
        current = {**current, "function": stored.identity.function}
    until = stored.identity.to_json().get("until")
    if isinstance(until, str) and "until" in current and _same_but_run_as_a_script(until, current["until"]):
        current = {**current, "until": until}
    diffs = identity_differences(stored.identity.to_json(), current)
    if diffs:
        raise ResumeError(
            f"cannot resume {label}: it was written by a different run ({'; '.join(diffs)}); "
            f"rerun with the original settings, or use {arg('mode', 'overwrite')} to start afresh"
        )
