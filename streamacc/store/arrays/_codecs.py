"""Named compressor settings for the output arrays.

Names are what the CLI and ``write(codec=...)`` accept; each maps to a zarr v3
compressor list. The default was chosen by benchmark (see benchmarks/RESULTS.md):
zarr's own default, zstd level 0, encodes several times slower than this disk writes.
zarr is imported only when a compressor list is made, so that the command line can list
the names without paying for zarr's import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from ...base import DEFAULT_CODEC
from ...errors import InputError

if TYPE_CHECKING:
    from zarr.abc.codec import BytesBytesCodec

__all__ = ["CODECS", "DEFAULT_CODEC", "MAX_CHUNK_BYTES", "compressors_for", "decompress"]

MAX_CHUNK_BYTES = 2**31 - 1 - 16
"""The largest chunk (uncompressed) c-blosc compresses (its BLOSC_MAX_BUFFERSIZE: INT_MAX
less its 16-byte header); larger chunks fail with "blosc compression failed". No chunk
may be larger, whatever the codec, so that changing the codec never breaks a layout."""


def _blosc(
    cname: Literal["lz4", "zstd"], shuffle: Literal["shuffle", "bitshuffle"]
) -> Callable[[], list[BytesBytesCodec]]:
    def make() -> list[BytesBytesCodec]:
        from zarr.codecs import BloscCodec

        return [BloscCodec(cname=cname, clevel=5, shuffle=shuffle)]

    return make


def _zstd() -> list[BytesBytesCodec]:
    from zarr.codecs import ZstdCodec

    return [ZstdCodec(level=0)]


CODECS: dict[str, Callable[[], list[BytesBytesCodec]]] = {
    "none": list,
    "zstd": _zstd,
    "blosc-lz4": _blosc("lz4", "shuffle"),
    "blosc-lz4-bitshuffle": _blosc("lz4", "bitshuffle"),
    "blosc-zstd": _blosc("zstd", "shuffle"),
    "blosc-zstd-bitshuffle": _blosc("zstd", "bitshuffle"),
}
"""Codec name -> factory of the zarr ``compressors`` list."""


def decompress(name: str | None, data: bytes) -> bytes:
    """``data`` compressed by codec ``name`` (None: no compressor), decompressed as zarr's codec would.

    Raises what the codec raises of bytes it cannot decode.
    """
    if name is None or name == "none":
        return bytes(data)
    if name == "zstd":
        from numcodecs import zstd

        return bytes(zstd.decompress(data))
    from numcodecs import blosc

    return bytes(blosc.decompress(data))


def compressors_for(name: str) -> list[BytesBytesCodec]:
    """The zarr compressors for codec ``name``, or an error listing the valid names."""
    try:
        return CODECS[name]()
    except (KeyError, TypeError):
        raise InputError(f"unknown codec {name!r}; choose one of: {', '.join(CODECS)}") from None
