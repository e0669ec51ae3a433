"""Defaults chosen per platform: the recipes' unroll, the write's block bytes and a Stream's hand-over differ on a
TPU or GPU and stay as they were on the CPU, each a function of the platform's name; the ``engine.platform``
seam runs a write or a Stream on this CPU as if JAX computed on a TPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import read_manifest, run

import streamacc
import streamacc.base
from streamacc import testing
from streamacc.base import (
    ACCELERATOR_COMPENSATED_UNROLL,
    ACCELERATOR_UNROLL,
    recipe_unroll,
    stream_handover,
    stream_piece_bytes,
    write_block_bytes,
)
from streamacc.recipes import RECIPES, get_recipe

ACCELERATORS = ["tpu", "gpu", "cuda", "rocm"]
CPU_UNROLL = {"gp": 8, "affine": 1, "logistic": 1, "randomwalk": 1, "lorenz": 1, "cumsum": 8, "cumprod": 8}
"""Each recipe's unroll on a CPU, as it was before the accelerators' defaults (2 for every compensated one)."""


@pytest.mark.parametrize("platform", ACCELERATORS)
def test_an_accelerator_takes_its_own_defaults(platform):
    assert [recipe_unroll(u, platform) for u in (1, 2, 8)] == [ACCELERATOR_UNROLL] * 3 == [64] * 3
    assert recipe_unroll(2, platform, ACCELERATOR_COMPENSATED_UNROLL) == ACCELERATOR_COMPENSATED_UNROLL == 64
    assert write_block_bytes(platform) == 32 * 2**20
    assert stream_handover(platform) == "ordered"
    assert stream_piece_bytes(platform) == 4 * 2**20


@pytest.mark.parametrize("platform", ["cpu", "metal"])
def test_a_cpu_keeps_its_defaults_and_an_unknown_platform_takes_them(platform):
    assert [recipe_unroll(u, platform) for u in (1, 2, 8)] == [recipe_unroll(u, platform, 8) for u in (1, 2, 8)]
    assert [recipe_unroll(u, platform) for u in (1, 2, 8)] == [1, 2, 8]
    assert write_block_bytes(platform) == 32 * 2**20 == streamacc.base.DEFAULT_WRITE_BLOCK_SIZE * 8
    assert stream_handover(platform) == ("in_place" if platform == "cpu" else "ordered")


def _job(name, tmp_path, **params):
    if name in ("cumsum", "cumprod"):
        path = tmp_path / f"{name}.zarr"
        if not path.exists():
            zarr.create_array(str(path), shape=(300,), dtype="float64", chunks=(100,))[...] = np.linspace(0.9, 1.1, 300)
        params["input"] = str(path)
    return get_recipe(name).build(300, "float64", **params)


@pytest.mark.parametrize("name", list(RECIPES))
def test_each_recipe_takes_the_unroll_of_the_platform_jax_computes_on(name, tmp_path, seam):
    compensated = name in ("gp", "affine", "cumsum", "cumprod")
    assert _job(name, tmp_path).unroll == CPU_UNROLL[name]
    if compensated:
        assert _job(name, tmp_path, compensated=True).unroll == 2
    seam("engine.platform", lambda: "tpu")
    assert _job(name, tmp_path).unroll == (1 if name == "lorenz" else 64)  # an RK4 step runs as fast at 1
    if compensated:
        assert _job(name, tmp_path, compensated=True).unroll == 64


def test_a_write_on_a_tpu_records_its_defaults_and_a_cpu_extends_it_with_them(tmp_path, capfd):
    """Written as on a TPU, an output's identity holds the TPU's unroll (and its blocks of 32 MiB); extended on
    this CPU, it keeps them, its values those of numpy's running product of the same steps."""
    out = tmp_path / "gp.zarr"
    args = ["write", out, "--dtype", "float32", "--ratio", "1.0009765625", "--no-progress"]
    with testing.patched("engine.platform", lambda: "tpu"):
        assert run(*args, "--size", "5000", capfd=capfd)[0] == 0
    identity = read_manifest(out)["identity"]
    assert identity["unroll"] == 64 and identity["block_size"] == 32 * 2**20 // 4
    assert run(*args, "--size", "9000", "--extend", capfd=capfd)[0] == 0
    assert read_manifest(out)["identity"]["unroll"] == 64
    want = np.multiply.accumulate(np.r_[np.float32(1), np.full(8999, np.float32(1.0009765625))], dtype=np.float32)
    assert zarr.open_group(str(out), mode="r")["x"][...].tobytes() == want.tobytes()


def test_a_block_size_the_cpus_unroll_takes_and_a_tpus_refuses_is_refused_naming_the_tpus(tmp_path, capfd, seam):
    seam("engine.platform", lambda: "tpu")
    code, err = run("write", tmp_path / "gp.zarr", "--size", "5000", "--block-size", "1000", "--no-progress",
                    capfd=capfd)  # fmt: skip
    assert code == 2 and "--block-size 1000 must be a multiple of the scan's unroll (64)" in err, err
    assert not (tmp_path / "gp.zarr").exists()


def test_a_stream_on_a_tpu_crosses_by_its_callback_to_the_bytes_of_write(tmp_path, seam):
    """As on a TPU (here on the CPU, whose JAX runs the same callbacks): the platform's hand-over, three blocks."""
    seam("engine.platform", lambda: "tpu")

    def step(c, x):
        return c * np.float32(0.999) + x * jnp.sin(c), c

    xs = np.random.default_rng(3).normal(size=3000).astype(np.float32)
    with streamacc.Stream(tmp_path / "s.zarr", step, length=3000, block_size=1024, progress=False) as s:
        carry = jax.jit(s.scan)(np.float32(0.5), xs)
    written = streamacc.write(tmp_path / "w.zarr", step, np.float32(0.5), xs, block_size=1024, progress=False)
    assert np.asarray(carry).tobytes() == np.asarray(written).tobytes()
    stored = [zarr.open_group(str(tmp_path / name), mode="r")["y"][...] for name in ("s.zarr", "w.zarr")]
    assert stored[0].tobytes() == stored[1].tobytes()
    stream_id, write_id = (read_manifest(tmp_path / name)["identity"] for name in ("s.zarr", "w.zarr"))
    # on a chip a step that names no unroll gets one of 2 at least (a loop trip is dear there), the same for both
    assert stream_id["unroll"] == write_id["unroll"] >= 2 and stream_id["block_size"] == write_id["block_size"]
    assert stream_id["unroll_chosen"] is write_id["unroll_chosen"] is True
