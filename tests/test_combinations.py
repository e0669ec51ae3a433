"""Features used together as scientists combine them: a recipe on a cluster, an extension of a
thinned, tiled, timed output, reverse scans and their summaries, object storage with all of it.

References come from numpy and one in-memory ``lax.scan``; outputs written two ways are
compared byte for byte.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same_output, imported_by

import streamacc
from streamacc.cli import main
from streamacc.engine import carry_pass, make_plan
from streamacc.recipes import get_recipe

# --- Lorenz-63 on a cluster ------------------------------------------------------------------


def test_lorenz_on_a_cluster_is_the_single_process_output(tmp_path, dask_client):
    """XLA compiles Lorenz's RK4 step without its ys slightly differently (1 ulp, in 1 of the first
    31,000 steps here): the carry pass then disagrees with the workers' blocks, which are right."""
    job = get_recipe("lorenz").build(40000, "float64")
    kw = {"length": job.length, "block_size": 8000, "names": job.names, "attrs": job.attrs, "progress": False}
    carry, ys = jax.lax.scan(job.f, job.init, None, length=job.length)
    plan = make_plan(job.f, job.init, None, length=job.length, block_size=8000)
    *_, (_, _, last) = carry_pass(plan, exact=True)  # the block function's own carries
    np.testing.assert_array_equal(last, carry)
    local, remote = tmp_path / "local.zarr", tmp_path / "cluster.zarr"
    streamacc.write(local, job.f, job.init, **kw)
    streamacc.write(remote, job.f, job.init, client=dask_client, **kw)
    assert_same_output(remote, local)
    ds = streamacc.open(remote)
    for name in "xyz":
        np.testing.assert_array_equal(ds[name].values, np.asarray(ys[name]))


# --- a thinned, tiled, timed ensemble, extended -----------------------------------------------

ENSEMBLE = ["--recipe", "randomwalk", "--paths", "6", "--save-every", "4", "--chunks", "step=8,path=3",
            "--time-step", "0.5", "--block-size", "64", "--summary-windows", "8,32", "--no-progress"]  # fmt: skip


def test_extending_a_thinned_tiled_timed_ensemble_says_what_it_does(tmp_path, capsys):
    out, ref = tmp_path / "out.zarr", tmp_path / "ref.zarr"
    assert main(["write", str(out), "--size", "200", *ENSEMBLE]) == 0
    assert main(["write", str(ref), "--size", "328", *ENSEMBLE]) == 0
    capsys.readouterr()
    assert main(["write", str(out), "--size", "328", *ENSEMBLE, "--extend"]) == 0
    err = capsys.readouterr().err
    assert "rewrote the root metadata" not in err and "resuming" not in err  # nothing was wrong, nothing resumed
    assert "extending " in err and "to step 328" in err
    assert_same_output(out, ref)
    assert main(["verify", str(out)]) == 0
    ds = streamacc.open(out)
    np.testing.assert_array_equal(ds["step"].values, np.arange(3, 328, 4))
    np.testing.assert_array_equal(ds["time"].values, 0.5 * np.arange(3, 328, 4))
    key = jax.random.fold_in(jax.random.key(0), 5)
    z = [float(jax.random.normal(jax.random.fold_in(key, k), dtype=jnp.float64)) for k in range(1, 328)]
    walk = np.add.accumulate(np.concatenate([[0.0], z]))
    np.testing.assert_array_equal(ds["x"].isel(path=5).values, walk[3::4])


# --- reverse scans: thinned, timed, and without summaries -----------------------------------


def _decay(c, x):
    c = c * 0.5 + x  # c * 0.5 is exact: one rounding, fused or not
    return c, {"s": c, "v": c * jnp.arange(1.0, 4.0)}


def test_a_thinned_timed_reverse_scan_and_its_missing_summaries(tmp_path):
    xs = np.random.default_rng(7).standard_normal(200)
    out = tmp_path / "rev.zarr"
    with pytest.raises(streamacc.errors.InputError, match=r"reverse scan writes no summaries.*summaries=False"):
        streamacc.write(out, _decay, np.float64(1.0), xs, reverse=True, summaries=[8], progress=False)
    assert not out.exists()
    kw = {"reverse": True, "save_every": 4, "block_size": 40, "dims": {"v": ["k"]}, "time": {"step": 0.25}}
    carry = streamacc.write(out, _decay, np.float64(1.0), xs, progress=False, **kw)
    want = [np.float64(1.0)]  # the reverse recurrence in numpy: step i runs after step i + 1
    for x in xs[::-1]:
        want.append(want[-1] * 0.5 + x)
    s = np.array(want[1:][::-1])  # s[i]: the carry after step i
    assert float(carry) == s[0]
    ds = streamacc.open(out)
    np.testing.assert_array_equal(ds["s"].values, s[3::4])
    np.testing.assert_array_equal(ds["v"].sel(step=slice(100, 120)).values, s[103:120:4, None] * [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(ds["time"].values, 0.25 * np.arange(3, 200, 4))
    assert streamacc.verify(out, _decay, np.float64(1.0), xs).committed_blocks == 5
    picture = streamacc.overview(out)  # no summaries (a reverse scan has none): its data, a row a window
    np.testing.assert_array_equal(picture["s_mean"].values, s[3::4])
    np.testing.assert_array_equal(picture["step"].values, np.arange(3, 200, 4))


def test_an_extension_refused_for_a_replaced_shard_leaves_the_output_as_it_was(tmp_path, capsys):
    out, other = tmp_path / "out.zarr", tmp_path / "other.zarr"
    assert main(["write", str(out), "--size", "200", *ENSEMBLE]) == 0
    assert main(["write", str(other), "--size", "200", *ENSEMBLE, "--seed", "5"]) == 0
    (out / "x" / "c" / "1" / "0").write_bytes((other / "x" / "c" / "1" / "0").read_bytes())  # block 1's shard
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["write", str(out), "--size", "328", *ENSEMBLE, "--extend"]) == 2
    err = capsys.readouterr().err
    assert "cannot extend" in err and "shard x/c/1/0 " in err and "not the" in err and "committed" in err
    assert err.count("\n") == 1 and "--overwrite" in err
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


# --- the command line on an output written from Python ----------------------------------------


def test_verify_from_the_command_line_on_a_python_output_is_a_usage_error(tmp_path, capsys):
    """Exit 1 means the check ran and failed (a damaged output); this one cannot be checked there."""
    out = tmp_path / "heat.zarr"
    u0 = np.exp(-(np.linspace(-2.0, 2.0, 64) ** 2))
    streamacc.write(out, _heat, u0, length=64, save_every=8, dims={"y": ["x"]}, progress=False)
    capsys.readouterr()
    assert main(["verify", str(out)]) == 2
    err = capsys.readouterr().err
    assert "written from Python" in err and "streamacc.verify(path, f, init)" in err and err.count("\n") == 1
    assert main(["info", str(out)]) == 0 and main(["plot", str(out), "-o", str(tmp_path / "heat.png")]) == 0
    u = u0
    for _ in range(64):
        u = u + 0.25 * (np.roll(u, 1) - 2.0 * u + np.roll(u, -1))
    np.testing.assert_allclose(streamacc.open(out)["y"].sel(step=63).values, u, rtol=1e-15, atol=1e-300)


def _heat(u, _):
    u = u + 0.25 * (jnp.roll(u, 1) - 2.0 * u + jnp.roll(u, -1))
    return u, u


def test_plot_names_a_range_outside_a_thinned_output_in_its_own_option(tmp_path, capsys):
    out = tmp_path / "out.zarr"
    assert main(["write", str(out), "--size", "200", *ENSEMBLE]) == 0
    capsys.readouterr()
    assert main(["plot", str(out), "--steps", "2**20:", "-o", str(tmp_path / "p.png")]) == 2
    err = capsys.readouterr().err
    assert "--steps 1048576:" in err and "None" not in err and "the committed steps are 0 to 200" in err


@pytest.mark.parametrize("block", ["100", "130"])
def test_the_block_size_suggested_for_a_thinned_unrolled_recipe_is_accepted(tmp_path, capsys, block):
    """gp runs with unroll=8: a thinned block must be a multiple of both 8 and --save-every."""
    args = ["--size", "4000", "--save-every", "10", "--no-progress", "--no-summaries"]
    assert main(["write", str(tmp_path / "bad.zarr"), *args, "--block-size", block]) == 2
    err = capsys.readouterr().err
    suggested = int(err.rsplit("--block-size ", 1)[1].split()[0])
    assert suggested % 10 == 0 and suggested % 8 == 0 and suggested >= 16
    assert not (tmp_path / "bad.zarr").exists()
    assert main(["write", str(tmp_path / "ok.zarr"), *args, "--block-size", str(suggested)]) == 0
    x = streamacc.open(tmp_path / "ok.zarr")["x"].values
    ratio = 1 + 1e-8
    want = [1.0]
    for _ in range(3999):
        want.append(want[-1] * ratio)
    np.testing.assert_array_equal(x, np.array(want)[9::10])


def test_a_bad_time_axis_is_named_by_its_own_option(tmp_path, capsys):
    """(--time-step 0 is in test_simulations.)"""
    out = tmp_path / "out.zarr"
    options = ["--time-step", "1", "--time-units", "days since never"]
    assert main(["write", str(out), "--size", "100", "--save-every", "4", "--no-progress", *options]) == 2
    err = capsys.readouterr().err
    assert "--time-units 'days since never'" in err and "--time[" not in err and "--time units" not in err
    assert err.count("\n") == 1 and not out.exists()


@pytest.mark.parametrize(
    "options",
    [["--summary-windows", "8,12"], ["--recipe", "lorenz", "--save-every", "2000"]],
    ids=["windows-not-multiples", "save-every-past-size"],
)
def test_layout_errors_of_a_simulation_come_before_jax_and_zarr(tmp_path, options):
    command = ["write", "o.zarr", "--size", "1000", *options]
    assert imported_by(f"from streamacc.cli import main; assert main({command!r}) == 2", tmp_path) <= {"numpy"}
    assert not (tmp_path / "o.zarr").exists()


def test_dates_select_a_thinned_output_at_sub_second_steps_quietly(tmp_path, recwarn):
    out = tmp_path / "cf.zarr"
    args = ["--recipe", "lorenz", "--size", "2000", "--save-every", "100", "--dt", "0.01", "--time-step", "0.01",
            "--time-units", "minutes since 2000-01-01", "--no-progress"]  # fmt: skip (a step is 0.6 s)
    assert main(["write", str(out), *args]) == 0
    ds = streamacc.open(out)
    got = ds.sel(time=slice("2000-01-01T00:02", "2000-01-01T00:04")).step.values  # 120 s to 240 s: steps 200-400
    np.testing.assert_array_equal(got, [299, 399])
    assert int(ds.sel(time=np.datetime64("2000-01-01T00:01:10"), method="nearest").step) == 99  # 59.4 s, not 119.4
    assert np.isfinite(ds.x.values).all()
    assert not [str(w.message) for w in recwarn if "serialize" in str(w.message).lower()]
