"""What the tests share: outputs read as files, failures injected through a store, the command line
in-process and as a process, moto's S3 server, and the engine's step functions and cases.

Fixtures are in ``conftest.py``; ``faultrun.py`` is the script that runs the command line under
a fault in a process of its own.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import errno
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import zarr
from zarr.storage import FsspecStore, LocalStore, WrapperStore

# --- outputs as files -------------------------------------------------------------------------

MANIFEST = "_streamacc/zarr.json"
RECORDS = "_streamacc/records_000000/zarr.json"
TEMP_SUFFIXES = (".partial", ".streamacc-tmp")


def unpacked(archive: Path, root: Path) -> Path:
    """``root``, holding the outputs an archive of ``tests/data`` keeps (see ``tests/data/README.md``)."""
    with tarfile.open(archive) as packed:
        packed.extractall(root, filter="data")
    return root


def copier(stored: Path, folder: Path) -> Callable[[str], Path]:
    """A function that copies the output ``name`` of ``stored`` into ``folder``, for a test to change."""

    def make(name: str) -> Path:
        out = folder / name
        shutil.copytree(stored / name, out)
        return out

    return make


def gp(size: int, ratio: float = 1.00000001, x0: float = 1.0, dtype: type = np.float64) -> np.ndarray:
    """The geometric progression's first ``size`` values, by numpy's running product."""
    return np.multiply.accumulate(np.r_[dtype(x0), np.full(size - 1, ratio, dtype=dtype)].astype(dtype))


def node_attribute(path: Path, name: str) -> Any:
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


def rewind(out: Path, blocks: int, steps: int, **changes: Any) -> dict:
    """Make the manifest of ``out`` commit only its first ``blocks`` blocks (``steps`` steps), as a writer killed
    after that commit left it (the records and carries after them stay, as a killed writer's do); the manifest."""
    manifest = read_manifest(out)
    manifest.update(committed_blocks=blocks, committed_steps=steps, complete=False, **changes)
    if "carry" in manifest:  # format 2 (streamacc 1.0 and before): the carry after the committed blocks
        manifest["carry"] = node_attribute(Path(out) / RECORDS, "streamacc_records")[blocks]["carry_in"]
    write_manifest(out, manifest)
    return manifest


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


def listing(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under ``root`` with its mtime and bytes, to prove nothing was touched."""
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes()) for p in root.rglob("*") if p.is_file()}


def tree(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root`` without following links: file bytes, or a link's target."""
    found: dict[str, bytes | str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            found[rel] = f"-> {os.readlink(path)}" if path.is_symlink() else path.read_bytes() if path.is_file() else ""
    return found


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
    assert got.get("carries") == want.get("carries") and got.get("carry") == want.get("carry")
    assert got == want
    got_files, want_files = store_files(out), store_files(ref)
    extra, missing = sorted(set(got_files) - set(want_files)), sorted(set(want_files) - set(got_files))
    assert not extra and not missing, f"files only in {out}: {extra}; only in the uninterrupted run: {missing}"
    differ = [key for key in want_files if got_files[key] != want_files[key]]
    assert not differ, f"files differ from the uninterrupted run: {differ}"
    assert temp_files(out) == []


@contextlib.contextmanager
def held_lock(path: Path) -> Iterator[None]:
    """Hold an output's writer lock (a ``flock`` on its folder) as another live writer would; changes nothing."""
    import fcntl

    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield
    finally:
        os.close(fd)


def committed(out: Path) -> int:
    """Blocks committed so far, -1 while there is no manifest."""
    manifest = read_manifest(out)
    return -1 if manifest is None else manifest["committed_blocks"]


def _plain(leaf: Any) -> np.ndarray:
    if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.extended):
        leaf = jax.random.key_data(leaf)
    return np.asarray(leaf)


def assert_bits_equal(got: Any, want: Any) -> None:
    """Same tree structure and, leaf by leaf, same dtype, shape and bytes (arrays are one-leaf trees)."""
    got_leaves, got_tree = jax.tree_util.tree_flatten(got)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    assert got_tree == want_tree
    for g, w in zip(got_leaves, want_leaves, strict=True):
        assert g.dtype == w.dtype
        g, w = _plain(g), _plain(w)
        assert g.shape == w.shape
        assert g.tobytes() == w.tobytes()


class OnesUntil:
    """An input of ``n`` values, all 1.0, that fails past row ``limit`` ("the input ends here"): a run of any
    length, up to 2**63 - 1, stops after a few blocks, with no array of its length made."""

    def __init__(self, n: int, limit: int) -> None:
        self.shape, self.dtype, self.ndim, self.limit = (n,), np.dtype(np.float64), 1, limit

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        if key.stop > self.limit:
            raise RuntimeError("the input ends here")
        return np.ones(key.stop - key.start)


def made_runs(tmp_path_factory) -> Callable[..., Path]:
    """A getter of uninterrupted runs of the command line's ``write``, one per argument list, each made on first use
    (for a module-scoped fixture: the tests of a module that compare with the same run share it)."""
    from streamacc.cli import main

    runs: dict[tuple[str, ...], Path] = {}

    def get(*args: object) -> Path:
        key = tuple(map(str, args))
        if key not in runs:
            out = tmp_path_factory.mktemp("made") / "out.zarr"
            assert main(["write", str(out), *key]) == 0
            runs[key] = out
        return runs[key]

    return get


class ReadCounting(WrapperStore):
    """A zarr store that records each key's reads: per key, the bytes each read returned (None where the key was
    absent), so ``len(store.reads[key])`` counts its reads and ``store.read_bytes(key)`` sums what they fetched."""

    def __init__(self, store, reads: dict | None = None) -> None:
        super().__init__(store)
        self.reads: dict[str, list[int | None]] = {} if reads is None else reads

    def _with_store(self, store):
        return type(self)(store, self.reads)

    async def get(self, key, prototype, byte_range=None):
        buf = await self._store.get(key, prototype, byte_range)
        self.reads.setdefault(key, []).append(None if buf is None else len(buf))
        return buf

    def read_bytes(self, key: str) -> int:
        return sum(n for n in self.reads.get(key, []) if n is not None)


# --- failures injected through the store ----------------------------------------------------------


class FailingStore(WrapperStore):
    """A zarr store that raises ``exc`` whenever ``key`` is set, as a full disk or a lost connection would.

    Pass it to ``streamacc.write`` in place of the output's path or URL: the run fails at that
    write (a chunk's key fails its block), and the output is then read, resumed or extended at
    its path or URL as any output is.
    """

    def __init__(self, store: Any, key: str = "", exc: BaseException | None = None) -> None:
        super().__init__(store)
        self.key = key
        self.exc = OSError(errno.EIO, "Input/output error") if exc is None else exc

    def _with_store(self, store: Any) -> FailingStore:
        return type(self)(store, self.key, self.exc)

    async def set(self, key: str, value: Any) -> None:
        if key == self.key:
            raise copy.copy(self.exc)
        await self._store.set(key, value)


def failing(where: Path | str, key: str, exc: BaseException | None = None, **storage_options: Any) -> FailingStore:
    """The output at ``where`` (a folder, or a URL with ``storage_options``) failing at the write of ``key``."""
    text = os.fspath(where)
    store = FsspecStore.from_url(text, storage_options=storage_options) if "://" in text else LocalStore(text)
    return FailingStore(store, key, exc)


FAULTRUN = Path(__file__).with_name("faultrun.py")


def faultrun_process(kind: str, at: int, *args: str) -> subprocess.CompletedProcess:
    """Run ``streamacc *args`` in a process of its own under fault ``kind`` (see ``faultrun.py``): faults that kill."""
    return run_warm([sys.executable, FAULTRUN, kind, str(at), *map(str, args)], text=True, timeout=120)


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


@contextlib.contextmanager
def dies_at(n: int, seen: list[str] | None = None) -> Iterator[None]:
    """Within this block, every store write from number ``n`` on fails: the writer died there (see ``faultrun.py``).

    ``seen`` collects what each write was; ``n=0`` lets every write through, to list them.
    """
    from faultrun import dies_at as dying

    with dying(n, seen):
        yield


# --- the command line, in this process and as a process -------------------------------------------

SMALL = ["--size", "5000", "--block-size", "512", "--codec", "none", "--no-progress", "--no-summaries"]
"""10 blocks, the last short; no summaries, whose tail would contradict the interrupted runs tests fake."""


def run(*args: object, capfd: Any) -> tuple[int, str]:
    """Run the command line in-process; return its exit code and its single stderr line."""
    from streamacc.cli import main

    capfd.readouterr()
    code = main([*map(str, args)])
    err = capfd.readouterr().err
    lines = err.splitlines()
    assert code == 0 or (len(lines) == 1 and lines[0].startswith("streamacc: error: ")), err
    return code, err.strip()


def cli(*args: object) -> list[str]:
    """The command line running ``streamacc *args`` (``python -m streamacc ARGS``)."""
    return [sys.executable, "-m", "streamacc", *map(str, args)]


def start_writer(out: Path, args: list[str], *, resume: bool) -> Popen:
    """``streamacc write OUT args [--resume]`` in a process of its own (stderr kept for failure messages)."""
    flags = ["--resume"] if resume else []
    return Popen(cli("write", out, *args, "--no-progress", *flags), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def kill_at(proc: Popen, out: Path, blocks: int | None, delay: float, timeout: float = 120.0) -> bool:
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


def stopped(proc: Popen) -> bool:
    """Whether ``proc`` is stopped (SIGSTOP), from its state in ``/proc`` (False once it has ended)."""
    try:
        return Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except FileNotFoundError:
        return False


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (no longer in ``/proc``, or a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def paused_writer(at: int, *args: str, timeout: float = 120.0) -> Popen:
    """``streamacc *args`` in a process of its own, returned once it has stopped itself (SIGSTOP) at the
    ``at``-th lease check its store writes make (``faultrun.py pause``; on S3 each write checks once
    before it starts and once as its request is sent): a point in the run that does not depend on
    the machine's speed. Continue it with SIGCONT, or SIGKILL it."""
    proc = Popen([sys.executable, FAULTRUN, "pause", str(at), *args], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not stopped(proc):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the writer never stopped: {proc.communicate()[1]}")
        time.sleep(0.01)
    return proc


HEAVY = ("jax", "zarr", "numpy", "xarray", "pandas")
"""What the command line must not import before a command needs it (xarray and pandas: only to read an output as a
Dataset, or to check attributes xarray decodes)."""


def python(code: str, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` with arguments ``argv`` in a fresh interpreter, capturing its output."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *argv], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


_LIGHT = r"""
import json, os, sys, traceback

import streamacc, streamacc.base, streamacc.cli, streamacc.recipes  # the public face, the command line's wings

HEAVY = {heavy!r}
print(json.dumps([m for m in HEAVY if m in sys.modules]), flush=True)
for line in sys.stdin:
    request = json.loads(line)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.chdir(request["cwd"])
        try:
            exec(compile(request["code"], "<string>", "exec"), {{"__name__": "__main__"}})
            found = {{"heavy": [m for m in HEAVY if m in sys.modules]}}
        except BaseException:
            found = {{"error": traceback.format_exc()}}
        os.write(write, json.dumps(found).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        found = answer.read().decode()
    os.waitpid(pid, 0)
    print(found, flush=True)
"""


class _Light:
    """A fresh interpreter that has imported streamacc and the wings its command line starts with, and nothing heavy,
    forking a child per check."""

    def __init__(self) -> None:
        import atexit

        code = textwrap.dedent(_LIGHT).format(heavy=HEAVY)
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=env, text=True)  # fmt: skip
        started = json.loads(self.proc.stdout.readline())
        assert started == [], f"importing streamacc and the command line's wings imported {started}"
        atexit.register(self.close)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)  # waited for: its CPU and its children's count as the tests'


_light: list[_Light] = []


def imported_by(code: str, tmp_path: Path) -> set[str]:
    """Which of ``HEAVY`` an interpreter that has imported only streamacc and the command line (with the wings it
    starts with) has imported after ``code``.

    Each check runs in a child forked from one such interpreter (which checked, as it started, that
    these import nothing heavy): a fresh start for what it imports, without paying
    for the interpreter's start and streamacc's import again.
    """
    if not _light:
        _light.append(_Light())
    server = _light[0].proc
    server.stdin.write(json.dumps({"code": textwrap.dedent(code), "cwd": os.fspath(tmp_path)}) + "\n")
    server.stdin.flush()
    found = json.loads(server.stdout.readline())
    assert "error" not in found, found.get("error")
    return set(found["heavy"])


# --- processes forked from a warm interpreter ---------------------------------------------------
# A writer that a test kills, stops or signals must be a process of its own, but a fresh interpreter
# spends seconds of CPU importing JAX before it does anything, in every test that starts one. As
# multiprocessing's forkserver does, one interpreter imports the libraries once and forks a child for
# each command: a real process with its own pid, stdio, working folder and environment, which runs
# ``python -m MODULE``, ``python SCRIPT`` or ``python -c CODE`` exactly as a fresh interpreter would
# (``__main__``, ``sys.argv``, Ctrl-C as at a terminal, interpreter shutdown) and is killed, stopped
# and signalled as any. Tests of what a fresh interpreter imports, and of the installed entry points,
# still start fresh ones.

_WARM = r"""
import json, os, select, signal, socket, sys

import numpy, jax, jax.numpy, zarr, numcodecs, fsspec, google_crc32c, tqdm  # what every command imports
import streamacc, streamacc.cli, streamacc.engine, streamacc.recipes, streamacc.run, streamacc.store
import streamacc.summaries
from streamacc.run import write  # noqa: the write path, its rooms and wings
import s3fs, distributed  # what commands on S3 and clusters import (no module here starts a thread)

import gc, threading

assert threading.active_count() == 1, "a module started a thread: forking would copy its locks mid-use"
gc.collect()
gc.freeze()  # what the imports made: a child's collector never walks it (nor copies its pages to do so)
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C at the terminal is the test run's, not this server's
listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
listener.bind(sys.argv[1])
listener.listen(64)
print("ready", flush=True)


def serve():
    # returns (request, fds) in a forked child; in the server, returns never
    children = {}
    while True:
        ready, _, _ = select.select([listener, sys.stdin], [], [], 0.02)
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1):  # the tests are over
            for pid in children:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for pid in list(children):
                os.waitpid(pid, 0)
            sys.exit(0)
        if listener in ready:
            conn, _ = listener.accept()
            message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
            pid = os.fork()
            if pid == 0:
                listener.close()
                for other in children.values():
                    other.close()
                conn.close()
                return json.loads(message), fds
            for fd in fds:
                os.close(fd)
            conn.send(str(pid).encode())
            children[pid] = conn
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid)
            try:
                conn.send(str(os.waitstatus_to_exitcode(status)).encode())
            except OSError:
                pass
            conn.close()


request, fds = serve()
for target, fd in zip((0, 1, 2), fds):
    os.dup2(fd, target)
    os.close(fd)
if request["session"]:
    os.setsid()
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.argv = request["argv"]
kind, target = request["kind"], request["target"]
del request, fds, serve, listener
import runpy

if kind == "module":
    sys.path[0] = os.getcwd()
    runpy.run_module(target, run_name="__main__", alter_sys=True)
elif kind == "script":
    sys.path[0] = os.path.dirname(os.path.abspath(target))
    runpy.run_path(target, run_name="__main__")
else:
    import types

    sys.path[0] = ""
    main = sys.modules["__main__"] = types.ModuleType("__main__")
    exec(compile(target, "<string>", "exec"), main.__dict__)
"""


class _Warm:
    """The server that forks warm children, started on first use and ended when the tests end."""

    def __init__(self) -> None:
        import atexit
        import tempfile

        self.folder = tempfile.mkdtemp(prefix="streamacc-warm-")
        self.path = os.path.join(self.folder, "socket")
        self.log = os.path.join(self.folder, "log")
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _WARM, self.path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                text=True,
            )  # fmt: skip
        ready = self.proc.stdout.readline()
        assert ready == "ready\n", f"the warm interpreter did not start: {Path(self.log).read_text()}"
        atexit.register(self.close)

    def close(self) -> None:
        import shutil

        self.proc.stdin.close()  # it kills what is left of its children, waits for them and exits
        self.proc.wait(timeout=60)  # waited for: its CPU and its children's count as the tests'
        shutil.rmtree(self.folder, ignore_errors=True)


_warm: list[_Warm] = []


class Popen:
    """``subprocess.Popen`` for a Python command line (``python -m M``, ``python SCRIPT``, ``python -c CODE``),
    run in a child forked from the warm interpreter; the same attributes and methods tests use."""

    def __init__(
        self,
        args: list[Any],
        *,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        text: bool = False,
        cwd: Path | str | None = None,
        env: dict[str, str] | None = None,
        start_new_session: bool = False,
    ) -> None:
        import socket

        self.args = [os.fspath(a) for a in args]
        assert self.args[0] == sys.executable, self.args
        first = self.args[1]
        if first == "-m":
            kind, target, argv = "module", self.args[2], [self.args[2], *self.args[3:]]
        elif first == "-c":
            kind, target, argv = "code", self.args[2], ["-c", *self.args[3:]]
        else:
            kind, target, argv = "script", first, self.args[1:]
        if not _warm:
            _warm.append(_Warm())
        self.returncode: int | None = None
        self.stdin = None
        keep, send = [], []
        for fd, how, mode in ((0, stdin, "r"), (1, stdout, "w"), (2, stderr, "w")):
            if how is None:
                send.append(fd)
            elif how == subprocess.DEVNULL:
                devnull = os.open(os.devnull, os.O_RDWR)
                send.append(devnull)
                keep.append(devnull)
            elif how == subprocess.PIPE and mode == "w":
                read, write = os.pipe()
                send.append(write)
                keep.append(write)
                stream = open(read, "r" if text else "rb", **({"encoding": "utf-8"} if text else {}))  # noqa: SIM115
                setattr(self, "stdout" if fd == 1 else "stderr", stream)
            elif how == subprocess.STDOUT:
                send.append(send[1])
            else:
                send.append(how.fileno() if hasattr(how, "fileno") else how)
        self.stdout = getattr(self, "stdout", None)
        self.stderr = getattr(self, "stderr", None)
        request = {
            "kind": kind, "target": target, "argv": argv, "cwd": os.fspath(cwd or os.getcwd()),
            "env": dict(os.environ if env is None else env), "session": start_new_session,
        }  # fmt: skip
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._conn.connect(_warm[0].path)
        socket.send_fds(self._conn, [json.dumps(request).encode()], send)
        for fd in keep:
            os.close(fd)
        self.pid = int(self._conn.recv(64))

    def poll(self) -> int | None:
        if self.returncode is None:
            self._conn.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                self._status(self._conn.recv(64))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._conn.settimeout(timeout)
            try:
                self._status(self._conn.recv(64))
            except TimeoutError:
                raise subprocess.TimeoutExpired(self.args, timeout) from None
        return self.returncode

    def _status(self, raw: bytes) -> None:
        self.returncode = int(raw)
        self._conn.close()

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        import selectors

        assert input is None
        deadline = None if timeout is None else time.monotonic() + timeout
        streams = [s for s in (self.stdout, self.stderr) if s is not None and not s.closed]
        chunks: dict[Any, list[bytes]] = {s: [] for s in streams}
        with selectors.DefaultSelector() as selector:
            for stream in streams:
                selector.register(stream.fileno(), selectors.EVENT_READ, stream)
            while selector.get_map():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout)
                for key, _ in selector.select(left):
                    data = os.read(key.fd, 1 << 16)
                    if data:
                        chunks[key.data].append(data)
                    else:
                        selector.unregister(key.fd)
        found = []
        for stream in (self.stdout, self.stderr):
            if stream is None:
                found.append(None)
                continue
            raw = b"".join(chunks.get(stream, []))
            found.append(raw.decode() if isinstance(stream, io.TextIOBase) else raw)
            stream.close()
        self.wait(None if deadline is None else max(deadline - time.monotonic(), 0.001))
        return found[0], found[1]

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def __enter__(self) -> Popen:
        return self

    def __exit__(self, *exc: object) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.close()
        self.wait()


def run_warm(args: list[Any], *, timeout: float | None = None, check: bool = False, **kwargs: Any):
    """``subprocess.run(args, capture_output=True, ...)`` for a Python command line, in a warm child."""
    proc = Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, args, out, err)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


# --- moto's S3 server -------------------------------------------------------------------------
# Tests talk to it through s3fs and zarr exactly as a user talks to AWS: only the endpoint
# differs, and it is passed the way a user passes it (``storage_options={"endpoint_url": ...}``,
# ``--storage-option endpoint_url=...``), never through a process-wide setting, so a code path that
# forgets to forward storage options fails here as it would for a user. Dummy credentials go into
# the environment, where botocore looks for them first, and so reach subprocesses too.

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
"""Environment for every test process: dummy keys, and no profile or metadata service."""

CLEARED = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")
"""Variables that would route requests elsewhere or sign them with someone's real session."""

S3_SMALL = ["--size", "6000", "--block-size", "512", "--no-progress"]
"""12 blocks, with summaries."""

S3_BIG = ["--size", "2**19", "--block-size", "2**13", "--codec", "none", "--no-progress"]
"""64 blocks."""


@dataclasses.dataclass(frozen=True)
class S3Server:
    """A running moto S3 server."""

    endpoint: str
    """``http://127.0.0.1:PORT``."""

    @property
    def storage_options(self) -> dict[str, Any]:
        """What a user passes to reach this endpoint (s3fs keyword arguments)."""
        return {"endpoint_url": self.endpoint}

    def fs(self) -> Any:
        """A synchronous s3fs filesystem on this endpoint (fsspec caches one per endpoint)."""
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options)


@dataclasses.dataclass(frozen=True)
class Bucket:
    """A fresh, empty bucket on the test server."""

    name: str
    server: S3Server

    @property
    def storage_options(self) -> dict[str, Any]:
        return self.server.storage_options

    def url(self, key: str = "out.zarr") -> str:
        """``s3://bucket/key``."""
        return f"s3://{self.name}/{key}"

    def keys(self) -> list[str]:
        """Every key stored in the bucket, relative to it, sorted."""
        fs = self.server.fs()
        fs.invalidate_cache()
        return sorted(path.split("/", 1)[1] for path in fs.find(self.name))


def start_server() -> tuple[Any, S3Server]:
    """Start a moto server on a free loopback port; return it and its description."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access-log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, S3Server(f"http://{host}:{port}")


def new_bucket(server: S3Server) -> Bucket:
    """A new, empty bucket on ``server``."""
    bucket = Bucket(f"test-{uuid.uuid4().hex[:16]}", server)
    server.fs().mkdir(bucket.name)
    return bucket


def etags(bucket: Bucket, key: str) -> dict[str, tuple[str, int]]:
    """Every object under ``key``, relative to it, with its ETag (its bytes' MD5) and size: one listing request."""
    fs = bucket.server.fs()
    fs.invalidate_cache()
    root = f"{bucket.name}/{key}"
    return {path[len(root) + 1 :]: (info["ETag"], info["size"]) for path, info in fs.find(root, detail=True).items()}


def assert_same_objects(bucket: Bucket, key: str, local: Path) -> None:
    """The S3 output at ``key`` holds exactly the files of the local output ``local`` (a lease aside), byte for
    byte: the objects' ETags (their MD5s, from one listing) are the files' MD5s."""
    import hashlib

    remote = {k: etag.strip('"') for k, (etag, _) in etags(bucket, key).items() if k != "_streamacc/lease/zarr.json"}
    assert remote == {k: hashlib.md5(data).hexdigest() for k, data in store_files(local).items()}


def s3_args(bucket: Bucket) -> list[str]:
    """The command line's options that reach ``bucket``'s server."""
    return ["--storage-option", f"endpoint_url={bucket.server.endpoint}"]


def remote_committed(bucket: Bucket, key: str) -> int:
    """Blocks the output at ``key`` has committed, -1 while it has no manifest."""
    try:
        raw = bucket.server.fs().cat_file(f"{bucket.name}/{key}/{MANIFEST}")
    except FileNotFoundError:
        return -1
    return json.loads(json.loads(raw)["attributes"]["streamacc_manifest"])["committed_blocks"]


@contextlib.contextmanager
def stripping_proxy(
    endpoint: str, strip: tuple[str, ...] = ("if-match", "if-none-match"), seen: list[str] | None = None
) -> Iterator[str]:
    """An HTTP proxy on 127.0.0.1 in front of ``endpoint`` that drops the ``strip`` request headers.

    It plays an S3-compatible store that ignores conditional writes. Yields its endpoint URL.
    Each request's method is appended to ``seen``, if given, to count what a command asks.
    """
    import http.client
    import http.server
    import threading
    from urllib.parse import urlsplit

    target = urlsplit(endpoint)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            if seen is not None:
                seen.append(self.command)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            drop = {*strip, "expect", "host", "connection"}
            headers = {k: v for k, v in self.headers.items() if k.lower() not in drop}
            upstream = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
            try:
                upstream.request(self.command, self.path, body=body, headers=headers)
                reply = upstream.getresponse()
                data = reply.read()
            finally:
                upstream.close()
            self.send_response(reply.status)
            for key, value in reply.getheaders():
                if key.lower() not in ("content-length", "connection", "transfer-encoding", "server", "date"):
                    self.send_header(key, value)
            head = self.command == "HEAD"
            self.send_header("Content-Length", reply.getheader("Content-Length", "0") if head else str(len(data)))
            self.end_headers()
            if not head:
                self.wfile.write(data)

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


# --- the engine's step functions and cases ------------------------------------------------------
# At module level, so that the engine's compile cache is shared between the tests that use them.

MAX_LEN = 300
DATA = np.random.default_rng(20240611).normal(size=(MAX_LEN, 2))


def product_step(c, _):
    return c * 1.0000001, c


def affine_sin_step(c, x):
    return 0.9 * c + jnp.sin(x), c


def logistic_step(c, _):
    return 3.9 * c * (1.0 - c), c


def tree_step(carry, _):
    n, acc = carry["n"], carry["acc"]
    new_acc = (acc[0] * 1.01 + n.astype(jnp.float64), acc[1] - 0.5 * acc[0])
    return {"n": n + 1, "acc": new_acc}, (n, {"sum": acc[0] + acc[1], "both": jnp.stack(acc)})


def key_step(key, _):
    key, sub = jax.random.split(key)
    return key, jax.random.normal(sub, dtype=jnp.float64)


def count_step(c, _):
    """Emits the carry it receives, so ys and carries reveal the order of the steps."""
    return c + 1, c


@dataclasses.dataclass(frozen=True)
class Case:
    """A step function, its init and a source for xs."""

    name: str
    f: Callable
    init: Callable[[], Any]
    xs: Callable[[int, Any], Any] | None = None  # (length, tmp dir) -> xs

    def make(self, length: int, tmp: Any) -> tuple[Any, Any, dict]:
        """(init, xs, extra kwargs) for a scan of ``length`` steps."""
        if self.xs is None:
            return self.init(), None, {"length": length}
        return self.init(), self.xs(length, tmp), {}


def _zarr_xs(length: int, tmp: Any) -> Any:
    arr = zarr.create_array(store=str(tmp / f"{uuid.uuid4().hex}.zarr"), shape=(length, 2), chunks=(64, 2), dtype="f8")
    arr[...] = DATA[:length]
    return arr


def _memmap_xs(length: int, tmp: Any) -> Any:
    mm = np.memmap(tmp / f"{uuid.uuid4().hex}.f8", dtype=np.float64, mode="w+", shape=(max(length, 1),))
    mm[:length] = DATA[:length, 0]
    mm.flush()
    return mm[:length]


CASES = [
    Case("product", product_step, lambda: np.float64(1.0)),
    Case("affine_sin_numpy", affine_sin_step, lambda: np.float64(0.5), lambda n, _: DATA[:n, 0].copy()),
    Case("logistic", logistic_step, lambda: np.float64(0.3)),
    Case("pytree", tree_step, lambda: {"n": np.int64(3), "acc": (np.float64(1.0), np.float64(-2.0))}),
    Case("prng_key", key_step, lambda: jax.random.key(7)),
    Case("affine_sin_zarr", affine_sin_step, lambda: np.array([0.5, -0.25]), _zarr_xs),
    Case("affine_sin_memmap", affine_sin_step, lambda: np.float64(0.5), _memmap_xs),
    Case("affine_sin_jax", affine_sin_step, lambda: np.float64(0.5), lambda n, _: jnp.asarray(DATA[:n, 0])),
]
UNROLL_CASES = [c for c in CASES if c.name in ("product", "affine_sin_numpy", "logistic", "pytree")]
