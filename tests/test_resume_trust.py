"""A resume trusts no committed block blindly: every committed chunk must end with the CRC-32C its
block record names, and an input read from Zarr must be the one the run started on.

Recomputing only the last committed block would let a chunk copied from another run into
an earlier block, or an ``--input`` row edited in the committed part, pass ``--resume``
and end in the finished output; both are refused.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr
from helpers import (
    SMALL,
    assert_same_output,
    read_manifest,
    rewind,
    root_says,
    run,
    write_manifest,
)

from streamacc.cli import main


def interrupt(out: Path, blocks: int, block: int) -> dict:
    """Make a finished output look killed after ``blocks`` committed blocks; return its manifest."""
    manifest = rewind(out, blocks, blocks * block)
    root_says(out, blocks * block)
    return manifest


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> tuple[Path, Path]:
    """The same layout written twice with different ratios."""
    base = tmp_path_factory.mktemp("runs")
    ours, other = base / "ours.zarr", base / "other.zarr"
    assert main(["write", str(ours), *SMALL]) == 0
    assert main(["write", str(other), *SMALL, "--ratio", "1+2e-8"]) == 0
    return ours, other


def test_a_chunk_from_another_run_in_an_earlier_block_is_refused(tmp_path, outputs, capfd):
    ours, other = outputs
    out = tmp_path / "out.zarr"
    shutil.copytree(ours, out)
    interrupt(out, 6, 512)
    shutil.copyfile(other / "x" / "c" / "2", out / "x" / "c" / "2")  # the same shape and codec, other values
    code, line = run("write", out, *SMALL, "--resume", capfd=capfd)
    assert code == 2 and "block 2 (steps 1024-1536)" in line and "not the chunk it committed" in line, line
    code, line = run("verify", out, "--blocks", "1", capfd=capfd)  # block 2 is not recomputed: its trailer is read
    assert code == 1 and "block 2 (steps 1024-1536)" in line, line
    shutil.copyfile(ours / "x" / "c" / "2", out / "x" / "c" / "2")
    assert main(["write", str(out), *SMALL, "--resume"]) == 0
    assert_same_output(out, ours)


def test_an_input_edited_since_the_run_started_is_refused(tmp_path, capfd):
    values = np.random.default_rng(7).uniform(0.5, 1.0, 4000)
    source = zarr.create_array(str(tmp_path / "in.zarr"), shape=(4000,), chunks=(500,), dtype="f8")
    source[:] = values
    args = ["--recipe", "cumsum", "--input", str(tmp_path / "in.zarr"), "--size", "3000", "--block-size", "256"]
    args += ["--no-progress", "--no-summaries"]  # summaries would contradict the interruption faked below
    ref, out = tmp_path / "ref.zarr", tmp_path / "out.zarr"
    assert main(["write", str(ref), *args]) == 0
    shutil.copytree(ref, out)
    manifest = interrupt(out, 5, 256)
    source[3500] = 1.0  # past the 3000 rows the run reads: no difference to it
    assert main(["write", str(out), *args, "--resume"]) == 0
    assert_same_output(out, ref)
    write_manifest(out, manifest)
    root_says(out, 5 * 256)
    source[3] = 2.0  # a committed row
    code, line = run("write", out, *args, "--resume", capfd=capfd)
    assert code == 2 and "cannot resume" in line and "input" in line, line


def test_an_input_path_through_a_link_names_what_the_system_reads(tmp_path, monkeypatch):
    """``link/../in.zarr`` is the ``in.zarr`` beside the link's target, as zarr and ``realpath`` read it; a
    textual ``abspath`` made it the ``in.zarr`` beside the link, read and recorded instead."""
    (tmp_path / "real" / "deep").mkdir(parents=True)
    (tmp_path / "link").symlink_to("real/deep")
    for where, value in ((tmp_path / "real" / "in.zarr", 1.0), (tmp_path / "in.zarr", 3.0)):
        zarr.create_array(str(where), shape=(100,), chunks=(50,), dtype="f8")[:] = np.full(100, value)
    monkeypatch.chdir(tmp_path)
    args = ["--recipe", "cumsum", "--input", "link/../in.zarr", "--block-size", "64", "--no-progress"]
    assert main(["write", "out.zarr", *args]) == 0
    assert np.array_equal(zarr.open_array("out.zarr/y", mode="r")[:], np.cumsum(np.full(100, 1.0)))
    assert read_manifest(tmp_path / "out.zarr")["identity"]["params"]["input"] == str(
        tmp_path.resolve() / "real/in.zarr"
    )
    assert main(["verify", "out.zarr"]) == 0
