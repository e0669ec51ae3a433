"""A block's rows stored as one shard of small chunks: read in parts, checked chunk by chunk, continued as before.

A new output whose block holds more than one chunk stores each block as one object, a Zarr v3
shard (``sharding_indexed``): its inner chunks one after another, each ending with its
CRC-32C, then their index, ending with its own. Every reader reads it (zarr, xarray, dask
through ``streamacc.open``), a small read fetches one inner chunk and the index, never the
block, and the block record keeps every inner chunk's checksum and the index's, so that a
shard copied from elsewhere (the same size, the same index), an inner chunk replaced or
damaged, or a shard missing is refused by ``open`` and ``verify``. Killed and resumed,
extended, virtual, thinned, tiled, ended on its condition, on S3 and in Icechunk: the same as
an uninterrupted run of today, file for file.

References come from outside the code under test: the values from numpy (the geometric
progression's running product) or ``lax.scan``; a shard's layout from zarr writing the same
values into an identical array, and from parsing its bytes here with numpy and
google-crc32c.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import google_crc32c
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import (
    ReadCounting,
    assert_same_output,
    dies_at,
    gp,
    made_runs,
    node_attribute,
    read_manifest,
    run,
    store_files,
)
from zarr.codecs import BloscCodec, Crc32cCodec
from zarr.storage import LocalStore

import streamacc
from streamacc.cli import main
from streamacc.errors import VerifyError
from streamacc.store import ChunkWriter

SIZE, BLOCK, INNER = 4500, 1024, 256  # 5 blocks; the last holds 404 rows: 2 of its shard's 4 inner chunks
SHARDED = ["--size", SIZE, "--block-size", BLOCK, "--chunks", INNER, "--no-progress"]
NONE = [*SHARDED, "--codec", "none", "--no-summaries"]  # every full shard the same size, its index the same bytes
MISSING = 2**64 - 1


def index_of(raw: bytes, count: int) -> np.ndarray:
    """A shard's index, parsed by the spec: ``count`` (offset, nbytes) pairs of little-endian uint64, then the
    CRC-32C of their bytes."""
    body, tail = raw[-(16 * count + 4) : -4], raw[-4:]
    assert google_crc32c.value(body) == int.from_bytes(tail, "little")
    return np.frombuffer(body, dtype="<u8").reshape(count, 2)


def inner_checksums(raw: bytes, count: int) -> list[int | None]:
    """Each inner chunk's CRC-32C trailer (None where not stored), checked against its bytes."""
    found: list[int | None] = []
    for offset, nbytes in index_of(raw, count):
        if offset == MISSING:
            found.append(None)
            continue
        piece = raw[int(offset) : int(offset + nbytes)]
        assert google_crc32c.value(piece[:-4]) == int.from_bytes(piece[-4:], "little")
        found.append(int.from_bytes(piece[-4:], "little"))
    return found


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Uninterrupted runs of the command line, one per argument list, made on first use."""
    return made_runs(tmp_path_factory)


def test_a_block_is_one_shard_that_every_reader_reads(made):
    out = made(*SHARDED)
    assert sorted(p.name for p in (out / "x" / "c").iterdir()) == ["0", "1", "2", "3", "4"]  # an object a block
    array = zarr.open_array(out / "x", mode="r")
    assert array.chunks == (INNER,) and array.shards == (BLOCK,)
    (codec,) = json.loads((out / "x" / "zarr.json").read_text())["codecs"]
    assert codec["name"] == "sharding_indexed" and codec["configuration"]["index_location"] == "end"
    assert [c["name"] for c in codec["configuration"]["index_codecs"]] == ["bytes", "crc32c"]
    assert [c["name"] for c in codec["configuration"]["codecs"]][-1] == "crc32c"
    np.testing.assert_array_equal(array[:], gp(SIZE))
    import xarray as xr

    with xr.open_zarr(out) as ds:
        np.testing.assert_array_equal(ds.x.values, gp(SIZE))
    opened = streamacc.open(out)
    assert all(c % BLOCK == 0 for c in opened.x.chunks[0][:-1])  # dask reads whole shards, never an inner chunk
    np.testing.assert_array_equal(opened.x.values, gp(SIZE))
    assert streamacc.info(out).arrays["x"].shards == (BLOCK,)
    assert read_manifest(out)["format"] == "streamacc-manifest/4"
    assert main(["verify", str(out)]) == 0


def test_tensorstore_reads_a_sharded_output(made):
    ts = pytest.importorskip("tensorstore")
    out = made(*SHARDED)
    array = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(out / "x")}}).result()
    np.testing.assert_array_equal(array.read().result(), gp(SIZE))


def test_the_record_keeps_each_stored_inner_chunk_s_checksum_then_the_index_s(made):
    out = made(*SHARDED)
    records = node_attribute(out / "_streamacc/records_000000/zarr.json", "streamacc_records")
    for k, record in enumerate(records):
        raw = (out / "x" / "c" / str(k)).read_bytes()
        inner = inner_checksums(raw, BLOCK // INNER)
        stored = [crc for crc in inner if crc is not None]
        assert record["crc32c"]["x"] == [*stored, int.from_bytes(raw[-4:], "little")]
        assert len(stored) == (2 if k == 4 else 4)  # the last shard stores the inner chunks holding rows
        assert inner[len(stored) :] == [None] * (4 - len(stored))


@pytest.mark.parametrize("codec", ["blosc-lz4", "none"])
@pytest.mark.parametrize(
    ("shape", "inner", "shard"),
    [((300,), (16,), (64,)), ((70, 6, 5), (8, 4, 2), (16, 8, 6)), ((21, 3), (2, 3), (6, 3))],
    ids=["series", "tiled-edges", "rows"],
)
def test_a_shard_is_the_bytes_zarr_writes(tmp_path, codec, shape, inner, shard):
    """The same values written by the chunk writer and by zarr into identical sharded arrays: the same shards,
    byte for byte (inner chunks in zarr's order, those past the array's end not stored), and the CRC-32Cs
    returned are those the shard holds."""
    compressors = [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")] if codec != "none" else []
    arrays = [
        zarr.open_group(tmp_path / f"{name}.zarr", mode="w").create_array(
            "y", shape=shape, chunks=inner, shards=shard, dtype="float64", fill_value=np.nan,
            compressors=[*compressors, Crc32cCodec()], config={"write_empty_chunks": True},
        )
        for name in ("ours", "zarr")
    ]  # fmt: skip
    data = np.cumprod(np.full(shape, 1.001), axis=0) + np.arange(np.prod(shape)).reshape(shape)
    writer = ChunkWriter(arrays[0])
    assert writer.direct and writer.sharding is not None
    written = []
    for start in range(0, shape[0], 2 * shard[0]):  # blocks of two shards, the last one short
        written += writer.write(start, data[start : start + 2 * shard[0]])
    arrays[1][:] = data
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "ours.zarr" / "y", mode="r")[:], data)
    count = int(np.prod([s // c for s, c in zip(shard, inner, strict=True)]))
    for w in written:
        raw = (tmp_path / "ours.zarr" / w.key).read_bytes()
        assert raw == (tmp_path / "zarr.zarr" / w.key).read_bytes()
        assert list(w.checksums) == [c for c in inner_checksums(raw, count) if c is not None] + [
            int.from_bytes(raw[-4:], "little")
        ]


def test_a_small_read_fetches_one_inner_chunk_and_the_index_never_the_block(tmp_path, made):
    out = tmp_path / "out.zarr"
    shutil.copytree(made(*NONE), out)
    store = ReadCounting(LocalStore(out, read_only=True))
    ds = streamacc.open(store, chunks=None)
    store.reads.clear()
    np.testing.assert_array_equal(ds.x[2100:2110].values, gp(SIZE)[2100:2110])  # inner chunk 0 of block 2
    index = 16 * (BLOCK // INNER) + 4
    assert store.read_bytes("x/c/2") == index + INNER * 8 + 4  # the index, and one inner chunk of raw values


def swapped(out: Path, a: str, b: str) -> None:
    pa, pb = out / "x" / "c" / a, out / "x" / "c" / b
    data_a, data_b = pa.read_bytes(), pb.read_bytes()
    assert len(data_a) == len(data_b) and data_a[-68:] == data_b[-68:]  # the same size, the very same index
    pa.write_bytes(data_b)
    pb.write_bytes(data_a)


def test_shards_swapped_with_the_same_index_are_refused_by_open_and_by_verify(tmp_path, made, capfd):
    out = tmp_path / "out.zarr"
    shutil.copytree(made(*NONE), out)
    swapped(out, "1", "2")
    ds = streamacc.open(out)
    np.testing.assert_array_equal(ds.x[:1024].values, gp(SIZE)[:1024])
    foreign = r"chunk x/c/1 .* inner chunk \(0,\) that is not the one committed for block 1"
    with pytest.raises(VerifyError, match=foreign):
        _ = ds.x[1030:1040].values  # a small read: one inner chunk, checked against its record
    with pytest.raises(VerifyError, match=r"chunk x/c/[12] .*not the one committed"):
        _ = ds.x.values  # whole shards, read at once: either swapped one is found first
    code, err = run("verify", out, "--blocks", "1", capfd=capfd)  # one block recomputed, the others' checksums read
    assert code != 0 and "block 1 " in err and "shard x/c/1 holds an inner chunk that is not the one committed" in err


def test_a_damaged_inner_chunk_is_refused_where_it_is_read_and_its_neighbours_read(tmp_path, made, capfd):
    out = tmp_path / "out.zarr"
    shutil.copytree(made(*SHARDED), out)
    path = out / "x" / "c" / "3"
    raw = bytearray(path.read_bytes())
    offset, nbytes = (int(v) for v in index_of(bytes(raw), 4)[2])
    raw[offset + nbytes // 2] ^= 1  # inside inner chunk 2 of block 3, its trailer kept
    path.write_bytes(bytes(raw))
    ds = streamacc.open(out)
    np.testing.assert_array_equal(ds.x[3072 : 3072 + 2 * INNER].values, gp(SIZE)[3072 : 3072 + 2 * INNER])
    with pytest.raises(VerifyError, match=r"chunk x/c/3 .* inner chunk \(2,\) that is damaged"):
        _ = ds.x[3072 + 2 * INNER + 5].values
    code, err = run("verify", out, capfd=capfd)
    assert code != 0 and "block 3 " in err
    code, err = run("write", out, *SHARDED, "--resume", capfd=capfd)  # a resume reads every shard whole first
    assert code != 0 and "x/c/3" in err


def test_a_write_killed_at_any_store_write_resumes_to_the_uninterrupted_output_file_for_file(tmp_path, made):
    ref = made(*SHARDED)
    seen: list[str] = []
    with dies_at(0, seen):
        assert main(["write", str(tmp_path / "dry.zarr"), *map(str, SHARDED)]) == 0
    for n in range(2, len(seen) + 1, 4):  # a few of every kind of write: metadata, records, manifests
        out = tmp_path / f"k{n}.zarr"
        with dies_at(n):
            assert main(["write", str(out), *map(str, SHARDED)]) == 1
        assert main(["write", str(out), *map(str, SHARDED), "--resume"]) == 0
        assert_same_output(out, ref)


@pytest.mark.slow
def test_a_write_sigkilled_in_a_shard_resumes_to_the_uninterrupted_output(tmp_path, made):
    from helpers import faultrun_process

    out, ref = tmp_path / "out.zarr", made(*SHARDED)
    done = faultrun_process("die", 12, "write", out, *SHARDED)
    assert done.returncode == -9, done.stderr
    assert main(["write", str(out), *map(str, SHARDED), "--resume"]) == 0
    assert_same_output(out, ref)


def test_an_extended_sharded_output_is_the_longer_run(tmp_path, made):
    out, ref = tmp_path / "out.zarr", made(*[a if a != SIZE else 7000 for a in SHARDED])
    shutil.copytree(made(*SHARDED), out)
    assert main(["write", str(out), *[str(a if a != SIZE else 7000) for a in SHARDED], "--extend"]) == 0
    assert_same_output(out, ref)


def test_a_virtual_sharded_output_reads_and_materializes_to_the_stored_output(tmp_path, made):
    out, stored = tmp_path / "out.zarr", made(*SHARDED)
    assert main(["write", str(out), *map(str, SHARDED), "--virtual"]) == 0
    assert not (out / "x" / "c").exists()
    np.testing.assert_array_equal(streamacc.open(out).x[1000:1100].values, gp(SIZE)[1000:1100])
    assert main(["materialize", str(out), "--no-progress"]) == 0
    files, want = store_files(out), store_files(stored)
    data = [{k: v for k, v in found.items() if k.startswith("x/")} for found in (files, want)]
    assert data[0] == data[1]
    np.testing.assert_array_equal(streamacc.open(out).x.values, gp(SIZE))


def test_a_thinned_sharded_output_keeps_every_third_step(made):
    out = made("--size", 9000, "--block-size", 3072, "--chunks", INNER, "--save-every", 3, "--no-progress")
    array = zarr.open_array(out / "x", mode="r")
    assert array.chunks == (INNER,) and array.shards == (1024,)
    np.testing.assert_array_equal(streamacc.open(out).x.values, gp(9000)[2::3])
    assert main(["verify", str(out)]) == 0


def field(c, _):
    c = c * 1.001  # one rounding a step, as numpy's
    return c, c


def test_a_tiled_state_s_shard_holds_its_tiles_and_reads_equal(tmp_path, capfd):
    """A (40, 6) state in inner chunks of 4 rows x (16, 4): a shard spans the whole state (48 x 8, its edge
    tiles padded), and every reader reads what ``lax.scan`` computes."""
    out = tmp_path / "out.zarr"
    init = jnp.arange(240, dtype=jnp.float64).reshape(40, 6) / 7 + 1
    streamacc.write(out, field, init, length=60, block_size=8, chunks={"step": 4, "y_dim_1": 16, "y_dim_2": 4},
                    progress=False)  # fmt: skip
    expected = np.asarray(jax.lax.scan(field, init, length=60)[1])  # x64 on: conftest
    array = zarr.open_array(out / "y", mode="r")
    assert array.chunks == (4, 16, 4) and array.shards == (8, 48, 8)
    np.testing.assert_array_equal(array[:], expected)
    np.testing.assert_array_equal(streamacc.open(out).y[:, 35:, 5].values, expected[:, 35:, 5])
    assert streamacc.verify(out, field, init).complete


def test_a_run_ended_on_its_condition_inside_a_shard_reads_and_verifies(tmp_path):
    out = tmp_path / "out.zarr"

    def grow(c, _):
        c = c * 1.00000001
        return c, c

    streamacc.write(out, grow, np.float64(1.0), length=SIZE, block_size=BLOCK, chunks={"step": INNER},
                    until=lambda c, y: c > gp(2400)[-1] * (1 + 5e-9), names="x", progress=False)  # fmt: skip
    assert read_manifest(out)["ended_at"] == 2399
    raw = (out / "x" / "c" / "2").read_bytes()
    assert [c is not None for c in inner_checksums(raw, 4)] == [True, True, False, False]  # rows 2048-2399
    np.testing.assert_array_equal(streamacc.open(out).x.values, gp(2401)[1:])  # y is the carry after the step
    assert streamacc.verify(out, grow, np.float64(1.0), until=lambda c, y: c > gp(2400)[-1] * (1 + 5e-9)).complete


def test_a_codec_zarr_encodes_itself_still_records_every_inner_chunk(tmp_path, capfd):
    out = tmp_path / "out.zarr"
    assert main(["write", str(out), *map(str, SHARDED), "--codec", "zstd"]) == 0
    raw = (out / "x" / "c" / "1").read_bytes()
    records = node_attribute(out / "_streamacc/records_000000/zarr.json", "streamacc_records")
    assert records[1]["crc32c"]["x"] == [*inner_checksums(raw, 4), int.from_bytes(raw[-4:], "little")]
    np.testing.assert_array_equal(streamacc.open(out).x[2000:2010].values, gp(SIZE)[2000:2010])
    assert run("verify", out, capfd=capfd)[0] == 0


def test_a_sharded_output_on_s3_is_the_local_one_and_reads_in_parts(s3_bucket, made):
    pytest.importorskip("s3fs")
    from helpers import assert_same_objects, s3_args

    url = f"s3://{s3_bucket.name}/out.zarr"
    assert main(["write", url, *map(str, SHARDED), *s3_args(s3_bucket)]) == 0
    assert_same_objects(s3_bucket, "out.zarr", made(*SHARDED))
    options = {"endpoint_url": s3_bucket.server.endpoint}
    ds = streamacc.open(url, storage_options=options)
    np.testing.assert_array_equal(ds.x[3500:3600].values, gp(SIZE)[3500:3600])
    assert main(["verify", url, *s3_args(s3_bucket)]) == 0


def test_a_sharded_output_in_icechunk_holds_the_folder_s_bytes(tmp_path, made):
    icechunk = pytest.importorskip("icechunk")
    from zarr.buffer import default_buffer_prototype

    from streamacc.store import sync

    repo = tmp_path / "repo"
    assert main(["write", f"icechunk://{repo}", *map(str, SHARDED)]) == 0
    store = icechunk.Repository.open(icechunk.local_filesystem_storage(str(repo))).readonly_session("main").store
    for key, data in store_files(made(*SHARDED)).items():
        if key.startswith("x/"):
            assert sync(store.get(key, default_buffer_prototype())).to_bytes() == data, key
    np.testing.assert_array_equal(streamacc.open(f"icechunk://{repo}").x[10:20].values, gp(SIZE)[10:20])



class Prefix:
    """The first ``rows`` rows of a Zarr array, as a run reading a prefix of an input holds them."""

    def __init__(self, array, rows: int) -> None:
        self.array, self.rows = array, rows

    def __len__(self) -> int:
        return self.rows


def test_an_input_s_fingerprint_counts_the_shards_holding_its_first_rows(tmp_path):
    from streamacc.store import fingerprint_of

    array = zarr.create_array(tmp_path / "in.zarr", shape=(4096,), chunks=(256,), shards=(1024,), dtype="f8")
    array[:] = np.arange(4096.0)
    before = fingerprint_of(Prefix(array, 1000))
    array[2048:] = -1.0  # shards 2 and 3, past the first 1000 rows
    assert fingerprint_of(Prefix(array, 1000)) == before
    array[500:510] = -1.0
    assert fingerprint_of(Prefix(array, 1000)) != before
