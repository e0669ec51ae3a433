"""Resuming through the Python API: interrupted runs finish byte-identical, mismatches are refused.

Interruptions are injected in-process (a failing or interrupted block write, a Ctrl-C
between a block's record and its manifest, a run stopped while creating its arrays);
real processes killed with SIGKILL are in test_faults.py.
"""

from __future__ import annotations

import errno
import itertools
import logging
import re
import shutil
import uuid
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import MANIFEST, assert_same_output, dies_at, failing, read_manifest, store_files, temp_files

import streamacc
from streamacc import testing
from streamacc.errors import ResumeError, StoreError, StreamaccWarning
from streamacc.record import Ledger
from streamacc.store import ZarrSink

LENGTH, BLOCK = 5000, 512  # 10 blocks, the last one short
BLOCKS = -(-LENGTH // BLOCK)
XS = np.linspace(0.0, 1.0, LENGTH)
ATTRS = {"recipe": "demo", "params": {"ratio": 1.0001}}


def step(c, x):
    c = c * 1.0001 + x
    return c, {"level": c, "pair": jnp.stack([c, 2.0 * c])}


def other_step(c, x):
    c = c * 1.0002 + x
    return c, {"level": c, "pair": jnp.stack([c, 2.0 * c])}


def run(out, **kw):
    # summaries asked for: an output this small has none by default
    args = {"length": None, "block_size": BLOCK, "progress": False, "attrs": ATTRS, "summaries": [16, 256, 4096], **kw}
    f = args.pop("f", step)
    return streamacc.write(out, f, np.float64(1.0), args.pop("xs", XS), **args)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted run, and its final carry."""
    out = tmp_path_factory.mktemp("ref") / "out.zarr"
    return out, np.asarray(run(out))


def failing_block(out, k: int, exc: BaseException | None = None):
    """``out`` failing at the write of block ``k`` (its chunk of ``level``)."""
    return failing(out, f"level/c/{k}", exc)


@pytest.mark.parametrize("k", [0, 1, 4, BLOCKS - 1])
def test_failed_block_write_then_resume_is_identical(tmp_path, reference, k):
    ref, carry = reference
    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError, match=rf"after {k * BLOCK} of {LENGTH} steps.*mode='resume'"):
        run(failing_block(out, k))
    manifest = read_manifest(out)
    assert manifest["committed_blocks"] == k and manifest["committed_steps"] == k * BLOCK
    assert not manifest["complete"]
    np.testing.assert_array_equal(run(out, mode="resume"), carry)
    assert_same_output(out, ref)


def removing_at_block(monkeypatch, out, k: int, folder: str) -> None:
    """``out / folder`` removed as block ``k``'s data start to be written: the writes after it make their folders."""
    real = ZarrSink.write

    def write(self, start, stop, ys):
        if start == k * BLOCK:
            shutil.rmtree(out / folder, ignore_errors=True)  # whatever a concurrent write puts there meanwhile
        return real(self, start, stop, ys)

    monkeypatch.setattr(ZarrSink, "write", write)


LOST = r"(no longer holds what this run committed|and the store no longer holds them) \({}"
"""The run ends with the output's loss, found as it finishes or as a write fails (a write racing the removal)."""


@pytest.mark.parametrize(
    ("folder", "gone"),
    [("level", "level/zarr.json is missing"), ("pair/c", "block 0 (steps 0-512): chunk pair/c/0/0 is missing"),
     ("_streamacc/summaries", "_streamacc/summaries/zarr.json is missing")],
)  # fmt: skip
def test_an_output_removed_mid_run_is_never_called_complete(tmp_path, monkeypatch, folder, gone):
    out = tmp_path / "out.zarr"
    removing_at_block(monkeypatch, out, 3, folder)
    with pytest.raises(StoreError, match=LOST.format(re.escape(gone))) as failed:
        run(out)
    assert str(failed.value).endswith("start afresh with mode='overwrite'")
    assert not read_manifest(out)["complete"]


@pytest.mark.parametrize("folder", ["level", "_streamacc/summaries"])
def test_a_failed_run_whose_output_was_removed_is_not_told_its_steps_are_safe(tmp_path, monkeypatch, folder):
    out = tmp_path / "out.zarr"
    removing_at_block(monkeypatch, out, 3, folder)
    with pytest.raises(StoreError, match=LOST.format("")) as failed:
        run(failing_block(out, 6, OSError(errno.ENOSPC, "No space left on device")))
    said = str(failed.value)
    assert "safely committed" not in said and said.endswith("start afresh with mode='overwrite'"), said


def test_keyboard_interrupt_in_a_worker_then_resume(tmp_path, monkeypatch, reference):
    """Raised by the block's write on its writer thread (inside a store, it would stop zarr's event loop)."""
    out = tmp_path / "out.zarr"
    real = ZarrSink.write

    def write(self, start, stop, ys):
        if start == 6 * BLOCK:
            raise KeyboardInterrupt
        return real(self, start, stop, ys)

    with monkeypatch.context() as m:
        m.setattr(ZarrSink, "write", write)
        with pytest.raises(KeyboardInterrupt):
            run(out)
    assert read_manifest(out)["committed_blocks"] == 6
    run(out, mode="resume")
    assert_same_output(out, reference[0])


@pytest.mark.parametrize("at", [3, 4, 8])
def test_interrupt_between_record_and_manifest_then_resume(tmp_path, monkeypatch, reference, at):
    """Ctrl-C after block ``at - 3``'s record is durable but before its manifest: the stale record is replaced.

    A local folder's manifest is written by the run itself, not through the zarr store: it is interrupted there."""
    out = tmp_path / "out.zarr"
    real = Ledger.save
    calls = itertools.count(1)  # saves 1 and 2 create the run (then with its arrays), save k + 3 commits block k

    def save(self, manifest):
        if next(calls) == at:
            raise KeyboardInterrupt
        real(self, manifest)

    with monkeypatch.context() as m:
        m.setattr(Ledger, "save", save)
        with pytest.raises(KeyboardInterrupt):
            run(out)
    assert read_manifest(out)["committed_blocks"] == at - 3
    run(out, mode="resume")
    assert_same_output(out, reference[0])


def test_interrupted_while_creating_arrays_then_resume(tmp_path, monkeypatch, reference):
    """A Ctrl-C, raised as the arrays are created (inside a store, it would stop zarr's event loop)."""
    out = tmp_path / "out.zarr"
    with monkeypatch.context() as m:
        m.setattr(ZarrSink, "create", classmethod(lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt())))
        with pytest.raises(KeyboardInterrupt):
            run(out)
    assert read_manifest(out)["committed_blocks"] == 0
    run(out, mode="resume")
    assert_same_output(out, reference[0])


@pytest.mark.parametrize("virtual", [False, True], ids=["stored", "virtual"])
def test_a_run_killed_at_any_write_before_its_first_commit_resumes_as_a_fresh_run(tmp_path, virtual):
    """Killed at each store write from its first manifest to the manifest that commits block 0: the group, the
    array documents, the summaries' arrays, the manifest with the arrays' metadata, the root, block 0's record.
    Nothing was committed, so ``mode="resume"`` starts the run; it ends as one never interrupted."""
    kw = {"virtual": virtual, "summaries": [64]}
    ref = tmp_path / "ref" / "out.zarr"
    run(ref, **kw)
    writes: list[str] = []
    with dies_at(0, writes):
        run(tmp_path / "dry" / "out.zarr", **kw)
    first_commit = writes.index("write records_000000/zarr.json") + 2  # block 0's record, then the manifest
    window = writes[:first_commit]
    made = "write" if virtual else "set"  # a virtual array's document declares it so, written by streamacc
    assert window[:4] == [
        "write _streamacc/zarr.json",
        "set zarr.json",
        f"{made} level/zarr.json",
        f"{made} pair/zarr.json",
    ]
    assert "set _streamacc/summaries/w64/level_min/zarr.json" in window
    assert window[-4:] == ["write _streamacc/zarr.json", "write out.zarr/zarr.json", "write records_000000/zarr.json",
                           "write _streamacc/zarr.json"]  # fmt: skip
    for n, what in enumerate(window, 1):
        out = tmp_path / str(n) / "out.zarr"
        with dies_at(n), pytest.raises(Exception, match=f"^{re.escape(what)}$"):
            run(out, **kw)
        manifest = read_manifest(out)
        assert (manifest is None) if n == 1 else manifest["committed_blocks"] == 0, what
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run(out, mode="resume", **kw)
        said = [str(w.message).split(" (")[0] for w in caught]
        assert said == ([f"nothing to resume at {out}"] if n == 1 else []), what  # killed before its first manifest
        assert store_files(out) == store_files(ref), f"killed at write {n} ({what})"
        assert temp_files(out) == [], what
        shutil.rmtree(out)


def test_killed_before_the_first_manifest_then_resume(tmp_path, reference):
    """A writer killed while writing its first manifest leaves a temp file only: any write starts afresh."""
    for resume in (True, False):
        out = tmp_path / f"out-{resume}.zarr"
        (out / "_streamacc").mkdir(parents=True)
        (out / f"{MANIFEST}.streamacc-tmp").write_bytes(b'{"zarr_format": 3, "node_type": "gro')
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run(out, mode="resume" if resume else "create")
        assert [str(w.message).startswith("nothing to resume at") for w in caught] == ([True] if resume else [])
        assert_same_output(out, reference[0])


def test_resume_removes_temp_files(tmp_path, caplog, reference):
    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError, match="No space left on device"):
        run(failing_block(out, 3, OSError(errno.ENOSPC, "No space left on device")))
    tag = "0123456789abcdef" * 2  # zarr's LocalStore writes STEM.<uuid4 hex>.partial
    leftovers = [out / f"level/c/5.{tag}.partial", out / f"pair/c/4/0.{tag}.partial", out / f"{MANIFEST}.streamacc-tmp"]
    for path in leftovers:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"half a chunk")
    assert len(temp_files(out)) == 3
    with caplog.at_level(logging.INFO, logger="streamacc"):
        run(out, mode="resume")
    assert "removed 3 temp files" in caplog.text
    assert "resuming" in caplog.text and f"at step {3 * BLOCK} of {LENGTH}" in caplog.text
    assert_same_output(out, reference[0])


def test_resume_removes_temp_files_in_every_folder_a_run_writes(tmp_path, reference):
    """The summaries' and the block records' folders too: the finished output is the uninterrupted run's, file for
    file."""
    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError):
        run(failing_block(out, 3))
    tag = uuid.uuid4().hex  # zarr's LocalStore writes STEM.<uuid4 hex>.partial
    levels = sorted(p.name for p in (out / "_streamacc" / "summaries").iterdir() if p.is_dir())
    leftovers = [f"_streamacc/summaries/{levels[0]}/level_min/c/0.{tag}.partial",
                 f"_streamacc/summaries/{levels[-1]}/pair_mean/c/0/0.{tag}.partial",
                 f"_streamacc/summaries/{levels[0]}/zarr.{tag}.partial",
                 f"_streamacc/records_000000/zarr.{tag}.partial"]  # fmt: skip
    for name in leftovers:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(b"half a chunk")
    run(out, mode="resume")
    assert_same_output(out, reference[0])


def test_resume_of_a_finished_run_does_nothing_and_warns(tmp_path, reference):
    ref, carry = reference
    out = tmp_path / "out.zarr"
    shutil.copytree(ref, out)
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    with pytest.warns(StreamaccWarning, match=r"already complete \(5000 steps\); nothing to do"):
        np.testing.assert_array_equal(run(out, mode="resume"), carry)
    assert {p: p.stat().st_mtime_ns for p in before} == before
    assert_same_output(out, ref)


def test_resume_of_a_missing_output_starts_it(tmp_path, reference):
    out = tmp_path / "new.zarr"
    with pytest.warns(streamacc.errors.StreamaccWarning, match="nothing to resume at .*new.zarr .*starting a new run"):
        run(out, mode="resume")
    assert_same_output(out, reference[0])


@pytest.fixture
def interrupted(tmp_path):
    """An output whose run stopped after 4 committed blocks."""
    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError):
        run(failing_block(out, 4))
    return out


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        ({"block_size": 1024}, ["block_size", "chunk", "chunks.level", "chunks.pair"]),
        ({"chunks": {"step": 256}}, ["chunk", "chunks.level", "chunks.pair"]),
        ({"attrs": {"recipe": "demo", "params": {"ratio": 2.0}}}, ["params.ratio"]),
        ({"codec": "none"}, ["codec"]),
        ({"f": other_step}, ["function"]),
        ({"unroll": 2}, ["unroll"]),
        (
            {"block_size": 1024, "codec": "none", "attrs": {"recipe": "other", "params": {"ratio": 3.0}}},
            ["block_size", "chunk", "chunks.level", "chunks.pair", "codec", "params.ratio", "recipe"],
        ),
    ],
)
def test_resume_with_different_settings_is_refused(interrupted, change, fields):
    before = store_files(interrupted)
    with pytest.raises(ResumeError, match="cannot resume") as err:
        run(interrupted, mode="resume", **change)
    message = str(err.value)
    named = message[message.index("(") : message.index("); rerun")]
    assert sorted(part.split(":")[0].strip("( ") for part in named.split(";")) == sorted(fields)
    assert "mode='overwrite'" in message and "\n" not in message
    assert store_files(interrupted) == before  # refused before touching anything


def test_resume_with_another_length_names_the_length_that_keeps_the_steps(interrupted):
    before = store_files(interrupted)
    with pytest.raises(ResumeError) as err:
        run(interrupted, mode="resume", length=LENGTH - 1, xs=XS[:-1])
    message = str(err.value)
    assert f"its run is {LENGTH} steps long ({4 * BLOCK} committed), not {LENGTH - 1}; continue it with " \
           f"length={LENGTH}" in message  # fmt: skip
    assert "overwrite" not in message and "\n" not in message
    assert store_files(interrupted) == before


def test_resume_of_a_foreign_directory_is_refused(tmp_path):
    plain = tmp_path / "notes"
    plain.mkdir()
    (plain / "notes.txt").write_text("mine")
    group = tmp_path / "group.zarr"
    zarr.open_group(str(group), mode="w").create_array("y", shape=(4,), dtype="f8")
    for out in (plain, group):
        before = store_files(out)
        with pytest.raises(ResumeError, match=r"is not a streamacc output.*mode='resume' cannot continue it"):
            run(out, mode="resume")
        assert store_files(out) == before and not (out / "_streamacc").exists()


@pytest.mark.parametrize("where", ["root", "arrays"])
def test_overwrite_interrupted_while_deleting_leaves_a_recognised_output(tmp_path, reference, where):
    """--overwrite saves the new run's manifest first: an interruption while deleting the old run, whatever
    the listing order, leaves an output that claims no block and that --overwrite and --resume recognise.

    A local folder's old run is removed by walking the folder, not through the zarr store: it is interrupted there."""
    out = tmp_path / "out.zarr"
    shutil.copytree(reference[0], out)
    new = {"codec": "none"}  # the new run differs from the old one

    def interrupted(root, keep):
        if where == "arrays":  # some arrays deleted, the rest still there
            shutil.rmtree(root / "level")
        raise KeyboardInterrupt

    with testing.patched("store.remove_tree_contents", interrupted), pytest.raises(KeyboardInterrupt):
        run(out, mode="overwrite", **new)
    manifest = read_manifest(out)
    assert manifest["committed_blocks"] == 0 and manifest["identity"]["codec"] == "none"
    assert not (out / "zarr.json").exists()  # readers no longer see the old group
    with pytest.raises(ResumeError, match="different run"):
        run(out, mode="resume")  # the old run's settings: its blocks are gone
    run(out, mode="resume", **new)  # the new run, never committed: starts afresh
    run(out, mode="overwrite")
    assert_same_output(out, reference[0])


def test_info_counts_only_committed_chunks(tmp_path):
    """Chunks written past the last commit are not counted in info's stored bytes."""

    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError):
        run(failing_block(out, 4), codec="none")
    info = streamacc.info(out)
    assert info.committed_steps == 4 * BLOCK and not info.complete
    crc = 4  # bytes of CRC-32C stored after each chunk
    assert info.arrays["level"].stored_bytes == 4 * (BLOCK * 8 + crc)
    assert info.arrays["pair"].stored_bytes == 4 * (BLOCK * 2 * 8 + crc)
    assert info.arrays["level"].compression_ratio == round(BLOCK * 8 / (BLOCK * 8 + crc), 3)
