"""Rows of a 1-D Zarr input read with as little memory as a block's own rows.

Slicing a Zarr array holds, for each chunk it touches, the chunk's stored bytes, the
chunk decoded, and the selection copied out of it: three chunk-sized buffers for a
block of one chunk's rows, and ``bytes`` objects whose freeing raises glibc's mmap
threshold so that later buffers stay on the heap; JAX then copies the rows into a
buffer of its own, since a numpy array not aligned to 64 bytes cannot be shared.
Where the array's codecs allow it (a Zarr v3 array of little-endian or one-byte values,
stored as plain bytes, optionally compressed with zstd, blosc or gzip, not sharded)
:class:`Rows` instead reads a local chunk's stored bytes into one reused anonymous
mapping and decodes them straight into the rows handed to the scan, which are aligned so
that JAX uses them in place; a chunk larger than a block is decoded once and kept for the
blocks that follow. Other arrays are sliced by Zarr. The values are those Zarr reads, bit
for bit: the same numcodecs decoders decode the same bytes.
"""

from __future__ import annotations

import mmap
import operator
import os
import sys
import threading
from typing import Any

__all__ = ["Rows"]


class Rows:
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
        return f"Rows({self.array!r}, n={self.n})"

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
            return self._read_chunks(start, stop)

    def _read_chunks(self, start: int, stop: int) -> Any:
        import numpy as np

        out = _aligned(stop - start, self.dtype)
        chunk = self.array.chunks[0]
        for index in range(start // chunk, (stop - 1) // chunk + 1):
            low, high = index * chunk, min((index + 1) * chunk, self.array.shape[0])
            a, b = max(low, start), min(high, stop)
            if (a, b) == (low, high):  # a whole chunk (or the array's last, partial one): decoded in place
                self._decode(index, out[a - start : b - start], high - low)
                continue
            if self._cached is None or self._cached[0] != index:
                self._cached = None  # the chunk before it is not needed any more
                values = np.empty(chunk, self.dtype)
                self._decode(index, values, chunk)
                self._cached = (index, values)
            out[a - start : b - start] = self._cached[1][a - low : b - low]
            if b == high:
                self._cached = None  # its last rows are read: scans read forward
        return out

    def _decode(self, index: int, out: Any, rows: int) -> None:
        """Chunk ``index`` decoded into ``out`` (its first ``rows`` values; a stored chunk holds a whole chunk)."""
        import numpy as np

        key = self.array.metadata.encode_chunk_key((index,))
        raw = self._stored(key)
        if raw is None:  # never written: the fill value, as Zarr reads it
            out[:] = self.array.fill_value
            return
        try:
            if rows == out.shape[0] == self.array.chunks[0]:
                self._decoder.decode(raw, out=out)
            else:  # the last chunk of an array whose length the chunks do not divide
                full = np.empty(self.array.chunks[0], self.dtype)
                self._decoder.decode(raw, out=full)
                out[:] = full[: out.shape[0]]
        finally:
            if isinstance(raw, memoryview):
                raw.release()

    def _stored(self, key: str) -> Any:
        """The stored bytes of ``key`` (None if absent): a local file read into the reused buffer, else as stored."""
        from zarr.storage import LocalStore

        store = self.array.store
        if not isinstance(store, LocalStore):
            from zarr.buffer import default_buffer_prototype

            from ..store import sync

            stored = sync(store.get(key, prototype=default_buffer_prototype()))
            return None if stored is None else stored.as_numpy_array()
        path = os.path.join(str(store.root), key)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            if self._buffer is None or len(self._buffer) < size:
                if self._buffer is not None:
                    self._buffer.close()
                self._buffer = mmap.mmap(-1, max(size, mmap.PAGESIZE))  # never on the heap, unmapped when dropped
            view = memoryview(self._buffer)[:size]
            done = 0
            while done < size:
                got = os.readv(fd, [view[done:]])
                if got == 0:
                    view.release()
                    raise OSError(f"{path} ended after {done} of {size} bytes")
                done += got
            return view
        finally:
            os.close(fd)


def _decoder(array: Any) -> Any:
    """The numcodecs decoder of ``array``'s chunks when they can be decoded in place, else None."""
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
        return numcodecs.Zstd()
    if isinstance(codec, BloscCodec):
        return numcodecs.Blosc()
    if isinstance(codec, GzipCodec):
        return numcodecs.GZip()
    return None


class _Plain:
    """The decoder of uncompressed chunks: a copy."""

    def decode(self, raw: Any, out: Any) -> None:
        import numpy as np

        out[:] = np.frombuffer(raw, dtype=out.dtype, count=out.shape[0])


def _aligned(count: int, dtype: Any) -> Any:
    """An uninitialised array of ``count`` values aligned to 64 bytes, so that JAX computes on it without a copy."""
    import numpy as np

    from ..store import aligned_empty

    dtype = np.dtype(dtype)
    return aligned_empty(count * dtype.itemsize, 64).view(dtype)
