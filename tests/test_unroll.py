"""The unroll chosen for a step that names none: the rule (a function of the step's program, the platform and the
length, the same every time), the bits it gives (``lax.scan``'s at that unroll, bit for bit), and the output that
records it (``info`` says it was chosen; a continued run keeps it on any platform; an explicit one is kept). A
chip is a seam away: ``engine.platform`` answers "tpu" and the rule lowers the step for a TPU on this CPU."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import read_manifest, run
from jax import lax

import streamacc
from streamacc.engine import ScanSpec, choose_unroll, step_program


def multiply(c, _):
    c = c * np.float32(1.0 + 2.0**-20)
    return c, c


def muladd(c, x):
    c = np.float32(0.999) * c + np.float32(0.01) * jnp.sin(x) + x * c * np.float32(1e-3)
    return c, c


def euler(c, _):
    x, y, z = c
    dt = np.float32(1e-3)
    c = (x + dt * (10 * (y - x)), y + dt * (x * (28 - z) - y), z + dt * (x * y - np.float32(8 / 3) * z))
    return c, c[0]


def members(c, x):
    c = c * np.float32(0.999) + x * c * np.float32(1e-3) + np.float32(1e-4)
    return c, c


def newton(c, x):
    r = lax.fori_loop(0, 8, lambda _, r: 0.5 * (r + x / r), jnp.maximum(x, 1.0))
    return c + r, r


def normal(c, _):
    key, x = c
    key, sub = jax.random.split(key)
    x = np.float32(0.99) * x + np.float32(0.1) * jax.random.normal(sub, x.shape, jnp.float32)
    return (key, x), x


def diffusion(c, _):
    c = c + np.float32(0.2) * (jnp.roll(c, 1) - 2 * c + jnp.roll(c, -1))
    return c, c


def _structs(f, init, x=None):
    carry = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.asarray(a).dtype), init)
    x = None if x is None else jax.ShapeDtypeStruct(x.shape, x.dtype)
    return carry, x, jax.eval_shape(f, carry, x)[1]


def chosen(f, init, length, platform, x=None, **keywords):
    return choose_unroll(f, *_structs(f, init, x), length=length, platform=platform, **keywords)


SCALAR, X = np.float32(0.5), np.zeros((), np.float32)


@pytest.mark.parametrize("platform", ["tpu", "gpu"])
def test_on_a_chip_a_cheap_step_of_a_long_run_unrolls_by_64_and_a_short_run_by_2(platform):
    # a loop trip on a chip costs far more than a multiply: a long run pays for the compile of 64 copies
    assert chosen(multiply, SCALAR, 2**28, platform) == 64
    assert chosen(euler, (SCALAR,) * 3, 2**28, platform) == 64
    # the saving of a short run does not pay for a larger compile; unroll 1 is never chosen on a chip
    assert chosen(multiply, SCALAR, 1000, platform) == 2
    assert 2 < chosen(muladd, SCALAR, 2**18, platform, X) < 64
    # the same job gets the same unroll every time
    assert len({chosen(muladd, SCALAR, 2**18, platform, X) for _ in range(3)}) == 1


def test_on_a_chip_a_large_program_or_a_loop_of_its_own_keeps_the_unroll_small():
    key = (jax.random.key(0), np.zeros(64, np.float32))
    program = step_program(normal, *_structs(normal, key)[:2], "tpu")
    assert program.operations > 300 and not program.loops  # a normal variate: hundreds of operations lowered
    u = chosen(normal, key, 2**40, "tpu")
    assert 2 <= u <= 8 and program.operations * u <= streamacc.base.UNROLLED_OPS_AT_MOST
    assert step_program(newton, *_structs(newton, SCALAR, X)[:2], "tpu").loops
    assert chosen(newton, SCALAR, 2**40, "tpu", X) == 2


def stacked(c, _):
    x, y, z = c[0], c[1], c[2]
    c = c + np.float32(1e-3) * jnp.stack([10 * (y - x), x * (28 - z) - y, x * y - np.float32(8 / 3) * z])
    return c, c


def test_on_a_chip_a_step_of_short_vectors_is_unrolled_less_and_less_again_where_it_stacks_them():
    """Vectors shorter than a register row: at most 8, and 4 where the step slices or stacks them (a state built
    with ``jnp.stack``); the same state as a tuple of scalars unrolls as a scalar step does."""
    program = step_program(stacked, *_structs(stacked, np.ones(3, np.float32))[:2], "tpu")
    assert program.short == 3 and program.short_moved
    assert chosen(stacked, np.ones(3, np.float32), 2**32, "tpu") == 4
    assert chosen(members, np.ones(3, np.float32), 2**32, "tpu", np.ones(3, np.float32)) == 8
    assert chosen(euler, (SCALAR,) * 3, 2**32, "tpu") == 64
    assert chosen(stacked, np.ones(3, np.float32), 2**32, "cpu") == 1  # a CPU runs a step that names none at 1


def test_on_a_chip_a_wide_state_or_a_thinned_large_y_is_not_unrolled_past_its_blocks():
    assert chosen(members, np.ones(2**20, np.float32), 2**30, "tpu", np.ones(2**20, np.float32)) == 1
    field = np.ones(4096, np.float32)
    assert chosen(diffusion, field, 2**30, "tpu") == 64
    assert chosen(diffusion, field, 2**30, "tpu", save_every=100) == 1  # an unrolled thinned block keeps every y
    assert chosen(multiply, SCALAR, 2**30, "tpu", save_every=100) == 64


def test_a_chosen_unroll_lines_up_with_the_blocks_and_the_reversed_length_asked_for():
    assert chosen(multiply, SCALAR, 2**28, "tpu", block_size=1000) == 8
    assert chosen(multiply, SCALAR, 2**28, "tpu", block_size=96) == 32
    assert chosen(multiply, SCALAR, 3 * 2**20 + 4, "tpu", reverse=True) == 4
    assert chosen(multiply, SCALAR, 2**28 + 1, "tpu", reverse=True) == 1


def test_on_a_cpu_a_step_that_names_no_unroll_runs_at_1_however_long_the_run():
    """Unrolled, XLA compiles the steps together and can change their last bits: a CPU, where unrolling gained
    little, keeps plain lax.scan's."""
    for f, init, x in [
        (multiply, SCALAR, None),
        (euler, (SCALAR,) * 3, None),
        (diffusion, np.ones(4096, np.float32), None),
        (newton, SCALAR, X),
        (normal, (jax.random.key(0), np.zeros(64, np.float32)), None),
    ]:
        assert chosen(f, init, 2**62, "cpu", x) == 1, f
    assert chosen(multiply, SCALAR, 2**62, "metal") == 1  # any platform not an accelerator is a CPU


CASES = [
    ("multiply-add", muladd, SCALAR, lambda n: np.random.default_rng(1).normal(size=n).astype(np.float32)),
    ("3 scalars", euler, (np.float32(1.0), np.float32(1.5), np.float32(2.0)), None),
    ("16 members", members, np.linspace(0.5, 1.5, 16, dtype=np.float32),
     lambda n: np.random.default_rng(2).normal(size=(n, 16)).astype(np.float32)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "f", "init", "make_xs"), CASES, ids=[c[0] for c in CASES])
def test_a_chosen_unroll_gives_the_bits_of_lax_scan_at_that_unroll(name, f, init, make_xs, seam):
    """Multiply-add-heavy steps, the unroll chosen as on a chip, blocked in three ways: ``lax.scan(unroll=u)``'s
    carry and ys, bit for bit (one jitted scan of the whole length, computed apart)."""
    seam("engine.platform", lambda: "tpu")
    n = 2**18 + 512
    xs = None if make_xs is None else make_xs(n)
    u = ScanSpec(f, init, xs, length=n).unroll
    assert u >= 4 and n % u == 0
    want_carry, want_ys = jax.jit(lambda c, x: lax.scan(f, c, x, length=n, unroll=u))(init, xs)
    for block in (None, 16 * u, 2**16 + 3 * u):
        spec = ScanSpec(f, init, xs, length=n, block_size=block)
        assert spec.unroll == u and spec.unroll_chosen
        carry, ys = streamacc.scan(spec)
        for got, want in zip(jax.tree_util.tree_leaves((carry, ys)), jax.tree_util.tree_leaves((want_carry, want_ys)),
                             strict=True):  # fmt: skip
            assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (name, block)


def test_a_cpu_run_of_any_length_keeps_the_sequential_products_bits_and_an_unroll_given_keeps_lax_scans():
    """At 2**23 steps 1.1.0 chose 8 on a CPU, and XLA then computed the multiply's constants across the copies:
    the values left numpy's sequential product. Nothing given, they are that product, bit for bit; unroll=8 given,
    they are lax.scan's at 8."""
    n = 2**23
    spec = ScanSpec(multiply, np.float32(1.0), length=n)
    assert spec.unroll == 1 and spec.unroll_chosen
    sequential = np.multiply.accumulate(np.full(n, np.float32(1.0 + 2.0**-20)), dtype=np.float32)
    assert streamacc.scan(spec)[1].tobytes() == sequential.tobytes()
    unrolled = streamacc.scan(multiply, np.float32(1.0), length=n, unroll=8)[1]
    want = jax.jit(lambda c: lax.scan(multiply, c, None, length=n, unroll=8))(np.float32(1.0))[1]
    assert unrolled.tobytes() == np.asarray(want).tobytes() and unrolled.tobytes() != sequential.tobytes()


def test_the_output_records_the_chosen_unroll_and_keeps_it_when_continued_on_another_platform(tmp_path, seam):
    out = tmp_path / "m.zarr"
    xs = np.random.default_rng(3).normal(size=4096).astype(np.float32)
    with streamacc.testing.patched("engine.platform", lambda: "tpu"):
        streamacc.write(out, muladd, SCALAR, xs[:2048], progress=False)
    identity = read_manifest(out)["identity"]
    u = identity["unroll"]
    assert u >= 2 and identity["unroll_chosen"] is True
    about = streamacc.info(out)
    assert about.unroll == u and about.unroll_chosen
    assert f"unroll: {u} (chosen for the step)" in str(about)
    # here, on the CPU, the rule would choose 1 for 4096 steps: the extension keeps the recorded unroll
    assert ScanSpec(muladd, SCALAR, xs).unroll == 1
    streamacc.write(out, muladd, SCALAR, xs, mode="extend", progress=False)
    assert read_manifest(out)["identity"]["unroll"] == u
    _, want = jax.jit(lambda c, x: lax.scan(muladd, c, x, unroll=u))(SCALAR, xs)
    assert zarr.open_group(str(out), mode="r")["y"][...].tobytes() == np.asarray(want).tobytes()
    assert streamacc.verify(out, muladd, SCALAR, xs).complete


def test_an_unroll_given_is_kept_and_an_output_without_the_record_keeps_its_own(tmp_path, seam):
    out = tmp_path / "given.zarr"
    streamacc.write(out, multiply, np.float32(1.0), length=1000, unroll=1, progress=False)
    identity = read_manifest(out)["identity"]
    assert identity["unroll"] == 1 and "unroll_chosen" not in identity
    assert "unroll: 1 (given)" in str(streamacc.info(out))
    # as an output of an earlier release (whose default was 1, recorded without saying it was chosen) on a chip,
    # where the rule would choose 2: extended, it keeps 1
    seam("engine.platform", lambda: "tpu")
    streamacc.write(out, multiply, np.float32(1.0), length=3000, mode="extend", progress=False)
    assert read_manifest(out)["identity"]["unroll"] == 1
    # an unroll given that differs from the recorded one is refused, naming it
    with pytest.raises(streamacc.errors.ResumeError, match="unroll: stored 1, now 4"):
        streamacc.write(out, multiply, np.float32(1.0), length=4000, mode="extend", unroll=4, progress=False)


def test_the_command_line_takes_an_unroll_and_refuses_a_bad_one(tmp_path, capfd):
    out = tmp_path / "gp.zarr"
    assert run("write", out, "--size", "1000", "--unroll", "4", "--no-progress", capfd=capfd)[0] == 0
    assert read_manifest(out)["identity"]["unroll"] == 4
    code, err = run("write", tmp_path / "bad.zarr", "--size", "1000", "--unroll", "0", "--no-progress", capfd=capfd)
    assert code == 2 and "--unroll" in err and not (tmp_path / "bad.zarr").exists()


def test_on_a_tpu_the_default_float64_is_said_to_be_emulated_and_an_explicit_one_is_not(tmp_path, capfd, seam):
    from streamacc.cli import main

    seam("engine.platform", lambda: "tpu")
    capfd.readouterr()
    assert main(["write", str(tmp_path / "a.zarr"), "--size", "256", "--no-progress"]) == 0
    err = capfd.readouterr().err
    notes = [line for line in err.splitlines() if "emulated on a TPU" in line]
    assert len(notes) == 1 and "--dtype float32 --compensated" in notes[0] and notes[0].startswith("streamacc: ")
    assert main(["write", str(tmp_path / "b.zarr"), "--size", "256", "--dtype", "float64", "--no-progress"]) == 0
    assert "emulated" not in capfd.readouterr().err
