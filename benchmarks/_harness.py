"""What every scenario of the harness measures: a command in a fresh child process, and the machine it ran on.

Each side of a scenario runs as its own process under GNU time (``/usr/bin/time -v``),
started from an empty folder with ``PYTHONPATH`` set to the checkout it measures, so that
its wall time, user and system CPU, page faults and peak RSS are its own, not the
harness's (``RUSAGE_CHILDREN`` would count the parent's memory at fork). The 1-minute
load average is recorded as each side starts: on a shared 2-core machine it moves every
figure, which is why the sides of a scenario alternate within each round.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from _machine import load
from _timing import time_command

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = ("streamacc", "jax", "jaxlib", "numpy", "zarr", "numcodecs", "ml_dtypes", "dask", "xarray",
            "pytest-benchmark")  # fmt: skip

__all__ = ["ROOT", "chunk_digest", "disk_bytes", "drop_cache", "load", "machine", "medians", "run", "shown", "versions"]


@functools.cache
def neutral() -> Path:
    """An empty folder the sides start in: ``python -m`` puts the working folder first on ``sys.path``."""
    return Path(tempfile.mkdtemp(prefix="streamacc-bench-cwd-"))


def versions(root: Path = ROOT) -> dict[str, str]:
    """Python's and the libraries' versions; streamacc's is the measured checkout's, with its commit."""
    out = {"python": platform.python_version()}
    for name in VERSIONS:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    text = (root / "streamacc" / "_version.py").read_text()
    if "__version__" in text:
        out["streamacc"] = text.split("__version__", 1)[1].split('"')[1]
    return out


def git(root: Path = ROOT) -> dict[str, Any]:
    """The measured checkout's commit (``dirty`` when its tracked files differ from it)."""

    def out(*args: str) -> str:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20)
            return done.stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"id": out("rev-parse", "HEAD") or "unknown", "time": out("show", "-s", "--format=%cI") or None,
            "author_time": out("show", "-s", "--format=%aI") or None,
            "dirty": bool(out("status", "--porcelain", "--untracked-files=no")),
            "project": "streamacc", "branch": out("rev-parse", "--abbrev-ref", "HEAD") or None}  # fmt: skip


def machine() -> dict[str, Any]:
    """Cores, memory and processor of this machine."""
    mem_kib = 0
    model = platform.processor() or platform.machine()
    try:
        mem_kib = int(next(line for line in Path("/proc/meminfo").read_text().splitlines()
                           if line.startswith("MemTotal")).split()[1])  # fmt: skip
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), model)  # fmt: skip
    except (OSError, StopIteration):
        pass
    return {"cores": os.cpu_count() or 1, "memory_gib": round(mem_kib / 2**20, 1), "cpu_model": model,
            "python_version": platform.python_version()}  # fmt: skip


def shown(cmd: Iterable[Any], *folders: Path) -> str:
    """``cmd`` as a reader would type it: ``python`` for this interpreter, ``DIR`` for the scratch folders."""
    text = shlex.join(str(c) for c in cmd).replace(sys.executable, "python")
    for folder in folders:
        text = text.replace(str(folder), "DIR")
    return text.replace(str(ROOT) + "/", "")


def run(cmd: list[Any], side: str, *, root: Path = ROOT, env: dict[str, str] | None = None,
        timeout: float = 4 * 3600, **extra: Any) -> dict[str, Any]:  # fmt: skip
    """``cmd`` in its own process under GNU time, with ``PYTHONPATH=root``: one row of the scenario's runs.

    The last line the command printed that is a JSON object is merged into the row (a
    side that times part of its work reports it so).
    """
    before = load()
    environ = {"PYTHONPATH": str(root), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"), **(env or {})}
    r = time_command([str(c) for c in cmd], env=environ, cwd=neutral(), timeout=timeout)
    if r["returncode"]:
        raise RuntimeError(f"{side} failed with exit {r['returncode']}: {shlex.join(map(str, cmd))}\n{r['stderr']}")
    row: dict[str, Any] = {
        "side": side,
        **extra,
        "wall s": r["wall_s"],
        "user s": r["user_s"],
        "system s": r["sys_s"],
        "CPU s": round(r["user_s"] + r["sys_s"], 2),
        "minor faults": r["minor_faults"],
        "major faults": r["major_faults"],
        "peak RSS MB": round(r["max_rss_kib"] * 1024 / 1e6, 1),
        "load": before[0],
    }
    for line in reversed(r["stdout"].splitlines()):
        try:
            printed = json.loads(line)
        except ValueError:
            continue
        if isinstance(printed, dict):
            row.update({k: v for k, v in printed.items() if not isinstance(v, (dict, list))})
            break
    print(f"{side:>28}: wall {r['wall_s']:7.2f} s, CPU {row['CPU s']:7.2f} s, {row['peak RSS MB']:7.1f} MB, "
          f"load {before[0]}", file=sys.stderr, flush=True)  # fmt: skip
    return row


def medians(rows: list[dict[str, Any]], side: str, *keys: str) -> dict[str, float]:
    """The median of each of ``keys`` over the rows of ``side``."""
    mine = [r for r in rows if r["side"] == side]
    return {key: statistics.median(r[key] for r in mine) for key in keys}


SIDES = Path(__file__).resolve().parent / "_sides.py"
"""The script whose named functions are the sides that need more than a command (``_sides.py``)."""


def write_command(out: Path, steps: int, *flags: str) -> list[Any]:
    """``streamacc write OUT --size STEPS`` with ``flags``, as a side runs it."""
    return [sys.executable, "-m", "streamacc", "write", out, "--size", str(steps), "--no-progress", *flags]


def side_command(name: str, **kw: object) -> list[Any]:
    """The command that runs ``_sides.py``'s side ``name`` with the keyword arguments ``kw``."""
    return [sys.executable, SIDES, name, json.dumps(kw)]


def ratio(a: float, b: float) -> float:
    """``a / b`` to three places, as the pages show ratios."""
    return round(a / b, 3)


def disk_bytes(path: Path) -> int:
    """The bytes of every file under ``path`` (of ``path`` itself where it is a file)."""
    path = Path(path)
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def chunk_digest(root: Path, array: str = "x") -> str:
    """One SHA-256 over every data chunk file of ``array`` (names and contents)."""
    folder = Path(root) / array
    h = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != "zarr.json":
            h.update(str(path.relative_to(folder)).encode())
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def drop_cache(path: Path) -> None:
    """Drop every file of ``path`` from the page cache (they are durable: the writer fsynced them)."""
    for f in Path(path).rglob("*"):
        if f.is_file():
            fd = os.open(f, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
