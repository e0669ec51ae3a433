"""Shared helpers of the crash, fault and resume tests: store snapshots, comparisons, killing a writer."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import zarr

FAULTRUN = Path(__file__).with_name("faultrun.py")
TEMP_SUFFIXES = (".partial", ".streamacc-tmp")
MANIFEST = "_streamacc/zarr.json"
RECORDS = "_streamacc/records_000000/zarr.json"


def fail_write_at(monkeypatch, start: int, exc: BaseException) -> None:
    """Make the write of the block starting at step ``start`` raise ``exc`` (in its writer thread)."""
    from streamacc.store._zarr import ZarrSink

    real = ZarrSink.write

    def write(self, block_start, stop, ys):
        if block_start == start:
            raise exc
        return real(self, block_start, stop, ys)

    monkeypatch.setattr(ZarrSink, "write", write)


def cli(*args: str) -> list[str]:
    """The command line running ``streamacc *args`` in a fresh interpreter."""
    return [sys.executable, "-m", "streamacc", *map(str, args)]


def stopped(proc: subprocess.Popen) -> bool:
    """Whether ``proc`` is stopped (SIGSTOP), from its state in ``/proc``."""
    return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def paused_writer(at: int, *args: str, timeout: float = 120.0) -> subprocess.Popen:
    """``streamacc *args`` in a fresh interpreter, returned once it has stopped itself (SIGSTOP) at the
    ``at``-th lease check its store writes make (``faultrun.py pause``; on S3 each write checks once
    before it starts and once as its request is sent): a point in the run that does not depend on
    the machine's speed. Continue it with SIGCONT, or SIGKILL it."""
    proc = subprocess.Popen([sys.executable, str(FAULTRUN), "pause", str(at), *args], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not stopped(proc):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the writer never stopped: {proc.communicate()[1]}")
        time.sleep(0.01)
    return proc


def node_attribute(path: Path, name: str):
    """Attribute ``name`` of the Zarr v3 node whose metadata document is ``path``, parsed from its JSON text."""
    return json.loads(json.loads(Path(path).read_bytes())["attributes"][name])


def read_manifest(out: Path) -> dict | None:
    """The manifest of ``out`` as JSON, or None while there is none (it is replaced atomically)."""
    try:
        return node_attribute(Path(out) / MANIFEST, "streamacc_manifest")
    except FileNotFoundError:
        return None


def write_manifest(out: Path, manifest: dict) -> None:
    """Replace the manifest of ``out`` (to damage it on purpose)."""
    path = Path(out) / MANIFEST
    doc = json.loads(path.read_bytes())
    doc["attributes"]["streamacc_manifest"] = json.dumps(manifest)
    path.write_text(json.dumps(doc))


def root_says(out: Path, committed: int, start: int = 0) -> None:
    """Set the root's progress attributes as an unfinished writer's last refresh left them (to fake a kill)."""
    path = Path(out) / "zarr.json"
    doc = json.loads(path.read_bytes())
    doc["attributes"].update(streamacc_complete=0, streamacc_committed_steps=committed, streamacc_committed_start=start)
    path.write_text(json.dumps(doc))


def store_files(out: Path) -> dict[str, bytes]:
    """Every file of an output and its bytes."""
    root = Path(out)
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def temp_files(out: Path) -> list[str]:
    """Temp files a writer left behind (zarr's ``*.partial``, streamacc's ``*.streamacc-tmp``)."""
    return sorted(str(p) for p in Path(out).rglob("*") if p.name.endswith(TEMP_SUFFIXES))


def array_bytes(out: Path) -> dict[str, bytes]:
    """Each array of an output, read through zarr, as raw bytes."""
    group = zarr.open_group(str(out), mode="r")
    return {name: np.ascontiguousarray(arr[...]).tobytes() for name, arr in group.arrays()}


def assert_same_output(out: Path, ref: Path) -> None:
    """``out`` holds exactly what the uninterrupted run ``ref`` holds: arrays, manifest, every file."""
    assert array_bytes(out) == array_bytes(ref)
    got, want = read_manifest(out), read_manifest(ref)
    assert got["complete"] and want["complete"]
    assert got["carry"] == want["carry"]
    assert got == want
    got_files, want_files = store_files(out), store_files(ref)
    extra, missing = sorted(set(got_files) - set(want_files)), sorted(set(want_files) - set(got_files))
    assert not extra and not missing, f"files only in {out}: {extra}; only in the uninterrupted run: {missing}"
    differ = [key for key in want_files if got_files[key] != want_files[key]]
    assert not differ, f"files differ from the uninterrupted run: {differ}"
    assert temp_files(out) == []


def committed(out: Path) -> int:
    """Blocks committed so far, -1 while there is no manifest."""
    manifest = read_manifest(out)
    return -1 if manifest is None else manifest["committed_blocks"]


def kill_at(proc: subprocess.Popen, out: Path, blocks: int | None, delay: float, timeout: float = 120.0) -> bool:
    """SIGKILL ``proc`` ``delay`` seconds after ``out`` counts ``blocks`` committed blocks.

    With ``blocks=None`` the delay runs from the moment the writer creates the output
    folder to lock it, before its first manifest. Returns True when the process died by the signal, False when it
    finished first.
    """
    deadline = time.monotonic() + timeout

    def waiting() -> bool:
        return not Path(out).exists() if blocks is None else committed(out) < blocks

    try:
        while proc.poll() is None and waiting():
            if time.monotonic() > deadline:
                raise AssertionError(f"{out} never reached {blocks} committed blocks")
            time.sleep(0.002)
        time.sleep(delay)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None and time.monotonic() > deadline:
            proc.kill()
        proc.wait(timeout=60)
    return proc.returncode == -signal.SIGKILL


def start_writer(out: Path, args: list[str], *, resume: bool) -> subprocess.Popen:
    """``streamacc write OUT args [--resume]`` in a subprocess (stderr kept for failure messages)."""
    flags = ["--resume"] if resume else []
    return subprocess.Popen(
        cli("write", out, *args, "--no-progress", *flags), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def faultrun_process(kind: str, at: int, *args: str) -> subprocess.CompletedProcess:
    """Run ``streamacc *args`` in a fresh process under fault ``kind`` (see ``faultrun.py``): for faults that kill."""
    return subprocess.run(
        [sys.executable, str(FAULTRUN), kind, str(at), *map(str, args)], capture_output=True, text=True, timeout=120
    )


def faultrun(kind: str, at: int, *args: str) -> SimpleNamespace:
    """Run ``streamacc *args`` in this process with a full disk injected at write number ``at`` of ``kind``.

    Returns what a finished process would: ``returncode`` and ``stderr``.
    """
    from faultrun import full_disk

    from streamacc.cli import main

    err = io.StringIO()
    with full_disk(kind, at), contextlib.redirect_stderr(err):
        code = main([*map(str, args)])
    return SimpleNamespace(returncode=code, stderr=err.getvalue())
