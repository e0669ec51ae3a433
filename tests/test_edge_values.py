"""Values at the edges, and damage, answered in one line naming the problem and the fix, never a raw exception.

An output of no values per step, a summary window of 2**64 rows, ``overview(steps=(inf,
None))``, a summary chunk with a flipped byte, missing, or whose array was shrunk, a picture
of values near the largest float64 or of some infinite ones, and times that float64 cannot
tell apart. Each would otherwise reach the user as another library's exception (a
ZeroDivisionError, a checksum error naming no file, pandas' InvalidIndexError), as fill
values read as data, or as a blank picture, none of which says what to do.
"""

from __future__ import annotations

import json
import math
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

import streamacc
from streamacc.errors import InputError, VerifyError


def count(c, _):
    return c + 1.0, c


def copy_of(ref, tmp_path, name="out.zarr"):
    out = tmp_path / name
    shutil.copytree(ref, out)
    return out


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    out = tmp_path_factory.mktemp("edge") / "small.zarr"
    streamacc.write(out, count, np.float64(0.0), length=3000, block_size=512, summaries=[8, 64], progress=False)
    return out


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_an_output_of_no_values_is_refused_before_anything_is_written(tmp_path):
    def empty(c, _):
        return c + 1.0, {"x": c, "nothing": jnp.zeros((0,))}

    with pytest.raises(InputError) as refused:
        streamacc.write(tmp_path / "o.zarr", empty, np.float64(0.0), length=100, progress=False)
    assert "output 'nothing' of f has shape (0,) each step, which holds no value" in one_line(refused)
    assert "leave it out of what f returns" in str(refused.value) and not (tmp_path / "o.zarr").exists()


@pytest.mark.parametrize("steps", [(math.inf, None), (None, -math.inf), (math.nan, 10), (0.5, 10), ("a", 2)])
def test_overview_steps_that_are_no_step_numbers(small, steps):
    with pytest.raises(InputError) as refused:
        streamacc.overview(small, steps=steps)
    assert "must be a (start, stop) pair or a slice of whole step numbers" in one_line(refused)
    assert "e.g. steps=(0, 1048576)" in str(refused.value)


def damaged_summaries(small, tmp_path, damage) -> str:
    out = copy_of(small, tmp_path)
    damage(out / "_streamacc" / "summaries" / "w8" / "y_min")
    with pytest.raises(VerifyError) as refused:
        streamacc.overview(out, points=10**6)
    with pytest.raises(VerifyError, match="summaries of 'y' cannot be read"):
        streamacc.verify(out, count, np.float64(0.0))
    assert "rewrite the output with mode='overwrite'" in str(refused.value)
    return one_line(refused)


def test_a_flipped_byte_in_a_summary_chunk_names_the_chunk(small, tmp_path):
    def flip(array):
        chunk = array / "c" / "0"
        raw = bytearray(chunk.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        chunk.write_bytes(bytes(raw))

    text = damaged_summaries(small, tmp_path, flip)
    assert "chunk _streamacc/summaries/w8/y_min/c/0 does not decode (ValueError: Stored and computed checksum" in text


def test_a_missing_summary_chunk_is_refused_not_read_as_nan(small, tmp_path):
    text = damaged_summaries(small, tmp_path, lambda array: (array / "c" / "0").unlink())
    assert "chunk _streamacc/summaries/w8/y_min/c/0 is missing" in text


def test_a_shrunk_summary_array_is_refused(small, tmp_path):
    def shrink(array):
        doc = json.loads((array / "zarr.json").read_text())
        doc["shape"] = [10]
        (array / "zarr.json").write_text(json.dumps(doc))

    text = damaged_summaries(small, tmp_path, shrink)
    assert "_streamacc/summaries/w8/y_min has 10 windows where the run has 375" in text


def test_overview_of_an_output_whose_array_folder_is_gone(small, tmp_path):
    out = copy_of(small, tmp_path)
    shutil.rmtree(out / "y")
    with pytest.raises(VerifyError) as refused:
        streamacc.overview(out)
    assert "the metadata of array 'y' (y/zarr.json) is missing" in one_line(refused)


def test_times_that_float64_cannot_tell_apart_are_one_line_naming_step(tmp_path):
    out = tmp_path / "t.zarr"
    streamacc.write(out, count, np.float64(0.0), length=100, time={"step": 1, "start": 2**60}, progress=False)
    ds = streamacc.open(out)
    assert float(ds.y.sel(step=5)) == 5.0
    with pytest.raises(KeyError, match=r"labels several rows: float64 times cannot tell neighbouring steps apart.*"
                                       r"select by step instead"):  # fmt: skip
        ds.sel(time=2**60 + 5)
