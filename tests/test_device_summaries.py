"""Window summaries computed on the device (a TPU's or GPU's write): each piece's minimum and maximum exact, its sum
within the bound ``verify`` allows, against numpy and exact sums; a write whose statistics come from the device (here
the CPU, told to) stores the host's picture, verifies, and has every non-finite piece reduced by the host; verify
takes a float32 mean within the bound and refuses one past it, and a float64 mean one ulp off."""

from __future__ import annotations

import math
import shutil
import warnings

import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import zarr
from helpers import array_bytes

import streamacc
from streamacc.engine import device_reducible, window_stats
from streamacc.errors import StreamaccWarning, VerifyError
from streamacc.summaries import mean_tolerance

RUNS = ((37, 1), (100, 9), (63, 1))  # a piece ending a window, nine windows, a piece beginning one: 1000 rows


def _values(rng: np.random.Generator, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    """Values of every kind a piece can hold: both zeros, subnormal numbers, NaNs, infinities, a wide range."""
    x = rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4, shape)
    x[rng.random(shape) < 0.2] = 0.0
    x[rng.random(shape) < 0.2] *= -0.0
    x[rng.random(shape) < 0.05] = 3e-41 * rng.choice([-1.0, 1.0])  # subnormal in float32
    x[:37] = np.abs(x[:37])  # a piece of no negative value: minima of zero or above
    x[137:237] = -np.abs(x[137:237])  # a window of no positive value: maxima of zero or below
    x[300] = np.nan
    x[450] = np.inf
    x[520:620] = np.nan  # a window of nothing but NaN
    return x.astype(dtype)


def _reference(part: np.ndarray) -> tuple[np.ndarray, ...]:
    """numpy's minimum and maximum of a piece (NaNs skipped, -0.0 the smaller zero), whether it is finite, and
    its exact sum (``math.fsum`` of the values as float64) and the sum of their magnitudes, value by value."""
    wide = part.astype(np.float64)
    zero = wide == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        low, high = np.nanmin(wide, axis=0), np.nanmax(wide, axis=0)
    low = np.where(low == 0, np.where((zero & np.signbit(wide)).any(axis=0), -0.0, 0.0), low)
    high = np.where(high == 0, np.where((zero & ~np.signbit(wide)).any(axis=0), 0.0, -0.0), high)
    finite = np.isfinite(wide).all(axis=0)
    flat = wide.reshape(len(wide), -1)
    exact = np.array([math.fsum(flat[:, j]) if finite.flat[j] else np.nan for j in range(flat.shape[1])])
    return low, high, finite, exact.reshape(finite.shape), np.where(np.isfinite(wide), np.abs(wide), 0.0).sum(axis=0)


CASES = {  # each dtype as a series; a state and a state summarised whole in float32
    "float32": (np.float32, ()), "bfloat16": (ml_dtypes.bfloat16, ()), "float16": (np.float16, ()),
    "state": (np.float32, (3,)), "over-state": (np.float32, (4, 5)),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_window_stats_are_exact_minima_and_maxima_and_sums_within_the_bound(case):
    dtype, shape = CASES[case]
    rng = np.random.default_rng(7)
    whole = len(shape) == 2  # summarised over the whole state: each piece over every value of its rows
    x = _values(rng, (1000, *shape), dtype)
    assert device_reducible(x.dtype) and not device_reducible(np.float64) and not device_reducible(np.int32)
    low, high, total = window_stats(jnp.asarray(x), RUNS, whole=whole).fetch()
    assert low.dtype == high.dtype == (np.float32 if dtype is ml_dtypes.bfloat16 else dtype)
    begin, i = 0, 0
    for rows, n in RUNS:
        for _ in range(n):
            part = x[begin : begin + rows].reshape(rows, -1).reshape(-1) if whole else x[begin : begin + rows]
            begin += rows
            want_low, want_high, finite, exact, magnitude = _reference(part)
            assert np.array_equal(np.isnan(total[i]), ~finite), i  # a non-finite piece: left to the host
            if finite.any():
                got_low, got_high = np.asarray(low[i], np.float64), np.asarray(high[i], np.float64)
                for got, want in ((got_low, want_low), (got_high, want_high)):
                    assert np.array_equal(got[finite], want[finite]), (i, got, want)
                    assert np.array_equal(np.signbit(got[finite]), np.signbit(want[finite])), i
                levels = math.ceil(math.log2(part.size if whole else rows)) + 1
                bound = levels**2 * 2.0**-47 * magnitude + 2.0**-120
                assert (np.abs(total[i] - exact) <= bound)[finite].all(), (i, total[i] - exact, bound)
            i += 1
    assert i == len(total) == 11 and begin == len(x)


def _step(c, x):
    c = c * jnp.float32(0.999) + x
    y = jnp.where(jnp.abs(x) > 3.2, jnp.nan, c)  # a NaN now and then
    return c, {"x": y, "v": jnp.stack([c, x, -x]), "f": jnp.broadcast_to(x, (40, 40)), "d": c.astype(jnp.float64)}


def _write(out, device: bool, seam, **kw) -> None:
    seam("run.summaries_on_device", lambda platform: device)
    xs = (np.random.default_rng(3).standard_normal(6000) * np.geomspace(1e-6, 1e6, 6000)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*holds a NaN", StreamaccWarning)
        streamacc.write(out, _step, np.float32(0.0), xs, block_size=1024, summaries=[64, 256], progress=False, **kw)
    return xs


def _summaries(out) -> dict[str, np.ndarray]:
    found = {}
    for window in (64, 256):
        group = zarr.open_group(out / f"_streamacc/summaries/w{window}", mode="r")
        found.update({f"w{window}/{key}": group[key][...] for key in group.array_keys()})
    return found


@pytest.mark.parametrize("until", [False, True], ids=["plain", "ended-mid-block"])
def test_a_write_reduced_on_the_device_stores_the_hosts_picture_and_verifies(tmp_path, seam, until):
    """The float32 outputs' statistics come from the device (the float64 one's from the host; the last block, one
    cut by its condition, and every piece holding a NaN, from the host too): minima, maxima and counts byte for byte
    the host-reduced write's, means within the bound (some of them in other last bits), the data the same bytes;
    verify, of every block and of a few, passes."""
    kw = {"until": lambda c, y: c > 1e5} if until else {}
    host, device = tmp_path / "host.zarr", tmp_path / "device.zarr"
    xs = _write(host, False, seam, **kw)
    _write(device, True, seam, **kw)
    assert array_bytes(device) == array_bytes(host)
    a, b = _summaries(host), _summaries(device)
    assert a.keys() == b.keys()
    differ = 0
    for key, stored in b.items():
        if not key.endswith("_mean"):
            assert stored.tobytes() == a[key].tobytes(), key
            continue
        stem = key[: -len("_mean")]
        bound = mean_tolerance(a[f"{stem}_count"], a[f"{stem}_min"], a[f"{stem}_max"])
        close = (np.abs(stored - a[key]) <= bound) | (np.isnan(stored) & np.isnan(a[key]))
        assert close.all(), key
        differ += int((stored != a[key]).sum())
        if "/d_" in key:  # float64: reduced by the host alike
            assert stored.tobytes() == a[key].tobytes()
    assert differ, "no mean in other last bits: the device's sums were not used"
    if until:
        assert streamacc.info(device).ended_at is not None
    for blocks in ("all", 2):
        streamacc.verify(device, _step, np.float32(0.0), xs, blocks=blocks, **kw)


def test_verify_takes_a_float32_mean_within_the_bound_and_refuses_one_past_it(tmp_path, seam):
    """A float32 output's mean may differ from the data's by the bound (a device's sum), no more, and each coarser
    window must still be the fold of the stored windows below it; a float64 output's mean must be the data's bit for
    bit."""
    out = tmp_path / "out.zarr"
    xs = _write(out, True, seam)
    rows = _summaries(out)
    bound = mean_tolerance(rows["w64/v_count"], rows["w64/v_min"], rows["w64/v_max"])
    cases = {"near": ("v", 0.5), "far": ("v", 4.0), "float64": ("d", None)}
    for case, (name, share) in cases.items():
        copy = tmp_path / f"{case}.zarr"
        shutil.copytree(out, copy)
        mean = zarr.open_array(copy / f"_streamacc/summaries/w64/{name}_mean", mode="r+")
        values = mean[...]
        i = int(np.flatnonzero(np.isfinite(values).reshape(len(values), -1).all(axis=1))[5])
        if share is None:
            values[i] = np.nextafter(values[i], np.inf)  # one ulp
        else:
            values[i] = values[i] + share * bound[i]
        mean[...] = values
        for blocks in ("all", 3):
            if case == "near" and blocks == "all":  # every row against the data: within the bound
                streamacc.verify(copy, _step, np.float32(0.0), xs, blocks=blocks)
                continue
            # past the bound, or (a few blocks checked) the coarser window no longer the fold of the rows below it
            with pytest.raises(VerifyError, match=rf"the summaries of '{name}'.*do not match"):
                streamacc.verify(copy, _step, np.float32(0.0), xs, blocks=blocks)
