"""Where every CPU-second of a command goes: ``perf record -g`` sampled, each sample put in one category.

Runs the command (by default the headline, ``streamacc write OUT --size N``) under
``/usr/bin/time -v`` and ``perf record -g``, and sorts every CPU sample by what it was
doing: the step function's compiled code, XLA's runtime, compression (LZ4 and the byte
shuffle), checksums, the summaries' reductions, copies, each kind of system call
(writing into the page cache, fsync, page faults, opening and renaming files, waiting on
locks), the Python interpreter, and the rest. Each category's share of the samples times
the CPU seconds that ``/usr/bin/time`` measured is its CPU-seconds. A run of the same
command at a small size (``--startup-size``) gives the fixed cost of starting (imports,
compilation), which the table lists beside.

    python benchmarks/bench_profile.py --size '2**30' --json benchmarks/results/profile_2p30.json
    python benchmarks/bench_profile.py --size '2**30' -- --no-summaries

Needs ``perf`` (Linux) allowed to sample this user's processes (``perf_event_paranoid`` <= 2).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import load, machine
from _timing import time_command

CATEGORIES = (
    "compute: the step's compiled code",
    "compute: XLA runtime",
    "compression: LZ4",
    "compression: byte shuffle",
    "checksums: CRC-32C",
    "summaries: numpy reductions",
    "copies: memcpy and memset",
    "system: write into the page cache",
    "system: fsync and writeback",
    "system: page faults",
    "system: open, rename, unlink, stat",
    "system: futex and scheduling",
    "system: other",
    "python: interpreter",
    "python: JSON",
    "other",
)


def _kernel_category(chain: list[str]) -> str:
    text = " ".join(chain)
    if "page_fault" in text:
        return "system: page faults"
    if "fsync" in text or "writeback" in text or "sync_file_range" in text:
        return "system: fsync and writeback"
    if "ksys_write" in text or "vfs_write" in text or "generic_perform_write" in text:
        return "system: write into the page cache"
    if any(s in text for s in ("rename", "do_sys_open", "openat", "unlink", "statx", "newfstat", "getdents")):
        return "system: open, rename, unlink, stat"
    if any(s in text for s in ("futex", "schedule", "finish_task_switch", "do_nanosleep", "epoll", "poll")):
        return "system: futex and scheduling"
    return "system: other"


def _user_category(sym: str, dso: str) -> str:
    name = Path(dso).name
    if dso.startswith("[JIT]") or (name.startswith("perf-") and name.endswith(".map")):
        return "compute: the step's compiled code"
    if "LZ4" in sym or "lz4" in dso.lower():
        return "compression: LZ4"
    if "shuffle" in sym:
        return "compression: byte shuffle"
    if "blosc" in dso:
        return "compression: LZ4" if "compress" in sym else "compression: byte shuffle"
    if "crc32c" in dso or "crc32c" in sym.lower():
        return "checksums: CRC-32C"
    if "_multiarray_umath" in dso and any(s in sym for s in ("minimum", "maximum", "sum_of", "_add", "isnan")):
        return "summaries: numpy reductions"
    if "memmove" in sym or "memcpy" in sym or "memset" in sym:
        return "copies: memcpy and memset"
    if "libjax" in dso or "xla" in dso.lower() or "jaxlib" in dso:
        return "compute: XLA runtime"
    if "_json" in dso:
        return "python: JSON"
    if "libpython" in dso or dso.startswith("python"):
        return "python: interpreter"
    return "other"


def categorize(perf_data: Path) -> tuple[collections.Counter[str], collections.Counter[str]]:
    """Samples per category, and per leaf symbol (for the detail), from ``perf script``."""
    script = subprocess.run(["perf", "script", "-i", str(perf_data), "-F", "comm,ip,sym,dso"],
                            capture_output=True, text=True, check=True).stdout  # fmt: skip
    counts: collections.Counter[str] = collections.Counter()
    symbols: collections.Counter[str] = collections.Counter()
    for sample in script.split("\n\n"):
        lines = [ln.strip() for ln in sample.strip().splitlines()]
        if len(lines) < 2:
            continue
        frames = []
        for ln in lines[1:]:
            parts = ln.split(None, 1)
            rest = parts[1] if len(parts) > 1 else ""
            sym, _, dso = rest.rpartition(" (")
            frames.append((sym, dso.rstrip(")")))
        leaf_sym, leaf_dso = frames[0]
        if "kernel" in leaf_dso:
            category = _kernel_category([s for s, d in frames if "kernel" in d])
            if category == "system: write into the page cache" and "copy" in leaf_sym:
                category = "system: write into the page cache"
        else:
            category = _user_category(leaf_sym, leaf_dso)
        counts[category] += 1
        symbols[f"{leaf_sym} ({Path(leaf_dso).name})"] += 1
    return counts, symbols


def profile(cmd: list[str], out: Path | None) -> dict:
    """Run ``cmd`` under perf and GNU time; the CPU-seconds per category."""
    with tempfile.TemporaryDirectory(prefix="streamacc-profile-") as tmp:
        data = Path(tmp) / "perf.data"
        if out is not None:
            shutil.rmtree(out, ignore_errors=True)
        timed = time_command(["perf", "record", "-q", "-g", "-F", "499", "-o", str(data), "--", *cmd])
        if timed["returncode"]:
            raise SystemExit(f"{' '.join(cmd)} failed: {timed['stderr']}")
        counts, symbols = categorize(data)
    total = sum(counts.values())
    cpu = timed["user_s"] + timed["sys_s"]
    seconds = {c: cpu * counts[c] / total for c in CATEGORIES if counts[c]}
    top = [{"symbol": s, "share": n / total, "cpu_s": cpu * n / total} for s, n in symbols.most_common(25)]
    keep = ("wall_s", "user_s", "sys_s", "minor_faults", "major_faults", "max_rss_kib")
    return {"command": " ".join(cmd), **{k: timed[k] for k in keep}, "samples": total, "cpu_s": cpu,
            "categories": seconds, "top_symbols": top}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="2**30")
    parser.add_argument("--startup-size", default="2**22", help="a run this short measures the fixed costs")
    parser.add_argument("--out", type=Path, default=Path("/tmp/streamacc-profile.zarr"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--label", default="")
    args, extra = parser.parse_known_args()
    extra = [e for e in extra if e != "--"]
    base = [sys.executable, "-m", "streamacc", "write", str(args.out), "--no-progress", *extra]
    result = {
        "label": args.label,
        "machine": machine(Path(args.out).parent),
        "run": profile([*base, "--size", args.size], args.out),
        "startup": profile([*base, "--size", args.startup_size], args.out),
    }
    shutil.rmtree(args.out, ignore_errors=True)
    result["machine"]["load_end"] = load()
    run, start = result["run"], result["startup"]
    print(f"{run['command']}: wall {run['wall_s']:.1f} s, CPU {run['cpu_s']:.1f} s "
          f"(startup at {args.startup_size}: CPU {start['cpu_s']:.1f} s)")  # fmt: skip
    for category in CATEGORIES:
        a, b = run["categories"].get(category, 0.0), start["categories"].get(category, 0.0)
        if a or b:
            print(f"  {category:40s} {a:7.2f} s   (startup {b:5.2f} s)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
