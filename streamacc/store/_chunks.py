"""Whole chunks of a Zarr v3 array encoded into reused buffers and stored.

zarr-python encodes each chunk into fresh memory: numcodecs' Blosc allocates a
destination as large as the raw chunk (32 MiB at the default block), which glibc maps
afresh and the kernel zero-fills page by page, and zarr's ``crc32c`` codec copies the
compressed bytes once more to append four. Here chunks are compressed into a few reused
buffers, one per block being encoded at that moment (see :class:`EncodeBuffers`), so
steady state allocates nothing, and the bytes go to the store in one ``set`` per chunk.
A local folder's chunk files are written here instead, as zarr's LocalStore writes them
(a temp file renamed over the chunk), their whole pages past the page cache
(``_files.write_new``): copying gigabytes of output into a cache nobody reads it back
from costs the kernel CPU that a long write would otherwise spend computing.

The direct path covers the layouts streamacc writes: a regular chunk grid (along the
first axis, and along the trailing axes where one step is large), the ``bytes`` codec in
native byte order, optionally ``blosc``, optionally ``crc32c`` last; or a shard of such
chunks (``sharding_indexed``, its inner chunks ending with ``crc32c``: see ``_shards``),
each shard written at once, its inner chunks compressed one after another into its buffer
and its index after them. It calls the same c-blosc function with the same arguments as
numcodecs, so the stored bytes are those zarr would write. Anything else falls back to
zarr's own write (``array[start:stop] = data``), which is correct but allocates.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import itertools
import struct
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import google_crc32c
import numcodecs.blosc
import numpy as np
import zarr
from zarr.buffer import cpu, default_buffer_prototype
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec
from zarr.storage import FsspecStore, LocalStore

from ._fence import unwrap
from ._files import PAGE, aligned_empty, scratch, write_new
from ._shards import Sharding, sharding_of
from ._zarrapi import RegularChunkGrid, sync

__all__ = ["ChunkWriter", "EncodeBuffers", "EncodedChunk"]


_SHUFFLE = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}
_CRC = struct.Struct("<I")  # zarr's crc32c codec appends the checksum as little-endian uint32


def _load_blosc() -> Any:
    """c-blosc's ``blosc_compress_ctx`` from the library numcodecs bundles, or None.

    ctypes releases the GIL around the call, as numcodecs does.
    """
    try:
        fn = ctypes.CDLL(numcodecs.blosc.__file__).blosc_compress_ctx
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p,
                   ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]  # fmt: skip
    fn.restype = ctypes.c_int
    return fn


_BLOSC_COMPRESS = _load_blosc()
_BLOSC_OVERHEAD = 16  # BLOSC_MAX_OVERHEAD: a destination of nbytes + 16 always fits


class EncodeBuffers:
    """The page-aligned buffers that chunks are compressed into, shared by the threads that encode.

    A buffer is taken for one block's chunks and given back once they are stored; the one
    given back last is taken first, and a new one is made only while every other is taken.
    A compressed chunk touches as many of its buffer's pages as it has bytes, and those pages
    stay resident while the buffer lives, so buffers are made only for encodings that
    overlap: one per writer thread would keep a chunk's worth of an output that hardly
    compresses (a running sum's) resident per thread, although blocks' encodings rarely
    overlap.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[np.ndarray] = []

    @contextlib.contextmanager
    def lease(self, nbytes: int) -> Iterator[np.ndarray]:
        """A buffer of at least ``nbytes`` starting on a page boundary, this thread's until the block ends."""
        with self._lock:
            fits = [i for i, b in enumerate(self._free) if b.nbytes >= nbytes]
            buffer = self._free.pop(fits[-1]) if fits else None
            if buffer is None and self._free:
                self._free.pop()  # too small: replaced by a larger one, so no more buffers live than overlap
        if buffer is None:
            buffer = aligned_empty(nbytes, PAGE)
        try:
            yield buffer
        finally:
            with self._lock:
                self._free.append(buffer)


_EncodeBuffers = EncodeBuffers  # its name before the store re-exported it, for code that imports that

_ENCODE_BUFFERS = EncodeBuffers()


@dataclasses.dataclass(frozen=True)
class _Blosc:
    cname: bytes
    clevel: int
    shuffle: int
    typesize: int
    blocksize: int

    def compress(self, src: np.ndarray, dest: np.ndarray) -> int:
        """Compress the bytes of ``src`` into ``dest``; the number of bytes written."""
        size: int = _BLOSC_COMPRESS(self.clevel, self.shuffle, self.typesize, src.nbytes, src.ctypes.data,
                                     dest.ctypes.data, dest.nbytes, self.cname, self.blocksize, 1)  # fmt: skip
        if size <= 0:
            raise RuntimeError(f"blosc compression failed ({size})")
        return size


class _OwnBytes(cpu.Buffer):
    """A chunk's stored bytes copied once out of the reused encode buffer, into a ``bytes`` of its own.

    For stores that may keep the buffer they are given (memory) or copy it into ``bytes``
    themselves (Icechunk's store passes ``to_bytes()`` on): ``to_bytes`` returns that same
    object, so the bytes are copied once whatever the store does with them.
    """

    def __init__(self, data: bytes) -> None:
        super().__init__(np.frombuffer(data, dtype=np.uint8))
        self._bytes = data

    def to_bytes(self) -> bytes:
        return self._bytes


@dataclasses.dataclass(frozen=True)
class EncodedChunk:
    """One chunk as stored: its key, its size in bytes, its CRC-32C trailer and the CRC-32Cs its record keeps.

    ``crc32c`` is None without the crc32c codec; both are unknown (-1, None) when zarr
    encoded the chunk itself. ``checksums`` are what a block record keeps of it: its
    trailer, or a shard's inner chunks' and its index's (see ``Sharding.checksums``); empty
    where unknown.
    """

    key: str
    nbytes: int
    crc32c: int | None
    checksums: tuple[int, ...] = ()


def _chunk_codecs(codecs: list[Any]) -> tuple[_Blosc | None, bool] | None:
    """(blosc settings or None, whether crc32c is appended) of a chunk's codecs, when the direct path encodes them."""
    codecs = list(codecs)
    first = codecs.pop(0) if codecs else None
    if not isinstance(first, BytesCodec) or (first.endian is not None and first.endian.value != sys.byteorder):
        return None
    crc = bool(codecs) and isinstance(codecs[-1], Crc32cCodec)
    if crc:
        codecs.pop()
    blosc = None
    if codecs:
        codec = codecs.pop(0)
        if codecs or not isinstance(codec, BloscCodec) or _BLOSC_COMPRESS is None:
            return None
        blosc = _Blosc(codec.cname.value.encode(), codec.clevel, _SHUFFLE[codec.shuffle.value], codec.typesize,
                       codec.blocksize)  # fmt: skip
    return blosc, crc


def _direct_layout(array: zarr.Array[Any]) -> tuple[_Blosc | None, bool] | None:
    """(blosc settings or None, whether crc32c is appended) of each chunk (each inner chunk of a sharded array,
    which must end with its CRC-32C) when the direct path applies."""
    meta = array.metadata
    if meta.zarr_format != 3 or not isinstance(meta.chunk_grid, RegularChunkGrid) or array.ndim < 1:
        return None
    if np.dtype(array.dtype).hasobject:
        return None
    sharded = sharding_of(meta)
    layout = _chunk_codecs(sharded[1] if sharded is not None else list(meta.codecs))
    if layout is None or (sharded is not None and not layout[1]):
        return None
    return layout


class ChunkWriter:
    """Writes row ranges of one Zarr v3 array as whole encoded chunks (each a shard of inner chunks, where the
    array is sharded: see ``_shards``).

    Rows are split into chunks along the first axis, and each row chunk into the tiles of
    the trailing axes' chunk grid (one tile when the trailing axes are not split; a shard
    always spans them). Thread-safe: a block's chunks are encoded into a buffer that no other
    thread uses meanwhile (as large as one raw chunk plus a few bytes), reused from block to
    block.
    """

    def __init__(self, array: zarr.Array[Any]) -> None:
        self.array = array
        grid = array.metadata.chunk_grid
        if not isinstance(grid, RegularChunkGrid):  # the only grid zarr 3.1 has
            raise TypeError(f"array {array.path!r} has a {type(grid).__name__}, not a regular chunk grid")
        self.shape = tuple(int(n) for n in grid.chunk_shape)
        self.chunk = self.shape[0]
        grids = [range(-(-int(n) // c)) for n, c in zip(array.shape[1:], self.shape[1:], strict=True)]
        self.tiles: list[tuple[int, ...]] = list(itertools.product(*grids))
        """The chunk indices along the trailing axes, in the order chunks are written (C order)."""
        sharded = sharding_of(array.metadata)
        self.sharding: Sharding | None = None if sharded is None else sharded[0]
        """The shards' geometry where the array is sharded: each chunk here is then a shard of inner chunks."""
        self._layout = _direct_layout(array)

    @property
    def direct(self) -> bool:
        """Whether chunks are encoded here (True) or by zarr's own write (False)."""
        return self._layout is not None

    def key(self, index: int | tuple[int, ...]) -> str:
        """The store key of the chunk at grid ``index`` (a row chunk alone: its first tile)."""
        if isinstance(index, int):
            index = (index,) + (0,) * (self.array.ndim - 1)
        name = self.array.metadata.encode_chunk_key(tuple(index))
        path = self.array.store_path.path
        return f"{path}/{name}" if path else name

    def keys(self, start: int, stop: int) -> list[str]:
        """The keys of every chunk holding rows ``[start, stop)``, in the order :meth:`write` writes them."""
        rows = range(start // self.chunk, -(-stop // self.chunk))
        return [self.key((i, *tile)) for i in rows for tile in self.tiles]

    def region(self, start: int, stop: int, position: int) -> tuple[slice, ...]:
        """Where chunk ``position`` of :meth:`keys` ``(start, stop)`` lies in those rows: a slice per axis."""
        row, tile = divmod(position, len(self.tiles))
        low = start // self.chunk * self.chunk + row * self.chunk - start
        trailing = (slice(t * c, (t + 1) * c) for t, c in zip(self.tiles[tile], self.shape[1:], strict=True))
        return (slice(low, min(low + self.chunk, stop - start)), *trailing)

    def held_rows(self, start: int, stop: int) -> list[int]:
        """For each chunk of :meth:`keys` ``(start, stop)``, how many of its rows hold rows ``[start, stop)`` (from
        its first: ``start`` is a chunk boundary)."""
        first = start // self.chunk * self.chunk
        return [
            min(stop, first + (row + 1) * self.chunk) - (first + row * self.chunk)
            for row in range(-(-stop // self.chunk) - start // self.chunk)
            for _ in self.tiles
        ]

    def checksum_counts(self, start: int, stop: int) -> list[int]:
        """How many CRC-32Cs a block record keeps for each chunk of :meth:`keys` ``(start, stop)``: one, or a shard's
        stored inner chunks' and its index's (see ``Sharding.checksums``)."""
        if self.sharding is None:
            return [1] * (len(self.keys(start, stop)))
        return [self.sharding.checksums(rows) for rows in self.held_rows(start, stop)]

    def split_record(self, start: int, stop: int, recorded: list[int]) -> list[list[int]] | None:
        """A block record's CRC-32Cs of rows ``[start, stop)`` (one list, as :meth:`write` returns them) cut into
        each chunk's, in the order of :meth:`keys`; None when they are not as many as the chunks take."""
        counts = self.checksum_counts(start, stop)
        if len(recorded) != sum(counts):
            return None
        cuts = list(itertools.accumulate(counts, initial=0))
        return [list(recorded[a:b]) for a, b in itertools.pairwise(cuts)]

    @functools.cached_property
    def _key_parts(self) -> tuple[str, str]:
        """What every chunk key has before and after its index along the first axis (and its separator)."""
        first, second = self.key(0), self.key(1)
        at = next(i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b)  # where '0' became '1'
        return first[:at], first[at + 1 :]

    @classmethod
    def of_document(cls, store: Any, path: str, document: dict[str, Any]) -> ChunkWriter:
        """The writer of the array whose metadata is ``document`` (its parsed ``zarr.json``), made without I/O.

        Every chunk it writes is stored, even one equal to the fill value (zarr's own write
        included, where the codecs are not encoded here). Raises ValueError, TypeError or
        KeyError when the document is not a Zarr v3 array's.
        """
        from zarr import AsyncArray
        from zarr.storage import StorePath

        from ._encoding import register_data_types
        from ._zarrapi import ArrayConfig, ArrayV3Metadata

        register_data_types()
        metadata = ArrayV3Metadata.from_dict(dict(document))
        config = ArrayConfig.from_dict({"write_empty_chunks": True})
        return cls(zarr.Array(AsyncArray(metadata, StorePath(store, path), config)))

    @functools.cached_property
    def _tile_positions(self) -> dict[tuple[int, ...], int]:
        return {tile: position for position, tile in enumerate(self.tiles)}

    def _indices(self, key: str) -> tuple[int, tuple[int, ...]] | None:
        """(index along the first axis, indices along the trailing axes) that ``key`` names, else None."""
        prefix, suffix = self._key_parts
        if len(key) <= len(prefix) + len(suffix) or not key.startswith(prefix):
            return None
        rest = key[len(prefix) :]
        tile: tuple[int, ...] = ()
        if len(self.shape) == 1:
            middle = rest[: len(rest) - len(suffix)] if rest.endswith(suffix) else ""
        else:
            separator = suffix[:1]  # what follows the first index: '/' or '.'
            middle, _, tail = rest.partition(separator)
            others = tail.split(separator)
            if len(others) != len(self.shape) - 1 or not all(o.isdigit() and o.isascii() for o in others):
                return None
            tile = tuple(int(o) for o in others)
        return (int(middle), tile) if middle.isdigit() and middle.isascii() else None

    def index(self, key: str) -> int | None:
        """The chunk index along the first axis that ``key`` names (any tile), or None when it names no chunk."""
        indices = self._indices(key)
        return None if indices is None else indices[0]

    def place(self, key: str) -> tuple[int, int] | None:
        """(row chunk, position of its tile in :attr:`tiles`) of the chunk ``key`` names, else None.

        A block's chunks are listed in that order (see :meth:`keys`): row chunk by row
        chunk, each one's tiles in turn, as its record keeps their checksums.
        """
        indices = self._indices(key)
        if indices is None:
            return None
        position = self._tile_positions.get(indices[1])
        return None if position is None else (indices[0], position)

    def _padded(self, part: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        """``part`` as a C-contiguous chunk of ``shape``, padded with the fill value where it is smaller (the last
        row chunk, the edges of the trailing grid)."""
        if part.shape == shape and part.flags.c_contiguous:
            return part
        dtype = np.dtype(self.array.dtype)
        nbytes = int(np.prod(shape)) * dtype.itemsize
        padded = scratch("pad", nbytes)[:nbytes].view(dtype).reshape(shape)
        if part.shape != shape:
            padded[...] = self.array.metadata.fill_value
        padded[tuple(slice(0, n) for n in part.shape)] = part
        return padded

    def _tile(self, rows: np.ndarray, tile: tuple[int, ...]) -> np.ndarray:
        """The part of ``rows`` in trailing chunk ``tile``, as a C-contiguous chunk of full shape (padded)."""
        region = tuple(slice(t * c, (t + 1) * c) for t, c in zip(tile, self.shape[1:], strict=True))
        return self._padded(rows[(slice(None), *region)], self.shape)

    def _encode_into(self, chunk: np.ndarray, out: np.ndarray) -> tuple[int, int | None]:
        """Encode one full chunk (or inner chunk) into the start of ``out``: the bytes written and their CRC-32C
        (None without the crc32c codec)."""
        assert self._layout is not None
        blosc, crc = self._layout
        raw = np.ascontiguousarray(chunk).reshape(-1).view(np.uint8)
        if blosc is not None:
            size = blosc.compress(raw, out[: raw.nbytes + _BLOSC_OVERHEAD])
        else:
            size = raw.nbytes
            out[:size] = raw
        if not crc:
            return size, None
        value = int(google_crc32c.value(out[:size]))
        out[size : size + _CRC.size] = np.frombuffer(_CRC.pack(value), dtype=np.uint8)
        return size + _CRC.size, value

    def encode(self, chunk: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, int | None]:
        """The stored bytes of one full chunk (uint8) and their CRC-32C (None without the crc32c codec).

        The bytes are a view of the chunk itself or of ``out`` (uint8, at least
        :meth:`encoded_nbytes` long): valid until either changes. Not for a sharded array
        (see :meth:`encoded`).
        """
        if self._layout is None:
            raise ValueError("this array's codecs are not encoded here; use write(), which lets zarr encode them")
        blosc, crc = self._layout
        if blosc is None and not crc:
            return np.ascontiguousarray(chunk).reshape(-1).view(np.uint8), None
        size, value = self._encode_into(chunk, out)
        return out[:size], value

    def _encode_shard(self, rows: np.ndarray, out: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """The stored bytes of the shard whose first ``len(rows)`` rows are ``rows`` (the others hold no data), and
        the CRC-32Cs its record keeps: each stored inner chunk's in C order, then its index's."""
        sharding = self.sharding
        assert sharding is not None
        inner = sharding.inner
        stored = sharding.stored_rows(len(rows))
        index = sharding.empty_index()
        crcs: dict[tuple[int, ...], int] = {}
        offset = 0
        for coords in sharding.layout:
            if coords[0] >= stored:
                continue
            region = tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, inner, strict=True))
            size, crc = self._encode_into(self._padded(rows[region], inner), out[offset:])
            assert crc is not None  # a sharded array's inner chunks end with their checksum (see _direct_layout)
            index[coords] = (offset, size)
            crcs[coords] = crc
            offset += size
        encoded, index_crc = sharding.encode_index(index)
        out[offset : offset + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
        return out[: offset + len(encoded)], [*(crcs[c] for c in sharding.present(len(rows))), index_crc]

    def write(self, start: int, data: np.ndarray, *, end: bool = False) -> list[EncodedChunk]:
        """Store rows ``[start, start + len(data))`` as whole chunks; ``start`` must be a chunk boundary.

        ``data`` must end on a chunk boundary too, or at the end of the array, or, with
        ``end``, where the array is to end (a run that ended on its condition): its last
        chunk is padded with the fill value, as an array's last chunk is (a shard stores no
        inner chunk past it). Chunks are returned in the order of :meth:`keys`.
        """
        stop = start + len(data)
        if not self.encodes(start, data, end=end):
            self.array[start:stop] = data
            return [EncodedChunk(key, -1, None) for key in self.keys(start, stop)]
        store = self.array.store_path.store
        # a local directory itself (not wrapped): its files are written here, as zarr would write them
        local = Path(store.root) if isinstance(store, LocalStore) else None
        # LocalStore writes the bytes out and FsspecStore copies them before returning; other stores (memory,
        # Icechunk) may keep the buffer itself, which this thread's next chunk overwrites
        keeps_buffer = not isinstance(unwrap(store), (LocalStore, FsspecStore))
        prototype = default_buffer_prototype()
        written = []
        for key, encoded, crcs in self.encoded(start, data):
            if local is not None:
                write_new(local / key, encoded.data)
            elif keeps_buffer:
                sync(store.set(key, _OwnBytes(encoded.tobytes())))
            else:
                sync(store.set(key, prototype.buffer.from_array_like(encoded)))
            written.append(EncodedChunk(key, encoded.nbytes, None if crcs is None else crcs[-1], tuple(crcs or ())))
        return written

    def encodes(self, start: int, data: np.ndarray, *, end: bool = False) -> bool:
        """Whether rows ``[start, start + len(data))`` are encoded here (else zarr writes them itself).

        They must cover whole chunks: ``start`` on a chunk boundary, the end on one or at the
        end of the array (or, with ``end``, where it is to end).
        """
        stop = start + len(data)
        if start % self.chunk or (stop % self.chunk and stop != self.array.shape[0] and not end):
            raise ValueError(f"rows {start}-{stop} do not cover whole chunks of {self.chunk}")
        return self._layout is not None and data.dtype == self.array.dtype

    def encoded(self, start: int, data: np.ndarray) -> Iterator[tuple[str, np.ndarray, list[int] | None]]:
        """``(key, stored bytes, CRC-32Cs)`` of each chunk of rows starting at ``start``, as :meth:`write` stores them.

        The CRC-32Cs are those a block record keeps of the chunk (its one trailer, or a
        shard's: see ``Sharding.checksums``), None without the crc32c codec. The bytes live
        in a reused buffer taken for the whole iteration (see :class:`EncodeBuffers`): each
        is valid until the next is made.
        """
        keys = self.keys(start, start + len(data))
        chunks = (data[i : i + self.chunk] for i in range(0, len(data), self.chunk))
        tiles = ((rows, tile) for rows in chunks for tile in self.tiles)
        with _ENCODE_BUFFERS.lease(self.encoded_nbytes) as out:
            for key, (rows, tile) in zip(keys, tiles, strict=True):
                if self.sharding is not None:
                    yield key, *self._encode_shard(rows, out)
                    continue
                encoded, crc = self.encode(self._tile(rows, tile), out)
                yield key, encoded, None if crc is None else [crc]

    @property
    def encoded_nbytes(self) -> int:
        """The most bytes one encoded chunk takes (its raw bytes, blosc's header, a checksum; a shard's inner
        chunks each so, and its index)."""
        itemsize = np.dtype(self.array.dtype).itemsize
        if self.sharding is not None:
            inner = int(np.prod(self.sharding.inner)) * itemsize + _BLOSC_OVERHEAD + _CRC.size
            return self.sharding.count * inner + self.sharding.index_nbytes
        return int(np.prod(self.shape)) * itemsize + _BLOSC_OVERHEAD + _CRC.size
