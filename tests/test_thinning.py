"""Keeping every k-th step: ``lax.scan(f, init, xs, length)[1][k-1::k]`` bit for bit, with the
final carry after every step, through the engine, ``write``, ``open``, ``verify``, resume
(in-process and after SIGKILL), a dask cluster and S3.

References are one in-memory ``lax.scan`` over the whole length, sliced with numpy.
"""

from __future__ import annotations

import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import (
    CASES,
    UNROLL_CASES,
    Popen,
    assert_bits_equal,
    assert_same_objects,
    assert_same_output,
    cli,
    failing,
    kill_at,
)
from hypothesis import HealthCheck, given, settings, strategies as st
from jax import lax

import streamacc
from streamacc.cli import main

SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""Few examples: each compiles scans of new lengths; the written outputs below are fixed cases."""


def thinned_reference(case, length, k, tmp, **opts):
    init, xs, kwargs = case.make(length, tmp)
    if xs is not None and not isinstance(xs, jax.Array):
        xs = np.asarray(xs[:])
    carry, ys = lax.scan(case.f, init, xs, **kwargs, **opts)
    return (init, case.make(length, tmp)[1], kwargs), carry, jax.tree_util.tree_map(lambda y: y[k - 1 :: k], ys)


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("xs")


@SETTINGS
@given(
    case=st.sampled_from(CASES),
    length=st.integers(1, 120),
    k=st.integers(1, 9),
    rows=st.integers(1, 5),
    reverse=st.booleans(),
)
def test_thinned_scan_is_the_sliced_full_scan(case, length, k, rows, reverse, tmp):
    k = min(k, length)
    (init, xs, kwargs), want_carry, want_ys = thinned_reference(case, length, k, tmp, reverse=reverse)
    carry, ys = streamacc.scan(case.f, init, xs, block_size=k * rows, save_every=k, reverse=reverse, **kwargs)
    assert_bits_equal(carry, want_carry)
    assert_bits_equal(ys, want_ys)
    blocks = list(streamacc.iter_blocks(case.f, init, xs, block_size=k * rows, save_every=k, reverse=reverse, **kwargs))
    assert [b.rows for b in blocks] == [range(b.start // k, b.stop // k) for b in blocks]
    assert_bits_equal(blocks[-1].carry, want_carry)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(UNROLL_CASES), length=st.integers(8, 160), k=st.integers(1, 12), rows=st.integers(1, 4),
       reverse=st.booleans())  # fmt: skip
def test_thinned_scan_with_unroll_is_the_sliced_full_scan(case, length, k, rows, reverse, tmp):
    """Unrolled, a thinned block is one plain scan whose every k-th y is kept: its groups are lax.scan's."""
    if reverse:
        length -= length % 4
    k = min(k, length)
    block = max(8, np.lcm(k, 4) * rows)
    (init, xs, kwargs), want_carry, want_ys = thinned_reference(case, length, k, tmp, reverse=reverse, unroll=4)
    carry, ys = streamacc.scan(case.f, init, xs, block_size=int(block), save_every=k, reverse=reverse, unroll=4,
                               **kwargs)  # fmt: skip
    assert_bits_equal((carry, ys), (want_carry, want_ys))


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"save_every": 0}, r"save_every must be >= 1, got 0"),
        ({"save_every": -3}, r"save_every must be >= 1, got -3"),
        ({"save_every": 2.5}, r"save_every must be a whole number >= 1, got 2.5"),
        ({"save_every": True}, r"save_every must be a whole number >= 1, got True"),
        ({"save_every": 101}, r"save_every=101 keeps no step of a scan of 100 steps"),
        ({"save_every": 3, "block_size": 10}, r"block_size=10 must be a multiple of save_every=3"),
    ],
)
def test_bad_save_every_is_refused_naming_it(tmp_path, kwargs, needle):
    with pytest.raises(streamacc.errors.InputError, match=needle) as info:
        streamacc.iter_blocks(CASES[0].f, np.float64(1.0), length=100, **kwargs)
    assert "\n" not in str(info.value)
    path = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.InputError, match=needle):
        streamacc.write(path, CASES[0].f, np.float64(1.0), length=100, progress=False, **kwargs)
    assert not path.exists()


# --- written outputs ----------------------------------------------------------------------

LENGTH, K, BLOCK = 1000, 7, 70  # 142 rows; 15 blocks, the last of 20 steps keeps 2 rows and 6 steps more
XS = np.random.default_rng(11).normal(size=(LENGTH, 2))


def step(c, x):
    c = 0.97 * c + jnp.sin(x)
    return c, {"state": c, "energy": jnp.sum(c * c)}


def write(out, reverse=False, **kw):
    kw = {"block_size": BLOCK, "save_every": K, "progress": False, "dims": {"state": ["i"]}, **kw}
    return streamacc.write(out, step, np.zeros(2), XS, reverse=reverse, **kw)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted thinned write, and the in-memory scan it must equal."""
    out = tmp_path_factory.mktemp("ref") / "out.zarr"
    carry = write(out)
    want_carry, ys = lax.scan(step, np.zeros(2), XS)
    return out, carry, want_carry, ys


def test_written_rows_are_every_kth_step_and_open_labels_them(reference):
    out, carry, want_carry, ys = reference
    assert_bits_equal(carry, want_carry)
    group = zarr.open_group(out, mode="r")
    assert group["state"].shape == (LENGTH // K, 2) and group.attrs["streamacc_save_every"] == K
    np.testing.assert_array_equal(group["state"][:], np.asarray(ys["state"])[K - 1 :: K])
    ds = streamacc.open(out)
    np.testing.assert_array_equal(ds["step"].values, np.arange(K - 1, LENGTH, K))
    assert float(ds["energy"].sel(step=13)) == float(ys["energy"][13])
    with pytest.raises(KeyError, match="not all values found in index 'step'") as missing:
        ds.sel(step=14)
    assert "step 14 is not in the index: it holds steps 6 to 993 every 7" in str(missing.value.__cause__)
    assert int(ds.sel(step=14, method="nearest")["step"]) == 13
    assert streamacc.verify(out, step, np.zeros(2), XS).complete
    info = streamacc.info(out)
    assert info.save_every == K and info.committed_rows == LENGTH // K


def test_overview_of_a_thinned_output_labels_its_windows_with_steps(tmp_path):
    out = tmp_path / "out.zarr"
    write(out, summaries=[4, 16])
    ov = streamacc.overview(out, points=10)
    assert ov.attrs["window"] in (4 * K, 16 * K)
    rows = ov.attrs["window"] // K
    np.testing.assert_array_equal(ov["step"].values, np.arange(0, LENGTH // K, rows) * K + K - 1)
    state = zarr.open_group(out, mode="r")["state"][:]
    np.testing.assert_array_equal(ov["state_max"].values[0], state[:rows].max(axis=0))
    assert streamacc.verify(out, step, np.zeros(2), XS).summary_windows > 0


def test_reverse_thinned_write(tmp_path):
    out = tmp_path / "out.zarr"
    carry = write(out, reverse=True)
    want_carry, ys = lax.scan(step, np.zeros(2), XS, reverse=True)
    assert_bits_equal(carry, want_carry)
    np.testing.assert_array_equal(zarr.open_group(out, mode="r")["state"][:], np.asarray(ys["state"])[K - 1 :: K])
    assert streamacc.verify(out, step, np.zeros(2), XS).complete


def test_failed_write_then_resume_is_identical(tmp_path, reference):
    out = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.StoreError, match=rf"after {6 * BLOCK} of {LENGTH} steps"):
        write(failing(out, "state/c/6/0"))  # the chunk of block 6's rows
    with pytest.raises(streamacc.errors.ResumeError, match=r"save_every: stored 7, now 5"):
        write(out, mode="resume", save_every=5)
    write(out, mode="resume")
    assert_same_output(out, reference[0])


def test_thinned_on_a_cluster_is_byte_identical(tmp_path, dask_client, reference):
    out = tmp_path / "out.zarr"
    assert_bits_equal(write(out, client=dask_client), reference[1])
    assert_same_output(out, reference[0])


def test_thinned_on_s3(s3_bucket, reference):
    url, options = s3_bucket.url("thin.zarr"), s3_bucket.storage_options
    write(url, storage_options=options)
    assert_same_objects(s3_bucket, "thin.zarr", reference[0])  # every object the bytes of the local run, which verifies
    ds = streamacc.open(url, storage_options=options)
    assert int(ds["step"][-1]) == (LENGTH // K) * K - 1



@pytest.mark.slow
def test_sigkill_then_resume_of_a_thinned_recipe_is_identical(tmp_path):
    """A real writer killed mid-run; the resumed output is the uninterrupted one's, and verifies."""
    args = ["--recipe", "logistic", "--size", "2**15", "--save-every", "4", "--block-size", "2**9", "--no-progress"]
    ref, out = tmp_path / "ref.zarr", tmp_path / "out.zarr"
    assert main(["write", str(ref), *args]) == 0
    assert kill_at(Popen(cli("write", out, *args), stderr=subprocess.PIPE), out, 5, 0.0)  # of 64 blocks
    assert main(["write", str(out), *args, "--resume"]) == 0
    assert_same_output(out, ref)
    assert main(["verify", str(out)]) == 0
