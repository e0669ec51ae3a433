"""Blocks sized in bytes, chunks sized in bytes on every axis, named dimensions.

Layouts are checked against independent arithmetic; outputs are read back with plain
zarr and xarray and compared with one in-memory ``lax.scan``. Only small outputs are
written; large states are checked through the plan alone (tracing, no computation).
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
import zarr

import streamacc
from streamacc.base import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_WRITE_BLOCK_SIZE,
    block_steps,
    check_request,
    default_chunks,
    divisor_at_most,
    resolve_chunks,
    shard_shape,
)
from streamacc.engine import make_plan
from streamacc.run import output_spec

MIB = 2**20


def scalar_step(c, _):
    return c * 1.0000001, c


def vector_step(u, _):
    u = u + 0.25 * (jnp.roll(u, 1) - 2.0 * u + jnp.roll(u, -1))
    return u, u


def plan_of(f, init, length=2**30, **kw):
    return make_plan(f, init, length=length, block_bytes=32 * MIB, **kw)


# --- blocks sized in bytes ----------------------------------------------------------------


def test_the_scalar_defaults_are_unchanged():
    """2**22 float64 steps per written block, 2**20 per computed one: the byte budgets of the defaults."""
    assert plan_of(scalar_step, np.float64(1.0)).block_size == 2**22 == DEFAULT_WRITE_BLOCK_SIZE
    plan = make_plan(scalar_step, np.float64(1.0), length=2**30)
    assert plan.block_size == 2**20 == DEFAULT_BLOCK_SIZE
    assert plan_of(scalar_step, np.float32(1.0)).block_size == 2**23  # same bytes, twice the steps
    spec = output_spec(plan_of(scalar_step, np.float64(1.0)), check_request())
    assert spec.chunks == {"y": (2**19,)} and spec.shards == {"y": (2**22,)}  # one shard (object) per block, as always


@pytest.mark.parametrize(
    ("values", "dtype", "rows"),
    [(4096, np.float64, 1024), (1000, np.float64, 4096), (3, np.float64, 2**20 + 2**18), (2**22, np.float64, 1)],
    ids=["heat_4096", "ensemble_1000", "lorenz_3", "state_32MiB"],
)
def test_blocks_hold_the_budget_in_bytes_whatever_a_step_outputs(values, dtype, rows):
    plan = plan_of(lambda c, _: (c, c), np.zeros(values, dtype))
    assert plan.block_size == rows
    row = values * np.dtype(dtype).itemsize
    assert rows * row <= 32 * MIB and (rows == 1 or 2 * rows * row > 32 * MIB * 7 / 8)


def test_a_step_larger_than_the_budget_runs_one_step_per_block_and_its_chunks_are_split():
    """A 128 MiB state: one step per block, chunks cut along the state so none nears blosc's 2 GiB."""
    assert block_steps(2**27, 32 * MIB) == 1
    chunk = resolve_chunks({"u": (2**24,)}, {"u": 8}, {"u": ("step", "x")}, None, 1)["u"]
    assert chunk[0] == 1 and 1 * MIB <= math.prod(chunk) * 8 <= 64 * MIB


def test_inputs_count_too():
    """A step whose xs rows are large reads about the budget per block (not 2**22 rows of them)."""
    xs = jax.ShapeDtypeStruct((2**20, 4096), np.float64)
    plan = make_plan(lambda c, x: (c + x.sum(), c), np.float64(0.0), xs, block_bytes=32 * MIB)
    assert plan.block_size == 1024


def test_an_explicit_block_size_counts_steps():
    assert plan_of(lambda c, _: (c, c), np.zeros(4096), block_size=10).block_size == 10


def test_unroll_and_thinning_shape_the_block():
    assert plan_of(scalar_step, np.float64(1.0), unroll=8).block_size % 8 == 0
    plan = plan_of(lambda c, _: (c, c), np.zeros(3), save_every=1000)
    assert plan.block_size % 1000 == 0 and plan.block_size <= 2**26  # bounded in steps too


# --- chunks -------------------------------------------------------------------------------


def test_default_chunks_rule():
    assert default_chunks((), 8, 2**22) == (2**19,)  # 4 MiB, an inner chunk of a block's shard
    assert default_chunks((), 8, 2**18) == (2**18,)  # a block at most
    assert default_chunks((500,), 8, 4096) == (1024, 500)  # few values a row: 4 MiB (at most a block)
    assert default_chunks((4096,), 8, 1024) == (512, 512)  # many: 2 MiB, balanced between snapshot and series
    assert default_chunks((1000,), 8, 4096) == (512, 500)
    assert default_chunks((256, 256), 8, 64) == (64, 64, 64)  # rows are a block's at most
    assert default_chunks((2**24,), 8, 1) == (1, 2**18)
    assert default_chunks((), 8, 2**26) == (2**19,)  # the same in a large block
    for trailing, rows in [((4096,), 1024), ((256, 256), 64), ((1000,), 4096), ((7, 999), 96), ((2**26,), 1)]:
        chunk = default_chunks(trailing, 8, rows)
        assert rows % chunk[0] == 0 and 1 * MIB <= math.prod(chunk) * 8 <= 64 * MIB


def test_a_block_of_several_chunks_is_one_shard():
    assert shard_shape((2**19,), (2**30,), 8, 2**22) == (2**22,)  # the default series: a block of 8 chunks
    assert shard_shape((2**22,), (2**30,), 8, 2**22) is None  # a block one chunk: nothing to shard
    assert shard_shape((1000,), (500,), 8, 1000) is None  # an array shorter than a chunk
    assert shard_shape((4, 16, 4), (60, 40, 6), 8, 8) == (8, 48, 8)  # the whole state, its edges rounded up
    assert shard_shape((1, 512, 512), (10, 2048, 2048), 8, 1) == (1, 2048, 2048)  # a 32 MiB field: 16 tiles
    assert shard_shape((2**19,), (2**40,), 8, 2**28) == (2**23,)  # a 2 GiB block: shards of 64 MiB at most
    assert shard_shape((3, 2), (100, 2), 4, 12) == (12, 2)  # rows a multiple of the chunk's


def test_divisor_at_most():
    for n, limit in [(4194, 1000), (2**22 * 3, 5000), (1000003, 100), (97 * 89, 90), (12, 12), (2**40, 2**20)]:
        d = divisor_at_most(n, limit)
        assert n % d == 0 and d <= limit
        assert not any(n % e == 0 for e in range(d + 1, min(limit, 10**5) + 1))  # the largest


def field_step(c, _):
    c = c * 0.5 + 1.0
    return c, {"field": jnp.full((40, 6), c), "stats": jnp.stack([c, c, c])}


def write_field(path, **kw):
    kw.setdefault("progress", False)
    return streamacc.write(path, field_step, np.float64(0.0), length=50, block_size=8, **kw)


@pytest.mark.parametrize(
    ("chunks", "field", "stats"),
    [
        (4, (4, 4, 4), (4, 3)),
        ((8, 20, -1), None, None),
        ({"step": 4, "a": 10}, (4, 10, 6), (4, 3)),
        ({"step": None, "b": 3}, (8, 40, 3), (8, 3)),
        ({"b": 2}, (8, 40, 2), (8, 3)),
    ],
    ids=["int", "tuple", "dict", "dict_whole_step", "dict_auto_step"],
)
def test_chunks_follow_dask_conventions_and_read_back_exactly(tmp_path, chunks, field, stats):
    path = tmp_path / "out.zarr"
    dims = {"field": ["a", "b"], "stats": ["s"]}
    if isinstance(chunks, tuple):  # a tuple gives every output one entry per axis: here both need 3
        with pytest.raises(streamacc.errors.InputError, match=r"chunks=\(8, 20, -1\) has 3 entries .* 2 axes"):
            write_field(path, chunks=chunks, dims=dims)
        assert not path.exists()
        return
    write_field(path, chunks=chunks, dims=dims)
    group = zarr.open_group(path, mode="r")
    assert group["field"].chunks == field and group["stats"].chunks == stats
    _, ref = jax.lax.scan(field_step, np.float64(0.0), None, length=50)
    np.testing.assert_array_equal(group["field"][:], ref["field"])
    np.testing.assert_array_equal(group["stats"][:], ref["stats"])
    assert streamacc.verify(path, field_step, np.float64(0.0)).complete


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"chunks": {"step": 3}}, r"3 rows along 'step' .* does not divide a block's 8 rows"),
        ({"chunks": {"step": 0}}, r"chunks gives dimension 'step' 0"),
        ({"chunks": {"a": 2.5}, "dims": {"field": ["a", "b"]}}, r"chunks gives dimension 'a' 2.5"),
        ({"chunks": {"x": 2}}, r"chunks names dimension 'x', which no output has"),
        ({"chunks": "big"}, r"chunks must be 'auto', an int, a tuple"),
        ({"dims": {"field": ["a"]}}, r"names 1 axis for output 'field'"),
        ({"dims": {"field": ["a", "s"], "stats": ["s"]}}, r"dimension 's' 6 values in output 'field' and 3"),
        ({"dims": {"nope": ["a"]}}, r"names outputs \['nope'\]"),
        ({"dims": {"stats": ["time"]}}, r"uses 'time', which streamacc names its own coordinate"),
        ({"dims": {"stats": ["a b"]}}, r"distinct names"),
    ],
)
def test_bad_layouts_are_refused_before_anything_is_written(tmp_path, kwargs, needle):
    path = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.InputError, match=needle) as info:
        write_field(path, **kwargs)
    assert "\n" not in str(info.value)
    assert not path.exists()


def test_a_chunk_past_blosc_s_limit_is_refused_with_the_fix():
    dims = {"u": ("step", "x")}
    with pytest.raises(
        streamacc.errors.InputError, match=r"2 GiB a compressor can take; pass smaller chunks, e.g. chunks="
    ):
        resolve_chunks({"u": (2**26,)}, {"u": 8}, dims, {"x": -1}, 8)
    assert resolve_chunks({"u": (2**26,)}, {"u": 8}, dims, {"x": 2**20}, 8)["u"] == (8, 2**20)


# --- named dimensions ---------------------------------------------------------------------


def test_outputs_of_different_shapes_open_everywhere_with_their_dims(tmp_path):
    """The report: {"field": c, "stats": c[:3]} could not be opened; defaults now never collide."""
    path = tmp_path / "out.zarr"

    def step(c, _):
        c = c + 1.0
        return c, {"field": c, "stats": c[:3]}

    streamacc.write(path, step, np.zeros(100), length=20, block_size=8, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = xr.open_zarr(path)
    assert plain["field"].dims == ("step", "field_dim_1") and plain["stats"].dims == ("step", "stats_dim_1")
    ds = streamacc.open(path)
    assert ds.sizes == {"step": 20, "field_dim_1": 100, "stats_dim_1": 3}
    np.testing.assert_array_equal(ds["stats"].values, np.arange(1, 21)[:, None] * np.ones(3))


def test_named_dims_are_what_xarray_shows(tmp_path):
    path = tmp_path / "out.zarr"
    write_field(path, dims={"field": ["x", "y"], "stats": ["moment"]})
    ds = streamacc.open(path)
    assert ds["field"].dims == ("step", "x", "y") and ds["stats"].dims == ("step", "moment")
    assert ds.sel(step=7)["field"].shape == (40, 6)
    assert streamacc.info(path).arrays["field"].dims == ("step", "x", "y")
