"""Runs that end on a condition (``until``): one ``lax.scan`` cut after the first step where the condition holds.

The references are one in-memory ``lax.scan`` over the whole length, numpy's search for the
first step where the condition holds, and an uninterrupted run's files; the steps are
compared at ``unroll=1`` (tests/test_exact.py compares them unrolled, with the run without the
condition).
"""

from __future__ import annotations

import dataclasses
import json
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
import zarr
from helpers import assert_bits_equal, assert_same_output, dies_at, read_manifest, store_files
from jax import lax

import streamacc
from streamacc.errors import InputError, ResumeError, StepFunctionError, VerifyError

XS = np.linspace(0.0, 5.0, 600)
INIT = np.float64(1.0)


def step(c, x):
    c = 0.999 * c + 0.01 * jnp.sin(x) + x * c * 1e-3
    return c, {"c": c, "sq": c * c}


def above(limit):
    def until(c, y):
        return c > limit

    return until


WHOLE = jax.tree_util.tree_map(np.asarray, lax.scan(step, INIT, XS)[1])


def first_step(limit: float, tested_from: int = 0) -> int:
    """The first step (from ``tested_from`` on) whose carry is above ``limit``: numpy's search, not streamacc's."""
    held = np.flatnonzero(WHOLE["c"][tested_from:] > limit)
    assert held.size, "the reference must hold somewhere"
    return tested_from + int(held[0])


K = first_step(1.5)
UNTIL = above(1.5)


def cut(k: int, every: int = 1) -> dict[str, np.ndarray]:
    """The reference's ys of steps 0 to ``k``, every ``every``-th kept."""
    return {name: y[: k + 1][every - 1 :: every] for name, y in WHOLE.items()}


def write(out, **kw):
    kw = {"block_size": 32, "chunks": 16, "until": UNTIL, "progress": False, "unroll": 1, **kw}
    return streamacc.write(out, step, INIT, XS, **kw)


# --- the scan in memory ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block_size", "every"),
    [(32, 1), (K, 1), (K + 1, 1), (600, 1), (33, 3), (K // 3 * 3, 3)],
    ids=["blocks", "k_first_of_a_block", "k_last_of_a_block", "one_block", "thinned", "thinned_k_in_a_row"],
)
def test_a_scan_ends_after_the_first_step_where_its_condition_holds(block_size, every):
    assert 40 < K < 560 and WHOLE["c"][K] > 1.5 >= WHOLE["c"][:K].max()
    carry, ys = streamacc.scan(step, INIT, XS, block_size=block_size, save_every=every, until=UNTIL, unroll=1)
    assert_bits_equal(ys, cut(K, every))
    assert_bits_equal(carry, WHOLE["c"][K])  # the carry step k left
    blocks = list(streamacc.iter_blocks(step, INIT, XS, block_size=block_size, save_every=every, until=UNTIL, unroll=1))
    assert [b.ended for b in blocks] == [False] * (len(blocks) - 1) + [True]
    assert blocks[-1].stop == K + 1 and blocks[-1].start <= K and len(blocks) == K // block_size + 1
    assert_bits_equal(blocks[-1].carry, WHOLE["c"][K])


def test_a_condition_that_never_holds_runs_the_whole_length_and_one_that_holds_at_once_keeps_one_step(tmp_path):
    for limit, k in ((100.0, None), (0.0, 0)):
        out = tmp_path / f"{limit}.zarr"
        write(out, until=above(limit))
        about = streamacc.info(out)
        assert (about.complete, about.ended_at, about.committed_steps) == (True, k, 600 if k is None else 1)
        assert_bits_equal(streamacc.open(out)["c"].values, WHOLE["c"] if k is None else WHOLE["c"][:1])
    carry, ys = streamacc.scan(step, INIT, XS, block_size=64, until=above(100.0), unroll=1)
    assert_bits_equal(ys, WHOLE) and assert_bits_equal(carry, WHOLE["c"][-1])
    carry, ys = streamacc.scan(step, INIT, XS, block_size=64, until=above(0.0), unroll=1)
    assert_bits_equal(ys, cut(0)) and assert_bits_equal(carry, WHOLE["c"][0])
    assert [(b.start, b.stop, b.ended) for b in streamacc.iter_blocks(step, INIT, XS, until=above(0.0), unroll=1)] == [
        (0, 1, True)
    ]


def test_a_pytree_carry_is_held_as_the_step_where_the_condition_held_left_it():
    """The carry's leaves are all step k's (the steps after it run, and change nothing kept)."""

    def counted(carry, x):
        c, n = carry
        c, y = step(c, x)
        return (c, n + 1), y

    (c, n), ys = streamacc.scan(
        counted, (INIT, np.int64(0)), XS, block_size=50, unroll=1, until=lambda carry, y: y["c"] > 1.5
    )
    assert int(n) == K + 1 and float(c) == WHOLE["c"][K]
    assert_bits_equal(ys, cut(K))


def test_with_unroll_every_entry_point_computes_the_step_with_its_condition_alike(tmp_path):
    """With ``unroll`` > 1 XLA compiles the condition into the unrolled steps: blocks of any size give the same ys,
    and ``write`` and ``scan`` the same ys and carry (the carry of the step where it held, found by running its
    block again, at the last bits of that block's steps)."""
    want = streamacc.scan(step, INIT, XS, block_size=32, unroll=4, until=UNTIL)
    assert float(want[0]) > 1.5 and len(want[1]["c"]) == K + 1
    for block_size in (96, 600):
        assert_bits_equal(streamacc.scan(step, INIT, XS, block_size=block_size, unroll=4, until=UNTIL)[1], want[1])
    carry = write(tmp_path / "out.zarr", unroll=4)
    assert_bits_equal(carry, want[0])
    assert_bits_equal(dict(streamacc.open(tmp_path / "out.zarr").data_vars), want[1])


class Unhashable:
    __hash__ = None

    def __call__(self, c, y):
        return c > 1


def python_bool(c, y):
    return bool(c > 1.5)


@pytest.mark.parametrize(
    ("until", "keywords", "match", "kind"),
    [
        (3, {}, r"until must be a function until\(carry, y\) -> bool", InputError),
        (lambda c: c > 1, {}, r"until must take two arguments.*got until\(c\)", InputError),
        (lambda c, y: jnp.array([c > 1, c < 2]), {}, r"until must return one boolean.*bool\[2\].*jnp\.all", InputError),
        (lambda c, y: c, {}, r"until must return one boolean.*float64\[\].*return a comparison", InputError),
        (python_bool, {}, r"until must be traceable by JAX, but at .*test_until.py:\d+ .*bool", StepFunctionError),
        (lambda c, y: y["missing"] > 1, {}, r"until failed on a step's carry float64\[\].*KeyError", InputError),
        (UNTIL, {"reverse": True}, r"until ends a scan .*; pass reverse=False", InputError),
        (Unhashable(), {}, r"until must be hashable", InputError),
    ],
    ids=["not_callable", "one_argument", "a_vector", "a_number", "python_bool", "fails", "reverse", "unhashable"],
)
def test_a_condition_that_cannot_be_tested_after_each_step_is_refused_in_one_line(until, keywords, match, kind):
    for entry in (streamacc.scan, streamacc.iter_blocks, streamacc.ScanSpec):
        with pytest.raises(kind, match=match) as refused:
            entry(step, INIT, XS, until=until, **keywords)
        assert "\n" not in str(refused.value)


def test_a_condition_is_given_once_and_not_to_a_virtual_output(tmp_path):
    spec = streamacc.ScanSpec(step, INIT, XS, until=UNTIL)
    assert spec.until is UNTIL and repr(spec).endswith(f"until={UNTIL!r})")
    with pytest.raises(InputError, match="drop until"):
        streamacc.scan(spec, until=UNTIL)
    assert_bits_equal(streamacc.scan(spec), streamacc.scan(step, INIT, XS, until=UNTIL))
    with pytest.raises(InputError, match=r"until cannot end a virtual output.*virtual=False"):
        write(tmp_path / "virtual.zarr", virtual=True)
    assert not (tmp_path / "virtual.zarr").exists()


# --- the output ------------------------------------------------------------------------------------------------------


def test_an_output_that_ended_holds_its_steps_alone_for_every_reader(tmp_path):
    out, plain = tmp_path / "out.zarr", tmp_path / "plain.zarr"
    carry = write(out, summaries=[16, 64])  # a small output has none by default: its last window left open
    assert_bits_equal(carry, WHOLE["c"][K])
    assert_bits_equal({name: v.values for name, v in streamacc.open(out).data_vars.items()}, cut(K))
    assert xr.open_zarr(out)["c"].shape == (K + 1,) and zarr.open_group(str(out))["sq"].shape == (K + 1,)
    # the chunks are those of a run of k + 1 steps: the last one padded with the fill value, no step after k stored
    streamacc.write(plain, step, INIT, XS[: K + 1], block_size=32, chunks=16, unroll=1, progress=False)
    for name in ("c", "sq"):
        chunks = {key: data for key, data in store_files(out).items() if key.startswith(f"{name}/c/")}
        assert chunks == {key: data for key, data in store_files(plain).items() if key.startswith(f"{name}/c/")}
    about = streamacc.info(out)
    assert (about.complete, about.ended_at, about.committed_steps, about.total_steps) == (True, K, K + 1, K + 1)
    assert about.length == 600  # the most it could run, named apart
    assert about.until.startswith(f"{__name__}.above.<locals>.until code:")
    said = f"{K + 1} of {K + 1} steps committed, complete, ended on its condition at step {K} (of at most 600 steps)"
    assert said in str(about)
    report = streamacc.verify(out, step, INIT, XS, until=UNTIL)
    assert (report.complete, report.committed_steps, report.committed_blocks) == (True, K + 1, K // 32 + 1)
    # one count of the run's steps everywhere: the root's, the manifest's, info's and verify's
    root = json.loads((out / "zarr.json").read_bytes())["attributes"]
    manifest = read_manifest(out)
    assert root["streamacc_total_steps"] == report.total_steps == manifest["committed_steps"] == K + 1
    assert (report.ended_at, manifest["ended_at"], report.length, manifest["identity"]["length"]) == (K, K, 600, 600)
    assert report.total_blocks == manifest["total_blocks"] == report.committed_blocks
    assert report.summary_windows > 0
    table = streamacc.overview(out)
    assert int(table.step[-1]) <= K < int(table.step[-1]) + table.attrs["window"]
    assert float(table["c_max"].max()) == WHOLE["c"][K]
    assert streamacc.to_arviz(out)["posterior"].sizes["draw"] == K + 1
    with pytest.raises(InputError, match="pass it as until"):
        streamacc.verify(out, step, INIT, XS)
    with pytest.raises(VerifyError, match=r"with the condition .*, not until .*limit changed\); pass the condition"):
        streamacc.verify(out, step, INIT, XS, until=above(1.6))


def test_a_run_killed_at_any_write_of_its_end_resumes_to_the_same_files(tmp_path):
    """Killed at each store write from the commit before its last block on (its last block's chunks and carry, the
    record and manifest that say where it ended, the arrays cut there, the manifest and root that call it complete)
    and at one write before: ``mode="resume"`` ends it as the run never interrupted, file for file."""
    ref = tmp_path / "ref" / "out.zarr"
    write(ref)
    writes: list[str] = []
    with dies_at(0, writes):
        write(tmp_path / "dry" / "out.zarr")
    records = [i for i, what in enumerate(writes) if "records_" in what]
    end = writes.index("write c/zarr.json")  # the arrays cut after step k: the run's finish, then its carries'
    assert writes[end + 1 : end + 4] == ["write sq/zarr.json", "write leaf_0/zarr.json", "write _streamacc/zarr.json"]
    for n in [records[1] + 1, *range(records[-2] + 2, len(writes) + 1)]:
        out = tmp_path / str(n) / "out.zarr"
        with dies_at(n), pytest.raises(Exception, match=f"^{re.escape(writes[n - 1])}$"):
            write(out)
        complete = read_manifest(out)["complete"]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            carry = write(out, mode="resume")
        said = [str(w.message).partition(" is ")[2] for w in caught]
        assert said == (
            [f"already complete (it ended on its condition at step {K}); nothing to do"] if complete else []
        )
        assert_bits_equal(carry, WHOLE["c"][K])
        assert_same_output(out, ref)


def test_a_resume_with_another_condition_is_refused_and_named(tmp_path):
    out = tmp_path / "out.zarr"
    write(out)
    before = store_files(out)
    with pytest.raises(ResumeError, match=r"different run \(until: .*until's closed-over limit changed\)"):
        write(out, mode="resume", until=above(1.6))
    with pytest.raises(ResumeError, match=r"different run \(until: stored '.*', now None\)"):
        write(out, mode="resume", until=None)
    plain = tmp_path / "plain.zarr"
    write(plain, until=None)
    with pytest.raises(ResumeError, match=r"different run \(until: stored None, now '.*until code:"):
        write(plain, mode="resume")
    with pytest.warns(
        streamacc.errors.StreamaccWarning, match=rf"already complete \(it ended on its condition at step {K}\)"
    ):
        assert_bits_equal(write(out, mode="resume"), WHOLE["c"][K])
    assert store_files(out) == before


# --- extended past its end -------------------------------------------------------------------------------------------


def test_an_output_extended_past_its_end_without_a_condition_is_the_run_of_the_whole_length(tmp_path):
    out, ref = tmp_path / "out.zarr", tmp_path / "ref.zarr"
    write(out)
    carry = write(out, mode="extend", until=None)
    assert_bits_equal(carry, WHOLE["c"][-1])
    write(ref, until=None)
    assert_same_output(out, ref)
    assert streamacc.verify(out, step, INIT, XS).complete


def test_an_ended_runs_kept_carries_end_with_its_blocks_and_an_older_layout_still_continues(tmp_path):
    """The carries' arrays of a run that ended hold its blocks' boundaries alone, not its length's, so that a reader
    walks them in a few chunks; an output of 1.1.0, whose arrays kept its length's room, reads, verifies and
    extends as before."""
    out, ref = tmp_path / "out.zarr", tmp_path / "ref.zarr"
    write(out)
    blocks = K // 32 + 1
    carries = zarr.open_array(out / "_streamacc" / "carries" / "leaf_0", mode="r")
    assert carries.shape == (blocks + 1,) and read_manifest(out)["total_blocks"] == blocks
    want = [INIT, *(WHOLE["c"][32 * b - 1] for b in range(1, blocks)), WHOLE["c"][K]]  # one lax.scan's carries
    assert_bits_equal(carries[:], np.asarray(want))
    zarr.open_array(out / "_streamacc" / "carries" / "leaf_0", mode="r+").resize((600 // 32 + 2,))  # as 1.1.0 left it
    assert streamacc.verify(out, step, INIT, XS, until=UNTIL).total_steps == K + 1
    assert streamacc.info(out).committed_steps == K + 1 and streamacc.open(out).sizes["step"] == K + 1
    assert_bits_equal(write(out, mode="extend", until=None), WHOLE["c"][-1])
    write(ref, until=None)
    assert_same_output(out, ref)


def test_an_output_extended_to_less_than_its_first_length_is_the_run_of_that_length(tmp_path):
    """Its kept carries were laid out for the first, longer length: the room past the new run's is left unused."""
    out, ref = tmp_path / "out.zarr", tmp_path / "ref.zarr"
    write(out)
    n = K + 1 + 40
    assert n < len(XS)
    carry = streamacc.write(out, step, INIT, XS[:n], block_size=32, chunks=16, mode="extend", unroll=1, progress=False)
    assert_bits_equal(carry, WHOLE["c"][n - 1])
    streamacc.write(ref, step, INIT, XS[:n], block_size=32, chunks=16, unroll=1, progress=False)
    assert_same_output(out, ref)
    assert streamacc.verify(out, step, INIT, XS[:n]).complete


@pytest.mark.parametrize(
    ("limit", "block_size"), [(2.0, 32), (1.0, 32), (2.0, 1024)], ids=["later", "held_before", "one_block"]
)
def test_an_output_extended_past_its_end_tests_its_new_condition_from_the_step_after(tmp_path, limit, block_size):
    """The new condition is tested from step k + 1 on: one that held before ends the extension there."""
    out = tmp_path / "out.zarr"
    write(out, block_size=block_size)
    then = first_step(limit, tested_from=K + 1)
    carry = write(out, mode="extend", until=above(limit), block_size=block_size)
    assert_bits_equal(carry, WHOLE["c"][then])
    assert (then == K + 1) == (limit == 1.0)
    assert_bits_equal({name: v.values for name, v in streamacc.open(out).data_vars.items()}, cut(then))
    about = streamacc.info(out)
    assert (about.ended_at, about.complete) == (then, True)
    assert read_manifest(out)["identity"]["until_from"] == K + 1
    assert streamacc.verify(out, step, INIT, XS, until=above(limit)).committed_steps == then + 1
    with pytest.raises(ResumeError, match=r"length=\d+ is all of the \d+ steps it holds.*pass a length above"):
        streamacc.write(out, step, INIT, XS[: then + 1], until=None, mode="extend", unroll=1, progress=False)


def test_an_unrolled_output_extends_with_another_condition_as_the_run_without_one(tmp_path):
    """The condition is tested on the plain scan's outputs: the stored steps are the run's without it at the same
    unroll, whatever the condition, so an unrolled output extends with another one (1.1.0's refused:
    tests/test_format110.py) to the bits of one lax.scan at that unroll."""
    out = tmp_path / "out.zarr"
    write(out, unroll=4)
    assert read_manifest(out)["identity"]["until_tested"] == "outside"
    write(out, unroll=4, mode="extend", until=None)
    want = jax.jit(lambda c, xs: lax.scan(step, c, xs, unroll=4))(INIT, XS)[1]["c"]
    assert streamacc.open(out)["c"].values.tobytes() == np.asarray(want).tobytes()
    assert streamacc.verify(out, step, INIT, XS).complete


# --- inside jit ------------------------------------------------------------------------------------------------------


def growth(c, _):
    c = c * 1.01 + 1e-3
    return c, c


def test_a_streams_loop_stops_after_the_block_where_its_condition_held(tmp_path):
    """A length of 2**40 steps is only the most: the loop of blocks stops (as write's engine does), and the Stream
    writes write's bytes, its carry the step's where the condition held."""
    ys = np.asarray(lax.scan(growth, np.float64(1.0), length=1000)[1])
    k = int(np.argmax(ys > 100.0))  # the step where the carry first passes 100
    want = ys[k]
    keywords = {"length": 2**40, "block_size": 64, "chunks": 32, "until": lambda c, y: c > 100.0, "unroll": 1}
    with streamacc.Stream(tmp_path / "stream.zarr", growth, progress=False, **keywords) as stream:
        carry = jax.jit(stream.scan)(np.float64(1.0))
    assert float(carry) == want
    written = streamacc.write(tmp_path / "write.zarr", growth, np.float64(1.0), progress=False, **keywords)
    assert float(written) == want and streamacc.info(tmp_path / "write.zarr").ended_at == k
    assert_same_output(tmp_path / "stream.zarr", tmp_path / "write.zarr")


def run_stream(out, **keywords):
    with streamacc.Stream(out, growth, progress=False, **{**STREAMED, **keywords}) as stream:
        return jax.jit(stream.scan)(np.float64(1.0))


STREAMED = {"length": 1000, "block_size": 64, "chunks": 32, "unroll": 1, "until": lambda c, y: c > 100.0}


def test_a_stream_killed_at_its_end_resumes_to_the_same_files(tmp_path):
    """Killed at its last block's record (before the commit that says where it ended) and as its arrays are cut
    there: the resumed Stream ends the output as the run never interrupted, and returns its carry."""
    ref = tmp_path / "ref" / "out.zarr"
    want = run_stream(ref)
    writes: list[str] = []
    with dies_at(0, writes):
        run_stream(tmp_path / "dry" / "out.zarr")
    last_record = max(i for i, what in enumerate(writes) if "records_" in what) + 1
    for n in (last_record, writes.index("write y/zarr.json") + 1):
        out = tmp_path / str(n) / "out.zarr"
        with dies_at(n), pytest.raises(Exception, match=f"^{re.escape(writes[n - 1])}$"):
            run_stream(out)
        assert not read_manifest(out)["complete"]
        assert_bits_equal(run_stream(out, mode="resume"), want)
        assert_same_output(out, ref)


def test_a_stream_extends_an_output_past_its_end_as_write_does(tmp_path):
    """Its program tests the new condition from the step after the old end (in the block holding it), as write's
    engine does: the same files."""
    stream, written = tmp_path / "stream.zarr", tmp_path / "write.zarr"
    run_stream(stream)
    streamacc.write(written, growth, np.float64(1.0), progress=False, **STREAMED)
    further = {**STREAMED, "until": lambda c, y: c > 120.0, "mode": "extend"}
    carry = run_stream(stream, **further)
    assert_bits_equal(carry, streamacc.write(written, growth, np.float64(1.0), progress=False, **further))
    ys = np.asarray(lax.scan(growth, np.float64(1.0), length=1000)[1])
    then = int(np.argmax(ys > 120.0))  # the condition holds after every step from there: none before the old end
    assert float(carry) == ys[then] and streamacc.info(stream).ended_at == then
    assert_same_output(stream, written)


def test_a_condition_that_is_a_frozen_dataclass_is_recorded_by_its_values(tmp_path):
    """A condition may be a frozen dataclass, recorded by its fields, as a recipe's step is."""

    @dataclasses.dataclass(frozen=True)
    class Above:
        limit: float

        def __call__(self, c, y):
            return c > self.limit

    out = tmp_path / "out.zarr"
    write(out, until=Above(1.5))
    assert streamacc.info(out).until.endswith("Above(limit=1.5)")
    with pytest.raises(ResumeError, match=r"until: stored '.*Above\(limit=1\.5\)', now '.*Above\(limit=2\.0\)'"):
        write(out, until=Above(2.0), mode="resume")
