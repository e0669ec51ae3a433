"""Readers trust only what ``verify`` would: the root metadata agrees with the manifest, the arrays
have the metadata they were written with, and nothing inside an output is a link.

The root metadata is what plain Zarr readers see, so it must never claim more than the
manifest: a writer killed between the manifest's "complete" and the root's refresh leaves
a root that lags, as a live writer's does, which readers read, ``verify`` refuses and
``--resume`` rewrites; a deleted root, a root whose consolidated shape was shrunk (xarray
would return part of the values marked complete), a root forged complete, or one linked
outside the output, is refused by ``verify``, ``info`` and ``open``; and ``open`` returns
no values through a linked array, nor values rescaled by a ``scale_factor`` added to
``x/zarr.json``.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from helpers import (
    SMALL,
    assert_same_output,
    faultrun_process,
    read_manifest,
    rewind,
    root_says,
    run,
    store_files,
    tree,
)

import streamacc
from streamacc.cli import main
from streamacc.run import verify_recipe_output


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ref") / "out.zarr"
    assert main(["write", str(out), *SMALL]) == 0
    return out


def copy(ref: Path, tmp_path: Path, name: str = "out.zarr") -> Path:
    out = tmp_path / name
    shutil.copytree(ref, out)
    return out


def refused_by_every_reader(out: Path, capfd, *words: str) -> None:
    for args in (["verify", out], ["info", out]):
        code, line = run(*args, capfd=capfd)
        assert code == 1 and all(w in line for w in words), (args, line)
    with pytest.raises(streamacc.errors.StoreError) as refused:
        streamacc.open(out)
    assert all(w in str(refused.value) for w in words), refused.value


@pytest.mark.slow
def test_a_kill_between_the_complete_manifest_and_the_root_is_repaired_by_resume(tmp_path, ref, capfd):
    out = tmp_path / "out.zarr"
    proc = faultrun_process("complete", 0, "write", out, *SMALL)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert read_manifest(out)["complete"]
    assert json.loads((out / "zarr.json").read_text())["attributes"]["streamacc_complete"] == 0
    assert run("info", out, capfd=capfd)[0] == 0  # a root that lags claims less than is true: readers read on
    assert streamacc.open(out).sizes["step"] == 5000
    code, line = run("verify", out, capfd=capfd)  # but it lags for good, which verify says
    assert code == 1 and "has out-of-date attributes (streamacc_committed_steps, streamacc_complete" in line, line
    assert line.endswith("resume the run with --resume to rewrite it from the manifest"), line
    assert main(["write", str(out), *SMALL, "--resume"]) == 0  # already complete: repairs the root, nothing else
    assert_same_output(out, ref)
    assert main(["verify", str(out)]) == 0


def test_verify_refuses_a_root_that_still_lags_a_complete_manifest(tmp_path, ref, capfd):
    out = copy(ref, tmp_path)
    root_says(out, 0)  # streamacc_complete and streamacc_committed_steps 0 on a finished output
    code, line = run("verify", out, capfd=capfd)
    assert code == 1
    assert line == (
        f"streamacc: error: {out}: its root metadata (zarr.json) has out-of-date attributes "
        "(streamacc_committed_steps, streamacc_complete) though the run is complete; resume the run with --resume "
        "to rewrite it from the manifest"
    )
    with pytest.raises(streamacc.errors.VerifyError) as refused:
        verify_recipe_output(out)
    assert str(refused.value).endswith("; resume the run with mode='resume' to rewrite it from the manifest")
    assert run("info", out, capfd=capfd)[0] == 0  # readers read a root that lags
    assert main(["write", str(out), *SMALL, "--resume"]) == 0
    assert_same_output(out, ref)
    assert run("verify", out, capfd=capfd)[0] == 0


def shrink_consolidated(out: Path) -> None:
    doc = json.loads((out / "zarr.json").read_text())
    doc["consolidated_metadata"]["metadata"]["x"]["shape"] = [1536]
    (out / "zarr.json").write_text(json.dumps(doc))


def forge_complete(out: Path) -> None:
    rewind(out, 3, 3 * 512)  # a run killed after 3 blocks, whose root says it finished


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda out: (out / "zarr.json").unlink(), "is missing"),
        (shrink_consolidated, "describes array 'x' otherwise than x/zarr.json"),
        (forge_complete, "says the run is complete"),
    ],
    ids=["deleted", "shrunk", "forged-complete"],
)
def test_a_root_that_lies_is_refused_by_readers_and_rewritten_by_resume(tmp_path, ref, capfd, damage, words):
    out = copy(ref, tmp_path)
    damage(out)
    refused_by_every_reader(out, capfd, "root metadata (zarr.json)", words)
    assert main(["write", str(out), *SMALL, "--resume"]) == 0
    assert_same_output(out, ref)
    assert xr.open_zarr(out).x.size == 5000


def test_a_root_linked_outside_the_output_is_refused(tmp_path, ref, capfd):
    out = copy(ref, tmp_path)
    elsewhere = tmp_path / "elsewhere.json"
    shutil.move(out / "zarr.json", elsewhere)
    (out / "zarr.json").symlink_to(elsewhere)
    before = tree(tmp_path)
    refused_by_every_reader(out, capfd, "link")
    code, line = run("write", out, *SMALL, "--resume", capfd=capfd)
    assert code in (1, 2) and "link" in line
    assert tree(tmp_path) == before


@pytest.mark.parametrize("linked", ["x", "x/c/3"])
def test_open_refuses_data_linked_from_elsewhere(tmp_path, ref, capfd, linked):
    other = tmp_path / "other.zarr"
    assert main(["write", str(other), *SMALL, "--ratio", "1+2e-8"]) == 0
    out = copy(ref, tmp_path)
    shutil.rmtree(out / linked) if (out / linked).is_dir() else (out / linked).unlink()
    (out / linked).symlink_to(other / linked)
    refused_by_every_reader(out, capfd, "link")


def test_an_attribute_that_rescales_the_values_is_refused(tmp_path, ref, capfd):
    out = copy(ref, tmp_path)
    array = zarr.open_array(str(out / "x"), mode="r+")
    array.attrs.update(scale_factor=2.0, add_offset=1.0)  # xarray would return 2 * x + 1
    refused_by_every_reader(out, capfd, "metadata of array 'x' changed", "attributes")
    array.attrs.update(units="m", comment="a note")  # attributes that change no value are the user's to edit
    del array.attrs["scale_factor"], array.attrs["add_offset"]
    expected = zarr.open_array(str(ref / "x"), mode="r")[:]
    assert np.array_equal(streamacc.open(out).x.values, expected)
    assert main(["verify", str(out)]) == 0
    assert sorted(store_files(out)) == sorted(store_files(ref))


def test_open_returns_no_chunk_but_the_one_committed(tmp_path, ref):
    """A chunk of another run put in place of a committed one (or written late by a writer that lost its
    lease) is refused as it is read; every other chunk reads as before."""
    other = tmp_path / "other.zarr"
    assert main(["write", str(other), *SMALL, "--ratio", "1+2e-8"]) == 0
    out = copy(ref, tmp_path)
    shutil.copyfile(other / "x" / "c" / "3", out / "x" / "c" / "3")
    expected = zarr.open_array(str(ref / "x"), mode="r")[:]
    for chunks in ("auto", None):
        ds = streamacc.open(out, chunks=chunks)
        assert np.array_equal(ds.x[:1536].values, expected[:1536])  # blocks 0-2
        with pytest.raises(
            streamacc.errors.VerifyError, match=r"chunk x/c/3 .* is not the chunk committed for block 3"
        ):
            np.asarray(ds.x[1536:2048])
