"""Simulations as scientists run them: a vector state, a field, an ensemble, Lorenz-63 thinned, from
Python and from the command line.

References: one in-memory ``lax.scan``; numpy for the ensemble's running sums of its draws
(each walk's increments drawn by ``jax.random`` exactly as its definition says) and for an
independent RK4 of the Lorenz system.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from jax import lax

import streamacc
from streamacc.cli import main

QUIET = ["--no-progress"]


def heat(u, _):
    u = u + 0.25 * (jnp.roll(u, 1) - 2.0 * u + jnp.roll(u, -1))
    return u, u


def field(c, _):
    c = c + 0.1 * (jnp.roll(c, 1, axis=0) + jnp.roll(c, 1, axis=1) - 2.0 * c)
    return c, c


@pytest.mark.parametrize(
    ("f", "init", "length", "chunk"),
    [
        (heat, np.exp(-(np.linspace(-4, 4, 4096) ** 2)), 64, (64, 512)),
        (field, np.random.default_rng(2).normal(size=(256, 256)), 12, (12, 64, 64)),
    ],
    ids=["heat_4096", "field_256x256"],
)
def test_vector_states_with_default_settings(tmp_path, f, init, length, chunk):
    """Blocks and chunks sized in bytes; a snapshot and a time series read back exactly."""
    out = tmp_path / "out.zarr"
    carry = streamacc.write(out, f, init, length=length, progress=False)
    want_carry, ys = lax.scan(f, init, None, length=length)
    np.testing.assert_array_equal(np.asarray(carry), np.asarray(want_carry))
    assert zarr.open_group(out, mode="r")["y"].chunks == chunk  # the state is cut: a time series reads a tile
    ds = streamacc.open(out)
    np.testing.assert_array_equal(ds["y"].sel(step=length // 2).values, np.asarray(ys)[length // 2])
    point = (slice(None), 100) if init.ndim == 1 else (slice(None), 100, 7)
    np.testing.assert_array_equal(ds["y"].values[point], np.asarray(ys)[point])
    about = streamacc.info(out)  # blocks of 32 MiB, of which this short output fills one block's rows
    assert about.block_size * np.asarray(init).nbytes == 32 * 2**20
    assert about.memory.block_bytes == min(about.block_size, length) * np.asarray(init).nbytes
    assert about.memory.carries == 5 * np.asarray(init).nbytes  # four blocks' and the one computing's
    assert f"memory to write it: 4 block buffers x {about.memory.block_bytes / 2**20:.1f} MiB" in str(about)


# --- ensembles ----------------------------------------------------------------------------


def walk_reference(x0, sigma, seed, paths, n):
    """Each walk p: x0, then x0 + sigma * z_p[1], ... with z_p[k] = normal(fold_in(fold_in(key(seed), p), k))."""
    key = jax.random.key(seed)  # the tests run with x64 on (conftest)
    out = np.empty((n, len(paths)))
    for j, p in enumerate(paths):
        kp = jax.random.fold_in(key, p)
        z = np.array([jax.random.normal(jax.random.fold_in(kp, k), dtype=jnp.float64) for k in range(1, n)])
        out[:, j] = np.add.accumulate(np.concatenate([[x0], np.float64(sigma) * z]))
    return out


def test_an_ensemble_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "walks.zarr"
    args = ["--recipe", "randomwalk", "--paths", "1000", "--size", "48", "--x0", "0.5", "--sigma", "0.3",
            "--seed", "9", "--block-size", "16", *QUIET]  # fmt: skip
    assert main(["write", str(out), *args]) == 0
    array = zarr.open_group(out, mode="r")["x"]
    assert array.shape == (48, 1000) and array.metadata.dimension_names == ("step", "path")
    picked = [0, 1, 517, 999]
    np.testing.assert_array_equal(array[:, picked], walk_reference(0.5, 0.3, 9, picked, 48))
    assert main(["verify", str(out)]) == 0
    assert main(["write", str(tmp_path / "w.zarr"), *args[:2], "--paths", "0", *args[4:]]) == 2
    assert "--paths must be in [1, 2**32]" in capsys.readouterr().err
    assert main(["recipes"]) == 0
    assert "--paths" in capsys.readouterr().out


def test_one_path_keeps_the_single_walk_definition(tmp_path):
    from streamacc.recipes import get_recipe

    one, default = (get_recipe("randomwalk").build(30, "float64", seed=3, **p) for p in ({"paths": 1}, {}))
    assert one.attrs == default.attrs and one.init.shape == () and one.xs.shape == (30,)
    _, ys = streamacc.scan(one.f, one.init, one.xs, block_size=8)
    key = jax.random.key(3)
    z = [jax.random.normal(jax.random.fold_in(key, k), dtype=jnp.float64) for k in range(1, 30)]
    np.testing.assert_array_equal(ys, np.add.accumulate(np.concatenate([[0.0], z])))


# --- Lorenz-63, thinned -------------------------------------------------------------------


def rk4_numpy(u, n, dt, sigma=10.0, rho=28.0, beta=8.0 / 3.0):
    def f(v):
        return np.array([sigma * (v[1] - v[0]), v[0] * (rho - v[2]) - v[1], v[0] * v[1] - beta * v[2]])

    states = [u]
    for _ in range(n - 1):
        k1 = f(u)
        k2 = f(u + 0.5 * dt * k1)
        k3 = f(u + 0.5 * dt * k2)
        k4 = f(u + dt * k3)
        u = u + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        states.append(u)
    return np.array(states)


def test_lorenz_thinned_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "lorenz.zarr"
    args = ["--recipe", "lorenz", "--size", "3000", "--save-every", "100", "--time-step", "0.001",
            "--time-units", "s", *QUIET]  # fmt: skip
    assert main(["write", str(out), *args]) == 0
    assert "(30 rows, every 100th step)" in capsys.readouterr().out
    ds = streamacc.open(out)
    np.testing.assert_array_equal(ds["step"].values, np.arange(99, 3000, 100))
    np.testing.assert_allclose(ds["time"].values, 0.001 * np.arange(99, 3000, 100))
    from streamacc.recipes import get_recipe

    job = get_recipe("lorenz").build(3000, "float64")
    _, ys = lax.scan(job.f, job.init, None, length=3000)
    for name in "xyz":
        np.testing.assert_array_equal(ds[name].values, np.asarray(ys[name])[99::100])
    reference = rk4_numpy(np.ones(3), 3000, 0.001)[99::100]
    np.testing.assert_allclose(np.stack([ds[n].values for n in "xyz"], axis=1), reference, rtol=1e-9)
    assert main(["info", str(out)]) == 0
    text = capsys.readouterr().out
    assert "keeps: every 100th step (steps 99, 199, ...)" in text and "time: step s at 0.0 + s * 0.001 s" in text
    assert main(["verify", str(out)]) == 0


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "x"])
def test_a_bad_save_every_is_one_line_exit_2_nothing_written(tmp_path, capsys, value):
    out = tmp_path / "out.zarr"
    assert main(["write", str(out), "--size", "100", "--save-every", value, *QUIET]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--save-every" in err
    assert not out.exists()


def test_save_every_on_an_unrolled_recipe(tmp_path):
    for every in (3, 16):
        out = tmp_path / f"gp{every}.zarr"
        assert main(["write", str(out), "--size", "1000", "--save-every", str(every), *QUIET]) == 0
        info = streamacc.info(out)
        assert info.unroll == 8 and info.committed_rows == 1000 // every
        assert info.block_size % np.lcm(every, 8) == 0
        x = zarr.open_group(out, mode="r")["x"][:]
        np.testing.assert_array_equal(x, np.multiply.accumulate(np.r_[1.0, np.full(999, 1 + 1e-8)])[every - 1 :: every])


@pytest.mark.parametrize(
    ("spec", "chunks"),
    [("step=8,path=-1", (8, 5)), ("4", (4, 4)), ("8,2", (8, 2)), ("auto", (16, 5))],
)
def test_chunks_option(tmp_path, spec, chunks):
    out = tmp_path / "out.zarr"
    args = ["--recipe", "randomwalk", "--paths", "5", "--size", "48", "--block-size", "16", *QUIET]
    assert main(["write", str(out), *args, "--chunks", spec]) == 0
    assert zarr.open_group(out, mode="r")["x"].chunks == chunks


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--chunks", "step="], "--chunks"),
        (["--chunks", "step=8,4"], "mixes forms"),
        (["--chunks", "step=3"], "does not divide a block's 16 rows"),
        (["--chunks", "step=3"], "pass a divisor such as --chunks step=4 or --chunks step=2, or a --block-size"),
        (["--chunks", "step=1000", "--size", "2**14", "--block-size", "4096"],
         "--chunks step=1024 or --chunks step=512"),  # the divisors of 4096 nearest 1000, not their gcd 8
        (["--chunks", "step=8,step=4"], "--chunks 'step=8,step=4' names dimension 'step' twice"),
        (["--chunks", "foo"], "--chunks 'foo': 'foo' is not a chunk length; each entry is a whole number of rows or "
                              "elements (2**12 works), -1 for the whole axis, or auto: pass e.g. --chunks 4096, "
                              "--chunks 4096,-1 or --chunks step=4096,path=-1"),
        (["--chunks", "step=2.5"], "--chunks 'step=2.5': '2.5' is not a chunk length"),
        (["--time-start", "1"], "--time-start and --time-units need --time-step"),
        (["--time-step", "0"], "--time-step must not be 0"),
    ],
)
def test_bad_layout_options_are_one_line(tmp_path, capsys, extra, needle):
    out = tmp_path / "out.zarr"
    assert main(["write", str(out), "--size", "40", "--block-size", "16", *QUIET, *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err
    assert not out.exists()
