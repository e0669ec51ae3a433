"""Zarr v3 metadata documents as streamacc records, checks and rewrites them, the root's progress attributes, and
an input array's fingerprint.

The documents are plain JSON and numpy, so that readers check an output's documents before Zarr reads them
(and a reader that needs no Zarr imports none: only the fingerprint imports it, where it is taken). A stored
Zarr array's fingerprint is cheap enough to take at every run's start.

A run that reads an input array (``cumsum``/``cumprod --input``) must resume only on the
same input: rows edited since the run started would join committed blocks computed from
the old rows. Hashing every byte would read the whole input once more per run, so the
fingerprint uses what the store already knows about each chunk: its key and size, and a
tag that changes with its content, the CRC-32C trailer where the array's codecs end with
``crc32c`` (a checksum of the chunk), else the store's own version stamp (the ETag on S3,
which is the content's MD5 for a plain PUT; the modification time on a local disk, which
every rewrite changes). A copy of a local input without its modification times (``cp``
rather than ``cp -p``) therefore counts as changed, which errs on the safe side.
"""

from __future__ import annotations

import hashlib
import json
import numbers
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import google_crc32c
import numpy as np

from ._target import default_buffer_prototype, sync

if TYPE_CHECKING:
    import zarr

__all__ = [
    "DECODING_ATTRIBUTES",
    "PROGRESS_ATTRS",
    "VIRTUAL",
    "VIRTUAL_ABOUT",
    "ArraySpec",
    "array_document",
    "array_fingerprint",
    "as_recorded",
    "decoding_attributes",
    "document_bytes",
    "fingerprint_of",
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
    """Array metadata ``doc`` without :data:`VIRTUAL`, and whether it declared it; TypeError where ``doc`` is not a
    JSON object (a document edited into a list or a number)."""
    if not isinstance(doc, dict):
        raise TypeError(f"its metadata is a JSON {type(doc).__name__}, not an object")
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


def _stored_chunks(array: zarr.Array[Any]) -> dict[str, tuple[int, Any]]:
    """Each stored chunk's key (relative to the array) -> (size, version stamp or None)."""
    from zarr.storage import FsspecStore, LocalStore

    store, path = array.store_path.store, array.store_path.path
    found: dict[str, tuple[int, Any]] = {}
    if isinstance(store, LocalStore):
        base = Path(store.root, path)
        for dirpath, _, names in os.walk(base):
            for name in names:
                stat = Path(dirpath, name).stat()
                found[Path(dirpath, name).relative_to(base).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    elif isinstance(store, FsspecStore):
        root = f"{store.path.rstrip('/')}/{path}".rstrip("/")
        for full, info in sync(store.fs._find(root, detail=True)).items():
            stamp = info.get("ETag") or info.get("mtime") or info.get("LastModified")
            found[full[len(root) :].lstrip("/")] = (int(info.get("size") or 0), str(stamp) if stamp else None)
    else:  # a store in memory: hash the bytes themselves
        prefix = f"{path}/" if path else ""

        async def collect() -> list[str]:
            return [key async for key in store.list_prefix(prefix)]

        for key in sync(collect()):
            data = sync(store.get(key, default_buffer_prototype()))
            raw = b"" if data is None else data.to_bytes()
            found[key[len(prefix) :]] = (len(raw), f"{google_crc32c.value(raw):08x}")
    return {key: value for key, value in found.items() if key.split("/")[-1] != "zarr.json"}


def _first_index(key: str) -> int | None:
    """The chunk's index along the first axis from its key ('c/5/0', 'c.5', '5.0'), None for other files."""
    match = re.match(r"^(?:c[/.])?(\d+)", key)
    return int(match[1]) if match else None


def fingerprint_of(leaf: Any) -> str | None:
    """:func:`array_fingerprint` of a Zarr array, or of one behind a view of its first rows (``leaf.array``,
    ``len(leaf)`` rows); None for anything else (a numpy array has no stored contents to fingerprint)."""
    zarr = sys.modules.get("zarr")  # not imported: no leaf is a Zarr array
    if zarr is None:
        return None
    if isinstance(leaf, zarr.Array):
        return array_fingerprint(leaf)
    array = getattr(leaf, "array", None)
    return array_fingerprint(array, len(leaf)) if isinstance(array, zarr.Array) else None


def array_fingerprint(array: zarr.Array[Any], rows: int | None = None) -> str:
    """A short text that changes when the array's metadata or stored contents change.

    With ``rows``, only the chunks holding the first ``rows`` rows count (a run reading a
    prefix is not disturbed by later rows).
    """
    from zarr.abc.store import SuffixByteRequest
    from zarr.codecs import Crc32cCodec

    meta = array.metadata.to_dict()
    meta.pop("attributes", None)
    chunks = _stored_chunks(array)
    if rows is not None and array.ndim >= 1:
        last = -(-rows // (array.shards or array.chunks)[0])  # keys name shards where the array is sharded
        chunks = {key: v for key, v in chunks.items() if (index := _first_index(key)) is None or index < last}
    keys = sorted(chunks)
    if array.metadata.zarr_format == 3 and isinstance(list(array.metadata.codecs)[-1], Crc32cCodec):
        store, path = array.store_path.store, array.store_path.path
        requests = [(f"{path}/{key}" if path else key, SuffixByteRequest(4)) for key in keys]
        tails = sync(store.get_partial_values(default_buffer_prototype(), requests)) if requests else []
        tags: list[Any] = [None if t is None else t.to_bytes().hex() for t in tails]
    else:
        tags = [chunks[key][1] for key in keys]
    digest = hashlib.sha256(json.dumps([meta, [[k, chunks[k][0], t] for k, t in zip(keys, tags, strict=True)]],
                                       sort_keys=True, default=str).encode())  # fmt: skip
    return f"{len(keys)} chunks, sha256 {digest.hexdigest()[:16]}"
