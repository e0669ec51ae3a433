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
import warnings

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import xarray as xr
import zarr
from helpers import assert_bits_equal, assert_same_output, failing, python, read_manifest

import streamacc
from streamacc import testing
from streamacc.errors import InputError, StoreError, StreamaccWarning, VerifyError
from streamacc.record import decode_leaves, encode_leaves
from streamacc.summaries import reduce_steps

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


def rounded(c, _):
    """Constants and no input: each product rounded to bfloat16 before the sum, as bfloat16 arithmetic is."""
    c = c * jnp.asarray(0.99, c.dtype) + jnp.asarray(0.5, c.dtype)
    return c, c


@pytest.mark.parametrize(
    ("f", "unroll", "every", "reverse"),
    [(step, 4, 1, False), (step, 1, 3, True), (step, 3, 5, False), (rounded, 1, 1, False), (rounded, 2, 3, True)],
)
def test_bfloat16_blocks_hold_one_scans_bits_whatever_the_scan_keywords(tmp_path, f, unroll, every, reverse):
    """Blocks all of one length: XLA's CPU compiler breaks a tie between two bfloat16s to even in a long loop and
    up in a short one (``rounded``'s third step, 2.4453125, is 2.4375 in a scan of 120 steps or more, 2.453125 in
    one of 3 to 119), so a short block can hold other bits than the same steps of a long scan."""
    out, length = tmp_path / "out.zarr", 960
    xs = inputs()[:length] if f is step else None
    carry, ys = jax.lax.scan(f, init(), xs, length=length, unroll=unroll, reverse=reverse)
    keywords = {"unroll": unroll, "save_every": every, "reverse": reverse, "block_size": 120, "progress": False}
    assert_bits_equal(streamacc.write(out, f, init(), xs, length=length, **keywords), carry)
    name = "level" if f is step else "y"
    kept = np.asarray(ys[name] if f is step else ys)[every - 1 :: every]
    assert np.array_equal(bits(zarr.open_array(out / name, mode="r")[:]), bits(kept))


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


def test_bfloat16_summaries_hold_its_exact_extremes_and_float64_means(tmp_path):
    out = tmp_path / "out.zarr"
    write(out, summaries=[16, 256])
    data = scanned()[1]["level"].astype(np.float64)  # every bfloat16 is a float64 exactly
    level = xr.open_zarr(out, group="_streamacc/summaries/w16")
    assert level.level_min.dtype == np.float32 and level.level_mean.dtype == np.float64
    windows = data[: LENGTH // 16 * 16].reshape(-1, 16, 2)
    rows = len(windows)
    assert np.array_equal(level.level_min.values[:rows], windows.min(axis=1))
    assert np.array_equal(level.level_max.values[:rows], windows.max(axis=1))
    assert np.allclose(level.level_mean.values[:rows], windows.mean(axis=1), rtol=1e-14, atol=0)
    assert np.array_equal(level.level_min.values[rows], data[rows * 16 :].min(axis=0))  # the short last window
    assert streamacc.verify(out, step, init(), inputs()).summary_windows > 0


def holes(c, x):
    """A bfloat16 recurrence whose y is NaN where x is (and only there)."""
    c = c * jnp.asarray(0.99, c.dtype) + jnp.where(jnp.isnan(x), jnp.zeros_like(x), x)
    return c, c + (x - x)


@pytest.mark.parametrize(("width", "slice_bytes"), [(None, 256), (64, 1024)], ids=["series", "state"])
def test_bfloat16_summaries_reduced_a_slice_at_a_time_skip_nans_exactly(tmp_path, width, slice_bytes):
    """Blocks past the bytes numpy's reductions are cut at: a series' windows in slices, a state's values in tiles."""
    length = 3000 if width is None else 600
    shape = (length,) if width is None else (length, width)
    rng = np.random.default_rng(7)
    xs = rng.uniform(-1, 1, shape).astype(np.float32)
    xs.reshape(length, -1)[rng.integers(0, length, 40), 0] = np.nan
    first = int(np.flatnonzero(np.isnan(xs.reshape(length, -1)).any(axis=1))[0])
    xs = jnp.asarray(xs.astype(BF16))
    c0 = jnp.zeros(shape[1:], BF16)
    out = tmp_path / "out.zarr"
    with testing.patched("summaries.SLICE_BYTES", slice_bytes):
        with pytest.warns(StreamaccWarning, match=f"y holds a NaN or an infinity at step {first},"):
            streamacc.write(out, holes, c0, xs, block_size=1024 if width is None else 256, summaries=[16],
                            progress=False)  # fmt: skip
        assert streamacc.verify(out, holes, c0, xs).summary_windows > 0
    y = np.asarray(jax.lax.scan(holes, c0, xs)[1]).astype(np.float64)  # every bfloat16 is a float64 exactly
    windows = y[: length // 16 * 16].reshape(-1, 16, *shape[1:])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN window's statistics are NaN
        want_min, want_max, want_mean = np.nanmin(windows, 1), np.nanmax(windows, 1), np.nanmean(windows, 1)
    level = xr.open_zarr(out, group="_streamacc/summaries/w16")
    rows = len(windows)
    assert np.isnan(windows).any()
    assert np.array_equal(level.y_min.values[:rows], want_min, equal_nan=True)
    assert np.array_equal(level.y_max.values[:rows], want_max, equal_nan=True)
    assert np.allclose(level.y_mean.values[:rows], want_mean, rtol=1e-12, atol=1e-15, equal_nan=True)
    assert np.array_equal(level.y_count.values[:rows], (~np.isnan(windows)).sum(axis=1))


def test_bfloat16_is_reduced_as_the_float32_holding_it_whole_or_in_tiles():
    """A window's statistics of bfloat16 values are those of the same values as float32, whatever the slices."""
    rng = np.random.default_rng(3)
    data = rng.standard_normal((96, 200)).astype(np.float32) * 50
    data[rng.random(data.shape) < 0.02] = np.nan
    data[40, :3], data[41, :2] = np.inf, -0.0
    narrow = data.astype(BF16)
    wide = narrow.astype(np.float32)
    for slice_bytes in (2**40, 32 * 100 * 2):
        for axis, batch in ((1, (3, 32, 200)), (0, (96, 200))):
            with np.errstate(invalid="ignore"), testing.patched("summaries.SLICE_BYTES", slice_bytes):
                got = reduce_steps(narrow.reshape(batch), axis)
                want = reduce_steps(wide.reshape(batch), axis)
            for a, b in zip(got.fields(), want.fields(), strict=True):
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (slice_bytes, axis)


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
