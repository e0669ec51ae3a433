"""Nothing is deleted that is not streamacc's: temp-file names license nothing, and no run deletes
the folder the command runs in or goes through a link at OUT.

A deletion cannot be undone, so each case errs towards keeping: a folder holding only
files named ``*.partial`` or ``*.streamacc-tmp``, at any depth, is someone else's, not
empty; ``cd out.zarr && streamacc write . --overwrite`` never empties the current
directory; and with ``l.zarr -> real.zarr``, ``write l.zarr --overwrite`` never rewrites
``real.zarr``.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from helpers import SMALL, rewind, run, tree

from streamacc.cli import main
from streamacc.store import open_target


@pytest.fixture(scope="module")
def ours(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ours") / "out.zarr"
    assert main(["write", str(out), *SMALL]) == 0
    return out


@pytest.mark.parametrize(
    "files",
    [["sub/thesis.partial"], ["draft.streamacc-tmp"], ["_streamacc/notes.partial"], ["a/b/c/x.partial", "y.partial"]],
)
def test_files_named_like_temp_files_make_a_folder_no_less_someone_elses(tmp_path, capfd, files):
    folder = tmp_path / "p"
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("draft")
    before = tree(tmp_path)
    for flags in ([], ["--overwrite"], ["--resume"]):
        code, line = run("write", folder, *SMALL, *flags, capfd=capfd)
        assert code == 2 and "is not a streamacc output" in line, line
    assert tree(tmp_path) == before


def test_resume_removes_only_the_temp_files_of_its_own_writes(tmp_path, ours, capfd):
    out = tmp_path / "out.zarr"
    shutil.copytree(ours, out)
    rewind(out, 9, 9 * 512)  # as a run killed after 9 of its 10 blocks
    (out / "x" / "c" / "9").unlink()
    hex32 = uuid.uuid4().hex
    mine = [f"x/c/9.{hex32}.partial", f"x/zarr.{hex32}.partial", "_streamacc/zarr.json.streamacc-tmp",
            "zarr.json.streamacc-tmp"]  # fmt: skip
    theirs = ["notes/thesis.partial", "x/c/9.partial", "x/draft.streamacc-tmp", f"y/c/1.{hex32}.partial",
              "README.partial", f"_streamacc/{hex32}.partial"]  # fmt: skip
    for name in mine + theirs:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("x")
    assert main(["write", str(out), *SMALL, "--resume"]) == 0
    assert all(not (out / name).exists() for name in mine)
    assert all((out / name).read_text() == "x" for name in theirs)


@pytest.mark.parametrize("how", ["dot", "absolute", "parent"])
def test_overwrite_never_deletes_the_current_directory(tmp_path, ours, capfd, monkeypatch, how):
    out = tmp_path / "out.zarr"
    shutil.copytree(ours, out)
    (out / "NOTES.txt").write_text("mine")
    (out / "sub").mkdir()
    here, arg = {"dot": (out, "."), "absolute": (out, str(out)), "parent": (out / "sub", "../../out.zarr")}[how]
    monkeypatch.chdir(here)
    before = tree(tmp_path)
    code, line = run("write", arg, *SMALL, "--overwrite", capfd=capfd)
    assert code == 2 and "never deletes the folder it runs in" in line and "from outside" in line, line
    assert tree(tmp_path) == before
    monkeypatch.chdir(tmp_path)
    assert main(["write", "out.zarr", *SMALL, "--overwrite"]) == 0  # from outside it may
    assert not (out / "NOTES.txt").exists()


def test_overwrite_never_goes_through_a_link_at_out(tmp_path, ours, capfd):
    real = tmp_path / "real.zarr"
    shutil.copytree(ours, real)
    (real / "NOTES.txt").write_text("mine")
    link = tmp_path / "l.zarr"
    link.symlink_to("real.zarr")
    before = tree(tmp_path)
    code, line = run("write", link, *SMALL, "--overwrite", capfd=capfd)
    assert code == 2 and f"is a link to {real}" in line and "never deletes through a link" in line, line
    assert tree(tmp_path) == before
    assert main(["write", str(link), *SMALL, "--resume"]) == 0  # writing through it deletes nothing: allowed
    assert main(["write", str(real), *SMALL, "--overwrite"]) == 0
    assert not (real / "NOTES.txt").exists()


def test_a_folder_removed_by_clearing_an_output_is_made_again_by_the_next_write(tmp_path):
    (tmp_path / "out.zarr").mkdir()
    target = open_target(tmp_path / "out.zarr")
    target.write("_streamacc/zarr.json", b"manifest")
    target.write("x/zarr.json", b"old")
    target.make_durable(["x/zarr.json"])
    target.clear({"_streamacc/zarr.json"})
    assert tree(tmp_path / "out.zarr") == {"_streamacc": "", "_streamacc/zarr.json": b"manifest"}
    target.write("x/zarr.json", b"new")
    target.make_durable(["x/zarr.json"])
    assert tree(tmp_path / "out.zarr") == {"_streamacc": "", "_streamacc/zarr.json": b"manifest", "x": "",
                                           "x/zarr.json": b"new"}  # fmt: skip
