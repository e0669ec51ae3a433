"""A fingerprint of a stored Zarr array's contents, cheap enough to take at every run's start.

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
import os
import re
from pathlib import Path
from typing import Any

import google_crc32c
import zarr
from zarr.abc.store import SuffixByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.codecs import Crc32cCodec
from zarr.storage import FsspecStore, LocalStore

from ._zarrapi import sync

__all__ = ["array_fingerprint", "fingerprint_of"]


def _stored_chunks(array: zarr.Array[Any]) -> dict[str, tuple[int, Any]]:
    """Each stored chunk's key (relative to the array) -> (size, version stamp or None)."""
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
    if isinstance(leaf, zarr.Array):
        return array_fingerprint(leaf)
    array = getattr(leaf, "array", None)
    return array_fingerprint(array, len(leaf)) if isinstance(array, zarr.Array) else None


def array_fingerprint(array: zarr.Array[Any], rows: int | None = None) -> str:
    """A short text that changes when the array's metadata or stored contents change.

    With ``rows``, only the chunks holding the first ``rows`` rows count (a run reading a
    prefix is not disturbed by later rows).
    """
    meta = array.metadata.to_dict()
    meta.pop("attributes", None)
    chunks = _stored_chunks(array)
    if rows is not None and array.ndim >= 1:
        last = -(-rows // array.chunks[0])
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
