"""Exact by default: with nothing given on a CPU, what a run stores is plain ``lax.scan(f, init, xs, length)``'s,
bit for bit (written, thinned, in memory, in a Stream, with inputs, resumed and extended); a run with a condition
stores what the same run without it stores, cut after the step where it held, with that run's carry there (at any
unroll given). The references are ``lax.scan`` itself, jitted whole, computed apart from streamacc.

The seed's program is the float64 geometric progression ``c * (1 + 1e-8)``: at unroll 2, XLA folds the constant
across the unrolled copies, and all but 7 of 2**20 steps differ from plain ``lax.scan``'s.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from faultrun import full_disk
from jax import lax

import streamacc
from streamacc.engine import INSIDE, OUTSIDE, ScanSpec


def gp(c, _):
    c = c * (1 + 1e-8)
    return c, c


def gp_in(c, x):
    c = c * (1 + 1e-8) + x * 1e-12
    return c, c


def oscillator(c, _):
    x, v = c
    v = v - 1e-3 * x
    x = x + 1e-3 * v
    return (x, v), x


def lax_scan(f, init, xs=None, *, length, unroll=1):
    """``lax.scan(f, init, xs, length=length, unroll=unroll)``, jitted whole: its carry and ys as numpy."""
    carry, ys = jax.jit(lambda c, x: lax.scan(f, c, x, length=length, unroll=unroll))(init, xs)
    return jax.tree_util.tree_map(np.asarray, carry), jax.tree_util.tree_map(np.asarray, ys)


def stored(path, name="x"):
    return zarr.open_group(str(path), mode="r")[name][...]


def same_bits(a, b):
    return np.asarray(a).tobytes() == np.asarray(b).tobytes()


@pytest.fixture(scope="module")
def plain():
    """Plain ``lax.scan(gp, 1.0, length=2**20)``: its carry and ys."""
    return lax_scan(gp, np.float64(1.0), length=2**20)


def test_the_seeds_progression_is_plain_lax_scans_at_2_20_and_2_23_steps(tmp_path, plain):
    """The unroll rule of 1.1.0 chose 2 at 2**20 steps and 8 at 2**23 on a CPU, and the values left lax.scan's."""
    spec = ScanSpec(gp, np.float64(1.0), length=2**23)
    assert spec.unroll == 1 and spec.unroll_chosen
    carry, ys = streamacc.scan(spec)
    want_carry, want = lax_scan(gp, np.float64(1.0), length=2**23)
    assert same_bits(ys, want) and same_bits(carry, want_carry)
    out = tmp_path / "gp.zarr"
    carry = streamacc.write(out, gp, np.float64(1.0), length=2**20, names="x", progress=False)
    assert same_bits(stored(out), plain[1]) and same_bits(carry, plain[0])
    assert streamacc.info(out).unroll == 1
    assert not same_bits(plain[1], lax_scan(gp, np.float64(1.0), length=2**20, unroll=2)[1])  # what unrolling did


def test_thinned_it_keeps_plain_lax_scans_every_thousandth_step(tmp_path, plain):
    out = tmp_path / "thin.zarr"
    streamacc.write(out, gp, np.float64(1.0), length=2**20, save_every=1000, names="x", progress=False)
    assert same_bits(stored(out), plain[1][999::1000])


def test_with_inputs_resumed_and_extended_it_is_plain_lax_scans(tmp_path):
    xs = np.random.default_rng(0).uniform(0.0, 1.0, 2**20)
    want_carry, want = lax_scan(gp_in, np.float64(1.0), xs, length=2**20)
    out = tmp_path / "in.zarr"
    with full_disk("chunk", 6), pytest.raises(streamacc.errors.StoreError):
        streamacc.write(out, gp_in, np.float64(1.0), xs[: 2**19], block_size=2**14, names="x", progress=False)
    assert 0 < streamacc.info(out).committed_steps < 2**19
    streamacc.write(out, gp_in, np.float64(1.0), xs[: 2**19], block_size=2**14, names="x", mode="resume",
                    progress=False)  # fmt: skip
    carry = streamacc.write(out, gp_in, np.float64(1.0), xs, block_size=2**14, names="x", mode="extend",
                            progress=False)  # fmt: skip
    assert same_bits(stored(out), want) and same_bits(carry, want_carry)
    assert streamacc.verify(out, gp_in, np.float64(1.0), xs).complete


def test_in_a_stream_it_is_plain_lax_scans(tmp_path, plain):
    out = tmp_path / "stream.zarr"
    with streamacc.Stream(out, gp, length=2**20, names="x", progress=False) as stream:
        carry = jax.jit(stream.scan)(jnp.float64(1.0))
    assert same_bits(stored(out), plain[1]) and same_bits(carry, plain[0])


# --- a condition changes no stored value ------------------------------------------------------------------------


def over(c, y):
    return c > 1.002  # first after step 199,999 or so


@pytest.mark.parametrize("unroll", [None, 8])
def test_a_condition_stores_the_run_without_it_cut_after_its_step(tmp_path, unroll):
    """Stored and returned, by write and by a Stream: the values of the run without the condition (the same unroll),
    cut after the first step where it held, and its carry there (the carry is the step's y: the same variable)."""
    n = 2**20
    _, want = lax_scan(gp, np.float64(1.0), length=n, unroll=unroll or 1)
    k = int(np.argmax(want > 1.002))
    assert 0 < k < n - 1
    spec = ScanSpec(gp, np.float64(1.0), length=n, unroll=unroll, until=over)
    assert spec._plan.until.way == OUTSIDE
    out = tmp_path / "ended.zarr"
    carry = streamacc.write(out, gp, np.float64(1.0), length=n, unroll=unroll, until=over, block_size=2**16,
                            names="x", progress=False)  # fmt: skip
    assert same_bits(stored(out), want[: k + 1]) and same_bits(carry, want[k])
    assert streamacc.info(out).ended_at == k
    into = tmp_path / "stream.zarr"
    with streamacc.Stream(into, gp, length=n, unroll=unroll, until=over, block_size=2**16, names="x",
                          progress=False) as stream:  # fmt: skip
        carry = jax.jit(stream.scan)(jnp.float64(1.0))
    assert same_bits(stored(into), want[: k + 1]) and same_bits(carry, want[k])


def test_a_condition_on_a_carry_the_ys_do_not_hold_keeps_the_stored_values_and_finds_its_carry(tmp_path):
    """The oscillator's y is its position; a condition on its velocity is tested inside the steps. Unrolled, the
    stored ys are still the run's without the condition; with unroll 1 the carry is lax.scan's after the step."""
    init = (np.float64(1.0), np.float64(0.0))
    n = 8192
    for unroll in (1, 8):
        _, want = lax_scan(oscillator, init, length=n, unroll=unroll)
        spec = ScanSpec(oscillator, init, length=n, unroll=unroll, until=lambda c, y: c[1] < -0.5)
        assert spec._plan.until.way == INSIDE
        carry, ys = streamacc.scan(spec)
        k = len(ys) - 1
        assert 0 < k < n - 1 and same_bits(ys, want[:k + 1]), unroll
        out = tmp_path / f"stream-{unroll}.zarr"
        with streamacc.Stream(out, oscillator, length=n, unroll=unroll, until=lambda c, y: c[1] < -0.5, names="x",
                              progress=False) as stream:  # fmt: skip
            got = jax.jit(stream.scan)((jnp.float64(1.0), jnp.float64(0.0)))
        assert same_bits(stored(out), ys) and all(same_bits(a, b) for a, b in zip(got, carry, strict=True))
        if unroll == 1:
            want_carry, _ = lax_scan(oscillator, init, length=k + 1)
            assert same_bits(carry[0], want_carry[0]) and same_bits(carry[1], want_carry[1])
            assert carry[1] < -0.5 and lax_scan(oscillator, init, length=k)[0][1] >= -0.5


def test_a_condition_on_the_ys_finds_the_carry_leaves_they_do_not_hold_by_running_its_block_again():
    """A condition on the position (a y) is tested on the plain scan's outputs; the velocity after the step where
    it held is the carry of the block run again to that step: lax.scan's, with unroll 1."""
    init = (np.float64(1.0), np.float64(0.0))
    n = 8192
    spec = ScanSpec(oscillator, init, length=n, block_size=1024, until=lambda c, y: y < 0.0)
    assert spec._plan.until.way == OUTSIDE and spec._plan.until.sources[1].kind == "held"
    carry, ys = streamacc.scan(spec)
    k = len(ys) - 1
    want_carry, want = lax_scan(oscillator, init, length=k + 1)
    assert 1024 < k < n - 1 and same_bits(ys, want) and ys[-1] < 0.0 <= ys[-2]
    assert same_bits(carry[0], want_carry[0]) and same_bits(carry[1], want_carry[1])


def test_thinned_a_condition_keeps_the_thinned_runs_rows(tmp_path):
    n = 2**18
    every = 100
    spec = ScanSpec(gp, np.float64(1.0), length=n, save_every=every, until=lambda c, y: c > 1.001)
    assert spec._plan.until.way == INSIDE
    _, ys = streamacc.scan(spec)
    _, want = streamacc.scan(gp, np.float64(1.0), length=n, save_every=every)
    k = int(np.argmax(lax_scan(gp, np.float64(1.0), length=n)[1] > 1.001))
    assert len(ys) == (k + 1) // every and same_bits(ys, want[: len(ys)])
    assert same_bits(want, lax_scan(gp, np.float64(1.0), length=n)[1][every - 1 :: every])


def test_a_run_that_ends_on_a_condition_compiles_its_steps_once():
    """A sampler's block compiled twice in 1.1.0 (a probe, then a finder where the condition held): the step is
    now traced into one program when the condition reads a carry the ys do not hold, and no other runs it."""
    traced = []

    def counted(c, _):
        traced.append(1)
        return oscillator(c, _)

    init = (np.float64(1.0), np.float64(0.0))
    spec = ScanSpec(counted, init, length=8192, block_size=1024, until=lambda c, y: c[1] < -0.9)
    assert spec._plan.until.way == INSIDE
    traced.clear()
    _, ys = streamacc.scan(spec)
    assert 1024 < len(ys) < 8192 and len(traced) == 1
