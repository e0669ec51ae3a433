"""Extending a finished output: the result is one run of the longer length, file for file.

The reference is always a fresh, uninterrupted run of the longer length; ``verify`` and one
in-memory ``lax.scan`` check it too. Refused extensions leave every file as it was.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import assert_same_output, failing, read_manifest, store_files
from jax import lax

import streamacc
from streamacc.cli import main

XS = np.random.default_rng(4).normal(size=(1000, 2))


def step(c, x):
    c = 0.9 * c + jnp.sin(x)
    return c, {"state": c, "norm": jnp.sqrt(jnp.sum(c * c))}


def product(c, _):
    return c * 1.0000001, c  # XLA regroups unrolled products: the layout must line up with lax.scan's


def write(out, length, *, f=step, **kw):
    kw = {"block_size": 16, "progress": False, **kw}
    if f is step:
        return streamacc.write(out, f, np.zeros(2), XS[:length], **kw)
    return streamacc.write(out, f, np.float64(1.0), length=length, **kw)


@pytest.mark.parametrize(
    ("lengths", "kw"),
    [
        ((100, 103, 250, 400), {"summaries": [1, 16]}),  # by less than a block, then a partial last block (4 steps)
        # becomes full, again (the levels of 100 steps, which the extended output keeps)
        ((96, 160), {}),  # from a whole number of blocks
        ((10, 100), {"summaries": [1]}),  # a single block: nothing is kept, the layout is the longer run's
        ((100, 251), {"save_every": 4}),  # thinned: the last kept rows and the steps after them
        ((54, 60), {"f": product, "unroll": 4, "block_size": 8}),  # a short tail joined its block, and still does
        ((54, 66), {"f": product, "unroll": 4, "block_size": 8}),  # ... and now stands alone
        ((60, 108), {"f": product, "unroll": 4, "block_size": 8, "save_every": 8}),
        ((100, 250), {"summaries": [8, 32]}),  # complete summary windows kept, the open one rebuilt from the data
        ((200, 451), {"save_every": 3, "block_size": 24, "summaries": [4, 8]}),
    ],
    ids=["less_than_a_block_partial_again", "whole_blocks", "single_block", "thinned", "tail_joined", "tail_alone",
         "unrolled_thinned", "summaries", "thinned_summaries"],
)  # fmt: skip
def test_an_extended_output_is_the_longer_run(tmp_path, lengths, kw):
    out, ref = tmp_path / "out.zarr", tmp_path / "ref.zarr"
    write(out, lengths[0], **kw)
    for length in lengths[1:]:
        carry = write(out, length, mode="extend", **kw)
    want = write(ref, lengths[-1], **kw)
    np.testing.assert_array_equal(np.asarray(carry), np.asarray(want))
    assert_same_output(out, ref)
    f = kw.get("f", step)
    init, xs = (np.zeros(2), XS[: lengths[-1]]) if f is step else (np.float64(1.0), None)
    assert streamacc.verify(out, f, init, xs).complete
    ref_carry, ys = lax.scan(f, init, xs, length=lengths[-1], unroll=kw.get("unroll", 1))
    np.testing.assert_array_equal(np.asarray(carry), np.asarray(ref_carry))
    k = kw.get("save_every", 1)
    stored = streamacc.open(out)["state" if f is step else "y"].values
    np.testing.assert_array_equal(stored, np.asarray(ys["state"] if f is step else ys)[k - 1 :: k])


@pytest.fixture
def finished(tmp_path):
    out = tmp_path / "out.zarr"
    write(out, 100)
    return out


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"length": 60}, r"length=60 is shorter than the 100 steps it holds"),
        ({"block_size": 32}, r"differ in more than its length \(block_size: stored 16, now 32"),
        ({"save_every": 2}, r"save_every: stored 1, now 2"),
        ({"codec": "none"}, r"codec: stored 'blosc-lz4', now 'none'"),
        ({"init": np.ones(2)}, r"init: stored"),
        ({"dims": {"state": ["i"]}}, r"dims.state: stored None"),
        ({"reverse": True}, r"reverse: stored False, now True"),
    ],
    ids=["shorter", "block", "save_every", "codec", "init", "dims", "reverse"],
)
def test_an_extension_that_would_change_written_bytes_is_refused(finished, kw, needle):
    before = store_files(finished)
    length, init = kw.pop("length", 200), kw.pop("init", np.zeros(2))
    with pytest.raises(streamacc.errors.ResumeError, match=needle) as info:
        streamacc.write(str(finished), step, init, XS[:length], block_size=kw.pop("block_size", 16), mode="extend",
                        progress=False, **kw)  # fmt: skip
    assert "the output is left as it was" in str(info.value) and "\n" not in str(info.value)
    assert store_files(finished) == before


def test_a_reverse_scan_is_not_extended(tmp_path):
    out = tmp_path / "out.zarr"
    write(out, 100, reverse=True)
    before = store_files(out)
    with pytest.raises(
        streamacc.errors.ResumeError, match=r"a reverse scan starts from its last step.*mode='overwrite'"
    ):
        write(out, 200, reverse=True, mode="extend")
    assert store_files(out) == before


def test_an_unfinished_or_missing_output_is_not_extended(tmp_path):
    out = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.NoOutputError, match="holds no output to extend"):
        write(out, 200, mode="extend")
    assert not out.exists()
    with pytest.raises(streamacc.errors.StoreError):
        write(failing(out, "state/c/3/0"), 100)  # the chunk of steps 48-63
    before = store_files(out)
    with pytest.raises(
        streamacc.errors.ResumeError, match=r"not finished \(48 of 100 steps committed\).*mode='resume'"
    ):
        write(out, 200, mode="extend")
    assert store_files(out) == before


def test_an_output_missing_a_chunk_is_not_extended_and_the_chunk_is_named(tmp_path):
    out = tmp_path / "out.zarr"
    write(out, 100)
    (out / "state" / "c" / "2" / "0").unlink()
    before = store_files(out)
    missing = r"cannot extend: block 2 \(steps 32-48\) of .* is bad: chunk state/c/2/0 is missing.*left as it was"
    with pytest.raises(streamacc.errors.ResumeError, match=missing):
        write(out, 200, mode="extend")
    assert store_files(out) == before


def test_an_interrupted_extension_resumes_to_the_longer_run(tmp_path, finished):
    ref = tmp_path / "ref.zarr"
    write(ref, 300, summaries=False)  # the 100-step output was begun without summaries (a small output), and keeps none
    with pytest.raises(streamacc.StreamaccError):  # stopped between the longer run's manifest and its arrays' metadata
        write(failing(finished, "state/zarr.json"), 300, mode="extend")
    assert read_manifest(finished)["identity"]["length"] == 300
    assert zarr.open_array(finished / "state", mode="r").shape == (100, 2)
    with pytest.raises(streamacc.errors.StoreError, match="after 160 of 300 steps"):  # and once more, writing blocks
        write(failing(finished, "state/c/10/0"), 300, mode="resume")
    write(finished, 300, mode="extend")  # extending to the length it is being extended to continues it
    assert_same_output(finished, ref)


def test_extend_from_the_command_line(tmp_path, capsys):
    args = ["--size", "1000", "--block-size", "256", "--no-progress"]
    out, ref = tmp_path / "out.zarr", tmp_path / "ref.zarr"
    assert main(["write", str(out), *args]) == 0
    assert main(["write", str(ref), *args[:1], "2500", *args[2:], "--no-summaries"]) == 0  # out's: none, it is small
    capsys.readouterr()
    assert main(["write", str(out), "--size", "600", *args[2:], "--extend"]) == 2
    assert "--size 600 is shorter than the 1000 steps" in capsys.readouterr().err
    assert main(["write", str(out), "--size", "2500", *args[2:], "--ratio", "1.5", "--extend"]) == 2
    assert "params.ratio: stored 1.00000001, now 1.5" in capsys.readouterr().err
    assert main(["write", str(out), "--size", "2500", *args[2:], "--extend"]) == 0
    assert "wrote 1732 steps (13.9kB), extended at step 1000 (steps 768-1000 written again: its last block)," in (
        capsys.readouterr().out
    )
    assert_same_output(out, ref)
    assert main(["verify", str(out)]) == 0
