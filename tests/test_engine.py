"""The block engine: exactness against one ``lax.scan``, block layout, lazy reads, compile
count, dispatch overlap, the x64 policy and the ``scan`` wrapper.

Step functions live at module level so that the engine's compile cache is shared
between examples; each distinct block length still costs one small XLA compile.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import (
    CASES,
    DATA,
    MAX_LEN,
    UNROLL_CASES,
    Case,
    affine_sin_step,
    assert_bits_equal,
    count_step,
    product_step,
    tree_step,
)
from hypothesis import HealthCheck, given, settings, strategies as st
from jax import lax

import streamacc

SETTINGS = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
"""Few examples: each compiles scans of new lengths (a tenth of a second each), and the fixed cases cover the edges."""

CASE_IDS = [c.name for c in CASES]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("xs")


# --- helpers ----------------------------------------------------------------------------


def reference(f: Callable, init: Any, xs: Any, kwargs: dict, **opts: Any) -> tuple[Any, Any]:
    """One ``lax.scan`` over the whole length; Zarr and memmap xs are read whole first."""
    if xs is not None and not isinstance(xs, jax.Array):
        xs = np.asarray(xs[:])
    return lax.scan(f, init, xs, **kwargs, **opts)


def join_blocks(blocks: list[streamacc.Block]) -> Any:
    """The blocks' ys concatenated in step order."""
    ordered = sorted(blocks, key=lambda b: b.start)
    return jax.tree_util.tree_map(lambda *ys: np.concatenate(ys), *[b.ys for b in ordered])


def check_exact(case: Case, length: int, block_size: int, reverse: bool, unroll: int, tmp: Any) -> None:
    init, xs, kwargs = case.make(length, tmp)
    opts = {"reverse": reverse, "unroll": unroll}
    want_carry, want_ys = reference(case.f, init, xs, kwargs, **opts)

    carry, ys = streamacc.scan(case.f, init, xs, block_size=block_size, **kwargs, **opts)
    assert_bits_equal(carry, want_carry)
    assert_bits_equal(ys, want_ys)

    blocks = list(streamacc.iter_blocks(case.f, init, xs, block_size=block_size, **kwargs, **opts))
    tail_joins = unroll > 1 and length > block_size and unroll <= length % block_size < 2 * unroll
    assert len(blocks) == -(-length // block_size) - tail_joins
    if blocks:
        assert_bits_equal(join_blocks(blocks), want_ys)
        assert_bits_equal(blocks[-1].carry, want_carry)


def bounds(length: int, block_size: int) -> list[tuple[int, int]]:
    """Every block's [start, stop) in index order."""
    return [(s, min(s + block_size, length)) for s in range(0, length, block_size)]


# --- 1. exactness -----------------------------------------------------------------------


@st.composite
def layouts(draw, max_len: int = MAX_LEN):
    length = draw(st.integers(0, max_len))
    block_size = draw(st.one_of(st.just(1), st.integers(1, length + 20)))
    return length, block_size


@pytest.mark.slow
@SETTINGS
@given(case=st.sampled_from(CASES), layout=layouts(), reverse=st.booleans())
def test_exact_random_layouts(case, layout, reverse, tmp):
    length, block_size = layout
    check_exact(case, length, block_size, reverse, 1, tmp)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_exact_every_case(case, reverse, tmp):
    """Each case with a block size of 1, a non-dividing one and one longer than the scan."""
    for block_size in (1, 10, 64):
        check_exact(case, 37, block_size, reverse, 1, tmp)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(UNROLL_CASES),
    length=st.integers(0, 120),
    groups=st.integers(2, 12),
    reverse=st.booleans(),
)
def test_exact_unroll4(case, length, groups, reverse, tmp):
    """unroll=4 is bit-identical to ``lax.scan(unroll=4)`` for every accepted layout.

    ``lax.scan(unroll=u)`` runs groups of u steps per loop trip and XLA may reassociate
    floating-point work within a group, so the engine requires block sizes that line up
    with those groups and joins a tail that would run its loop once to the block before.
    """
    unroll, block_size = 4, 4 * groups
    if reverse:
        length -= length % unroll  # reverse scans run their remainder first: required to be empty
    check_exact(case, length, block_size, reverse, unroll, tmp)


@pytest.mark.parametrize("unroll", [1, 4, 8])
@pytest.mark.parametrize("recipe", ["lorenz", "randomwalk"])
def test_blocks_computed_into_recycled_buffers_are_one_scans_bits(recipe, unroll):
    """Full blocks run the scan's loop straight into a recycled buffer: RK4's fused arithmetic and a PRNG
    key's draws come out as from one ``lax.scan``, block after block (the buffers hold the last block's ys)."""
    from streamacc.recipes import get_recipe

    job = get_recipe(recipe).build(8 * 64, "float64")
    want_carry, want_ys = reference(job.f, job.init, job.xs, {"length": job.length}, unroll=unroll)
    blocks = list(streamacc.iter_blocks(job.f, job.init, job.xs, length=job.length, block_size=64, unroll=unroll))
    assert len(blocks) == 8
    assert_bits_equal(join_blocks(blocks), want_ys)
    assert_bits_equal(blocks[-1].carry, want_carry)


def _damped_sin(c, x):
    c = 0.999 * c + 0.01 * jnp.sin(x) + x * c * 1e-3
    return c, c


def _field(c, x):
    """A 64-point state: each point a multiply-add of its neighbours and the input."""
    c = c * (1 - 1e-3 * x) + 0.04 * (jnp.roll(c, 1) - 2 * c + jnp.roll(c, -1)) * x  # stable: 0.04 * 10 < 1/2
    return c, c[::8]


def _oscillator(c, x):
    """Symplectic Euler on a (position, momentum) pair, its energy as a second output."""
    q, p = c
    p = p - 0.01 * (q + 0.1 * q * q * q) + 1e-3 * x
    q = q + 0.01 * p
    return (q, p), {"q": q, "energy": 0.5 * p * p + 0.5 * q * q}


def _float32_decay(c, x):
    c = c * np.float32(0.9999) + np.float32(1e-4) * x * c + np.float32(1e-5) * x
    return c, c


MULTIPLY_ADD_STEPS = {
    "damped_sin": (_damped_sin, lambda: np.float64(1.0), np.float64),
    "field": (_field, lambda: np.linspace(-1.0, 1.0, 64), np.float64),
    "oscillator": (_oscillator, lambda: (np.float64(1.0), np.float64(0.0)), np.float64),
    "float32": (_float32_decay, lambda: np.float32(1.0), np.float32),
}


UNROLLS = [(s, u) for s in MULTIPLY_ADD_STEPS for u in (2, 3, 5, 8, 16) if (s, u) != ("field", 16)]
"""Every step at unrolls 2 to 16 but the 64-point field at 16, whose unrolled trips take XLA seconds to compile."""


@pytest.mark.parametrize(("step", "unroll"), UNROLLS, ids=[f"{s}-{u}" for s, u in UNROLLS])
def test_unrolled_blocks_are_the_bits_of_lax_scan_itself(step, unroll, tmp_path):
    """``lax.scan(f, c0, xs, unroll=u)`` is the reference, called as a user calls it: the blocks of
    ``iter_blocks``, ``scan`` and a written output agree with it bit for bit, as one block of the whole
    length and as many blocks with a tail, for multiply-add-heavy steps where XLA's fusion decides the
    last bits (an unroll-8 loop of the first step once differed in 3949 of 4096 values)."""
    f, init, dtype = MULTIPLY_ADD_STEPS[step]
    length = 1000
    xs = np.linspace(0.0, 10.0, length, dtype=dtype)
    want_carry, want_ys = lax.scan(f, init(), xs, unroll=unroll)
    for block_size in (unroll * -(-length // unroll), unroll * 12):
        blocks = list(streamacc.iter_blocks(f, init(), xs, block_size=block_size, unroll=unroll))
        assert (len(blocks) == 1) == (block_size >= length) and blocks[-1].stop == length
        assert_bits_equal(join_blocks(blocks), want_ys)
        assert_bits_equal(blocks[-1].carry, want_carry)
    carry, ys = streamacc.scan(f, init(), xs, block_size=unroll * 12, unroll=unroll)
    assert_bits_equal(ys, want_ys)
    assert_bits_equal(carry, want_carry)
    out = tmp_path / "o.zarr"
    streamacc.write(out, f, init(), xs, block_size=unroll * 12, unroll=unroll, progress=False, summaries=False)
    import zarr

    stored = zarr.open_group(out, mode="r")
    for name, want in zip(sorted(stored.array_keys()), jax.tree_util.tree_leaves(want_ys), strict=True):
        np.testing.assert_array_equal(np.asarray(stored[name][:]).view(np.uint8), np.asarray(want).view(np.uint8))


def test_unroll_tail_joins_the_previous_block(tmp):
    """A tail of unroll..2*unroll-1 steps would run its unrolled loop once; it joins the block before."""
    blocks = list(streamacc.iter_blocks(product_step, np.float64(1.0), length=54, block_size=8, unroll=4))
    assert [(b.start, b.stop) for b in blocks][-2:] == [(32, 40), (40, 54)]
    from streamacc.base import Blocking

    assert Blocking(54, 8, unroll=4).last_steps == 54 - 5 * 8  # the tail of 6 joins: a last block of 14
    assert Blocking(1000, 96, unroll=1).last_steps == 1000 % 96 and Blocking(960, 96, unroll=1).last_steps == 96
    check_exact(CASES[0], 54, 8, False, 4, tmp)


@pytest.mark.parametrize(
    ("length", "block_size", "unroll", "reverse", "needle"),
    [
        (100, 7, 4, False, r"block_size=7 must be a multiple of the scan's unroll \(4\).*pass e.g. block_size=8"),
        (100, 4, 4, False, "at least 8"),
        (102, 8, 4, True, "reverse=True"),
        (100, 8, True, False, "unroll=True"),
    ],
    ids=["not_multiple", "too_small", "reverse_remainder", "full_unroll"],
)
def test_unroll_layouts_that_regroup_steps_are_refused(length, block_size, unroll, reverse, needle):
    with pytest.raises(streamacc.errors.InputError, match=needle):
        streamacc.iter_blocks(
            product_step, np.float64(1.0), length=length, block_size=block_size, unroll=unroll, reverse=reverse
        )


# --- 2. block structure -----------------------------------------------------------------


@SETTINGS
@given(layout=layouts(), reverse=st.booleans())
def test_block_layout(layout, reverse):
    length, block_size = layout
    init = np.int64(100)
    blocks = list(streamacc.iter_blocks(count_step, init, length=length, block_size=block_size, reverse=reverse))

    spans = [(b.start, b.stop) for b in blocks]
    assert spans == (bounds(length, block_size)[::-1] if reverse else bounds(length, block_size))
    covered = np.zeros(length, dtype=int)
    steps_done = 0
    for b in blocks:
        assert b.start % block_size == 0
        assert len(b) == b.stop - b.start > 0
        assert b.stop == length or len(b) == block_size  # only the last block in index order is short
        assert b.ys.shape == (len(b),) and b.ys.dtype == np.int64
        covered[b.start : b.stop] += 1
        # count_step emits the incoming carry: it is init + the number of steps run so far
        order = np.arange(len(b))[::-1] if reverse else np.arange(len(b))
        np.testing.assert_array_equal(b.ys, init + steps_done + order)
        steps_done += len(b)
        assert b.carry.dtype == np.int64 and int(b.carry) == init + steps_done
    assert (covered == 1).all()
    if reverse and blocks:
        assert blocks[0].stop == length  # the short block runs first


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_block_carry_is_prefix_scan_carry(reverse):
    length, block_size = 23, 5
    init = np.float64(0.5)
    xs = DATA[:length, 0]
    for b in streamacc.iter_blocks(affine_sin_step, init, xs, block_size=block_size, reverse=reverse):
        part = xs[b.start :] if reverse else xs[: b.stop]
        want_carry, want_ys = lax.scan(affine_sin_step, init, part, reverse=reverse)
        assert_bits_equal(b.carry, want_carry)
        assert_bits_equal(b.ys, want_ys[: len(b)] if reverse else want_ys[b.start :])


# --- 3 and 5. lazy reads and dispatch overlap --------------------------------------------


class ReadRecorder:
    """An xs leaf that records every key it is indexed with and refuses to be read whole."""

    def __init__(self, array: np.ndarray):
        self._array = array
        self.shape = array.shape
        self.dtype = array.dtype
        self.reads: list[Any] = []

    def __getitem__(self, key):
        self.reads.append(key)
        return self._array[key]

    def __array__(self, *args, **kwargs):
        raise AssertionError("the whole xs array was converted at once")


def _as_span(key: Any) -> tuple[int, int]:
    assert isinstance(key, slice) and key.step in (None, 1), key
    return key.start, key.stop


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
@pytest.mark.parametrize("how", ["scan", "iter_blocks"])
def test_reads_only_the_current_block(how, reverse):
    length, block_size = 47, 8
    rec = ReadRecorder(DATA[:length, 0].copy())
    run = streamacc.scan if how == "scan" else lambda *a, **k: list(streamacc.iter_blocks(*a, **k))
    run(affine_sin_step, np.float64(0.5), rec, block_size=block_size, reverse=reverse)

    spans = [_as_span(k) for k in rec.reads]
    want = bounds(length, block_size)
    assert spans == (want[::-1] if reverse else want)  # each block read once, in scan order
    assert (0, length) not in spans


@pytest.mark.parametrize("ahead", [None, False, True], ids=["default", "on-demand", "ahead"])
@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_next_block_dispatched_before_handover_only_ahead(reverse, ahead):
    """Computing ahead (by default on an accelerator, not on a CPU) dispatches block k+1 before handing k over."""
    from streamacc.engine import computes_ahead, make_plan, run_plan

    length, block_size = 70, 8
    rec = ReadRecorder(DATA[:length, 0].copy())
    want = bounds(length, block_size)
    want = want[::-1] if reverse else want

    if ahead is None:
        gen = streamacc.iter_blocks(affine_sin_step, np.float64(0.5), rec, block_size=block_size, reverse=reverse)
    else:
        plan = make_plan(affine_sin_step, np.float64(0.5), rec, block_size=block_size, reverse=reverse)
        gen = run_plan(plan, ahead=ahead)
    further = computes_ahead() if ahead is None else ahead
    assert rec.reads == []  # nothing read before the first next()
    for k, block in enumerate(gen):
        assert (block.start, block.stop) == want[k]
        spans = [_as_span(key) for key in rec.reads]
        read = min(k + 1 + further, len(want))  # block k (and ahead, k+1) was read and dispatched, nothing further
        assert spans == want[:read]


def test_live_device_arrays_stay_bounded():
    """The generator holds a fixed number of blocks, however many it has run."""
    gen = streamacc.iter_blocks(affine_sin_step, np.float64(0.5), DATA[:, 0], block_size=4)
    base = len(jax.live_arrays())
    counts = []
    for block in gen:
        counts.append(len(jax.live_arrays()) - base)
        del block
    assert len(counts) == 75
    assert max(counts) <= 6
    assert max(counts[10:]) <= max(counts[:10])


# --- 4. compile count -------------------------------------------------------------------

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class CompileCounter:
    def __init__(self):
        self.count = 0

    def __call__(self, event, duration, **kwargs):
        if event == COMPILE_EVENT:
            self.count += 1

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self)
        return self

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self)


def fresh_product_step() -> Callable:
    def step(c, _):
        return c * 1.0000001, c

    return step


def fresh_affine_step() -> Callable:
    def step(c, x):
        return 0.9 * c + jnp.sin(x), c

    return step


def _count_compiles(f: Callable, xs: Any, length: int, block_size: int) -> int:
    kwargs = {} if xs is not None else {"length": length}
    with CompileCounter() as counter:
        for _ in streamacc.iter_blocks(f, np.float64(1.0), xs, block_size=block_size, **kwargs):
            pass
    return counter.count


@pytest.mark.parametrize("with_xs", [False, True], ids=["no_xs", "numpy_xs"])
def test_compiles_two_block_functions_whatever_the_block_count(with_xs):
    """The full block (the same function whether its buffer is fresh or recycled) and the short last one."""
    block_size = 6
    fresh = fresh_affine_step if with_xs else fresh_product_step
    counts = {}
    _count_compiles(fresh(), None if not with_xs else np.zeros(9), 9, block_size)  # what any first run compiles once
    for blocks in (5, 10, 50):
        length = blocks * block_size + 3
        xs = np.linspace(0.0, 1.0, length) if with_xs else None
        counts[blocks] = _count_compiles(fresh(), xs, length, block_size)
    assert counts[5] == counts[10] == counts[50] == 2, counts


def test_second_identical_call_compiles_nothing():
    f = fresh_product_step()
    assert 1 <= _count_compiles(f, None, 63, 6) <= 3
    assert _count_compiles(f, None, 63, 6) == 0
    with CompileCounter() as counter:
        streamacc.scan(f, np.float64(1.0), length=63, block_size=6)
    assert counter.count == 0


# --- 6. x64 policy ----------------------------------------------------------------------


def int_step(c, x):
    return c + x, c * 2


def uint_step(c, _):
    return c * 3 + 1, c


@pytest.mark.parametrize(
    ("f", "init", "xs"),
    [
        (product_step, np.float64(1.0), None),
        (affine_sin_step, np.float64(1.0), np.linspace(0.0, 1.0, 13)),
        (int_step, np.int64(2**40), np.arange(13, dtype=np.int64)),
        (uint_step, np.uint64(2**63), None),
    ],
    ids=["float64", "float64_xs", "int64", "uint64"],
)
def test_x64_on_keeps_64_bits(f, init, xs):
    kwargs = {} if xs is not None else {"length": 13}
    carry, ys = streamacc.scan(f, init, xs, block_size=4, **kwargs)
    assert carry.dtype == init.dtype
    assert ys.dtype == init.dtype
    assert_bits_equal((carry, ys), lax.scan(f, init, xs, **kwargs))
    blocks = list(streamacc.iter_blocks(f, init, xs, block_size=4, **kwargs))
    assert all(b.ys.dtype == init.dtype and b.carry.dtype == init.dtype for b in blocks)


@pytest.mark.parametrize(
    ("init", "xs"),
    [
        (np.float64(1.0), None),
        (np.float32(1.0), np.zeros(5, dtype=np.float64)),
        ({"a": np.float32(1.0), "b": np.int64(1)}, None),
    ],
    ids=["float64_init", "float64_xs", "int64_leaf"],
)
def test_x64_off_refuses_64_bit_inputs(x64_off, init, xs):
    kwargs = {} if xs is not None else {"length": 5}
    for run in (streamacc.scan, streamacc.iter_blocks):
        with pytest.raises(streamacc.errors.X64Error, match="jax_enable_x64") as info:
            run(lambda c, x: (c, 0.0), init, xs, block_size=2, **kwargs)
        assert isinstance(info.value, streamacc.StreamaccError)
        assert "\n" not in str(info.value)


def f32_step(c, x):
    return 0.5 * c + jnp.sin(x), c


def test_x64_off_float32_works(x64_off):
    xs = np.linspace(0.0, 1.0, 29, dtype=np.float32)
    init = np.float32(0.25)
    carry, ys = streamacc.scan(f32_step, init, xs, block_size=8)
    assert carry.dtype == np.float32 and ys.dtype == np.float32
    assert_bits_equal((carry, ys), lax.scan(f32_step, init, xs))
    with pytest.warns(streamacc.errors.StreamaccWarning, match="so this run is float32"):
        carry, ys = streamacc.scan(product_step, 1.0, length=10, block_size=3)  # weak Python float: 32 bits
    assert carry.dtype == np.float32 and ys.dtype == np.float32


# --- 7. scan's return values ------------------------------------------------------------


def vector_step(c, x):
    return c + x.sum(), (jnp.stack([c, 2.0 * c]), jnp.int32(1))


def test_scan_returns_carry_and_host_ys():
    xs = DATA[:20]
    carry, ys = streamacc.scan(vector_step, np.float64(0.0), xs, block_size=6)
    assert isinstance(ys, tuple) and all(isinstance(y, np.ndarray) for y in ys)
    assert ys[0].shape == (20, 2) and ys[1].shape == (20,) and ys[1].dtype == np.int32
    assert_bits_equal((carry, ys), lax.scan(vector_step, np.float64(0.0), xs))


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reverse"])
def test_scan_length_zero(reverse):
    xs = np.zeros((0, 2))
    init = np.float64(1.5)
    carry, ys = streamacc.scan(vector_step, init, xs, block_size=4, reverse=reverse)
    assert isinstance(ys[0], np.ndarray) and ys[0].shape == (0, 2) and ys[0].dtype == np.float64
    assert isinstance(ys[1], np.ndarray) and ys[1].shape == (0,) and ys[1].dtype == np.int32
    assert carry.dtype == np.float64 and float(carry) == init
    assert list(streamacc.iter_blocks(vector_step, init, xs, block_size=4, reverse=reverse)) == []

    carry, ys = streamacc.scan(tree_step, CASES[3].init(), length=0)
    assert_bits_equal(carry, CASES[3].init())
    assert ys[0].shape == (0,) and ys[0].dtype == np.int64
    assert ys[1]["both"].shape == (0, 2) and ys[1]["sum"].dtype == np.float64


def test_block_is_sized():
    (block,) = streamacc.iter_blocks(product_step, np.float64(1.0), length=3, block_size=8)
    assert (block.start, block.stop, len(block)) == (0, 3, 3)
    assert list(itertools.islice(streamacc.iter_blocks(product_step, 1.0, length=9, block_size=2), 2))[1].start == 2
