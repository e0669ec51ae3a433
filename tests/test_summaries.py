"""Window summaries: every stored row against numpy over the same steps, at every level, for any
block layout, dtype and state shape; interrupted and resumed runs; damage that verify must
catch; ``streamacc.overview`` on finished, unfinished, data-less and S3 outputs."""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import shutil
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
import zarr
from helpers import assert_same_output, failing, read_manifest, write_manifest

import streamacc
import streamacc.cli
from streamacc.errors import InputError, NoOutputError, ResumeError, StoreError, VerifyError

LENGTH = 1000
WINDOWS = [8, 32, 128]  # the last window of each level is short: 1000 is no multiple of any
NAN = (np.arange(LENGTH) % 97 == 5) | ((np.arange(LENGTH) >= 200) & (np.arange(LENGTH) < 264))  # 200-263: all NaN
XS = np.arange(LENGTH, dtype=np.float64)


def step(c, i):
    c = c * 0.999 + jnp.sin(i)
    f = jnp.where(jnp.asarray(NAN)[i.astype(jnp.int32)], jnp.nan, c)
    return c, {
        "f": f,  # float64 with NaNs, and windows of nothing but NaN
        "g": c.astype(jnp.float32),
        "i": (i.astype(jnp.int32) * 7919) % 1000 - 500,
        "b": jnp.sin(3.0 * i) > 0,
        "v": jnp.stack([c, -2.0 * c, i]),  # a state with a trailing axis
    }


def data() -> dict[str, np.ndarray]:
    """The outputs, from one in-memory ``lax.scan`` (the summaries' reference is numpy over these)."""
    _, ys = jax.lax.scan(step, jnp.float64(0.0), jnp.asarray(XS))
    return {k: np.asarray(v) for k, v in ys.items()}


def write(out, **kw):
    args = {"length": None, "block_size": 64, "progress": False, "summaries": WINDOWS, **kw}
    with warnings.catch_warnings():  # f holds NaNs on purpose: the warning that says so is tested elsewhere
        warnings.filterwarnings("ignore", ".*: f holds a NaN", streamacc.errors.StreamaccWarning)
        return streamacc.write(out, step, np.float64(0.0), XS, **args)


def interrupt(out, at: int, *, block_size: int, **kw) -> None:
    """``write(out, **kw)`` failing at the block that starts at step ``at``: steps before it stay committed."""
    with pytest.raises(StoreError):
        write(failing(out, f"f/c/{at // block_size}"), block_size=block_size, **kw)


_EXPECTED: dict[tuple, dict[str, np.ndarray]] = {}


def expected(values: np.ndarray, window: int) -> dict[str, np.ndarray]:
    """min, max, mean and count of each window, by numpy over the same steps (NaNs skipped); each computed once."""
    key = (values.dtype.str, values.shape, values.tobytes(), window)
    if key not in _EXPECTED:
        _EXPECTED[key] = _expected(values, window)
    return _EXPECTED[key]


def _expected(values: np.ndarray, window: int) -> dict[str, np.ndarray]:
    out = {k: [] for k in ("min", "max", "mean", "count")}
    for start in range(0, len(values), window):
        w = (
            values[start : start + window].astype(np.float64)
            if values.dtype == bool
            else values[start : start + window]
        )
        ok = ~np.isnan(w) if w.dtype.kind == "f" else np.ones(w.shape, bool)
        count = ok.sum(axis=0)
        with pytest.warns(RuntimeWarning) if (count == 0).any() else contextlib.nullcontext():
            out["min"].append(np.nanmin(w, axis=0) if w.dtype.kind == "f" else w.min(axis=0))
            out["max"].append(np.nanmax(w, axis=0) if w.dtype.kind == "f" else w.max(axis=0))
            out["mean"].append(np.nanmean(w.astype(np.float64), axis=0))
        out["count"].append(count)
    return {k: np.asarray(v) for k, v in out.items()}


def assert_rows(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str) -> None:
    for stat in ("min", "max", "count"):  # exact
        np.testing.assert_array_equal(np.asarray(got[stat], dtype=np.float64), want[stat].astype(np.float64),
                                      err_msg=f"{what} {stat}")  # fmt: skip
    np.testing.assert_allclose(got["mean"], want["mean"], rtol=1e-12, atol=1e-12, err_msg=f"{what} mean")


@pytest.fixture(scope="module")
def reference():
    return data()


@pytest.fixture(scope="module")
def written(tmp_path_factory, reference):
    """The same run cut into blocks longer than the windows, shorter than them, and of odd size."""
    outs = {}
    for block in (24, 64, 300):
        out = tmp_path_factory.mktemp(f"b{block}") / "out.zarr"
        write(out, block_size=block)
        outs[block] = out
    return outs


@pytest.mark.parametrize("block", [24, 64, 300])
def test_every_stored_row_matches_numpy(written, reference, block):
    out = written[block]
    for window in WINDOWS:
        group = zarr.open_group(out / f"_streamacc/summaries/w{window}", mode="r")
        for name, values in reference.items():
            got = {stat: group[f"{name}_{stat}"][:] for stat in ("min", "max", "mean", "count")}
            assert got["min"].dtype == values.dtype and got["mean"].dtype == np.float64
            assert_rows(got, expected(values, window), f"{name} w{window} block {block}")
    verify = streamacc.verify(out, step, np.float64(0.0), XS)
    assert verify.summary_windows == sum(-(-LENGTH // w) for w in WINDOWS) * len(reference)


def test_rows_reduced_a_few_windows_at_a_time_match_numpy(tmp_path, reference, seam):
    """Large blocks are reduced a slice of windows at a time, a slice holding a NaN window again: numpy's rows,
    and every byte of the output the same as with each block reduced whole."""
    whole, sliced = tmp_path / "whole.zarr", tmp_path / "sliced.zarr"
    write(whole, block_size=300)
    seam("summaries.SLICE_BYTES", 200)  # here three windows of 8 float64 steps a slice
    write(sliced, block_size=300)
    for window in WINDOWS:
        group = zarr.open_group(sliced / f"_streamacc/summaries/w{window}", mode="r")
        for name, values in reference.items():
            got = {stat: group[f"{name}_{stat}"][:] for stat in ("min", "max", "mean", "count")}
            assert_rows(got, expected(values, window), f"{name} w{window} in slices")
    assert_same_output(sliced, whole)


# a scalar series, a 1024-point state and a 32x32 field (summarised value by value), a 4096-point state and a
# 256x256 field (summarised over their whole state), each with NaNs: at scattered steps and points, and at a
# few points through a whole window (min, max and mean NaN there, count 0); shape -> (length, block, windows)
STATES = {
    (): (10_000, 1000, [64, 1024]),
    (1024,): (512, 128, [64, 256]),
    (32, 32): (96, 16, [4, 16]),
    (4096,): (512, 128, [64, 256]),
    (256, 256): (48, 16, [4, 16]),
}


def expected_over_state(values: np.ndarray, window: int) -> dict[str, np.ndarray]:
    """min, max, mean and count of each window over every value of its steps, by numpy (NaNs skipped)."""
    flat = [values[s : s + window].reshape(-1, 1) for s in range(0, len(values), window)]
    rows = [expected(f, len(f)) for f in flat]  # one window over all of them
    return {k: np.concatenate([r[k] for r in rows]).reshape(-1) for k in ("min", "max", "mean", "count")}


def state_step(shape, length):
    points = int(np.prod(shape, dtype=np.int64))
    index = jnp.arange(points).reshape(shape)
    offset = index.astype(jnp.float64) * 1e-3

    def f(c, i):
        c = c * 0.999 + jnp.sin(i + offset)
        scattered = (i.astype(jnp.int32) % 7 == 3) & (index % 5 == 0)
        stretch = (i >= length // 4) & (i < length // 2) & (index < 10)
        return c, jnp.where(scattered | stretch, jnp.nan, c)

    return f, jnp.zeros(shape, jnp.float64)


@pytest.mark.parametrize("shape", list(STATES), ids=["series", "state1024", "field32x32", "state4096", "field256x256"])
def test_summaries_of_a_series_a_large_state_and_a_field_with_nans_match_numpy(tmp_path, shape, seam):
    """Against numpy over the same steps (NaNs skipped): min, max and count exactly, means to 1e-12. Windows larger
    than a slice of a reduction are reduced a tile of the state's values at a time: every byte is that of reductions
    over whole windows."""
    length, block, windows = STATES[shape]
    f, init = state_step(shape, length)
    xs = np.arange(length, dtype=np.float64)
    _, ys = jax.lax.scan(f, init, jnp.asarray(xs))
    values = np.asarray(ys)
    args = {"block_size": block, "progress": False, "summaries": windows, "names": "y"}
    with warnings.catch_warnings():  # y holds NaNs on purpose
        warnings.filterwarnings("ignore", ".*: y holds a NaN", streamacc.errors.StreamaccWarning)
        streamacc.write(tmp_path / "tiled.zarr", f, init, xs, **args)
        seam("summaries.SLICE_BYTES", 2**40)  # each window in one call
        streamacc.write(tmp_path / "whole.zarr", f, init, xs, **args)
    assert_same_output(tmp_path / "tiled.zarr", tmp_path / "whole.zarr")
    size = int(np.prod(shape, dtype=np.int64))
    over = size > 1024  # summarised over the whole state: each window's statistics over every value of its steps
    assert streamacc.info(tmp_path / "tiled.zarr").summaries.over_state == (("y",) if over else ())
    for window in windows:
        group = zarr.open_group(tmp_path / f"tiled.zarr/_streamacc/summaries/w{window}", mode="r")
        got = {stat: group[f"y_{stat}"][:] for stat in ("min", "max", "mean", "count")}
        want = expected_over_state(values, window) if over else expected(values, window)
        assert got["min"].shape == want["min"].shape
        full = window * size if over else window
        assert (want["count"] < full).any() and (over or window > windows[0] or (want["count"] == 0).any())  # NaNs
        assert_rows(got, want, f"{shape} w{window}")
    report = streamacc.verify(tmp_path / "tiled.zarr", f, init, xs)
    assert report.summary_windows == sum(-(-length // w) for w in windows)


def test_a_state_is_reduced_in_tiles_of_its_values_bit_for_bit_as_whole():
    """The tiles of a state's values (at least 64 of them, the last never narrower) give each value the bits of one
    numpy reduction over its window's steps, whatever the dtype, NaNs and infinities included."""
    from streamacc.summaries import reduce_steps
    from streamacc.testing import patched

    rng = np.random.default_rng(5)
    for dtype in ("float64", "float32", "int16", "bool"):
        for values in (64, 200, 4096):
            data = rng.standard_normal((96, values)) * 50
            if dtype.startswith("float"):
                data[rng.random(data.shape) < 0.02] = np.nan
                data[:32, :70] = np.nan
                data[40, :3] = np.inf
            data = data > 0 if dtype == "bool" else data.astype(dtype)
            for axis, batch in ((1, data.reshape(3, 32, values)), (0, data)):
                with np.errstate(invalid="ignore"):
                    with patched("summaries.SLICE_BYTES", 2**40):
                        whole = reduce_steps(batch, axis)
                    with patched("summaries.SLICE_BYTES", 32 * 100 * batch.itemsize):  # tiles of 100 values
                        tiled = reduce_steps(batch, axis)
                for a, b in zip(whole.fields(), tiled.fields(), strict=True):
                    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), (dtype, values)


def test_a_window_of_zeros_of_both_signs_has_minimum_minus_zero_and_maximum_zero():
    """Whatever numpy's loops give for a tie, a window's minimum is -0.0 if it holds a -0.0 and its maximum 0.0 if it
    holds a 0.0, for one window, a batch, a state and its tiles, NaNs beside: the reference is the signs counted."""
    from streamacc.summaries import reduce_steps
    from streamacc.testing import patched

    rng = np.random.default_rng(9)
    for dtype in ("float64", "float32"):
        data = rng.choice(np.array([0.0, -0.0, 1.0, -1.0, np.nan], dtype), p=[0.4, 0.4, 0.08, 0.08, 0.04],
                          size=(64, 32, 130))  # fmt: skip
        data[:, :, :60] = np.abs(data[:, :, :60])  # no negatives there: minimums of zero
        data[:, :, 60:120] = -np.abs(data[:, :, 60:120])  # no positives there: maximums of zero
        zero, nan = data == 0, np.isnan(data)
        for slice_bytes in (2**40, 32 * 64 * data.itemsize):  # whole, and in tiles of 64 values
            with np.errstate(invalid="ignore"), patched("summaries.SLICE_BYTES", slice_bytes):
                got = reduce_steps(data, 1)
                one = reduce_steps(data[3, :, 5], 0)
            low, high = np.fmin.reduce(data, axis=1), np.fmax.reduce(data, axis=1)
            want_low = np.where(low == 0, np.where((zero & np.signbit(data)).any(axis=1), -0.0, 0.0), low)
            want_high = np.where(high == 0, np.where((zero & ~np.signbit(data)).any(axis=1), 0.0, -0.0), high)
            assert (low == 0).any() and (high == 0).any() and nan.any()
            assert got.min.tobytes() == want_low.astype(dtype).tobytes(), (dtype, slice_bytes)
            assert got.max.tobytes() == want_high.astype(dtype).tobytes(), (dtype, slice_bytes)
            assert one.min.tobytes() == want_low[3, 5].astype(dtype).tobytes()
            assert one.max.tobytes() == want_high[3, 5].astype(dtype).tobytes()


def test_overview_reads_each_level_with_the_output_dims(written, reference):
    out = written[64]
    for points, window in [(1, 128), (8, 128), (9, 32), (32, 32), (33, 8), (10**6, 8)]:
        ds = streamacc.overview(out, points=points)
        assert ds.attrs["window"] == window and ds.encoding["streamacc_complete"] == 1
        np.testing.assert_array_equal(ds.step.values, np.arange(0, LENGTH, window))
        for name, values in reference.items():
            got = {stat: ds[f"{name}_{stat}"].values for stat in ("min", "max", "mean")}
            want = expected(values, window)
            got["count"] = want["count"]
            assert_rows(got, want, f"overview {name} w{window}")
    assert ds["v_mean"].dims == ("step", "v_dim_1") and ds["v_mean"].shape == (-(-LENGTH // 8), 3)
    part = streamacc.overview(out, points=10, steps=(300, 700))
    assert part.attrs["window"] == 32 and part.step.values[0] == 288 and part.step.values[-1] == 672


def test_summaries_are_invisible_to_plain_readers_and_listed_by_info(written):
    out = written[64]
    assert sorted(xr.open_zarr(out).data_vars) == list("bfgiv")
    assert sorted(streamacc.open(out).data_vars) == list("bfgiv")
    level = xr.open_zarr(out / "_streamacc/summaries/w32")  # readable with xarray on their own
    assert level.f_max.sizes["window"] == 32 and level.v_mean.dims == ("window", "v_dim_1")
    info = streamacc.info(out)
    assert info.summaries.windows == tuple(WINDOWS) and info.summaries.arrays == tuple("bfgiv")
    assert "summaries: min, max, mean of b, f, g, i, v per 8, 32, 128 steps" in str(info)


def test_overview_needs_only_the_summaries(tmp_path, written):
    out = tmp_path / "out.zarr"
    shutil.copytree(written[64], out)
    before = streamacc.overview(written[64], points=10)
    for name in "fgibv":
        shutil.rmtree(out / name / "c")
    xr.testing.assert_identical(streamacc.overview(out, points=10), before)


def test_summaries_as_streamacc_writes_them_are_read_without_zarr_as_zarr_reads_them(written):
    from streamacc.store import open_target
    from streamacc.summaries import plain_array, plain_group

    out = written[24]
    target = open_target(out, read_only=True)
    assert plain_group(json.loads((out / "_streamacc/summaries/zarr.json").read_text()))
    arrays = 0
    for window in WINDOWS:
        level = out / f"_streamacc/summaries/w{window}"
        assert plain_group(json.loads((level / "zarr.json").read_text()))  # with its consolidated metadata
        for name in "bfgiv":
            for stat in ("min", "max", "mean", "count"):
                path = f"_streamacc/summaries/w{window}/{name}_{stat}"
                plain = plain_array(json.loads((out / path / "zarr.json").read_text()))
                assert plain is not None, path
                stored = zarr.open_array(out / path, mode="r")
                for start, stop in [(0, stored.shape[0]), (3, stored.shape[0] - 2), (5, 6)]:
                    got, want = plain.read(target, path, start, stop), stored[start:stop]
                    assert got.dtype == want.dtype and got.shape == want.shape
                    np.testing.assert_array_equal(got, want)
                arrays += 1
    assert arrays == len(WINDOWS) * 5 * 4


def test_summaries_of_any_other_form_are_read_by_zarr_which_names_what_is_wrong(tmp_path, written):
    from streamacc.summaries import plain_array, plain_group

    before = streamacc.overview(written[64], points=20)  # the level of 32 steps
    out = tmp_path / "edited.zarr"
    shutil.copytree(written[64], out)
    meta = out / "_streamacc/summaries/w32/f_min/zarr.json"
    doc = json.loads(meta.read_text())
    doc["attributes"]["note"] = ["a", "list"]  # zarr reads it; the plain reader leaves it to zarr
    meta.write_text(json.dumps(doc, indent=2))
    level = out / "_streamacc/summaries/w32/zarr.json"
    group = json.loads(level.read_text())
    group["consolidated_metadata"]["metadata"]["f_min"] = doc
    level.write_text(json.dumps(group, indent=1))
    assert plain_array(doc) is None and not plain_group(group)
    xr.testing.assert_identical(streamacc.overview(out, points=20), before)
    for wrong in ({**doc, "data_type": "complex128"}, {**doc, "fill_value": 0.5}, {**doc, "storage_transformers": [{}]},
                  {**doc, "codecs": doc["codecs"][:-1]}, {**doc, "extra": 1}):  # fmt: skip
        assert plain_array(wrong) is None
    flipped = tmp_path / "flipped.zarr"
    shutil.copytree(written[64], flipped)
    chunk = flipped / "_streamacc/summaries/w32/i_min/c/0"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    with pytest.raises(VerifyError, match=r"'i': chunk _streamacc/summaries/w32/i_min/c/0 does not decode"):
        streamacc.overview(flipped, points=20)  # the level of 32 steps
    chunk.unlink()
    with pytest.raises(VerifyError, match=r"'i': chunk _streamacc/summaries/w32/i_min/c/0 is missing"):
        streamacc.overview(flipped, points=20)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "out.zarr"
    write(out, block_size=100)
    return out


@pytest.mark.parametrize("k", [1, 4, 9])
def test_an_interrupted_run_shows_exactly_its_committed_steps_and_resumes_identically(
    tmp_path, uninterrupted, reference, k
):
    out = tmp_path / "out.zarr"
    interrupt(out, k * 100, block_size=100)
    committed = k * 100
    ds = streamacc.overview(out, points=10**6)
    assert ds.encoding["streamacc_complete"] == 0 and ds.encoding["streamacc_committed_steps"] == committed
    assert ds.step.values[-1] < committed <= ds.step.values[-1] + 8
    for name, values in reference.items():
        want = expected(values[:committed], 8)
        got = {stat: ds[f"{name}_{stat}"].values for stat in ("min", "max", "mean")}
        assert_rows({**got, "count": want["count"]}, want, f"interrupted {name}")
    coarse = streamacc.overview(out, points=1)  # the open coarse window covers the committed steps too
    want = expected(reference["f"][:committed], 128)
    assert_rows({s: coarse[f"f_{s}"].values for s in ("min", "max", "mean")} | {"count": want["count"]}, want, "coarse")
    streamacc.verify(out, step, np.float64(0.0), XS)
    write(out, block_size=100, mode="resume")
    assert_same_output(out, uninterrupted)


def test_damaged_summaries_are_caught_by_verify(tmp_path, written):
    def copy(name):
        out = tmp_path / name
        shutil.copytree(written[64], out)
        return out

    finest = copy("finest.zarr")
    arr = zarr.open_array(finest / "_streamacc/summaries/w8/f_max", mode="r+")
    arr[40] = arr[40] + 1e-9  # a valid chunk, one value off
    coarse = copy("coarse.zarr")
    arr = zarr.open_array(coarse / "_streamacc/summaries/w128/v_mean", mode="r+")
    arr[3, 1] = 0.0
    for out in (finest, coarse):
        for blocks in ("all", 3):
            with pytest.raises(VerifyError, match=r"the summaries of '[fv]'.*do not match"):
                streamacc.verify(out, step, np.float64(0.0), XS, blocks=blocks)
    flipped = copy("flipped.zarr")
    chunk = flipped / "_streamacc/summaries/w32/i_min/c/0"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    with pytest.raises(VerifyError, match="the summaries of 'i' cannot be read"):
        streamacc.verify(flipped, step, np.float64(0.0), XS)


def test_a_damaged_or_foreign_tail_is_refused(tmp_path):
    out = tmp_path / "out.zarr"
    interrupt(out, 500, block_size=100)
    manifest = read_manifest(out)
    good = manifest["summaries"]
    assert sorted(good) == list("bfgiv") and good["f"]["open"] == [62, 496, 500]  # steps 496-499 of window 62
    manifest["summaries"] = {**good, "f": {**good["f"], "arrays": "not base64!"}}
    write_manifest(out, manifest)
    for action in (lambda: streamacc.verify(out, step, np.float64(0.0), XS), lambda: streamacc.overview(out)):
        with pytest.raises(VerifyError, match=r"summaries of .* are damaged \(the tail its manifest records"):
            action()
    with pytest.raises(ResumeError, match=r"cannot resume: the summaries of .* are damaged"):
        write(out, block_size=100, mode="resume")
    manifest.update(summaries=good, committed_blocks=4, committed_steps=400)  # the tail covers 500 steps
    write_manifest(out, manifest)
    with pytest.raises(VerifyError, match="they cover 500 rows of 'b', the manifest commits 400"):
        streamacc.overview(out)


def test_no_summaries_reverse_and_bad_windows(tmp_path):
    off = tmp_path / "off.zarr"
    write(off, summaries=False)
    assert not (off / "_streamacc" / "summaries").exists()
    assert "summaries: none" in str(streamacc.info(off))
    np.testing.assert_array_equal(streamacc.overview(off)["b_max"].values, streamacc.open(off)["b"].values)  # small
    big = tmp_path / "big.zarr"
    streamacc.write(big, lambda c, _: (c + np.float32(1.0), c), np.float32(0.0), length=2**22 + 1, summaries=False,
                    progress=False)  # fmt: skip
    with pytest.raises(NoOutputError, match=r"has no summaries .*summaries=False"):
        streamacc.overview(big)
    cplx = tmp_path / "complex.zarr"
    streamacc.write(cplx, lambda c, _: (c * np.complex64(1j), c), np.complex64(1.0), length=1000, progress=False)
    with pytest.raises(NoOutputError, match=r"its outputs y \(complex64\) are not ordered real numbers, which are"):
        streamacc.overview(cplx)
    rev = tmp_path / "rev.zarr"
    write(rev, reverse=True, summaries=True)
    assert not (rev / "_streamacc" / "summaries").exists()
    np.testing.assert_array_equal(streamacc.overview(rev)["b_min"].values, streamacc.open(rev)["b"].values)
    for bad in ([8, 12], [0, 8], [16, 8], "8", [8.0], 3):
        with pytest.raises(InputError, match="summaries"):
            write(tmp_path / "bad.zarr", summaries=bad)
    assert not (tmp_path / "bad.zarr").exists()
    with pytest.raises(InputError, match="points"):
        streamacc.overview(off, points=0)


def state(c, i):
    """The state ``v`` of :func:`step` alone: one array on S3 (each array keeps four more per summary level)."""
    c = c * 0.999 + jnp.sin(i)
    return c, jnp.stack([c, -2.0 * c, i])


@pytest.mark.slow
def test_overview_on_object_storage_while_unfinished(s3_bucket):
    url, options = s3_bucket.url("out.zarr"), s3_bucket.storage_options
    kw = {"length": None, "block_size": 100, "names": ["v"], "summaries": [32], "progress": False}
    with pytest.raises(StoreError):
        streamacc.write(failing(url, "v/c/6/0", **options), state, np.float64(0.0), XS, **kw)
    ds = streamacc.overview(url, points=18, storage_options=options)
    assert ds.attrs["window"] == 32 and ds.encoding["streamacc_committed_steps"] == 600
    v = np.asarray(jax.lax.scan(state, jnp.float64(0.0), jnp.asarray(XS))[1])
    want = expected(v[:600], 32)
    assert_rows({s: ds[f"v_{s}"].values for s in ("min", "max", "mean")} | {"count": want["count"]}, want, "s3")
    streamacc.write(url, state, np.float64(0.0), XS, storage_options=options, mode="resume", **kw)
    assert streamacc.verify(url, state, np.float64(0.0), XS, storage_options=options).summary_windows > 0


def test_a_finished_run_keeps_no_tail(written):
    for block, out in written.items():
        tail = read_manifest(out)["summaries"]
        for entry in tail.values():
            assert entry["emitted"] == entry["durable"] == [-(-LENGTH // w) for w in WINDOWS] and "open" not in entry
        assert len(json.dumps(tail)) < 2048, block


def test_default_windows_follow_the_output_length_thinned_or_short(tmp_path):
    """A 2**26-step run keeping every 256th step has 2**18 rows: its finest default windows give at least 1024
    windows (of 256 rows), not 64; a shorter output gets windows of 128 rows, or of 16 below 2**16 values, never
    fewer (the summaries of windows of one row took three times an output's data)."""
    from streamacc.base import default_windows

    assert default_windows(2**18) == [256, 1024, 4096, 16384, 65536]
    assert default_windows(2**40) == [2**12, 2**14, 2**16, 2**18, 2**20]
    assert default_windows(2**16) == [128, 512, 2048, 8192, 32768] and default_windows(500) == [16, 64, 256]
    assert default_windows(10) == [16] and default_windows(500, 200) == [128]  # one partial window
    for rows in (1, 1000, 1024, 3000, 65537, 2**22 - 1, 2**22, 2**33):
        windows = default_windows(rows)
        assert all(b == 4 * a for a, b in itertools.pairwise(windows)) and all(w <= rows for w in windows[1:])
        least = 128 if rows >= 2**16 else 16
        assert least <= windows[0] <= 4096
        assert windows[0] == least or (rows // windows[0] >= 1024 and (windows[0] == 4096 or rows // windows[0] < 2048))
    out = tmp_path / "thinned.zarr"
    streamacc.write(out, lambda c, _: (c + 1.0, c), np.float64(0.0), length=2**25, save_every=64, progress=False)
    assert streamacc.info(out).summaries.windows == (512, 2048, 8192, 32768, 131072)  # 2**19 rows
    streamacc.write(out, lambda c, _: (c + 1.0, c), np.float64(0.0), length=2**26, save_every=64, mode="extend",
                    progress=False)  # fmt: skip
    assert streamacc.info(out).summaries.windows == (512, 2048, 8192, 32768, 131072)  # an extension keeps its levels


def test_the_overview_reads_the_windows_its_picture_needs_not_four_times_as_many(tmp_path):
    """Levels 4 apart: the picture of ``points`` windows reads a level of fewer than 4 times as many, and of
    exactly as many where the length is ``points`` times a level's window (2**30 steps: 4096 of 2**18 steps;
    levels 16 apart read 16,384 there). 2**19 steps drawn in 256 windows read 256 of 2048 steps, not 1024 of 512."""
    from streamacc.base import default_windows

    for rows in (2**26, 2**28, 2**30, 2**31, 2**32, 3 * 2**29):  # up to 4096 windows of the coarsest, 2**20
        windows = default_windows(rows)
        read = min(n for n in (-(-rows // w) for w in windows) if n >= 4096)  # the coarsest level giving 4096
        assert read < 4 * 4096 and (read == 4096 or rows not in (2**26, 2**28, 2**30, 2**32)), (rows, read)
    out = tmp_path / "out.zarr"
    streamacc.write(out, lambda c, _: (c + 1.0, c), np.float64(0.0), length=2**19, progress=False)
    ds = streamacc.overview(out, points=256)
    assert ds.sizes["step"] == 256 and ds.attrs["window"] == 2048
    np.testing.assert_array_equal(ds["y_max"].values, np.arange(2047, 2**19, 2048, dtype=np.float64))


def test_a_small_output_has_no_summaries_and_its_overview_draws_every_row_from_its_data(tmp_path, capsys):
    """A 4096-row output (2**16 steps, every 16th kept) is drawn from its data in 4096 windows of a row each (its
    summaries gave 256); a 2**16-step write keeps no summary file beside its data; extended from small, an
    output keeps none, and its overview reads windows of two rows."""
    out = tmp_path / "thinned.zarr"
    streamacc.write(out, lambda c, _: (c + 1.0, c), np.float64(0.0), length=2**16, save_every=16, progress=False)
    assert streamacc.info(out).summaries is None and not (out / "_streamacc" / "summaries").exists()
    ds = streamacc.overview(out)
    assert ds.sizes["step"] == 4096 and ds.attrs["window"] == 16 and ds.attrs["windows"] == [16]
    steps = np.arange(15, 2**16, 16)
    np.testing.assert_array_equal(ds["step"].values, steps)
    for stat in ("min", "max", "mean"):
        np.testing.assert_array_equal(ds[f"y_{stat}"].values, steps.astype(np.float64))  # one row: the value
    ds = streamacc.overview(out, points=60, steps=(40, 4000))  # windows of 4 rows, from row 0 (step 15) on
    rows = np.arange(0, 4096, dtype=np.float64) * 16 + 15
    want = rows[:252].reshape(63, 4)
    np.testing.assert_array_equal(ds["y_min"].values, want.min(axis=1)[:63])
    np.testing.assert_array_equal(ds["y_mean"].values, want.mean(axis=1)[:63])
    assert ds.attrs["window"] == 64 and ds["step"].values[0] == 15
    streamacc.write(out, lambda c, _: (c + 1.0, c), np.float64(0.0), length=2**17, save_every=16, mode="extend",
                    progress=False)  # fmt: skip
    ds = streamacc.overview(out)
    assert ds.attrs["window"] == 32 and ds.sizes["step"] == 4096
    np.testing.assert_array_equal(ds["y_max"].values, np.arange(31, 2**17, 32, dtype=np.float64))
    small = tmp_path / "small.zarr"
    assert streamacc.cli.main(["write", str(small), "--size", "2**16", "--no-progress"]) == 0
    assert not (small / "_streamacc" / "summaries").exists() and "summaries" not in capsys.readouterr().out


def test_default_windows_of_a_large_state_hold_at_most_a_million_values_at_the_finest(tmp_path):
    """A short output of a 4096-point state gets fewer, longer finest windows: 2**20 values per statistic at most,
    never windows longer than a long output's finest (4096 rows)."""
    from streamacc.base import default_windows

    assert default_windows(2**17) == [128, 512, 2048, 8192, 32768]
    assert default_windows(2**17, 4096) == [512, 2048, 8192, 32768, 131072]  # 256 windows of 4096 values
    assert default_windows(2**14, 256 * 256) == [1024, 4096, 16384]  # a 256x256 field: 16 windows
    assert default_windows(2**40, 4096) == [2**12, 2**14, 2**16, 2**18, 2**20]
    assert default_windows(2**12, 2**20) == [2**12]
    for rows, size in itertools.product((100, 5000, 2**17 + 3, 2**22), (1, 3, 1000, 4096, 65536)):
        windows = default_windows(rows, size)
        finest = -(-rows // windows[0])
        assert finest * size <= 2**20 or windows[0] == 4096
        least = 128 if rows * size >= 2**16 else 16  # windows of at least 128 rows from 2**16 values up
        assert windows[0] == max(default_windows(rows)[0], least) or (-(-rows // (windows[0] // 2))) * size > 2**20
    out = tmp_path / "state.zarr"  # 1024 values kept apart: 2**10 windows of 128 rows hold 2**20, the most allowed
    state = np.ones(1024, np.int8)  # the windows depend on the counts alone: one byte a value
    streamacc.write(out, lambda u, _: (u, u), state, length=2**17, block_size=2**13, progress=False)
    assert streamacc.info(out).summaries.windows == (128, 512, 2048, 8192, 32768)  # 256 first had it counted twice


def test_a_summary_window_longer_than_the_output_is_refused(tmp_path, capsys):
    def count(c, _):
        return c + 1.0, c

    for windows in ([2**64], [8, 2**20]):
        with pytest.raises(InputError) as refused:
            streamacc.write(tmp_path / "o.zarr", count, np.float64(0.0), length=100, summaries=windows, progress=False)
        assert "longer than the output's 100 rows" in str(refused.value) and "at most 100 rows" in str(refused.value)
    assert "e.g. summaries=[8]" in str(refused.value) and not (tmp_path / "o.zarr").exists()
    args = ["--size", "1000", "--save-every", "10", "--summary-windows", "4,64,1024", "--no-progress"]
    code = streamacc.cli.main(["write", str(tmp_path / "o.zarr"), *args])
    err = capsys.readouterr().err
    assert code == 2 and "--summary-windows 4,64,1024 asks for windows of 1024 rows, longer than the output" in err
    assert "e.g. --summary-windows 4,64" in err


def test_an_extension_far_beyond_a_short_outputs_levels_warns_that_it_keeps_them(tmp_path):
    """A 1000-step output with windows of 16 and 256 rows, extended to 2**18 steps, keeps them (the default then
    is 16 times longer), and says so, naming how to have the default levels."""
    import warnings

    out = tmp_path / "grow.zarr"

    def grow(length, **kw):
        return streamacc.write(out, lambda c, _: (c + 1.0, c), np.float64(0.0), length=length, progress=False, **kw)

    grow(1000, summaries=[16, 256])  # a small output has none by default
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grow(3000, mode="extend")  # the default for 3000 rows has the same finest window: nothing to say
    with pytest.warns(streamacc.errors.StreamaccWarning) as caught:
        grow(2**18, mode="extend")
    (warning,) = [w for w in caught if "summary levels" in str(w.message)]
    text = str(warning.message)
    assert (
        "keeps the summary levels it was begun with, windows of [16, 256] rows, so its 262144 rows get 16384 windows "
        "at the finest level (the default for 262144 rows is [256, 1024, 4096, 16384, 65536])"
    ) in text
    assert "rewrite it with mode='overwrite', or begin an output meant to grow with summaries=[4096, 16384, " in text
    assert streamacc.info(out).summaries.windows == (16, 256)


def zeros_step(k, _):
    """Window minimums and maximums that tie between 0.0 and -0.0: steps of each zero in turn, and positives."""
    plus, minus = jnp.float64(0.0), jnp.float64(-0.0)
    y = jnp.where(k % 4 == 0, minus, jnp.where(k % 4 == 1, plus, jnp.where(k % 4 == 2, plus, minus)))
    return k + 1, jnp.where(k % 3 == 2, 1.0 + k.astype(jnp.float64), y)


ZEROS = {"length": 4608, "summaries": [2, 32, 512], "progress": False}


def test_signed_zero_ties_are_settled_one_way_whatever_the_cut(tmp_path):
    """A window of zeros of both signs has -0.0 for its minimum and 0.0 for its maximum at every level (by numpy
    over the signs), so a partial verify, which folds the coarse levels in other cuts than the writer's commits,
    passes, and an interrupted run resumes to the uninterrupted run's bytes."""
    whole, cut = tmp_path / "whole.zarr", tmp_path / "cut.zarr"
    streamacc.write(whole, zeros_step, np.int64(0), block_size=288, **ZEROS)
    report = streamacc.verify(whole, zeros_step, np.int64(0), blocks=3)
    assert report.checked_blocks == (0, 8, 15)
    _, ys = jax.lax.scan(zeros_step, jnp.int64(0), length=4608)
    ys = np.asarray(ys)
    ds = streamacc.overview(whole, points=4608 // 32)
    windows = ys.reshape(-1, 32)
    negative = np.signbit(windows) & (windows == 0)
    assert np.array_equal(np.signbit(ds["y_min"].values), negative.any(axis=1))
    assert not np.signbit(ds["y_max"].values).any()
    with pytest.raises(StoreError):
        streamacc.write(failing(cut, "y/c/5"), zeros_step, np.int64(0), block_size=288, **ZEROS)
    streamacc.write(cut, zeros_step, np.int64(0), block_size=288, mode="resume", **ZEROS)
    assert_same_output(cut, whole)


def test_verify_takes_a_summary_zero_of_either_sign_from_an_earlier_release(tmp_path):
    """Outputs written before zero ties were settled hold whichever zero numpy's loops gave: verify accepts a
    minimum or maximum of 0.0 where it computes -0.0, and still refuses any other difference."""
    out = tmp_path / "out.zarr"
    streamacc.write(out, zeros_step, np.int64(0), block_size=288, **ZEROS)
    group = zarr.open_group(str(out / "_streamacc" / "summaries" / "w32"), mode="r+", use_consolidated=False)
    low = group["y_min"]
    stored = np.asarray(low[...])
    assert (np.signbit(stored) & (stored == 0)).any()
    low[...] = np.where(stored == 0, 0.0, stored)  # every zero positive, as an earlier release could store it
    streamacc.verify(out, zeros_step, np.int64(0))
    low[...] = np.where(stored == 0, 1e-300, stored)
    with pytest.raises(VerifyError, match="do not match its data"):
        streamacc.verify(out, zeros_step, np.int64(0))


def test_coarse_levels_write_few_files_their_chunks_unchanged_for_older_outputs(tmp_path):
    """The summaries' own cost at 2**30 steps: a coarser level's chunks span the finest's steps times the levels'
    factor, up to 512 KiB a statistic (5 levels 4 apart write 284 files there, not 340), and are checksummed, not
    compressed (a picture reads them without numcodecs); an output's chunks are read back as it was written."""
    from streamacc.summaries import level_chunks

    series, state = [2**12, 2**14, 2**16, 2**18, 2**20], [4, 16, 64, 256, 1024]
    assert level_chunks(series, 1) == [4096, 16384, 65536, 65536, 65536]
    assert level_chunks(state, 1024) == [4, 16, 64, 64, 64]  # 32 KiB of float64 at the finest, 512 KiB at most
    windows = [2**30 // w for w in series]  # 2**30 steps
    assert sum(math.ceil(n / c) for n, c in zip(windows, level_chunks(series, 1), strict=True)) * 4 == 284
    out = tmp_path / "out.zarr"
    streamacc.write(out, lambda c, _: (c + 1.0, c), np.float64(0.0), length=2**20, summaries=[16, 64, 256],
                    block_size=2**16, progress=False)  # fmt: skip
    for window, chunk in ((16, 4096), (64, 16384), (256, 4096)):  # the coarsest's capped at its 4096 windows
        doc = json.loads((out / "_streamacc" / "summaries" / f"w{window}" / "y_min" / "zarr.json").read_text())
        assert doc["chunk_grid"]["configuration"]["chunk_shape"] == [chunk]
        assert [c["name"] for c in doc["codecs"]] == ["bytes", "crc32c"]
    with pytest.warns(streamacc.errors.StreamaccWarning, match="keeps the summary levels"):  # an extension: its own
        streamacc.write(out, lambda c, _: (c + 1.0, c), np.float64(0.0), length=2**21, block_size=2**16,
                        mode="extend", progress=False)  # fmt: skip
    assert streamacc.verify(out, lambda c, _: (c + 1.0, c), np.float64(0.0)).summary_windows > 0
