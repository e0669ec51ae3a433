"""Named compressor settings for the output arrays.

Names are what the CLI and ``write(codec=...)`` accept; each maps to a zarr v3
compressor list. The default was chosen by benchmark (see benchmarks/RESULTS.md):
zarr's own default, zstd level 0, encodes several times slower than this disk writes.
"""

from __future__ import annotations

from collections.abc import Callable

from zarr.codecs import BloscCodec, ZstdCodec

from ._defaults import DEFAULT_CODEC
from ._errors import InputError

__all__ = ["CODECS", "DEFAULT_CODEC", "compressors_for"]


def _blosc(cname: str, shuffle: str) -> Callable[[], list]:
    return lambda: [BloscCodec(cname=cname, clevel=5, shuffle=shuffle)]


CODECS: dict[str, Callable[[], list]] = {
    "none": list,
    "zstd": lambda: [ZstdCodec(level=0)],
    "blosc-lz4": _blosc("lz4", "shuffle"),
    "blosc-lz4-bitshuffle": _blosc("lz4", "bitshuffle"),
    "blosc-zstd": _blosc("zstd", "shuffle"),
    "blosc-zstd-bitshuffle": _blosc("zstd", "bitshuffle"),
}
"""Codec name -> factory of the zarr ``compressors`` list."""


def compressors_for(name: str) -> list:
    """The zarr compressors for codec ``name``, or an error listing the valid names."""
    try:
        return CODECS[name]()
    except (KeyError, TypeError):
        raise InputError(f"unknown codec {name!r}; choose one of: {', '.join(CODECS)}") from None
