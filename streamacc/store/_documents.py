"""Zarr v3 metadata documents as streamacc records, checks and rewrites them, and the root's progress
attributes: plain JSON and numpy, no Zarr, so that readers check an output before (or without) importing
Zarr."""

from __future__ import annotations

import json
import numbers
from collections.abc import Mapping
from typing import Any

import google_crc32c
import numpy as np

__all__ = [
    "DECODING_ATTRIBUTES",
    "PROGRESS_ATTRS",
    "VIRTUAL",
    "VIRTUAL_ABOUT",
    "ArraySpec",
    "array_document",
    "as_recorded",
    "decoding_attributes",
    "document_bytes",
    "is_virtual",
    "netcdf_safe",
    "plain_document",
    "progress_attrs",
    "stored_crc32c",
    "virtual_document",
]

ArraySpec = tuple[tuple[int, ...], np.dtype]
"""(shape, dtype) of one output array."""

_INT64 = 2**63


def stored_crc32c(raw: bytes) -> int | None:
    """The CRC-32C a stored chunk carries (zarr's ``crc32c`` codec, last), or None when it does not match its bytes."""
    if len(raw) < 4:
        return None
    body = np.frombuffer(raw, dtype=np.uint8, count=len(raw) - 4)
    value = int.from_bytes(raw[-4:], "little")
    return value if int(google_crc32c.value(body)) == value else None


def _safe_value(value: Any) -> Any:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, numbers.Integral):
        value = int(value)
        return value if -_INT64 <= value < _INT64 else str(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)) and value:
        items = [_safe_value(v) for v in value]
        if all(isinstance(v, str) for v in items) or all(isinstance(v, (int, float)) for v in items):
            return items
    return json.dumps(value, sort_keys=True)


def netcdf_safe(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``attrs`` as strings, numbers and flat lists, so that any reader and netCDF export accept them.

    Booleans become 0/1, integers stay exact (beyond 64 bits they become text), and
    anything nested (dicts, mixed lists, None) its JSON text. A netCDF-4 file holds every
    such value; a netCDF-3 file holds no integer beyond 32 bits.
    """
    return {str(k): _safe_value(v) for k, v in attrs.items()}


def progress_attrs(
    committed: tuple[int, int], length: int, complete: bool, *, virtual: bool = False
) -> dict[str, Any]:
    """The root attributes that say how much of the output a reader can trust.

    A virtual output (its data recomputed on reading, not all stored) says so, and how to
    read it: its arrays refuse plain Zarr readers (see :data:`VIRTUAL`).
    """
    start, stop = committed
    done = stop - start
    if complete:
        status = f"complete: all {length} steps committed"
    else:
        status = (
            f"incomplete: steps {start} to {stop} of {length} are committed and any other value may be partial; "
            "read the committed steps with streamacc.open(path)"
        )
    if virtual:
        status = (
            f"virtual, {status.partition(';')[0]}: the data are not all stored but recomputed from the recorded "
            "carries when read; read them with streamacc.open(path), or store them with `streamacc materialize`"
        )
    return {
        "streamacc_complete": int(complete),
        "streamacc_committed_steps": int(done),
        "streamacc_committed_start": int(start),
        "streamacc_total_steps": int(length),
        "streamacc_status": status,
        **({"streamacc_virtual": 1} if virtual else {}),
    }


PROGRESS_ATTRS = (
    "streamacc_complete",
    "streamacc_committed_steps",
    "streamacc_committed_start",
    "streamacc_total_steps",
    "streamacc_status",
    "streamacc_virtual",
)
"""The root attributes :func:`progress_attrs` writes."""


DECODING_ATTRIBUTES = ("scale_factor", "add_offset", "_FillValue", "missing_value", "_Unsigned", "dtype", "calendar")
"""Attributes with which xarray's decoding changes the values it returns (``units`` too, naming a time)."""


def decoding_attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes of an array that change what a decoding reader (xarray) returns for its values."""
    kept = {k: attrs[k] for k in DECODING_ATTRIBUTES if k in attrs}
    units = attrs.get("units")
    if isinstance(units, str) and " since " in units:
        kept["units"] = units
    return kept


VIRTUAL = "streamacc_virtual"
"""The codec that the arrays of a virtual output declare, last, while some of their chunks are not
stored. No reader knows it, and Zarr v3 requires a reader to refuse an array with a codec it does
not know: a reader that knows nothing of streamacc gets an error (zarr: "Unknown codec:
'streamacc_virtual'"), never the fill value presented as data. streamacc reads such an array
without it (see ``run.recompute``); the root's status attribute says how to read the output.
(A storage transformer would say the same, but zarr-python ignores those when it opens a group.)"""

VIRTUAL_ABOUT = (
    "the chunks of this array are not all stored: streamacc recomputes the others from the carries it recorded; "
    "read it with streamacc.open(path), or store them with `streamacc materialize`"
)


def virtual_document(doc: dict[str, Any]) -> dict[str, Any]:
    """Array metadata ``doc`` declaring :data:`VIRTUAL`: plain Zarr readers refuse the array."""
    codecs = [c for c in doc.get("codecs") or [] if not (isinstance(c, dict) and c.get("name") == VIRTUAL)]
    return {**doc, "codecs": [*codecs, {"name": VIRTUAL, "configuration": {"about": VIRTUAL_ABOUT}}]}


def plain_document(doc: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Array metadata ``doc`` without :data:`VIRTUAL`, and whether it declared it."""
    codecs = doc.get("codecs")
    if not isinstance(codecs, list):
        return doc, False
    others = [c for c in codecs if not (isinstance(c, dict) and c.get("name") == VIRTUAL)]
    return {**doc, "codecs": others}, len(others) != len(codecs)


def document_bytes(doc: dict[str, Any]) -> bytes:
    """Array metadata as zarr writes it (so that a document streamacc rewrites is the bytes zarr would write)."""
    return json.dumps(doc, indent=2).encode()


def is_virtual(raw: bytes | None) -> bool:
    """Whether a stored array ``zarr.json`` declares :data:`VIRTUAL`."""
    try:
        doc = json.loads(raw) if raw is not None else None
    except ValueError:
        return False
    return isinstance(doc, dict) and plain_document(doc)[1]


def array_document(raw: bytes | None) -> dict[str, Any] | None:
    """A stored array ``zarr.json`` as a run records and checks it, or None when absent or unreadable.

    Everything but the attributes, which users may edit, except those that change the
    values a decoding reader returns (``scale_factor`` and the like): a reader must see the
    values a run wrote.
    """
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return as_recorded(doc) if isinstance(doc, dict) else None


def as_recorded(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as recorded: a virtual array's declaration is not part of what it is (see :data:`VIRTUAL`)."""
    doc = plain_document(doc)[0]
    kept = {k: v for k, v in doc.items() if k != "attributes"}
    attrs = doc.get("attributes")
    decoding = decoding_attributes(attrs) if isinstance(attrs, dict) else {}
    return {**kept, "attributes": decoding} if decoding else kept
