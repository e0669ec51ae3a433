"""Format 3 outputs written before the kept carries were compressed keep working, their carries uncompressed.

``data/outputs-format3.tar.gz`` holds outputs whose manifest's ``carries`` names no codec
(``tests/data/README.md`` lists the commands): a finished geometric progression, a random walk
of 128 paths interrupted by a full disk after 4 of its 8 blocks (a carry kept every 3 blocks),
and a virtual progression. They read, verify, resume and extend as they are, each value
checked against numpy or an uninterrupted run of today, and the carries a continued run
adds are stored as the output's others are: uncompressed, as the manifest's carries say.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from helpers import copier, gp, read_manifest, run, unpacked

import streamacc
from streamacc.cli import main

ARCHIVE = Path(__file__).parent / "data" / "outputs-format3.tar.gz"
WALK = ["--recipe", "randomwalk", "--paths", "128", "--size", "64", "--block-size", "8", "--no-progress"]
CARRY = "_streamacc/carries/leaf_0"


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    return unpacked(ARCHIVE, tmp_path_factory.mktemp("format3"))


@pytest.fixture
def copy(stored, tmp_path):
    return copier(stored, tmp_path)


def uncompressed(out: Path, chunk: str, leaf_bytes: int) -> bool:
    """Whether the carry chunk ``chunk`` holds the leaf's raw bytes and their CRC-32C, nothing else."""
    return (out / CARRY / "c" / chunk).stat().st_size == leaf_bytes + 4


def test_the_archive_holds_uncompressed_carries(stored):
    for out in sorted(stored.iterdir()):
        carries = read_manifest(out)["carries"]
        assert "codec" not in carries, out.name
        assert [c["name"] for c in zarr.open_array(out / CARRY, mode="r").metadata.to_dict()["codecs"]] == [
            "bytes", "crc32c"
        ]  # fmt: skip


@pytest.mark.parametrize("name", ["gp_complete", "walk_partial", "gp_virtual"])
def test_reads_and_verifies(stored, name, capfd):
    out = stored / f"{name}.zarr"
    assert run("verify", out, capfd=capfd)[0] == 0
    if name != "walk_partial":
        np.testing.assert_array_equal(streamacc.open(out).x.values, gp(5000))


def test_a_resume_keeps_the_carries_uncompressed_and_writes_the_uninterrupted_values(copy, tmp_path, capfd):
    out, ref = copy("walk_partial.zarr"), tmp_path / "ref.zarr"
    assert run("write", out, *WALK, "--resume", capfd=capfd)[0] == 0
    assert main(["write", str(ref), *WALK]) == 0
    assert run("verify", out, capfd=capfd)[0] == 0
    assert "codec" not in read_manifest(out)["carries"] and "codec" in read_manifest(ref)["carries"]
    assert read_manifest(out)["format"] == "streamacc-manifest/3"  # continued in its own format: no shards
    assert uncompressed(out, "6/0", 128 * 8) and uncompressed(out, "8/0", 128 * 8)  # kept by the resumed run
    for name in ("x",):
        np.testing.assert_array_equal(zarr.open_array(out / name)[:], zarr.open_array(ref / name)[:])


@pytest.mark.parametrize("name", ["gp_complete", "gp_virtual"])
def test_an_extension_keeps_the_carries_uncompressed(copy, name, capfd):
    out = copy(f"{name}.zarr")
    virtual = ["--virtual"] if name == "gp_virtual" else []
    assert run("write", out, "--size", "6000", "--block-size", "512", *virtual, "--no-progress", "--extend",
               capfd=capfd)[0] == 0  # fmt: skip
    assert run("verify", out, capfd=capfd)[0] == 0
    assert "codec" not in read_manifest(out)["carries"] and uncompressed(out, "11", 8)
    assert read_manifest(out)["format"] == "streamacc-manifest/3"
    np.testing.assert_array_equal(streamacc.open(out).x.values, gp(6000))
