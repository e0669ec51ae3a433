"""Rows of a 1-D Zarr input read with as little memory as a block's own rows.

Slicing a Zarr array holds, for each chunk it touches, the chunk's stored bytes, the
chunk decoded, and the selection copied out of it: three chunk-sized buffers for a
block of one chunk's rows, and ``bytes`` objects whose freeing raises glibc's mmap
threshold so that later buffers stay on the heap; JAX then copies the rows into a
buffer of its own, since a numpy array not aligned to 64 bytes cannot be shared.
Where the array's codecs allow it (a Zarr v3 array of little-endian or one-byte values,
stored as plain bytes, optionally compressed with zstd, blosc or gzip, not sharded)
:class:`InputRows` instead decodes a local chunk's stored bytes straight into the rows handed to
the scan, which are aligned so that JAX uses them in place; a chunk larger than a block is
decoded once and kept for the blocks that follow. Other arrays are sliced by Zarr. The
values are those Zarr reads, bit for bit: the same numcodecs decoders decode the same bytes.

A whole chunk of plain bytes is read straight into its rows, and a whole zstd chunk is
read into the end of its rows and decompressed in place there (zstd's in-place
decompression: the compressed frame at the end of the output, ``ZSTD_decompressionMargin``
bytes past it, which zstd itself refuses to overrun); so the rows are the only buffer a
block reads into, where a chunk's stored bytes took a second one nearly as large (for a block
of random float64, which barely compresses). Blosc and gzip chunks, and any chunk the zstd
margin does not fit, are read into one reused anonymous mapping and decoded from there.
"""

from __future__ import annotations

import mmap
import operator
import os
import sys
import threading
from typing import Any, Protocol

__all__ = ["InputRows"]


class InputRows:
    """A lazy view of the first ``n`` rows of a 1-D Zarr array, read chunk by chunk when sliced.

    Nothing is read until it is sliced, and then only the chunks holding the rows asked
    for, so the engine can scan a prefix of a large Zarr array without loading it.
    """

    __slots__ = ("_buffer", "_cached", "_decoder", "_lock", "array", "n")

    def __init__(self, array: Any, n: int) -> None:
        if not 0 <= n <= array.shape[0]:
            raise ValueError(f"cannot view {n} rows of an array with {array.shape[0]}")
        self.array = array
        self.n = n
        self._decoder = _decoder(array)
        self._cached: tuple[int, Any] | None = None  # (chunk index, its decoded values): a chunk larger than a block
        self._buffer: mmap.mmap | None = None  # a local chunk's stored bytes, reused from chunk to chunk
        self._lock = threading.Lock()  # blocks recomputed in parallel read through one buffer

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.n,)

    @property
    def dtype(self) -> Any:
        import numpy as np

        return np.dtype(self.array.dtype)

    @property
    def ndim(self) -> int:
        return 1

    def __len__(self) -> int:
        return self.n

    @property
    def whole(self) -> Any:
        """The array itself when this view holds all of its rows (a run's identity names it), else None."""
        return self.array if self.n == self.array.shape[0] else None

    def __getstate__(self) -> dict[str, Any]:
        return {"array": self.array, "n": self.n}  # the buffers and the lock are this process's own

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["array"], state["n"])  # type: ignore[misc]

    def __repr__(self) -> str:
        return f"InputRows({self.array!r}, n={self.n})"

    def __getitem__(self, key: Any) -> Any:
        import numpy as np

        if isinstance(key, tuple):
            if len(key) > 1:
                raise IndexError(f"too many indices for a 1-D input: {key!r}")
            key = key[0] if key else slice(None)
        if isinstance(key, slice):
            start, stop, step = key.indices(self.n)
            rows = range(start, stop, step)
            if not rows:
                return np.empty(0, self.dtype)
            low, high = min(rows[0], rows[-1]), max(rows[0], rows[-1]) + 1
            values = self._read(low, high)
            return values if step == 1 else values[rows[0] - low :: step]
        index = operator.index(key)
        if not -self.n <= index < self.n:
            raise IndexError(f"index {index} is out of bounds for {self.n} rows")
        return self._read(index % self.n, index % self.n + 1)[0]

    def _read(self, start: int, stop: int) -> Any:
        """Rows ``[start, stop)`` as a fresh numpy array."""
        import numpy as np

        if self._decoder is None:
            return np.asarray(self.array[start:stop])
        with self._lock:
            return self._read_chunks(self._decoder, start, stop)

    def _read_chunks(self, decoder: _Decoder, start: int, stop: int) -> Any:
        size = self.dtype.itemsize
        chunk = self.array.chunks[0]
        rows, room = _rows(stop - start, self.dtype, decoder.tail)
        for index in range(start // chunk, (stop - 1) // chunk + 1):
            low, high = index * chunk, min((index + 1) * chunk, self.array.shape[0])
            a, b = max(low, start), min(high, stop)
            if (a, b) == (low, high):  # a whole chunk (or the array's last, partial one): decoded in place
                # its room runs on over the next chunk's rows, which are read after it
                at = (a - start) * size
                self._decode(decoder, index, rows[a - start : b - start], high - low, room[at:])
                continue
            if self._cached is None or self._cached[0] != index:
                self._cached = None  # the chunk before it is not needed any more
                values, whole_room = _rows(chunk, self.dtype, decoder.tail)
                self._decode(decoder, index, values, chunk, whole_room)
                self._cached = (index, values)
            rows[a - start : b - start] = self._cached[1][a - low : b - low]
            if b == high:
                self._cached = None  # its last rows are read: scans read forward
        return rows

    def _decode(self, decoder: _Decoder, index: int, out: Any, rows: int, room: Any) -> None:
        """Chunk ``index`` decoded into ``out`` (its first ``rows`` values; a stored chunk holds a whole chunk).

        ``room``, bytes from ``out``'s first on and ``decoder.tail`` past its last (or more),
        lets a whole chunk be read and decoded there, without a buffer of its stored bytes.
        """
        import numpy as np

        key = self.array.metadata.encode_chunk_key((index,))
        whole = rows == out.shape[0] == self.array.chunks[0]
        if whole and self._decode_in_place(decoder, key, room[: out.nbytes + max(decoder.tail, 0)], out.nbytes):
            return
        raw = self._stored(key)
        if raw is None:  # never written: the fill value, as Zarr reads it
            out[:] = self.array.fill_value
            return
        try:
            if whole:
                decoder.decode(raw, out=out)
            else:  # the last chunk of an array whose length the chunks do not divide
                full = np.empty(self.array.chunks[0], self.dtype)
                decoder.decode(raw, out=full)
                out[:] = full[: out.shape[0]]
        finally:
            if isinstance(raw, memoryview):
                raw.release()

    def _local_path(self, key: str) -> str | None:
        """The file of ``key`` where the array is on a local store, else None."""
        from zarr.storage import LocalStore

        store = self.array.store
        return os.path.join(str(store.root), key) if isinstance(store, LocalStore) else None

    def _decode_in_place(self, decoder: _Decoder, key: str, room: Any, nbytes: int) -> bool:
        """Whether local chunk ``key`` was read into the end of ``room`` and decoded into its first ``nbytes``.

        False (nothing decoded) where it is not stored in a local file, does not fit, or its
        decoder cannot decode it in place: the caller reads it into a buffer of its own then.
        """
        from ..store import read_into

        path = self._local_path(key)
        if path is None or decoder.tail < 0:
            return False
        stored = read_into(path, lambda size: room[len(room) - size :] if size <= len(room) else None)
        return stored is not None and decoder.decode_in_place(stored, room, nbytes)

    def _stored(self, key: str) -> Any:
        """The stored bytes of ``key`` (None if absent): a local file read into the reused buffer, else as stored."""
        from zarr.storage import LocalStore

        store = self.array.store
        if not isinstance(store, LocalStore):
            from zarr.buffer import default_buffer_prototype

            from ..store import sync

            stored = sync(store.get(key, prototype=default_buffer_prototype()))
            return None if stored is None else stored.as_numpy_array()
        from ..store import read_into

        return read_into(os.path.join(str(store.root), key), self._reused)

    def _reused(self, size: int) -> memoryview:
        """The first ``size`` bytes of the reused buffer, grown to hold them (``read_into`` releases it on failure)."""
        if self._buffer is None or len(self._buffer) < size:
            if self._buffer is not None:
                self._buffer.close()
            self._buffer = mmap.mmap(-1, max(size, mmap.PAGESIZE))  # never on the heap, unmapped when dropped
        return memoryview(self._buffer)[:size]


class _Decoder(Protocol):
    """How a chunk's stored bytes become its values."""

    tail: int
    """Bytes past a whole chunk's rows that decoding it in place needs (-1: it cannot be)."""

    def decode(self, raw: Any, out: Any) -> None:
        """Decode the stored bytes ``raw`` into ``out``."""

    def decode_in_place(self, stored: Any, room: Any, nbytes: int) -> bool:
        """Decode ``stored``, read into the end of ``room``, into its first ``nbytes``; False if it cannot."""


def _decoder(array: Any) -> _Decoder | None:
    """The decoder of ``array``'s chunks when they can be decoded into the rows, else None (zarr reads them)."""
    import numpy as np

    metadata: Any = getattr(array, "metadata", None)
    if getattr(metadata, "zarr_format", None) != 3 or len(array.shape) != 1 or getattr(array, "shards", None):
        return None
    try:
        from zarr.codecs import BloscCodec, BytesCodec, GzipCodec, ZstdCodec
    except ImportError:
        return None
    codecs = tuple(metadata.codecs)
    if not codecs or not isinstance(codecs[0], BytesCodec) or len(codecs) > 2:
        return None
    dtype = np.dtype(array.dtype)
    endian = getattr(codecs[0].endian, "value", codecs[0].endian)
    if dtype.itemsize > 1 and (endian or sys.byteorder) != sys.byteorder:
        return None
    import numcodecs

    if len(codecs) == 1:
        return _Plain()
    codec = codecs[1]
    if isinstance(codec, ZstdCodec):
        return _Zstd()
    if isinstance(codec, BloscCodec):
        return _Buffered(numcodecs.Blosc())
    if isinstance(codec, GzipCodec):
        return _Buffered(numcodecs.GZip())
    return None


class _Buffered:
    """A numcodecs decoder that decodes from a buffer of the stored bytes (never in place)."""

    tail = -1
    """No room for decoding in place."""

    def __init__(self, codec: Any) -> None:
        self.codec = codec

    def decode(self, raw: Any, out: Any) -> None:
        self.codec.decode(raw, out=out)

    def decode_in_place(self, stored: Any, room: Any, nbytes: int) -> bool:
        return False


class _Plain:
    """The decoder of uncompressed chunks: a copy, or nothing where they were read into place."""

    tail = 0
    """Read into its rows, a whole chunk needs no room past them."""

    def decode(self, raw: Any, out: Any) -> None:
        import numpy as np

        out[:] = np.frombuffer(raw, dtype=out.dtype, count=out.shape[0])

    def decode_in_place(self, stored: Any, room: Any, nbytes: int) -> bool:
        """Its rows were read where they go (``stored`` is all of ``room``) if the file holds exactly a chunk."""
        return len(stored) == nbytes


ZSTD_IN_PLACE = 10505
"""The zstd version (1.5.5) whose API documents in-place decompression (``ZSTD_decompressionMargin``)."""

ZSTD_TAIL = 256 * 2**10
"""Room past a block's rows for a zstd chunk decompressed in place: its margin is its frame's header
and block headers (3 bytes per block of at most 128 KiB, 768 bytes for 32 MiB) and one block."""

_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_SKIPPABLE = 0x184D2A50  # the 16 magic numbers of skippable frames, less their last 4 bits
_ZSTD_BLOCK_MAX = 128 * 2**10


class _Zstd:
    """The decoder of zstd chunks: in place where zstd documents it (see :func:`zstd_margin`), else from a buffer."""

    def __init__(self) -> None:
        import numcodecs
        from numcodecs import zstd

        self.codec = numcodecs.Zstd()
        self._decompress = zstd.decompress
        self.tail = ZSTD_TAIL if zstd.VERSION_NUMBER >= ZSTD_IN_PLACE else -1

    def decode(self, raw: Any, out: Any) -> None:
        self.codec.decode(raw, out=out)

    def decode_in_place(self, stored: Any, room: Any, nbytes: int) -> bool:
        """Decompress ``stored``, the end of ``room``, into ``room``'s first ``nbytes``; False if it cannot be.

        zstd decompresses in place when the compressed frames lie at the end of an output
        buffer ``ZSTD_decompressionMargin`` bytes longer than what they hold, in one call of
        ``ZSTD_decompress`` (which numcodecs makes); it checks the spacing itself as it goes
        and fails rather than overwrite input it has not read. A failure may have
        overwritten what it read, so the caller reads the chunk again.
        """
        margin = zstd_margin(stored, nbytes)
        if margin is None or nbytes + margin > len(room):
            return False
        try:
            self._decompress(stored, room[:nbytes])
        except (RuntimeError, ValueError):
            return False
        return True


def zstd_margin(data: Any, content: int) -> int | None:
    """``ZSTD_decompressionMargin`` of the zstd frames ``data`` (bytes-like), or None.

    None unless ``data`` is a sequence of well-formed frames (and skippable frames) that
    declare their content sizes, adding up to ``content`` bytes, with no dictionary. The
    margin: each frame's header, checksum and 3 bytes per block, each skippable frame whole,
    and the largest block size of any frame.
    """
    buf = memoryview(data).cast("B")
    size, pos, margin, block_max, total = len(buf), 0, 0, 0, 0
    while pos < size:
        if size - pos < 6:
            return None
        magic = int.from_bytes(buf[pos : pos + 4], "little")
        if magic & ~0xF == _ZSTD_SKIPPABLE:
            if size - pos < 8:
                return None
            skipped = 8 + int.from_bytes(buf[pos + 4 : pos + 8], "little")
            margin, pos = margin + skipped, pos + skipped
            continue
        descriptor = buf[pos + 4]
        if magic != _ZSTD_MAGIC or descriptor & 0b1011:  # another format, a reserved bit, a dictionary
            return None
        single, checksum = descriptor >> 5 & 1, descriptor >> 2 & 1
        fcs = (single, 2, 4, 8)[descriptor >> 6]
        header = 5 + (1 - single) + fcs
        if not fcs or size - pos < header:
            return None  # a frame that does not say what it holds
        frame_content = int.from_bytes(buf[pos + header - fcs : pos + header], "little") + (256 if fcs == 2 else 0)
        if single:
            window = frame_content
        else:
            exponent, mantissa = buf[pos + 5] >> 3, buf[pos + 5] & 7
            window = (1 << (10 + exponent)) + ((1 << (10 + exponent)) >> 3) * mantissa
        block_max = max(block_max, min(window, _ZSTD_BLOCK_MAX))
        pos += header
        blocks, last = 0, False
        while not last:
            if size - pos < 3:
                return None
            block = int.from_bytes(buf[pos : pos + 3], "little")
            last, kind, length = bool(block & 1), block >> 1 & 3, block >> 3
            if kind == 3:  # reserved
                return None
            pos += 3 + (1 if kind == 1 else length)  # an RLE block stores one byte
            blocks += 1
        pos += 4 * checksum
        margin += header + 4 * checksum + 3 * blocks
        total += frame_content
    return margin + block_max if pos == size and total == content else None


def _rows(count: int, dtype: Any, tail: int) -> tuple[Any, Any]:
    """Uninitialised rows of ``count`` values aligned to 64 bytes (so that JAX computes on them without a copy),
    and their bytes with ``tail`` bytes more past them: the room a chunk is decoded in place in."""
    from ..store import aligned_empty

    room = aligned_empty(count * dtype.itemsize + max(tail, 0), 64)
    return room[: count * dtype.itemsize].view(dtype), room
