"""Crash safety with real processes: SIGKILL, a full disk, corruption, damaged bookkeeping, the lock.

Writers run as ``python -m streamacc write`` subprocesses and are killed with SIGKILL
at seeded points: after a seeded number of committed blocks (read from the manifest
as the writer replaces it) plus a seeded delay, so kills land anywhere in a block's
write-and-commit cycle, including before the first block and in a resumed run. Every
interrupted output is finished with ``--resume`` and must equal, file for file, an
uninterrupted run, and pass ``streamacc verify``. Resumes, references and checks run
in-process through ``streamacc.cli.main`` to save interpreter start-ups.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    MANIFEST,
    RECORDS,
    assert_same_output,
    committed,
    dies_at,
    faultrun,
    faultrun_process,
    held_lock,
    kill_at,
    read_manifest,
    start_writer,
    store_files,
    temp_files,
)

import streamacc
from streamacc.cli import main
from streamacc.errors import LockedError, ResumeError
from streamacc.recipes import get_recipe

BIG = ["--size", "2**20", "--block-size", "2**14", "--codec", "none"]  # 64 blocks, ~1 s of writing
BIG_LZ4 = ["--size", "2**19", "--block-size", "2**13", "--codec", "blosc-lz4"]  # 64 blocks
SMALL = ["--size", "20000", "--block-size", "512", "--codec", "none"]  # 40 blocks, the last one short
SMALL_BLOCKS = 40


def cli(*args, capsys=None) -> tuple[int, list[str]]:
    """Run the command line in-process; return its exit code and its stderr lines (stdout in ``cli.out``)."""
    if capsys is not None:
        capsys.readouterr()
    code = main([*map(str, args)])
    captured = None if capsys is None else capsys.readouterr()
    cli.out = "" if captured is None else captured.out
    return code, [] if captured is None else captured.err.splitlines()


def one_error_line(err: list[str]) -> str:
    assert len(err) == 1, err
    assert err[0].startswith("streamacc: error: ") and "Traceback" not in err[0]
    return err[0]


@pytest.fixture(scope="module")
def refs(tmp_path_factory):
    """Uninterrupted runs, one per argument list, made on first use."""
    made: dict[tuple, object] = {}

    def get(args: list[str]):
        key = tuple(args)
        if key not in made:
            out = tmp_path_factory.mktemp("ref") / "out.zarr"
            assert main(["write", str(out), *args, "--no-progress"]) == 0
            made[key] = out
        return made[key]

    return get


# --- SIGKILL ----------------------------------------------------------------------------


def kill_chain(out, args: list[str], total: int, seed: int, kills: int) -> int:
    """Kill ``kills`` writers of ``out`` in a row (a fresh run, then resumes) at seeded points."""
    rng = np.random.default_rng(seed)
    killed = 0
    for attempt in range(kills):
        done = committed(out)
        if done < 0 and seed % 2:  # the fresh run, from its lock on: creating the output, first blocks
            target, delay = None, float(rng.uniform(0, 0.15))
        elif done < 0:  # the fresh run, from its first manifest on
            target, delay = int(rng.integers(0, total // 2)), float(rng.uniform(0, 0.01))
        else:
            target, delay = min(done + 1 + int(rng.integers(0, (total - done) // 2)), total - 8), rng.uniform(0, 0.01)
        proc = start_writer(out, args, resume=attempt > 0)
        if kill_at(proc, out, target, delay=float(delay)):
            killed += 1
            assert committed(out) < total
        else:  # finished before the kill landed: the chain is over
            assert proc.returncode == 0, proc.stderr.read().decode()
            break
    return killed


@pytest.mark.slow
@pytest.mark.parametrize(("seed", "args"), [(0, BIG_LZ4), (1, BIG)], ids=["blosc-lz4", "none"])
def test_sigkill_then_resume_is_identical(tmp_path, refs, seed, args):
    """2 seeds (a fresh run killed after, then before, its first manifest) x 3 kills, then a final resume;
    compressed chunks (blosc-lz4) and raw ones are rewritten identically."""
    out = tmp_path / "out.zarr"
    killed = kill_chain(out, args, 64, seed, kills=3)
    assert killed >= 1
    assert cli("write", out, *args, "--no-progress", "--resume")[0] == 0
    assert temp_files(out) == []
    assert_same_output(out, refs(args))
    assert cli("verify", out)[0] == 0


@pytest.mark.slow
@pytest.mark.parametrize("virtual", [False, True], ids=["stored", "virtual"])
def test_sigkill_before_the_first_commit_then_resume_starts_the_run(tmp_path, refs, capsys, virtual):
    """SIGKILLed after its array documents, after the manifest that records them, and at the manifest that would
    commit block 0: ``--resume`` starts the run and ends as one never interrupted."""
    args = ["--size", "5000", *SMALL[2:], "--no-progress", *(["--virtual"] if virtual else [])]
    writes: list[str] = []
    with dies_at(0, writes):
        assert cli("write", tmp_path / "dry" / "out.zarr", *args)[0] == 0
    made = writes.index(f"{'write' if virtual else 'set'} x/zarr.json") + 2  # after the array's document
    recorded = writes.index("write _streamacc/zarr.json", 1) + 2  # after the manifest with the arrays' metadata
    first_commit = writes.index("write records_000000/zarr.json") + 2  # at the manifest counting block 0
    for at in (made, recorded, first_commit):
        out = tmp_path / str(at) / "out.zarr"
        proc = faultrun_process("die", at, "write", out, *args)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        assert read_manifest(out)["committed_blocks"] == 0
        code, err = cli("write", out, *args, "--resume", capsys=capsys)
        assert (code, err) == (0, []), (at, writes[at - 1])
        assert store_files(out) == store_files(refs(args)), (at, writes[at - 1])
        assert temp_files(out) == []


# --- the lock ---------------------------------------------------------------------------


def test_live_writer_blocks_a_second_one_and_its_stale_lock_does_not(tmp_path, refs, capsys):
    out = tmp_path / "out.zarr"
    proc = start_writer(out, BIG, resume=False)
    try:
        while committed(out) < 1:
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.002)
        proc.send_signal(signal.SIGSTOP)  # alive and holding the lock however busy the machine: it cannot finish
        assert proc.poll() is None, proc.stderr.read().decode()
        for flag in ("--resume", "--overwrite"):
            code, err = cli("write", out, *BIG, "--no-progress", flag, capsys=capsys)
            assert code == 1
            assert f"being written by pid {proc.pid}" in one_error_line(err)
        job = get_recipe("gp").build(2**20, "float64")
        with pytest.raises(LockedError, match="mode='resume'"):
            streamacc.write(str(out), job.f, job.init, length=job.length, block_size=2**14, mode="resume")
        assert proc.poll() is None  # the refused writers did not disturb the live one
    finally:
        assert kill_at(proc, out, 0, delay=0.0)  # one more kill point: mid-run, holding the lock
    assert 1 <= committed(out) < 64
    assert cli("write", out, *BIG, "--no-progress", "--resume")[0] == 0
    assert_same_output(out, refs(BIG))


def test_lock_held_in_process(tmp_path, refs, capsys, caplog):
    out = tmp_path / "out.zarr"
    shutil.copytree(refs(SMALL), out)
    before = store_files(out)
    with held_lock(out):
        for flag in ("--resume", "--overwrite"):
            code, err = cli("write", out, *SMALL, "--no-progress", flag, capsys=capsys)
            line = one_error_line(err)
            assert code == 1 and f"is being written by pid {os.getpid()}" in line and line.endswith(f"with {flag}")
        job = get_recipe("gp").build(20000, "float64")
        with pytest.raises(LockedError, match=r"mode='overwrite'$"):
            streamacc.write(str(out), job.f, job.init, length=job.length, block_size=512, mode="overwrite")
    assert store_files(out) == before  # --overwrite deleted nothing while locked out
    caplog.set_level("INFO", logger="streamacc")
    assert cli("write", out, *SMALL, "--no-progress", "--resume")[0] == 0
    assert "already complete" in caplog.text
    assert store_files(out) == before


# --- a full disk ------------------------------------------------------------------------

CHUNK_FAULTS = sorted(int(n) for n in np.random.default_rng(7).choice(np.arange(1, SMALL_BLOCKS + 1), 4, False))
MANIFEST_FAULTS = [int(np.random.default_rng(8).integers(3, SMALL_BLOCKS + 3)), SMALL_BLOCKS + 3]
"""Manifest writes 1 and 2 create the run, write k + 3 commits block k, the last marks it complete."""


def check_full_disk_failure(proc, out) -> str:
    assert proc.returncode == 1, proc.stderr
    line = one_error_line(proc.stderr.splitlines())
    assert "No space left on device" in line and "--resume" in line
    manifest = read_manifest(out)
    if manifest is not None:  # the message counts exactly the steps the manifest commits
        assert f"after {manifest['committed_steps']} of 20000 steps" in line
    return line


@pytest.mark.parametrize("at", CHUNK_FAULTS)
def test_full_disk_at_a_chunk_then_resume(tmp_path, refs, capsys, at):
    out = tmp_path / "out.zarr"
    proc = faultrun("chunk", at, "write", out, *SMALL, "--no-progress")
    check_full_disk_failure(proc, out)
    assert 0 <= committed(out) < SMALL_BLOCKS
    code, _ = cli("info", out, capsys=capsys)
    assert code == 0 and f"{committed(out) * 512} of 20000 steps committed, incomplete" in cli.out
    assert cli("verify", out)[0] == 0  # what is committed is sound
    assert cli("write", out, *SMALL, "--no-progress", "--resume")[0] == 0
    assert_same_output(out, refs(SMALL))


@pytest.mark.parametrize("at", MANIFEST_FAULTS)
def test_full_disk_at_the_manifest_then_resume(tmp_path, refs, at):
    out = tmp_path / "out.zarr"
    proc = faultrun("manifest", at, "write", out, *SMALL, "--no-progress")
    line = check_full_disk_failure(proc, out)
    assert temp_files(out) == []  # the half-written manifest was cleaned up
    manifest = read_manifest(out)
    assert manifest["committed_blocks"] == min(at - 3, SMALL_BLOCKS) and not manifest["complete"]
    assert f"after {manifest['committed_steps']} of 20000 steps" in line
    assert cli("write", out, *SMALL, "--no-progress", "--resume")[0] == 0
    assert_same_output(out, refs(SMALL))


def test_atomic_write_that_fails_keeps_the_old_file_and_no_temp(tmp_path, monkeypatch):
    """A local folder's fsync is the system's: no store wrapper reaches it, so the system call itself fails."""
    from streamacc.store import atomic_write

    path = tmp_path / "manifest.json"
    path.write_bytes(b"old")

    def fsync(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", fsync)
        with pytest.raises(OSError, match="No space left"):
            atomic_write(path, b"new")
    assert path.read_bytes() == b"old" and list(tmp_path.iterdir()) == [path]


# --- corruption and damaged bookkeeping -------------------------------------------------


@pytest.fixture
def small(tmp_path, refs):
    """A copy of a finished output, to damage."""
    out = tmp_path / "out.zarr"
    shutil.copytree(refs(SMALL), out)
    return out


@pytest.mark.parametrize("block", [0, 17, SMALL_BLOCKS - 1])
def test_flipped_bytes_in_a_chunk_are_named(small, capsys, block):
    chunk = small / "x" / "c" / str(block)
    data = bytearray(chunk.read_bytes())
    data[8 * 13 + 5] ^= 0x10  # inside step 13 of the block (the last block holds only 32 steps)
    chunk.write_bytes(bytes(data))
    code, err = cli("verify", small, capsys=capsys)
    line = one_error_line(err)
    assert code == 1 and f"block {block} (steps {block * 512}-" in line and "checksum" in line
    assert cli("verify", small, "--blocks", "1")[0] == (1 if block == 0 else 0)  # only block 0 checked


def test_undecodable_compressed_chunk_is_named(tmp_path, refs, capsys):
    out = tmp_path / "out.zarr"
    args = [*SMALL[:-1], "blosc-lz4"]
    shutil.copytree(refs(args), out)
    chunk = out / "x" / "c" / "9"
    data = bytearray(chunk.read_bytes())
    data[16:48] = bytes(32)
    chunk.write_bytes(bytes(data))
    code, err = cli("verify", out, capsys=capsys)
    assert code == 1 and "block 9 " in one_error_line(err)


def test_missing_chunk_is_named(small, capsys):
    (small / "x" / "c" / "23").unlink()
    code, err = cli("verify", small, capsys=capsys)
    line = one_error_line(err)
    assert code == 1 and "block 23 " in line and "missing" in line


def test_truncated_manifest_fails_cleanly(small, capsys):
    manifest = small / MANIFEST
    raw = manifest.read_bytes()
    manifest.write_bytes(raw[: len(raw) // 2])
    for args in (["info", small], ["verify", small], ["write", small, *SMALL, "--no-progress", "--resume"]):
        code, err = cli(*args, capsys=capsys)
        assert code in (1, 2) and "manifest" in one_error_line(err), (args, err)
    assert manifest.read_bytes() == raw[: len(raw) // 2]  # nothing was rewritten


def test_damaged_block_records_fail_cleanly(small, capsys):
    segment = small / RECORDS
    segment.write_bytes(segment.read_bytes()[:1000])
    code, err = cli("verify", small, capsys=capsys)
    assert code == 1 and "block records" in one_error_line(err)


def test_manifest_of_another_run_is_caught(small, refs, capsys):
    other = [*SMALL, "--ratio", "1.5"]
    shutil.copyfile(refs(other) / MANIFEST, small / MANIFEST)
    code, err = cli("verify", small, capsys=capsys)
    line = one_error_line(err)
    assert code == 1 and "block 0 " in line and "does not recompute" in line
    code, err = cli("write", small, *SMALL, "--ratio", "1.00000001", "--no-progress", "--resume", capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and "cannot resume" in line and "params.ratio: stored 1.5, now 1.00000001" in line
    # the options left out are the manifest's (ratio 1.5): its blocks are not the stored ones
    code, err = cli("write", small, *SMALL, "--no-progress", "--resume", capsys=capsys)
    line = one_error_line(err)
    assert code == 2 and "cannot resume: block 39 (steps 19968-20000)" in line and "does not recompute" in line
    job = get_recipe("gp").build(20000, "float64")
    with pytest.raises(ResumeError, match=r"params\.ratio"):
        streamacc.write(
            str(small), job.f, job.init, length=20000, block_size=512, codec="none", attrs=job.attrs, mode="resume"
        )


def test_the_chaos_script_starts_and_takes_its_options():
    """``tests/chaos.py`` runs the adversarial categories with many more trials, by hand: it still starts."""
    chaos = Path(__file__).with_name("chaos.py")
    proc = subprocess.run([sys.executable, str(chaos), "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert all(option in proc.stdout for option in ("--only", "--trials", "--seed", "--json"))
    assert "{kills,s3,tamper,signals,deletions}" in proc.stdout
