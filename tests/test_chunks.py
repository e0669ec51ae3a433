"""Chunks encoded into reused buffers: plain zarr reads give back the values, the stored
bytes are those zarr itself writes, and the recorded CRC-32C is the one zarr checks.

Every reference is independent of the code under test: the values come from numpy, the
expected bytes from zarr writing the same data into an identical array, the checksum
from google_crc32c over the stored file.
"""

from __future__ import annotations

import threading

import google_crc32c
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, Crc32cCodec, ZstdCodec

from streamacc.store import ChunkWriter

CHUNK = 64

CODECS = {
    "blosc-lz4": [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")],
    "blosc-lz4-crc32c": [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"), Crc32cCodec()],
    "blosc-zstd-bitshuffle": [BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")],
    "none": [],
    "none-crc32c": [Crc32cCodec()],
}


def _values(dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(3)
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith("i"):
        return np.cumsum(rng.integers(-5, 9, size=shape), axis=0).astype(dtype)
    return np.cumprod(np.full(shape, 1 + 1e-3), axis=0).astype(dtype) + rng.normal(size=shape).astype(dtype)


def _pair(tmp_path, codec: str, dtype: str, shape: tuple[int, ...]) -> tuple[zarr.Array, zarr.Array]:
    """Two identical arrays in two stores: one written by ChunkWriter, one by zarr."""
    arrays = []
    for name in ("ours", "zarr"):
        group = zarr.open_group(tmp_path / f"{name}.zarr", mode="w")
        arrays.append(
            group.create_array(
                "y",
                shape=shape,
                chunks=(CHUNK, *shape[1:]),
                dtype=dtype,
                fill_value=np.nan if dtype.startswith("f") else 0,
                compressors=CODECS[codec] or None,
                config={"write_empty_chunks": True},
            )
        )
    return arrays[0], arrays[1]


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize(("dtype", "shape"), [("float64", (300,)), ("float32", (300, 3)), ("int64", (256,)),
                                              ("bool", (300, 2))])  # fmt: skip
def test_chunks_read_back_and_match_zarr_bytes(tmp_path, codec, dtype, shape):
    ours, theirs = _pair(tmp_path, codec, dtype, shape)
    data = _values(dtype, shape)
    writer = ChunkWriter(ours)
    assert writer.direct
    written = []
    for start in range(0, shape[0], 2 * CHUNK):  # blocks of two chunks; the last one may be short
        written += writer.write(start, data[start : start + 2 * CHUNK])
    theirs[:] = data

    reread = zarr.open_array(tmp_path / "ours.zarr" / "y", mode="r")[:]
    np.testing.assert_array_equal(reread, data)
    assert [w.key for w in written] == [f"y/c/{i}" + "/0" * (len(shape) - 1) for i in range(-(-shape[0] // CHUNK))]
    for w in written:
        stored = (tmp_path / "ours.zarr" / w.key).read_bytes()
        assert stored == (tmp_path / "zarr.zarr" / w.key).read_bytes()
        assert len(stored) == w.nbytes
        if "crc32c" in codec:
            assert w.crc32c == google_crc32c.value(stored[:-4]) == int.from_bytes(stored[-4:], "little")
        else:
            assert w.crc32c is None


def test_damaged_chunk_is_refused_by_plain_zarr_reads(tmp_path):
    ours, _ = _pair(tmp_path, "blosc-lz4-crc32c", "float64", (128,))
    ChunkWriter(ours).write(0, _values("float64", (128,)))
    path = tmp_path / "ours.zarr" / "y" / "c" / "1"
    damaged = bytearray(path.read_bytes())
    damaged[20] ^= 1
    path.write_bytes(bytes(damaged))
    array = zarr.open_array(tmp_path / "ours.zarr" / "y", mode="r")
    np.testing.assert_array_equal(array[:CHUNK], _values("float64", (128,))[:CHUNK])
    with pytest.raises(ValueError, match="checksum"):
        array[CHUNK:]


def test_other_codecs_fall_back_to_zarr(tmp_path):
    group = zarr.open_group(tmp_path / "z.zarr", mode="w")
    array = group.create_array("y", shape=(200,), chunks=(CHUNK,), dtype="float64", compressors=[ZstdCodec(level=1)])
    data = _values("float64", (200,))
    writer = ChunkWriter(array)
    assert not writer.direct
    assert [w.key for w in writer.write(0, data)] == ["y/c/0", "y/c/1", "y/c/2", "y/c/3"]
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "z.zarr" / "y", mode="r")[:], data)


def test_threads_write_concurrently(tmp_path):
    ours, _ = _pair(tmp_path, "blosc-lz4-crc32c", "float64", (CHUNK * 24,))
    data = _values("float64", (CHUNK * 24,))
    writer = ChunkWriter(ours)

    def every_fourth(k: int) -> None:
        for start in range(k * CHUNK, len(data), 4 * CHUNK):
            writer.write(start, data[start : start + CHUNK])

    threads = [threading.Thread(target=every_fourth, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "ours.zarr" / "y", mode="r")[:], data)


def test_rows_must_cover_whole_chunks(tmp_path):
    ours, _ = _pair(tmp_path, "blosc-lz4", "float64", (300,))
    writer = ChunkWriter(ours)
    with pytest.raises(ValueError, match="whole chunks"):
        writer.write(10, np.zeros(CHUNK))
    with pytest.raises(ValueError, match="whole chunks"):
        writer.write(0, np.zeros(CHUNK + 1))


@pytest.mark.parametrize("codec", ["blosc-lz4-crc32c", "none-crc32c"])
@pytest.mark.parametrize(
    ("shape", "chunks"), [((300, 10), (64, 4)), ((200, 5, 6), (64, 2, 4)), ((130, 7), (64, 7))], ids=str
)
def test_chunks_split_along_trailing_axes_match_zarr_bytes(tmp_path, codec, shape, chunks):
    """Chunks that cut the state too (edge tiles padded) hold zarr's own bytes, in the order of ``keys``."""
    arrays = []
    for name in ("ours", "zarr"):
        group = zarr.open_group(tmp_path / f"{name}.zarr", mode="w")
        arrays.append(group.create_array("y", shape=shape, chunks=chunks, dtype="float64", fill_value=np.nan,
                                         compressors=CODECS[codec], config={"write_empty_chunks": True}))  # fmt: skip
    ours, theirs = arrays
    data = _values("float64", shape)
    writer = ChunkWriter(ours)
    assert writer.direct
    written = []
    for start in range(0, shape[0], 2 * CHUNK):
        written += writer.write(start, data[start : start + 2 * CHUNK])
    theirs[:] = data
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "ours.zarr" / "y", mode="r")[:], data)
    grid = [-(-n // c) for n, c in zip(shape, chunks, strict=True)]
    assert len(written) == np.prod(grid) and [w.key for w in written] == writer.keys(0, shape[0])
    for w in written:
        stored = (tmp_path / "ours.zarr" / w.key).read_bytes()
        assert stored == (tmp_path / "zarr.zarr" / w.key).read_bytes()
        assert w.crc32c == google_crc32c.value(stored[:-4])


def test_encode_buffers_are_shared_by_threads_and_made_only_for_overlaps():
    """A block's chunks take one buffer; a thread after it reuses it, and only blocks encoded at once need more."""
    from streamacc.store import EncodeBuffers

    buffers = EncodeBuffers()
    with buffers.lease(1000) as first:
        pass
    held = buffers.lease(1000)  # kept: dropped, it would give its buffer back
    seen = []
    thread = threading.Thread(target=lambda: seen.append(held.__enter__()))
    thread.start()
    thread.join()
    assert seen[0] is first  # another thread, no overlap: the same buffer
    with buffers.lease(1000) as a, buffers.lease(1000) as b:
        assert a is not b and first is not a and first is not b  # `first` is still the thread's (never given back)
    with buffers.lease(5000) as large:  # two are free now, both too small: a larger one replaces one of them
        assert large.nbytes >= 5000 and large.ctypes.data % 4096 == 0
    assert len(buffers._free) == 2
