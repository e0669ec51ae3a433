"""The named codecs: what the command line and ``write(codec=...)`` accept, each a zarr v3 compressor list.

The default is chosen by benchmark (the Benchmarks pages' codecs). A codec's compressors are made
when an array is created, and a chunk streamacc wrote is decompressed here as zarr's codec would,
through numcodecs: importing this module imports no Zarr, so that a reader of the carries or the
summaries needs none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from ..base import CODEC_NAMES
from ..errors import InputError

if TYPE_CHECKING:
    from zarr.abc.codec import BytesBytesCodec

__all__ = ["CODECS", "compressors_for", "decompress"]


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


CODECS: dict[str, Callable[[], list[BytesBytesCodec]]] = dict(
    zip(
        CODEC_NAMES,
        [list, _zstd, _blosc("lz4", "shuffle"), _blosc("lz4", "bitshuffle"), _blosc("zstd", "shuffle"),
         _blosc("zstd", "bitshuffle")],
        strict=True,
    )
)  # fmt: skip
"""Codec name (``base.CODEC_NAMES``) -> factory of the zarr ``compressors`` list."""


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
