"""Outputs written by streamacc 1.0 (bookkeeping format 2: carries as base64 in the records) keep working.

``data/outputs-1.0.0.tar.gz`` holds outputs that streamacc 1.0.0 wrote, each by the command
line (``tests/data/README.md`` lists the commands): finished, interrupted by a full disk,
with a PRNG key in the carry, thinned with three outputs, virtual, and compensated float32.
They read, verify, resume and extend as they are, each value checked against numpy, and a
continued format 2 output stays format 2, byte for byte what its run writes today.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import zarr
from helpers import MANIFEST, RECORDS, copier, gp, node_attribute, read_manifest, run, unpacked

import streamacc
from streamacc.cli import main
from streamacc.record import Manifest

ARCHIVE = Path(__file__).parent / "data" / "outputs-1.0.0.tar.gz"
QUIET = ["--no-progress"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    return unpacked(ARCHIVE, tmp_path_factory.mktemp("v1"))


@pytest.fixture
def copy(stored, tmp_path):
    return copier(stored, tmp_path)


def values(out: Path, name: str = "x") -> np.ndarray:
    return np.asarray(zarr.open_array(out / name, mode="r")[:])


def test_the_archive_holds_format_2(stored):
    for out in sorted(stored.iterdir()):
        manifest = read_manifest(out)
        assert manifest["format"] == "streamacc-manifest/2" and "carries" not in manifest, out.name
        assert "carry_in" in node_attribute(out / RECORDS, "streamacc_records")[0]


def test_a_manifest_read_is_written_back_byte_for_byte(stored, tmp_path):
    """A manifest read (its identity typed) and saved again is the bytes it was: 1.0.0's, and one written now."""
    fresh = tmp_path / "fresh.zarr"
    assert main(["write", str(fresh), "--recipe", "lorenz", "--size", "3000", "--save-every", "4", *QUIET]) == 0
    for out in [*sorted(stored.iterdir()), fresh]:
        raw = (out / MANIFEST).read_bytes()
        assert Manifest.from_json(raw, out.name).to_json() == raw, out.name


@pytest.mark.parametrize("name", ["gp_complete", "gp_partial", "walk_paths", "lorenz_partial", "gp_comp32"])
def test_reads_and_verifies(stored, name, capfd):
    out = stored / f"{name}.zarr"
    ds = streamacc.open(out)
    manifest = read_manifest(out)
    assert ds.sizes["step"] == manifest["committed_steps"] // manifest["identity"].get("save_every", 1)
    if name.startswith("gp_complete") or name == "gp_partial":
        np.testing.assert_array_equal(ds.x.values, gp(5000)[: ds.sizes["step"]])
    assert run("verify", out, capfd=capfd)[0] == 0
    assert run("info", out, capfd=capfd)[0] == 0


def test_a_virtual_output_reads_and_materializes(copy, capfd):
    out = copy("gp_virtual.zarr")
    np.testing.assert_array_equal(streamacc.open(out).x.values, gp(5000))
    assert run("verify", out, capfd=capfd)[0] == 0
    assert run("materialize", out, "--no-progress", capfd=capfd)[0] == 0
    np.testing.assert_array_equal(values(out), gp(5000))
    assert read_manifest(out)["format"] == "streamacc-manifest/2"


@pytest.mark.parametrize(
    ("name", "args", "arrays"),
    [
        ("gp_partial", ["--size", "5000", "--block-size", "512"], ["x"]),
        ("lorenz_partial", ["--recipe", "lorenz", "--size", "6000", "--block-size", "512", "--save-every", "4"],
         ["x", "y", "z"]),
    ],
)  # fmt: skip
def test_an_interrupted_output_resumes_as_format_2_with_the_bytes_of_one_run(copy, tmp_path, name, args, arrays):
    out = copy(f"{name}.zarr")
    assert main(["write", str(out), *args, "--resume", *QUIET]) == 0
    fresh = tmp_path / "fresh.zarr"
    assert main(["write", str(fresh), *args, *QUIET]) == 0
    for array in arrays:
        assert values(out, array).tobytes() == values(fresh, array).tobytes()
    manifest = read_manifest(out)
    assert manifest["format"] == "streamacc-manifest/2" and manifest["complete"]
    records = node_attribute(out / RECORDS, "streamacc_records")
    assert all(set(r) == {"index", "start", "stop", "carry_in", "crc32c"} for r in records)
    assert main(["verify", str(out)]) == 0
    if name == "gp_partial":
        np.testing.assert_array_equal(values(out), gp(5000))


def test_a_finished_output_extends_as_format_2(copy, tmp_path):
    out = copy("walk_paths.zarr")
    args = ["--recipe", "randomwalk", "--paths", "4", "--block-size", "256"]
    assert main(["write", str(out), "--size", "1500", *args, "--extend", *QUIET]) == 0
    fresh = tmp_path / "fresh.zarr"
    assert main(["write", str(fresh), "--size", "1500", *args, *QUIET]) == 0
    assert values(out).tobytes() == values(fresh).tobytes()
    assert read_manifest(out)["format"] == "streamacc-manifest/2"
    assert main(["verify", str(out)]) == 0


def test_a_changed_carry_in_a_format_2_record_is_found(copy, capfd):
    out = copy("gp_complete.zarr")
    path = out / RECORDS
    doc = json.loads(path.read_text())
    records = json.loads(doc["attributes"]["streamacc_records"])
    records[4]["carry_in"] = records[5]["carry_in"]
    doc["attributes"]["streamacc_records"] = json.dumps(records)
    path.write_text(json.dumps(doc))
    code, line = run("verify", out, capfd=capfd)
    assert code == 1 and "block 3 " in line and "final carry" in line
    assert (out / MANIFEST).exists()
