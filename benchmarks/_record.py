"""What a benchmark's JSON records beside its figures: the command, the machine, its load, the versions.

Timings on a shared 2-core machine depend on what else runs, so each file keeps the load
average before and after, and the figures it compares were measured alternately in one run.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _machine import load
from _timing import time_command

__all__ = ["load", "machine", "median", "run", "save"]

ROOT = Path(__file__).resolve().parents[1]
NEUTRAL = Path(tempfile.mkdtemp(prefix="bench-cwd-"))
"""An empty folder the runs start in."""
ENV = {"PYTHONPATH": str(ROOT), "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu")}


def machine() -> dict[str, Any]:
    """The machine and the versions the figures were measured with."""
    versions = {}
    for name in ("jax", "numpy", "zarr", "xarray", "dask", "matplotlib"):
        with contextlib.suppress(ImportError):
            versions[name] = __import__(name).__version__
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    mem = next((line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), "0")  # fmt: skip
    return {
        "cpus": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(),
        "mem_gib": round(int(mem) / 2**20, 1),
        "python": platform.python_version(),
        "versions": versions,
        "git": git.stdout.strip(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }


def run(cmd: list[str], label: str, **extra: Any) -> dict[str, Any]:
    """``cmd`` in its own process under GNU time: wall, user and system CPU, faults, peak RSS, and what it printed."""
    before = load()
    # run from a folder of no package: ``python -m``/``-c`` put the working folder first on sys.path, ahead of
    # PYTHONPATH, so a run from a checkout would import that checkout's streamacc whatever ENV says
    r = time_command(cmd, env=ENV, cwd=NEUTRAL)
    if r["returncode"]:
        raise SystemExit(f"{label} failed ({r['returncode']}): {shlex.join(cmd)}\n{r['stderr']}")
    record = {
        "label": label,
        "command": shlex.join(cmd),
        "wall_s": r["wall_s"],
        "user_s": r["user_s"],
        "sys_s": r["sys_s"],
        "minor_faults": r["minor_faults"],
        "major_faults": r["major_faults"],
        "peak_rss_mb": round(r["max_rss_kib"] * 1024 / 1e6, 1),
        "load_before": before,
        **extra,
    }
    lines = [line for line in r["stdout"].splitlines() if line.startswith("{")]
    if lines:
        record.update(json.loads(lines[-1]))
    print(json.dumps(record), flush=True)
    return record


def median(records: list[dict[str, Any]], label: str, key: str = "wall_s") -> float:
    return float(statistics.median(r[key] for r in records if r["label"] == label))


def save(path: Path, command: str, body: dict[str, Any]) -> None:
    """Write the benchmark's JSON: the command that reproduces it, the machine, then ``body``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"command": command, "machine": machine(), **body, "load_after": load()}
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}", file=sys.stderr)
