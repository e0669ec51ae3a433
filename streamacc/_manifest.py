"""The manifest: the durable record that makes a run resumable and verifiable.

It holds the run's identity, how many blocks (in scan order) are committed, and the
carry after them. Per-block records (the carry entering each block and a CRC-32 of
each output array's bytes) live in segment files of ``SEGMENT`` blocks, so a commit
rewrites a bounded amount whatever the length. Each block's record is written before
the manifest that counts it, so the manifest never claims a block it cannot describe.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

import numpy as np

from ._carry import HostLeaf
from ._errors import ResumeError, VerifyError
from ._target import BOOKKEEPING, Target

__all__ = ["FORMAT", "SEGMENT", "BlockRecord", "Ledger", "Manifest", "identity_differences"]

FORMAT = "streamacc-manifest/1"
SEGMENT = 64
MANIFEST_KEY = f"{BOOKKEEPING}/manifest.json"


def encode_leaves(leaves: list[HostLeaf]) -> list[dict]:
    """JSON form of host carry leaves: dtype, shape, exact bytes, PRNG key implementation."""
    return [
        {"dtype": a.dtype.str, "shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode(), "key": impl}
        for a, impl in leaves
    ]


def decode_leaves(records: list[dict]) -> list[HostLeaf]:
    """Inverse of :func:`encode_leaves`."""
    out = []
    for r in records:
        raw = base64.b64decode(r["data"])
        out.append((np.frombuffer(raw, dtype=np.dtype(r["dtype"])).reshape(r["shape"]).copy(), r["key"]))
    return out


@dataclasses.dataclass(frozen=True)
class BlockRecord:
    """What it takes to recompute and check one block alone."""

    index: int
    start: int
    stop: int
    carry_in: list[dict]
    crc32: dict[str, int]


@dataclasses.dataclass
class Manifest:
    """The committed state of one run."""

    identity: dict[str, Any]
    total_blocks: int
    committed_blocks: int = 0
    committed_steps: int = 0
    carry: list[dict] | None = None
    complete: bool = False

    def to_json(self) -> bytes:
        return json.dumps({"format": FORMAT, **dataclasses.asdict(self)}, indent=1, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, label: str) -> Manifest:
        try:
            doc = json.loads(raw)
            if doc.pop("format") != FORMAT:
                raise ValueError("unknown format")
            return cls(**doc)
        except (ValueError, KeyError, TypeError, AttributeError):
            raise VerifyError(
                f"the manifest of {label} is damaged or not a streamacc manifest; "
                "its data cannot be trusted: rewrite it with --overwrite"
            ) from None


def _flatten(doc: dict, prefix: str = "") -> dict[str, Any]:
    flat = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def identity_differences(stored: dict, current: dict) -> list[str]:
    """Each field where two run identities differ, as 'field: stored X, now Y'."""
    a, b = _flatten(stored), _flatten(json.loads(json.dumps(current)))
    return [f"{k}: stored {a.get(k)!r}, now {b.get(k)!r}" for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


class Ledger:
    """Reads and writes a target's manifest and block records."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self._segment: tuple[int, list[dict]] | None = None

    def load(self) -> Manifest | None:
        raw = self.target.read(MANIFEST_KEY)
        return None if raw is None else Manifest.from_json(raw, self.target.label)

    def save(self, manifest: Manifest) -> None:
        self.target.write(MANIFEST_KEY, manifest.to_json())

    @staticmethod
    def _segment_key(seg: int) -> str:
        return f"{BOOKKEEPING}/blocks/{seg:06d}.json"

    def _read_segment(self, seg: int) -> list[dict]:
        if self._segment is not None and self._segment[0] == seg:
            return self._segment[1]
        raw = self.target.read(self._segment_key(seg))
        try:
            records = [] if raw is None else json.loads(raw)["blocks"]
        except (ValueError, KeyError, TypeError):
            raise VerifyError(f"block records of {self.target.label} are damaged (segment {seg})") from None
        self._segment = (seg, records)
        return records

    def record(self, rec: BlockRecord) -> None:
        """Durably store block ``rec.index``'s record (blocks are recorded in scan order)."""
        seg, pos = divmod(rec.index, SEGMENT)
        records = self._read_segment(seg)
        if len(records) < pos:
            raise VerifyError(
                f"block records of {self.target.label} end at block {seg * SEGMENT + len(records)}, "
                f"before block {rec.index}; they are damaged: rewrite the output with --overwrite"
            )
        records = records[:pos]  # drop records an interrupted run wrote past its commit
        records.append(dataclasses.asdict(rec))
        self._segment = (seg, records)
        self.target.write(self._segment_key(seg), json.dumps({"blocks": records}).encode())

    def block(self, index: int) -> BlockRecord:
        """The record of committed block ``index`` (in scan order)."""
        seg, pos = divmod(index, SEGMENT)
        records = self._read_segment(seg)
        if pos >= len(records) or records[pos].get("index") != index:
            raise VerifyError(f"the record of block {index} is missing from {self.target.label}")
        return BlockRecord(**records[pos])


def require_same_run(stored: Manifest, identity: dict, label: str) -> None:
    """Refuse to continue a run whose identity differs, naming every difference."""
    diffs = identity_differences(stored.identity, identity)
    if diffs:
        raise ResumeError(
            f"cannot resume {label}: it was written by a different run ({'; '.join(diffs)}); "
            "rerun with the original settings, or use --overwrite to start afresh"
        )
