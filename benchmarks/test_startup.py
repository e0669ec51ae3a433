"""What a command costs before it does its work: the write's start-up, and the readers' cold start.

Each side is one fresh process under GNU time that runs the command in-process (as ``streamacc
ARGV`` runs it, or ``streamacc.overview``) and then prints how long the command took from the
first import of streamacc, how many modules the process had imported and which of the heavy
libraries among them (``WATCHED``): a feature that is not used must not add to any of these.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import _harness
import pytest

from streamacc.cli._expr import parse_int

WATCHED = ("jax", "zarr", "xarray", "pandas", "dask", "matplotlib")
"""The libraries whose import a command pays for only where it needs them."""

PROBE = """
import sys, time
t0 = time.perf_counter()
{call}
seconds = time.perf_counter() - t0
import json
print(json.dumps({{"command s": round(seconds, 3), "modules": len(sys.modules),
                  **{{name: name in sys.modules for name in {watched!r}}}}}))
"""


def probe(call: str) -> list[Any]:
    """A process that runs ``call`` (Python) and prints what it took and imported."""
    return [sys.executable, "-c", PROBE.format(call=call, watched=WATCHED)]


def command(*argv: Any) -> list[Any]:
    """:func:`probe` of ``streamacc ARGV`` run in-process; a command that fails ends the process with its code."""
    args = [str(a) for a in argv]
    return probe(f"from streamacc.cli import main\ncode = main({args!r})\nif code:\n    sys.exit(code)")


def import_seconds(cmd: list[Any], root: Path) -> tuple[float, dict[str, float]]:
    """``python -X importtime`` of ``cmd``: the seconds spent importing, and the five top-level packages that took
    the most (cumulative), in one untimed run."""
    env = {**os.environ, "PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-X", "importtime", *map(str, cmd[1:])], capture_output=True, text=True,
                          env=env, cwd=_harness.neutral(), timeout=600)  # fmt: skip
    total, top = 0, {}
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)$", line)
        if m:
            total += int(m[1])
            if len(m[3]) == 1:
                top[m[4]] = top.get(m[4], 0) + int(m[2])
    largest = sorted(top.items(), key=lambda kv: -kv[1])[:5]
    return round(total / 1e6, 3), {name: round(us / 1e6, 3) for name, us in largest}


def summarize(scenario: Any, sides: list[str]) -> None:
    """Each side's medians (wall, CPU, peak RSS, the command's own seconds, modules) and what it imported."""
    for side in sides:
        rows = [r for r in scenario.rows if r["side"] == side]
        for key in ("wall s", "CPU s", "peak RSS MB", "command s", "modules"):
            scenario.figures[f"{side}: median {key}"] = round(statistics.median(r[key] for r in rows), 3)
        imported = [name for name in WATCHED if any(r[name] for r in rows)]
        scenario.figures[f"{side}: imported"] = ", ".join(imported) or "none of " + ", ".join(WATCHED)


def trees(scenario: Any) -> dict[str, Path | None]:
    """This checkout, and ``--ref``'s where given."""
    return {"this": None} | ({"ref": scenario.ref} if scenario.ref is not None else {})


def label(side: str, tree: str) -> str:
    return side if tree == "this" else f"{side} (ref)"


@pytest.mark.benchmark(group="start-up")
@pytest.mark.sizes("2**10")
def test_start_up(scenario, size):
    """``streamacc write OUT --size N`` alternating with ``--ref``'s code (1.0.0's, to hold the start-up to it): at
    2**10 steps the write is nearly all start-up (imports, the compile, the output made); at 2**24 its peak RSS
    shows what the imports add to a long write's. Wall, CPU, peak RSS, the modules imported and which heavy
    libraries, and the seconds spent importing (``-X importtime``, one run each, untimed)."""
    steps = parse_int(size, name="--size")
    out = scenario.folder / "out.zarr"
    roots = trees(scenario)

    def write() -> list[Any]:
        return command("write", out, "--size", steps, "--no-progress")

    def one_round(i: int) -> None:
        order = list(roots.items())
        for tree, root in order if i % 2 == 0 else reversed(order):
            shutil.rmtree(out, ignore_errors=True)
            scenario.run(write(), label("write", tree), root=root, round=i + 1)
        shutil.rmtree(out, ignore_errors=True)

    scenario.rounds(one_round, default=5)
    summarize(scenario, [label("write", tree) for tree in roots])
    for tree, root in roots.items():
        shutil.rmtree(out, ignore_errors=True)
        seconds, largest = import_seconds(write(), root or _harness.ROOT)
        scenario.figures[f"{label('write', tree)}: import s (-X importtime)"] = seconds
        scenario.tables[f"{label('write', tree)}: the largest imports (-X importtime, cumulative s)"] = [
            {"package": name, "s": s} for name, s in largest.items()
        ]
    shutil.rmtree(out, ignore_errors=True)
    if "ref" in roots:
        this, ref = (scenario.medians(label("write", t), "wall s", "peak RSS MB") for t in roots)
        scenario.figures["wall, this / ref"] = round(this["wall s"] / ref["wall s"], 3)
        scenario.figures["peak RSS MB, this - ref"] = round(this["peak RSS MB"] - ref["peak RSS MB"], 1)


READERS = ("info", "overview", "plot")


@pytest.mark.benchmark(group="readers-cold")
@pytest.mark.sizes("2**20")
def test_readers_cold(scenario, size):
    """``streamacc info``, ``streamacc.overview(OUT, points=4096)`` and ``streamacc plot`` of a local output of
    ``--size`` steps, each in a fresh process after every file of the output left the page cache, alternating
    with ``--ref``'s code (each tree reads an output its own code wrote: 1.0's format is not 1.1's). Wall, CPU,
    peak RSS, the command's seconds from the first import of streamacc, and which heavy libraries it imported:
    a local output's summaries, manifest and documents need neither JAX nor Zarr, ``overview`` returns an
    xarray Dataset, and ``plot`` needs matplotlib."""
    steps = parse_int(size, name="--size")
    roots = trees(scenario)
    outs = {tree: scenario.folder / f"{tree}.zarr" for tree in roots}
    png = scenario.folder / "plot.png"
    for tree, root in roots.items():
        shutil.rmtree(outs[tree], ignore_errors=True)
        cmd = [sys.executable, "-m", "streamacc", "write", outs[tree], "--size", steps, "--no-progress"]
        scenario.run(cmd, label("write", tree), root=root)

    def reader(name: str, out: Path) -> list[Any]:
        if name == "overview":
            return probe(f"import streamacc\nstreamacc.overview({str(out)!r}, points=4096)")
        return command("info", out) if name == "info" else command("plot", out, "-o", png)

    def one_round(i: int) -> None:
        order = list(roots.items())
        for name in READERS:
            for tree, root in order if i % 2 == 0 else reversed(order):
                _harness.drop_cache(outs[tree])
                scenario.run(reader(name, outs[tree]), label(name, tree), root=root, round=i + 1)

    scenario.rounds(one_round, default=5)
    summarize(scenario, [label(name, tree) for name in READERS for tree in roots])
    for out in outs.values():
        shutil.rmtree(out, ignore_errors=True)
    png.unlink(missing_ok=True)
