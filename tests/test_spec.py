"""One description of a blocked scan, ``ScanSpec``, checked where it is made and taken by every entry point."""

from __future__ import annotations

import dataclasses
import inspect

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bits_equal, assert_same_output
from jax import lax

import streamacc
from streamacc.base import SCAN_DEFAULTS, ScanKeywords
from streamacc.errors import InputError, StepFunctionError


def damped(c, x):
    c = 0.999 * c + 0.01 * jnp.sin(x) + x * c * 1e-3
    return c, {"c": c, "twice": 2 * c}


XS = np.linspace(0.0, 5.0, 1000)


def spec(**keywords):
    return streamacc.ScanSpec(damped, np.float64(1.0), XS, **{"block_size": 96, "unroll": 4, **keywords})


def test_a_spec_is_checked_where_it_is_made_and_cannot_change():
    with pytest.raises(InputError, match=r"block_size=7 must be a multiple of the scan's unroll \(4\)"):
        spec(block_size=7)
    with pytest.raises(InputError, match=r"length=5 .*xs"):
        spec(length=5)

    def branchy(c, x):
        if c > 2:  # not traceable
            return c, c
        return c + x, c

    with pytest.raises(StepFunctionError, match="must be traceable"):
        streamacc.ScanSpec(branchy, np.float64(0.0), XS)
    made = spec()
    assert (made.length, made.block_size, made.unroll, made.reverse, made.save_every) == (1000, 96, 4, False, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.length = 10


def test_the_scan_keywords_are_declared_once():
    """Every entry point spells the scan's keywords as ``ScanKeywords`` names them, with the same defaults."""
    assert set(ScanKeywords.__annotations__) == set(SCAN_DEFAULTS)
    for entry in (streamacc.ScanSpec, streamacc.iter_blocks, streamacc.scan):
        parameters = inspect.signature(entry).parameters
        assert {name: parameters[name].default for name in SCAN_DEFAULTS} == SCAN_DEFAULTS, entry
    made = spec(save_every=2)
    assert made.keywords() == {"length": 1000, "block_size": 96, "unroll": 4, "reverse": False, "save_every": 2}
    shown = repr(made)
    assert shown.startswith("ScanSpec(f=<function damped at ") and f", init=np.float64(1.0), xs={XS!r}, " in shown
    assert shown.endswith(", length=1000, block_size=96, unroll=4, reverse=False, save_every=2)")
    assert streamacc.ScanSpec(damped, np.float64(1.0), XS).block_size is None


def test_scan_iter_blocks_and_write_take_the_spec_as_they_take_its_arguments(tmp_path):
    want_carry, want_ys = lax.scan(damped, np.float64(1.0), XS, unroll=4)
    carry, ys = streamacc.scan(spec())
    assert_bits_equal(ys, want_ys) and assert_bits_equal(carry, want_carry)
    blocks = list(streamacc.iter_blocks(spec()))
    assert [b.start for b in blocks] == list(range(0, 1000, 96))[:-1] or blocks[-1].stop == 1000
    assert_bits_equal(blocks[-1].carry, want_carry)
    by_spec, by_arguments = tmp_path / "spec.zarr", tmp_path / "arguments.zarr"
    got = streamacc.write(by_spec, spec(), progress=False)
    streamacc.write(by_arguments, damped, np.float64(1.0), XS, block_size=96, unroll=4, progress=False)
    assert_bits_equal(got, want_carry)
    assert_same_output(by_spec, by_arguments)
    assert streamacc.verify(by_spec, spec()).complete
    assert streamacc.verify(by_spec, damped, np.float64(1.0), XS).complete


def test_a_virtual_output_reads_and_materializes_with_the_spec(tmp_path):
    out = tmp_path / "v.zarr"
    streamacc.write(out, spec(), virtual=True, progress=False)
    pytest.importorskip("xarray")
    want = np.asarray(lax.scan(damped, np.float64(1.0), XS, unroll=4)[1]["c"])
    np.testing.assert_array_equal(streamacc.open(out, spec()).c.values, want)
    assert streamacc.materialize(out, spec(), progress=False) > 0
    np.testing.assert_array_equal(streamacc.open(out).c.values, want)


def test_a_spec_is_given_alone():
    for extra in ({"length": 1000}, {"block_size": 96}, {"unroll": True}, {"save_every": 2}, {"reverse": True}):
        name = next(iter(extra))
        with pytest.raises(InputError, match=rf"a ScanSpec already holds .*drop {name}="):
            streamacc.scan(spec(), **extra)
    with pytest.raises(InputError, match="drop init"):
        list(streamacc.iter_blocks(spec(), np.float64(1.0)))
    with pytest.raises(InputError, match="drop xs"):
        streamacc.write("unused.zarr", spec(), None, XS)
    with pytest.raises(InputError, match=r"init is needed with the step function f: pass both, or a ScanSpec"):
        streamacc.verify("unused.zarr", damped)


def test_iter_blocks_starts_from_a_carry_at_a_block():
    """The blocks from block k, started from the carry block k-1 left, are the whole run's from there, bit for bit."""
    whole = list(streamacc.iter_blocks(spec()))
    for k in (1, 5, len(whole) - 1):
        rest = list(streamacc.iter_blocks(spec(), carry=whole[k - 1].carry, first_block=k))
        assert [(b.start, b.stop) for b in rest] == [(b.start, b.stop) for b in whole[k:]]
        for got, want in zip(rest, whole[k:], strict=True):
            assert_bits_equal(got.ys, want.ys)
            assert_bits_equal(got.carry, want.carry)
    with pytest.raises(InputError, match=r"first_block=11 is past the scan's last block \(11 blocks of 96 steps\)"):
        streamacc.iter_blocks(spec(), first_block=11)
    with pytest.raises(InputError, match=r"carry must have init's shapes and dtypes: a leaf is float32\[\]"):
        streamacc.iter_blocks(spec(), carry=np.float32(1.0), first_block=1)
    with pytest.raises(InputError, match="carry must have init's structure"):
        streamacc.iter_blocks(spec(), carry=(np.float64(1.0), np.float64(2.0)), first_block=1)
