"""Benchmarks of the block engine: bounded memory and compute-only throughput.

    python benchmarks/bench_engine.py --mode memory
    python benchmarks/bench_engine.py --mode throughput
    python benchmarks/bench_engine.py --mode all

memory      runs ``for b in iter_blocks(gp_step, np.float64(1.0), length=N, block_size=B): pass``
            for each N, each in a fresh subprocess, and reports the child's peak RSS
            (``getrusage(RUSAGE_SELF).ru_maxrss``); the target is the longest run within 10%
            of the shortest.
throughput  compares iter_blocks (consuming the blocks without copying) with one jitted
            full-length ``lax.scan`` (``block_until_ready``), same step and unroll, best of
            --repeat runs after a warm-up that compiles everything; the target is a
            blocked/full throughput ratio >= 0.95. With --compare-recycling, every block
            size also runs with the engine's buffer pool off (``BlockPool(0)``: XLA
            allocates each block's output, as before the pool existed).

Both print Markdown tables (and the command line) for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def _setup():
    import jax

    jax.config.update("jax_enable_x64", True)
    return jax


def gp_step(c, _):
    """A geometric progression: the carry grows by a factor of 1 + 1e-8 per step, and is emitted."""
    return c * (1 + 1e-8), c


def _pow2(text: str) -> int:
    """An int given as e.g. 1048576, 2**20 or 1<<20."""
    text = text.strip()
    if "**" in text:
        base, exp = text.split("**")
        return int(base) ** int(exp)
    if "<<" in text:
        a, b = text.split("<<")
        return int(a) << int(b)
    return int(text)


def _fmt_pow2(n: int) -> str:
    return f"2**{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


def _mib(kib: float) -> str:
    return f"{kib / 1024:.1f}"


# --- memory ------------------------------------------------------------------------------


def _child_memory(length: int, block_size: int) -> None:
    """One measured run (in a fresh process); prints a JSON line."""
    _setup()
    import numpy as np

    import streamacc

    rss_after_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    blocks = 0
    for _b in streamacc.iter_blocks(gp_step, np.float64(1.0), length=length, block_size=block_size):
        blocks += 1
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(
        json.dumps(
            {
                "length": length,
                "block_size": block_size,
                "blocks": blocks,
                "peak_rss_kib": peak,
                "import_rss_kib": rss_after_import,
                "seconds": seconds,
            }
        )
    )


def run_memory(lengths: list[int], block_size: int, repeat: int, mmap_threshold: int | None) -> list[dict]:
    """Peak RSS of ``repeat`` fresh processes per length: the min and max of their peaks."""
    env = dict(os.environ)
    if mmap_threshold is not None:
        env["MALLOC_MMAP_THRESHOLD_"] = str(mmap_threshold)  # glibc: buffers this big are mmapped, freed at once
    rows = []
    for n in lengths:
        runs = []
        for _ in range(repeat):
            cmd = [sys.executable, __file__, "--_child-memory", str(n), "--block-size", str(block_size)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
        peaks = [r["peak_rss_kib"] for r in runs]
        row = {**runs[0], "peak_min_kib": min(peaks), "peak_max_kib": max(peaks)}
        row["seconds"] = min(r["seconds"] for r in runs)
        rows.append(row)
        print(f"  N={_fmt_pow2(n)}: peak RSS {[_mib(p) for p in peaks]} MiB", file=sys.stderr)
    return rows


def memory_table(rows: list[dict]) -> str:
    base = rows[0]["peak_max_kib"]
    lines = [
        "| steps | block_size | blocks | peak RSS min (MiB) | peak RSS max (MiB) | max / first max "
        "| RSS after import (MiB) | ns/step (incl. compile) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {_fmt_pow2(r['length'])} | {_fmt_pow2(r['block_size'])} | {r['blocks']} | "
            f"{_mib(r['peak_min_kib'])} | {_mib(r['peak_max_kib'])} | {r['peak_max_kib'] / base:.3f} | "
            f"{_mib(r['import_rss_kib'])} | {1e9 * r['seconds'] / r['length']:.2f} |"
        )
    return "\n".join(lines)


# --- throughput --------------------------------------------------------------------------


def run_throughput(
    length: int, unrolls: list[int], block_sizes: list[int], repeat: int, compare_recycling: bool = False
) -> list[dict]:
    """Best-of-``repeat`` seconds per (unroll, block size, recycling); block size None is the full scan.

    The runs are interleaved (each round times every configuration once), so that a
    change in the machine's load hits all configurations alike.
    """
    jax = _setup()
    import numpy as np
    from jax import lax

    import streamacc
    from streamacc.engine import make_plan, run_plan
    from streamacc.engine._memory import BlockPool

    init = np.float64(1.0)
    block_sizes = [bs for bs in block_sizes if bs <= length]
    rows = []
    for unroll in unrolls:
        full = jax.jit(lambda c, u=unroll: lax.scan(gp_step, c, None, length=length, unroll=u))

        def run_full(full=full):
            jax.block_until_ready(full(init))

        def run_blocked(bs, unroll=unroll, n=length):
            for _b in streamacc.iter_blocks(gp_step, init, length=n, block_size=bs, unroll=unroll):
                pass  # consume and discard: ys are zero-copy host views on CPU

        def run_fresh(bs, unroll=unroll, n=length):
            plan = make_plan(gp_step, init, length=n, block_size=bs, unroll=unroll)
            for _b in run_plan(plan, pool=BlockPool(0)):
                pass

        runs = {None: run_full, **{bs: (lambda bs=bs: run_blocked(bs)) for bs in block_sizes}}
        if compare_recycling:
            runs.update({(bs, "fresh"): (lambda bs=bs: run_fresh(bs)) for bs in block_sizes})
        # warm up: compile the full scan and every block function (full and short blocks, fresh and recycled)
        run_full()
        for bs in block_sizes:
            run_blocked(bs, n=min(length, 4 * bs))
            if length % bs:
                run_blocked(bs, n=length % bs)
        best = dict.fromkeys(runs, float("inf"))
        faults = dict.fromkeys(runs, 0)
        for _ in range(repeat):
            for key, fn in runs.items():
                f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                t0 = time.perf_counter()
                fn()
                t = time.perf_counter() - t0
                if t < best[key]:
                    best[key] = t
                    faults[key] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        for key, t in best.items():
            rows.append({"unroll": unroll, "block_size": key, "seconds": t, "full": best[None], "faults": faults[key]})
            what = "full" if key is None else f"block_size={_label(key)}"
            print(
                f"  unroll={unroll} {what}: {1e9 * t / length:.3f} ns/step, {best[None] / t:.3f}x full",
                file=sys.stderr,
            )
    return rows


def _label(key: int | tuple) -> str:
    if isinstance(key, tuple):
        return f"{_fmt_pow2(key[0])}, no recycling"
    return _fmt_pow2(key)


def throughput_table(rows: list[dict], length: int) -> str:
    lines = [
        "| unroll | run | blocks | ns/step | Msteps/s | throughput vs full | page faults / 1000 steps |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        bs = r["block_size"]
        name = "full lax.scan" if bs is None else f"iter_blocks, block_size={_label(bs)}"
        blocks = 1 if bs is None else -(-length // (bs[0] if isinstance(bs, tuple) else bs))
        ratio = r["full"] / r["seconds"]
        lines.append(
            f"| {r['unroll']} | {name} | {blocks} | {1e9 * r['seconds'] / length:.3f} | "
            f"{length / r['seconds'] / 1e6:.1f} | {ratio:.3f}x | {1000 * r['faults'] / length:.2f} |"
        )
    return "\n".join(lines)


# --- main --------------------------------------------------------------------------------


def _machine() -> str:
    import jax
    import jaxlib

    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"jax {jax.__version__} / jaxlib {jaxlib.__version__}, backend {jax.default_backend()}, "
        f"load average {os.getloadavg()[0]:.2f} at start"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mode", choices=["memory", "throughput", "all"], default="all")
    p.add_argument(
        "--lengths",
        default="2**24,2**28",
        help="memory mode: comma-separated step counts, each run in a fresh process (default: 2**24,2**28)",
    )
    p.add_argument("--block-size", type=_pow2, default=2**20, help="memory mode: steps per block (default 2**20)")
    p.add_argument("--mem-repeat", type=int, default=3, help="memory mode: fresh processes per length (default 3)")
    p.add_argument(
        "--mmap-threshold",
        type=_pow2,
        default=None,
        help="memory mode: set glibc's MALLOC_MMAP_THRESHOLD_ (bytes) in the children, so that freed block "
        "buffers go back to the OS at once instead of staying in malloc's heap",
    )
    p.add_argument("--length", type=_pow2, default=2**26, help="throughput mode: steps per run (default 2**26)")
    p.add_argument("--unrolls", default="1,8", help="throughput mode: comma-separated unroll factors (default 1,8)")
    p.add_argument(
        "--block-sizes",
        default="2**16,2**18,2**20,2**22",
        help="throughput mode: comma-separated block sizes (default 2**16,2**18,2**20,2**22)",
    )
    p.add_argument("--repeat", type=int, default=5, help="throughput mode: runs per measurement, best taken")
    p.add_argument(
        "--compare-recycling",
        action="store_true",
        help="throughput mode: also run every block size with the engine's buffer pool off",
    )
    p.add_argument("--_child-memory", type=_pow2, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args._child_memory is not None:
        _child_memory(args._child_memory, args.block_size)
        return 0

    command = "python benchmarks/bench_engine.py " + " ".join(sys.argv[1:] if argv is None else argv)
    _setup()
    print(f"Command: `{command.strip()}`\n")
    print(f"Machine: {_machine()}\n")
    if args.mode in ("memory", "all"):
        lengths = [_pow2(x) for x in args.lengths.split(",")]
        rows = run_memory(lengths, args.block_size, args.mem_repeat, args.mmap_threshold)
        if args.mmap_threshold is not None:
            print(f"Children run with MALLOC_MMAP_THRESHOLD_={args.mmap_threshold}\n")
        print(memory_table(rows))
        ratio = rows[-1]["peak_max_kib"] / rows[0]["peak_max_kib"]
        verdict = "met" if ratio <= 1.10 else "MISSED"
        print(
            f"\nLargest peak RSS ratio {_fmt_pow2(lengths[-1])} / {_fmt_pow2(lengths[0])}: {ratio:.3f} "
            f"(target <= 1.10: {verdict})\n"
        )
    if args.mode in ("throughput", "all"):
        unrolls = [int(x) for x in args.unrolls.split(",")]
        block_sizes = [_pow2(x) for x in args.block_sizes.split(",")]
        rows = run_throughput(args.length, unrolls, block_sizes, args.repeat, args.compare_recycling)
        print(f"Steps per run: {_fmt_pow2(args.length)}; best of {args.repeat}\n")
        print(throughput_table(rows, args.length))
        best = max((r for r in rows if r["block_size"] is not None), key=lambda r: r["full"] / r["seconds"])
        print(
            f"\nBest blocked: unroll={best['unroll']}, block_size={_label(best['block_size'])}, "
            f"{best['full'] / best['seconds']:.3f}x full (target >= 0.95x)"
        )
    print(f"\nLoad average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
