"""The summaries' metadata and chunks read without Zarr, where they are exactly what streamacc writes.

``overview`` (and so ``streamacc plot``) reads a few small summary chunks; reading them through Zarr
(its arrays opened, its codec pipeline) costs more than everything else it does. A group or array
document is read here only when it has exactly the form :class:`~streamacc.summaries.SummaryArrays`
writes (the keys, the data types, the codecs and their settings, a regular grid whose chunks span
the trailing axes, the default chunk keys): every such document is one Zarr accepts and reads as
these functions do. Anything else (an edited attribute, another codec, a document Zarr may refuse)
returns None, and the caller asks Zarr, which reads or refuses it as before. A chunk is read only
once its CRC-32C trailer matches its bytes (Zarr's ``crc32c`` codec, last) and it decodes (the same
numcodecs decoders as Zarr's) to exactly one chunk of values; a chunk that does not raises, and the
caller reads it through Zarr, which says what is wrong with it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import numpy as np

from ..store import Target, stored_crc32c

__all__ = ["PlainArray", "plain_array", "plain_group"]

_DTYPES = {"bool", *(f"{k}{b}" for k in ("int", "uint") for b in (8, 16, 32, 64)), "float16", "float32", "float64"}
_ARRAY_KEYS = {
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
    "attributes",
    "dimension_names",
    "zarr_format",
    "node_type",
    "storage_transformers",
}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _is_int(value: Any, minimum: int) -> bool:
    return type(value) is int and value >= minimum


def _plain_attributes(attrs: Any) -> bool:
    """Attributes of the forms streamacc writes: text keys, text or whole-number values."""
    return isinstance(attrs, dict) and all(
        isinstance(k, str) and (isinstance(v, str) or type(v) is int) for k, v in attrs.items()
    )


@dataclasses.dataclass(frozen=True)
class PlainArray:
    """A summary array as its document describes it: enough to find, check and decode its chunks."""

    shape: tuple[int, ...]
    dtype: np.dtype
    chunk: int
    compressor: dict[str, Any] | None

    def key(self, path: str, index: int) -> str:
        """The store key of row chunk ``index`` of the array at ``path`` (the default chunk keys, ``/``)."""
        return f"{path}/c/{index}" + "/0" * (len(self.shape) - 1)

    def keys(self, path: str, start: int, stop: int) -> list[str]:
        """The keys of the chunks holding rows ``[start, stop)``."""
        return [self.key(path, i) for i in range(start // self.chunk, -(-stop // self.chunk))]

    def decode(self, raw: bytes) -> np.ndarray:
        """The values of one stored chunk; ValueError when its checksum or its encoding is wrong."""
        if stored_crc32c(raw) is None:
            raise ValueError("its CRC-32C does not match its bytes")
        body = raw[:-4]
        if self.compressor is None:
            data = body
        elif self.compressor["name"] == "blosc":
            from numcodecs.blosc import decompress

            data = decompress(body)
        else:
            from numcodecs.zstd import Zstd

            data = Zstd(level=0, checksum=False).decode(body)
        rows = (self.chunk, *self.shape[1:])
        if len(data) != int(np.prod(rows, dtype=np.int64)) * self.dtype.itemsize:
            raise ValueError("it does not decode to one chunk")
        return np.frombuffer(data, dtype=self.dtype).reshape(rows)

    def read(self, target: Target, path: str, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` of the array at ``path``; KeyError for a missing chunk, ValueError for a bad one."""
        out = np.empty((max(stop - start, 0), *self.shape[1:]), dtype=self.dtype)
        for i in range(start // self.chunk, -(-stop // self.chunk)) if start < stop else ():
            raw = target.read(self.key(path, i))
            if raw is None:
                raise KeyError(self.key(path, i))
            first = i * self.chunk
            low, high = max(start, first), min(stop, first + self.chunk)
            out[low - start : high - start] = self.decode(raw)[low - first : high - first]
        return out


def _compressor(codec: Any, itemsize: int) -> tuple[bool, dict[str, Any] | None]:
    """Whether ``codec`` is a compressor streamacc writes (the ``CODECS``), and it."""
    if codec == {"name": "zstd", "configuration": {"level": 0, "checksum": False}}:
        return True, codec
    if not isinstance(codec, dict) or codec.get("name") != "blosc" or set(codec) != {"name", "configuration"}:
        return False, None
    conf = codec["configuration"]
    plain = conf == {
        "typesize": itemsize,
        "cname": conf.get("cname") if conf.get("cname") in ("lz4", "zstd") else None,
        "clevel": 5,
        "shuffle": conf.get("shuffle") if conf.get("shuffle") in ("shuffle", "bitshuffle") else None,
        "blocksize": 0,
    }
    return plain and type(conf["typesize"]) is int, codec


def plain_array(doc: Any) -> PlainArray | None:
    """The summary array ``doc`` (a parsed ``zarr.json``) describes, when it is exactly of the form streamacc
    writes; None for any other document (Zarr decides about it)."""
    if not isinstance(doc, dict) or set(doc) != _ARRAY_KEYS:
        return None
    shape, dtype_name = doc["shape"], doc["data_type"]
    if doc["zarr_format"] != 3 or doc["node_type"] != "array" or doc["storage_transformers"] != []:
        return None
    if not (isinstance(shape, list) and shape and all(_is_int(n, 0) for n in shape)) or dtype_name not in _DTYPES:
        return None
    dtype = np.dtype(dtype_name).newbyteorder("<")
    ndim = len(shape)
    grid = doc["chunk_grid"]
    chunks = grid.get("configuration", {}).get("chunk_shape") if isinstance(grid, dict) else None
    if not (
        isinstance(grid, dict)
        and set(grid) == {"name", "configuration"}
        and grid["name"] == "regular"
        and grid["configuration"] == {"chunk_shape": chunks}
        and isinstance(chunks, list)
        and len(chunks) == ndim
        and all(_is_int(c, 1) for c in chunks)
        and chunks[1:] == shape[1:]  # one chunk spans the trailing axes
    ):
        return None
    if doc["chunk_key_encoding"] != {"name": "default", "configuration": {"separator": "/"}}:
        return None
    kind = dtype.kind
    fill = doc["fill_value"]
    if not ((kind == "f" and fill == "NaN") or (kind in "iu" and type(fill) is int and fill == 0) or (
        kind == "b" and fill is False
    )):  # fmt: skip
        return None
    names = doc["dimension_names"]
    if not (isinstance(names, list) and len(names) == ndim and all(n is None or isinstance(n, str) for n in names)):
        return None
    if not _plain_attributes(doc["attributes"]):
        return None
    codecs = doc["codecs"]
    if not isinstance(codecs, list) or len(codecs) not in (2, 3) or codecs[-1] != {"name": "crc32c"}:
        return None
    little = {"name": "bytes", "configuration": {"endian": "little"}}
    if codecs[0] != little and not (dtype.itemsize == 1 and codecs[0] == {"name": "bytes"}):
        return None
    compressor = None
    if len(codecs) == 3:
        known, compressor = _compressor(codecs[1], dtype.itemsize)
        if not known:
            return None
    return PlainArray(tuple(shape), dtype, chunks[0], compressor)


def plain_group(doc: Any) -> bool:
    """Whether ``doc`` (a parsed ``zarr.json``) is a group document exactly of the form streamacc writes for its
    summaries (its consolidated metadata, if any, listing arrays :func:`plain_array` reads); False for any other
    (Zarr decides about it)."""
    required = {"zarr_format", "node_type", "attributes"}
    if not isinstance(doc, dict) or not required <= set(doc) <= {*required, "consolidated_metadata"}:
        return False
    if doc["zarr_format"] != 3 or doc["node_type"] != "group" or not _plain_attributes(doc["attributes"]):
        return False
    if "consolidated_metadata" not in doc:
        return True
    consolidated = doc["consolidated_metadata"]
    if not isinstance(consolidated, dict) or set(consolidated) != {"kind", "must_understand", "metadata"}:
        return False
    members = consolidated["metadata"]
    return (
        consolidated["kind"] == "inline"
        and consolidated["must_understand"] is False
        and isinstance(members, dict)
        and all(isinstance(k, str) and _NAME.match(k) and plain_array(v) for k, v in members.items())
    )
