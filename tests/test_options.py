"""``write``'s options grouped by concern: ``Layout`` (how the output is laid out) and ``Local``/``Dask`` (where
the blocks run), each checked where it is made, and the same keywords still taken alone."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
import typing

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bits_equal, assert_same_output

import streamacc
from streamacc.errors import InputError


def diffuse(c, x):
    c = c + 0.04 * (jnp.roll(c, 1) - 2 * c + jnp.roll(c, -1)) * x
    return c, {"u": c, "total": jnp.sum(c)}


INIT = np.sin(np.linspace(0.0, 2 * np.pi, 4096))
XS = np.linspace(0.5, 1.0, 300)
LAID = {
    "names": ["sum", "u"],  # the leaves of y in key order
    "dims": {"u": ["x"]},
    "chunks": {"step": 50, "x": 1024},
    "codec": "zstd",
    "attrs": {"title": "diffusion"},
    "array_attrs": {"u": {"units": "K"}},
    "time": {"step": 0.5, "units": "s"},
    "summaries": [10, 50],
}


def test_a_layout_and_an_executor_write_the_bytes_their_keywords_write(tmp_path):
    alone, grouped = tmp_path / "alone.zarr", tmp_path / "grouped.zarr"
    carry = streamacc.write(alone, diffuse, INIT, XS, block_size=100, inflight=2, progress=False, **LAID)
    again = streamacc.write(
        grouped, streamacc.ScanSpec(diffuse, INIT, XS, block_size=100), layout=streamacc.Layout(**LAID),
        executor=streamacc.Local(inflight=2), progress=False,
    )  # fmt: skip
    assert_bits_equal(carry, again)
    assert_same_output(alone, grouped)
    ds = streamacc.open(grouped)
    assert ds.u.dims == ("step", "x") and ds.u.attrs["units"] == "K" and ds.attrs["title"] == "diffusion"
    assert float(ds.time[2]) == 1.0  # step 2 at 0.5 s a step
    assert list(streamacc.info(grouped).summaries.windows) == [10, 50]
    assert streamacc.info(grouped).arrays["u"].chunks == (50, 1024)


def test_a_layout_is_checked_where_it_is_made_in_one_line():
    bad = {
        "codec": ({"codec": "gzip"}, "codec='gzip' is unknown; choose one of"),
        "attrs": ({"attrs": {"streamacc_x": 1}}, "attrs must not set streamacc_x"),
        "json": ({"attrs": {"a": object()}}, "attrs must be JSON-serialisable"),
        "array_attrs": ({"array_attrs": {"u": 3}}, "array_attrs must map output names to dicts"),
        "time": ({"time": {"units": "s"}}, "time"),
        "summaries": ({"summaries": [10, 15]}, "does not give increasing window lengths"),
        "virtual": ({"virtual": "yes"}, "virtual must be True or False"),
        "names": ({"names": 3}, "names must be a name or a list of names"),
        "chunks": ({"chunks": "big"}, "chunks"),
    }
    for name, (keywords, says) in bad.items():
        with pytest.raises(InputError) as refused:
            streamacc.Layout(**keywords)
        assert says in str(refused.value), name
        assert "\n" not in str(refused.value), name
    with pytest.raises(dataclasses.FrozenInstanceError):
        streamacc.Layout().codec = "zstd"
    assert streamacc.Layout(summaries=None).summaries is False
    assert streamacc.Layout(summaries=(4, 16)).summaries == (4, 16)


def test_a_layout_needs_no_jax():
    code = (
        "import sys, streamacc\n"
        "layout = streamacc.Layout(names='x', chunks=4096, time={'step': 1.0})\n"
        "try:\n    streamacc.Layout(codec='gzip')\nexcept streamacc.errors.InputError:\n    pass\n"
        "assert 'jax' not in sys.modules, 'jax imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_where_blocks_run_is_checked_where_it_is_made():
    with pytest.raises(InputError, match=r"inflight must be >= 1, got 0"):
        streamacc.Local(inflight=0)
    with pytest.raises(InputError, match=r"client must be a distributed.Client, got str"):
        streamacc.Dask("tcp://127.0.0.1:8786")
    assert streamacc.Local().inflight is None and streamacc.Local(inflight=4).inflight == 4


def test_an_option_given_alone_and_in_its_object_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "out.zarr"
    with pytest.raises(InputError, match=r"names and layout both say how the output is laid out"):
        streamacc.write(path, diffuse, INIT, XS, layout=streamacc.Layout(), names=["sum", "u"])
    with pytest.raises(InputError, match=r"inflight and executor both say where the blocks run"):
        streamacc.write(path, diffuse, INIT, XS, executor=streamacc.Local(), inflight=2)
    with pytest.raises(InputError, match=r"layout must be a streamacc.Layout, got dict"):
        streamacc.write(path, diffuse, INIT, XS, layout={"names": "u"})
    with pytest.raises(TypeError, match=r"write\(\) got an unexpected keyword argument 'chunk'"):
        streamacc.write(path, diffuse, INIT, XS, chunk=10)
    assert not path.exists()


def test_write_takes_few_parameters_and_its_keywords_are_those_of_its_objects():
    parameters = inspect.signature(streamacc.write).parameters
    assert len(parameters) <= 12
    hints = typing.get_type_hints(inspect.unwrap(streamacc.write), include_extras=True)
    (keywords,) = typing.get_args(hints["keywords"])
    scan = set(streamacc.ScanSpec(diffuse, INIT, XS).keywords()) - {"length"}
    layout = {field.name for field in dataclasses.fields(streamacc.Layout)}
    where = {field.name for field in (*dataclasses.fields(streamacc.Local), *dataclasses.fields(streamacc.Dask))}
    assert set(keywords.__annotations__) == scan | layout | where
    assert set(parameters) - {"keywords"} == {
        "store", "f", "init", "xs", "length", "mode", "layout", "executor", "storage_options", "progress", "until",
    }  # fmt: skip


def test_a_virtual_layout_stores_no_data_and_reads_as_the_stored_one(tmp_path):
    stored, virtual = tmp_path / "stored.zarr", tmp_path / "virtual.zarr"
    streamacc.write(stored, diffuse, INIT, XS, block_size=100, progress=False)
    streamacc.write(virtual, diffuse, INIT, XS, block_size=100, layout=streamacc.Layout(virtual=True), progress=False)
    assert not list(virtual.glob("u/c/*")) and list(stored.glob("u/c/*"))
    assert streamacc.info(virtual).virtual
    recomputed = streamacc.open(virtual, diffuse, INIT, XS).u.values
    np.testing.assert_array_equal(recomputed, streamacc.open(stored).u.values)
