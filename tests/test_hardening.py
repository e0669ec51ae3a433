"""Untrusted outputs and unlucky moments: nothing outside OUT is ever touched, and damaged
bookkeeping never turns into wrong data.

Outputs get copied, synced and extracted from archives, so each test crafts or damages
one (links inside it, a stray ``zarr.json``, a self-contradictory or foreign manifest, a
flipped carry, changed array metadata) and checks that writing, resuming, overwriting
and verifying refuse with one line and leave every file, inside and outside, as it was.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import google_crc32c
import numpy as np
import pytest
import zarr
from helpers import (
    MANIFEST,
    RECORDS,
    SMALL,
    Popen,
    assert_same_output,
    cli,
    committed,
    read_manifest,
    rewind,
    root_says,
    run,
    store_files,
    tree,
    write_manifest,
)

import streamacc
from streamacc.cli import main
from streamacc.store import LocalTarget

BIG = ["--size", "2**20", "--block-size", "2**14", "--codec", "none", "--no-progress"]  # 64 blocks


@pytest.fixture(scope="module")
def ref(tmp_path_factory) -> Path:
    """An uninterrupted run of SMALL."""
    out = tmp_path_factory.mktemp("ref") / "out.zarr"
    assert main(["write", str(out), *SMALL]) == 0
    return out


@pytest.fixture
def interrupted(tmp_path, ref) -> Path:
    """A copy of ``ref`` made to look killed after 3 of its 10 blocks (a legitimate state)."""
    out = tmp_path / "out.zarr"
    shutil.copytree(ref, out)
    rewind(out, 3, 3 * 512)
    root_says(out, 3 * 512)
    for k in range(3, 10):
        (out / "x" / "c" / str(k)).unlink()
    return out


# --- links inside an output -----------------------------------------------------------------


@pytest.mark.parametrize("linked", [RECORDS, MANIFEST, "x/c/4", "_streamacc/lock"])
def test_a_link_inside_an_output_is_never_followed(tmp_path, ref, capfd, linked):
    out = tmp_path / "out.zarr"
    shutil.copytree(ref, out)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (out / linked).unlink(missing_ok=True)
    (out / linked).symlink_to(os.path.relpath(victim, (out / linked).parent))
    before = tree(tmp_path)
    for flag in ("--resume", "--overwrite"):
        code, line = run("write", out, *SMALL, flag, capfd=capfd)
        assert code in (1, 2) and "link" in line, line
    assert tree(tmp_path) == before and victim.read_text() == "precious"


@pytest.mark.parametrize("with_output", [True, False], ids=["output", "only-the-link"])
def test_a_linked_bookkeeping_folder_is_never_followed(tmp_path, ref, capfd, with_output):
    victims = tmp_path / "victimdir"
    victims.mkdir()
    (victims / "data.txt").write_text("precious")
    shutil.copytree(ref / "_streamacc", victims / "looks-like-ours")
    out = tmp_path / "out.zarr"
    if with_output:
        shutil.copytree(ref, out)
        shutil.rmtree(out / "_streamacc")
    else:
        out.mkdir()
    (out / "_streamacc").symlink_to("../victimdir/looks-like-ours")
    before = tree(tmp_path)
    for args in (["write", out, *SMALL, "--overwrite"], ["write", out, *SMALL, "--resume"], ["verify", out]):
        code, line = run(*args, capfd=capfd)
        assert code in (1, 2) and "link" in line, (args, line)
    assert tree(tmp_path) == before


# --- what licenses deletion -----------------------------------------------------------------


def test_a_file_named_zarr_json_licenses_nothing(tmp_path, capfd):
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print('years of work')\n")
    (project / "zarr.json").write_text("not json\n")
    plain = tmp_path / "plain.zarr"  # a Zarr group some other tool wrote
    zarr.open_group(str(plain), mode="w").create_array("y", shape=(4,), dtype="f8")
    before = tree(tmp_path)
    for out in (project, plain):
        code, line = run("write", out, *SMALL, "--overwrite", capfd=capfd)
        assert code == 2 and "is not a streamacc output" in line and "--overwrite will not delete it" in line
        code, line = run("write", out, *SMALL, "--resume", capfd=capfd)
        assert code == 2 and "is not a streamacc output" in line
    assert tree(tmp_path) == before


def test_the_current_directory_as_an_empty_path_is_refused(tmp_path, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    code, line = run("write", "", "--size", "10", "--overwrite", capfd=capfd)
    assert code == 2 and "empty" in line and "current directory" in line
    with pytest.raises(streamacc.errors.InputError, match="empty"):
        streamacc.write("", lambda c, _: (c, c), np.float64(0.0), length=4, mode="overwrite", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


# --- self-contradictory, damaged and foreign manifests ----------------------------------------


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"complete": True}, "says complete with only 3 of 10 blocks committed"),
        ({"committed_steps": 4 * 512}, "counts 2048 committed steps where 3 blocks hold 1536"),
        ({"committed_blocks": 11}, "commits 11 of 10 blocks"),
        ({"total_blocks": 12}, "counts 12 blocks where its layout has 10"),
        ({"committed_blocks": 2**50}, "commits 1125899906842624 of 10 blocks"),
        ({"committed_steps": -5}, "counts -5 committed steps where 3 blocks hold 1536"),
        ({"committed_blocks": 2}, "counts 1536 committed steps where 2 blocks hold 1024"),  # lowered by hand
    ],
)
def test_a_self_contradictory_manifest_is_refused(interrupted, capfd, change, problem):
    """Every reader and writer gives one diagnosis and one piece of advice, before it loops over the blocks (a
    count of 2**50 blocks kept info looping for minutes and verify ended in a bare MemoryError)."""
    manifest = read_manifest(interrupted)
    manifest.update(change)
    write_manifest(interrupted, manifest)
    before = store_files(interrupted)
    said = f"contradicts itself ({'it ' + problem}), so which of its blocks are committed cannot be told; start afresh"
    code, line = run("verify", interrupted, capfd=capfd)
    assert code == 1 and said in line and line.endswith("start afresh with --overwrite")
    code, line = run("info", interrupted, capfd=capfd)
    assert code == 1 and said in line
    code, line = run("write", interrupted, *SMALL, "--resume", capfd=capfd)
    assert code == 2 and "cannot resume" in line and said in line
    for read in (streamacc.open, streamacc.overview, streamacc.info):
        with pytest.raises(streamacc.errors.VerifyError, match=re.escape(said)):
            read(interrupted)
    assert store_files(interrupted) == before


def test_resume_refuses_a_flipped_bit_in_the_carry(interrupted, capfd):
    chunk = interrupted / "_streamacc/carries/leaf_0/c/3"  # the carry kept after block 2, which a resume starts from
    raw = bytearray(chunk.read_bytes())
    raw[0] ^= 0x01  # the last bit of the mantissa
    chunk.write_bytes(bytes(raw))
    before = store_files(interrupted)
    code, line = run("write", interrupted, *SMALL, "--resume", capfd=capfd)
    assert code == 2 and "cannot resume" in line and "block 2 " in line
    assert "chunk _streamacc/carries/leaf_0/c/3 do not match their checksum" in line
    assert store_files(interrupted) == before


def test_resume_refuses_a_carry_replaced_with_its_checksum(interrupted, capfd):
    """A carry chunk changed and its trailer and record made to match: the recomputed block ends elsewhere."""
    chunk = interrupted / "_streamacc/carries/leaf_0/c/3"
    value = np.frombuffer(chunk.read_bytes()[:-4], dtype="<f8")[0]
    body = np.float64(np.nextafter(value, np.inf)).tobytes()
    crc = google_crc32c.value(body)
    chunk.write_bytes(body + crc.to_bytes(4, "little"))
    path = interrupted / RECORDS
    doc = json.loads(path.read_text())
    records = json.loads(doc["attributes"]["streamacc_records"])
    records[2]["carry"] = [crc]
    doc["attributes"]["streamacc_records"] = json.dumps(records)
    path.write_text(json.dumps(doc))
    before = store_files(interrupted)
    code, line = run("write", interrupted, *SMALL, "--resume", capfd=capfd)
    assert code == 2 and "cannot resume" in line and "block 2 " in line and "final carry" in line
    assert store_files(interrupted) == before


def test_resume_refuses_another_runs_bookkeeping_with_the_same_settings(tmp_path, interrupted, ref, capfd):
    """The bookkeeping of the same run killed later (6 blocks) copied onto one killed after 3."""
    later = tmp_path / "later.zarr"
    shutil.copytree(ref, later)
    rewind(later, 6, 6 * 512)
    shutil.copyfile(later / MANIFEST, interrupted / MANIFEST)
    before = store_files(interrupted)
    code, line = run("write", interrupted, *SMALL, "--resume", capfd=capfd)
    assert code == 2 and "cannot resume" in line and "block 3 " in line and "missing" in line
    code, line = run("verify", interrupted, capfd=capfd)
    assert code == 1 and "block 3 " in line and "missing" in line
    assert store_files(interrupted) == before


def test_a_legitimately_interrupted_output_resumes_identically(interrupted, ref):
    assert main(["write", str(interrupted), *SMALL, "--resume"]) == 0
    assert_same_output(interrupted, ref)


# --- array metadata -------------------------------------------------------------------------


def test_verify_and_resume_check_the_array_metadata(tmp_path, ref, interrupted, capfd):
    out = tmp_path / "deleted.zarr"
    shutil.copytree(ref, out)
    (out / "x" / "zarr.json").unlink()
    code, line = run("verify", out, capfd=capfd)
    assert code == 1 and "the metadata of array 'x' (x/zarr.json) is missing" in line
    path = interrupted / "x" / "zarr.json"
    path.write_text(path.read_text().replace('"fill_value": "NaN"', '"fill_value": 0.0'))
    for args in (["verify", interrupted], ["write", interrupted, *SMALL, "--resume"]):
        code, line = run(*args, capfd=capfd)
        assert code in (1, 2) and "metadata of array 'x' changed" in line and "fill_value" in line


# --- the lock, and moments ------------------------------------------------------------------


def test_the_lock_is_taken_before_the_output_is_looked_at(tmp_path, monkeypatch):
    """A writer looks at nothing in its output before it holds the lock (readers take none)."""
    out = tmp_path / "out.zarr"
    looked = []

    def locked_first(name):
        real = getattr(LocalTarget, name)

        def look(self, *args, **kwargs):
            if not self.read_only:
                fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    with pytest.raises(BlockingIOError):  # another writer could not take it now
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                finally:
                    os.close(fd)
                looked.append((name, self.label))
            return real(self, *args, **kwargs)

        return look

    for name in ("exists", "read", "list_dir", "list_keys", "sizes"):
        monkeypatch.setattr(LocalTarget, name, locked_first(name))
    assert main(["write", str(out), *SMALL]) == 0
    assert main(["write", str(out), *SMALL, "--overwrite"]) == 0
    assert looked.count(("exists", str(out))) >= 2 and {label for _, label in looked} == {str(out)}


def test_errors_taking_the_lock_are_one_line(tmp_path, monkeypatch, capfd):
    """The lock of a local folder is a flock no store wrapper reaches: the system call fails here."""

    def flock(fd, operation):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(fcntl, "flock", flock)
    out = tmp_path / "out.zarr"
    code, line = run("write", out, *SMALL, capfd=capfd)
    assert code == 1 and "cannot lock" in line and "Read-only file system" in line
    assert not out.exists()  # the folder made to lock was removed again


@pytest.mark.parametrize("size", ["2**63", str(2**64 - 1)])
def test_lengths_readers_cannot_index_are_refused(tmp_path, capfd, size):
    out = tmp_path / "out.zarr"
    code, line = run("write", out, "--size", size, capfd=capfd)
    assert code == 2 and "2**63 - 1" in line and "--size" in line
    with pytest.raises(streamacc.errors.InputError, match=r"length=9223372036854775808 is longer than 2\*\*63 - 1"):
        streamacc.write(out, lambda c, _: (c, c), np.float64(0.0), length=2**63, progress=False)
    assert not out.exists()


def test_sigterm_stops_like_ctrl_c_and_the_run_resumes(tmp_path):
    out = tmp_path / "out.zarr"
    proc = Popen(cli("write", out, *BIG), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while committed(out) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    if proc.returncode == 0:
        pytest.skip("the writer finished before the signal landed")
    assert proc.returncode == 143, err
    again = shlex.join(["streamacc", "write", str(out), *BIG, "--resume"])
    message = f"streamacc: error: terminated; committed blocks are safe: continue with {again}"
    assert err.splitlines() == [message]
    assert 2 <= committed(out) < 64
    assert main(["write", str(out), *BIG, "--resume"]) == 0
    ref = tmp_path / "ref.zarr"
    assert main(["write", str(ref), *BIG]) == 0
    assert_same_output(out, ref)


def test_sigterm_handler_is_restored(monkeypatch):
    before = signal.getsignal(signal.SIGTERM)
    assert main(["recipes"]) == 0
    assert signal.getsignal(signal.SIGTERM) == before


def test_an_output_of_the_first_format_is_refused_with_the_fix_and_can_be_overwritten(tmp_path, ref, capfd):
    """streamacc 0.1 kept its bookkeeping in ``_streamacc/manifest.json`` (format 1)."""
    out = tmp_path / "old.zarr"
    zarr.open_group(str(out), mode="w").create_array("x", shape=(5000,), chunks=(512,), dtype="f8")
    (out / "_streamacc").mkdir()
    (out / "_streamacc" / "manifest.json").write_text('{"format": "streamacc-manifest/1", "committed_blocks": 3}')
    before = tree(out)
    for args in (["write", out, *SMALL, "--resume"], ["verify", out], ["info", out]):
        code, line = run(*args, capfd=capfd)
        assert code == 2 and "streamacc 0.1 (bookkeeping format 1)" in line and "--overwrite" in line, line
    assert tree(out) == before
    assert main(["write", str(out), *SMALL, "--overwrite"]) == 0  # recognisably streamacc's: it may be replaced
    assert not (out / "_streamacc" / "manifest.json").exists()
    assert_same_output(out, ref)


def test_a_chunk_damaged_behind_its_intact_trailer_is_refused_by_resume_and_named_by_readers(tmp_path, capfd):
    """A byte flipped inside a committed chunk whose CRC-32C trailer (and record) were left as they were: the
    trailer check alone passes, so a resume reads every committed chunk whole before it keeps them, and every
    read names the chunk in one line (zarr's codec said only 'Stored and computed checksum do not match')."""
    out = tmp_path / "out.zarr"
    args = ["--size", "20000", "--block-size", "4096", "--codec", "none", "--no-progress", "--no-summaries"]
    assert main(["write", str(out), *args]) == 0
    chunk = out / "x" / "c" / "2"
    raw = bytearray(chunk.read_bytes())
    raw[100] ^= 0x01
    chunk.write_bytes(bytes(raw))
    before = store_files(out)
    with pytest.raises(streamacc.errors.VerifyError, match=r"^chunk x/c/2 of .* is damaged \(its bytes do not give"):
        streamacc.open(out).x.load()
    code, line = run("verify", out, capfd=capfd)
    assert code == 1 and "chunk x/c/2 do not match their checksum" in line
    code, line = run("write", out, *args, "--resume", capfd=capfd)
    assert code == 2 and "cannot resume" in line and "block 2 " in line and "chunk x/c/2 do not match" in line
    assert store_files(out) == before
    rewind(out, 3, 3 * 4096)  # and an unfinished run, whose resume would keep the block
    root_says(out, 3 * 4096)
    before = store_files(out)
    code, line = run("write", out, *args, "--resume", capfd=capfd)
    assert code == 2 and "block 2 " in line and "chunk x/c/2 do not match" in line
    assert store_files(out) == before
