"""bfloat16, the TPU's own type, stored as Zarr's bfloat16 extension data type; float16 stays as it was.

A step whose ys or carry are bfloat16 writes (through ``write`` and a ``Stream``) arrays that zarr,
xarray and ``streamacc.open`` read as bfloat16, bit for bit the values of one in-memory ``lax.scan``
(compared as their uint16 bits); a run interrupted and resumed, or extended, writes the bytes of an
uninterrupted one; ``verify`` recomputes it and catches a changed value. Its summaries hold the
exact minima and maxima (as float32) and float64 means, checked against numpy.
"""

from __future__ import annotations

import json
import textwrap

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import xarray as xr
import zarr
from helpers import assert_bits_equal, assert_same_output, failing, python, read_manifest

import streamacc
from streamacc.errors import InputError, StoreError, VerifyError
from streamacc.run.record import decode_leaves, encode_leaves

BF16 = np.dtype(ml_dtypes.bfloat16)
LENGTH, BLOCK = 1000, 128  # 8 blocks, the last one short


def step(c, x):
    """A bfloat16 recurrence with a float32 side: every value rounded to bfloat16 as the chip would."""
    c = c * jnp.asarray(0.99, c.dtype) + x.astype(c.dtype)
    return c, {"level": c, "wide": c.astype(jnp.float32) * 2}


def inputs(dtype=BF16):
    x = (np.arange(LENGTH) % 7).astype(np.float32) / 8
    return jnp.asarray(np.stack([x, -x], axis=1).astype(dtype))


def init(dtype=BF16):
    return jnp.asarray([1.0, -0.5], dtype)


def scanned(dtype=BF16, length=LENGTH):
    carry, ys = jax.lax.scan(step, init(dtype), inputs(dtype)[:length])
    return carry, {k: np.asarray(v) for k, v in ys.items()}


def bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}")


def write(out, dtype=BF16, length=LENGTH, **kw):
    return streamacc.write(out, step, init(dtype), inputs(dtype)[:length], block_size=BLOCK, progress=False, **kw)


@pytest.mark.parametrize("dtype", [BF16, np.dtype(np.float16)], ids=["bfloat16", "float16"])
def test_sixteen_bit_floats_are_stored_as_the_scan_computes_them(tmp_path, dtype):
    out = tmp_path / "out.zarr"
    carry, ys = scanned(dtype)
    assert_bits_equal(write(out, dtype), carry)
    doc = json.loads((out / "level" / "zarr.json").read_text())
    assert (doc["data_type"], doc["fill_value"]) == (dtype.name, "NaN")
    level = zarr.open_array(out / "level", mode="r")
    assert level.dtype == dtype
    assert np.array_equal(bits(level[:]), bits(ys["level"]))
    plain = xr.open_zarr(out)
    assert plain.level.dtype == dtype and np.array_equal(bits(plain.level.values), bits(ys["level"]))
    ds = streamacc.open(out)
    assert ds.level.dtype == dtype and np.array_equal(bits(ds.level.values), bits(ys["level"]))
    assert np.array_equal(bits(ds.wide.values), bits(ys["wide"]))
    assert streamacc.info(out).arrays["level"].dtype == dtype.name
    assert streamacc.verify(out, step, init(dtype), inputs(dtype)).checked_blocks == tuple(range(8))


def test_a_plain_zarr_reader_reads_bfloat16_once_the_type_is_registered(tmp_path):
    out = tmp_path / "out.zarr"
    write(out)
    want = bits(scanned()[1]["level"]).tolist()
    code = textwrap.dedent(f"""
        import json, sys, zarr
        try:
            zarr.open_array({str(out / "level")!r}, mode="r")
        except ValueError as exc:
            refused = str(exc)
        import streamacc
        streamacc.register_data_types()
        streamacc.register_data_types()
        level = zarr.open_array({str(out / "level")!r}, mode="r")
        print(json.dumps([refused, str(level.dtype), level[:].view("u2").tolist()]))
    """)
    done = python(code)
    assert done.returncode == 0, done.stderr
    refused, dtype, got = json.loads(done.stdout)
    assert "bfloat16" in refused
    assert dtype == "bfloat16" and got == want


def test_a_bfloat16_run_interrupted_and_resumed_is_the_uninterrupted_one(tmp_path):
    ref, out = tmp_path / "ref.zarr", tmp_path / "out.zarr"
    write(ref)
    with pytest.raises(StoreError):
        write(failing(out, "level/c/4/0"))
    assert read_manifest(out)["committed_blocks"] == 4
    assert_bits_equal(write(out, mode="resume"), scanned()[0])
    assert_same_output(out, ref)


def test_a_bfloat16_run_extended_is_the_longer_run(tmp_path):
    ref, out = tmp_path / "ref.zarr", tmp_path / "out.zarr"
    write(ref)
    write(out, length=500)
    assert_bits_equal(write(out, mode="extend"), scanned()[0])
    assert np.array_equal(bits(streamacc.open(out).level.values), bits(scanned()[1]["level"]))
    assert streamacc.verify(out, step, init(), inputs()).complete


def test_verify_catches_a_changed_bfloat16_value(tmp_path):
    out = tmp_path / "out.zarr"
    write(out)
    level = zarr.open_array(out / "level", mode="r+")  # zarr rewrites the chunk whole, its checksum valid
    value = level[300, 0]
    assert value > 1
    level[300, 0] = -value
    with pytest.raises(VerifyError):
        streamacc.verify(out, step, init(), inputs())


def test_the_stream_writes_bfloat16_as_write_does(tmp_path):
    carry, ys = scanned()
    out, written = tmp_path / "stream.zarr", tmp_path / "write.zarr"
    with streamacc.Stream(out, step, length=LENGTH, block_size=BLOCK, progress=False) as stream:
        got = jax.jit(stream.scan)(init(), inputs())
    assert_bits_equal(got, carry)
    assert np.array_equal(bits(streamacc.open(out).level.values), bits(ys["level"]))
    write(written)
    assert_same_output(out, written)


def test_a_carry_recorded_as_raw_bytes_by_1_0_reads_back_as_bfloat16():
    leaf = np.asarray([1.5, -2.0], BF16)
    (recorded,) = encode_leaves([(leaf, None)])
    assert recorded["dtype"] == "bfloat16"
    (back, impl), (old, _) = decode_leaves([recorded, {**recorded, "dtype": leaf.dtype.str}])
    assert leaf.dtype.str == "<V2"  # what 1.0 recorded: numpy's string for bfloat16
    for got in (back, old):
        assert got.dtype == BF16 and got.tobytes() == leaf.tobytes()
    assert impl is None


def test_an_output_zarr_cannot_store_is_refused_before_anything_is_written(tmp_path):
    def narrow(c, x):
        return c, c.astype(jnp.float8_e4m3fn)

    out = tmp_path / "out.zarr"
    with pytest.raises(InputError, match=r"dtype float8_e4m3fn, which Zarr cannot store.*astype\(jnp\.float32\)"):
        streamacc.write(out, narrow, jnp.float32(1.0), length=10, progress=False)
    assert not out.exists()
