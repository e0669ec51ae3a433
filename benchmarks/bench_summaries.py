"""What the window summaries cost: the same write with and without ``--no-summaries``, alternating.

Runs ``streamacc write OUT --size N`` and the same with ``--no-summaries`` in turn,
``--pairs`` times each (alternating, so that a change in the machine's load falls on both
alike), each under ``/usr/bin/time -v``, and reports the medians of wall time and of user +
system CPU, and the summaries' extra CPU as a share of the run without them. Then checks
that the outputs' data chunks are byte for byte the same files (their SHA-256), and, with
``--reference DIR``, that they equal an output written before (another version's). With
``--against CHECKOUT``, a third write joins the rotation: with summaries, by the code of
another checkout (``PYTHONPATH=CHECKOUT``), so that two versions' costs are measured in the
same run, under the same load.

    python benchmarks/bench_summaries.py --size '2**30' --pairs 3 --json benchmarks/results/summaries_2p30.json

``--slices`` instead times the reductions alone on one block of the headline (2**22 float64
steps, 32 MiB) evicted from the caches before each run, for several slice sizes
(``SLICE_BYTES``), and at the default size also right after the block was written and on a
block of a 4096-point state (4096 steps, 128 MiB, windows of 64 steps) and on a block of a
256x256 field inside one longer window (64 steps, 32 MiB, one piece), in thread CPU time,
best and median of ``--repeat``:

    python benchmarks/bench_summaries.py --slices

``--xla`` times the same reductions done by XLA instead, on the block as the scan makes it:
a separate jitted function of the block (min, max and sum per window, without the NaN
handling that numpy's pieces include: the least XLA would do), and the scan's own jitted
function returning them beside the block (its time less the scan's alone), against numpy's
pieces of that block, for the headline's block and for a block of a 4096-point state, in
process CPU time (XLA computes on threads of its own), medians of ``--repeat``:

    python benchmarks/bench_summaries.py --xla --json benchmarks/results/summaries_xla.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _machine import load, machine
from _timing import time_command


def chunk_hashes(root: Path, array: str = "x") -> dict[str, str]:
    """SHA-256 of every data chunk file of ``array`` (path relative to the array)."""
    folder = root / array
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != "zarr.json":
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def digest(hashes: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()


def slices(repeat: int) -> dict:
    """Thread CPU ms of ``block_pieces`` on a cold 32 MiB block, per slice size; and at the default size on
    the block just written (``just_written``), as the block of a write is when its writer takes it."""
    import time

    import numpy as np

    from streamacc.summaries import _pyramid, _reduce

    step = np.full(2**22, 1 + 1e-8)
    block = np.multiply.accumulate(step)
    evict = np.ones(2**26)  # 512 MiB, more than the caches hold
    out = {}
    cold, hot = [], []
    for _ in range(repeat):
        for times, fresh in ((cold, False), (hot, True)):
            evict += 1.0
            if fresh:
                np.multiply.accumulate(step, out=block)
            t0 = time.thread_time()
            _pyramid.block_pieces(block, 0, 4096, 2**32)
            times.append((time.thread_time() - t0) * 1e3)
    state, on_state = np.random.default_rng(0).standard_normal((4096, 4096)), []  # 4096 steps of 4096 points
    for _ in range(repeat):
        evict += 1.0
        t0 = time.thread_time()
        _pyramid.block_pieces(state, 0, 64, 2**40)
        on_state.append((time.thread_time() - t0) * 1e3)
    field, on_field = np.random.default_rng(0).standard_normal((64, 256, 256)), []  # 64 steps of a 256x256 field
    for _ in range(repeat):
        evict += 1.0
        t0 = time.thread_time()
        _pyramid.block_pieces(field, 64, 256, 2**40)  # steps 64-127 of a window of 256: one piece
        on_field.append((time.thread_time() - t0) * 1e3)
    labelled = (("cold", cold), ("just_written", hot), ("state_4096_windows_of_64", on_state),
                ("field_256x256_in_a_window_of_256", on_field))  # fmt: skip
    for label, times in labelled:
        out[label] = {"best_ms": min(times), "median_ms": statistics.median(times)}
        print(f"{label:>32}, slices of {_reduce.SLICE_BYTES:,} bytes: median {statistics.median(times):.2f} ms")
    for nbytes in (2**18, 2**19, 2**20, 2**21, 2**22, 2**25):
        _reduce.SLICE_BYTES = nbytes
        times = []
        for _ in range(repeat):
            evict += 1.0
            t0 = time.thread_time()
            _pyramid.block_pieces(block, 0, 4096, 2**32)
            times.append((time.thread_time() - t0) * 1e3)
        out[str(nbytes)] = {"best_ms": min(times), "median_ms": statistics.median(times)}
        print(f"slices of {nbytes:>9,} bytes: best {min(times):.2f} ms, median {statistics.median(times):.2f} ms")
    return out


def xla(repeat: int) -> dict:
    """Process CPU ms of the window reductions of one block by numpy (the writer's pieces) and by XLA."""
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    from streamacc.summaries import _pyramid

    jax.config.update("jax_enable_x64", True)
    cases = {
        # the headline: 2**22 steps of x -> x * (1 + 1e-8) at unroll 8, windows of 4096 steps
        "series_2p22_windows_of_4096": (lambda c, _: (c * (1 + 1e-8), c * (1 + 1e-8)), jnp.float64(1.0), 2**22,
                                        4096, 8),
        # a 4096-point state, 4096 steps (128 MiB), windows of 64 steps
        "state_4096_windows_of_64": (lambda c, _: (c * 0.999 + 1e-3, c * 0.999 + 1e-3),
                                     jnp.linspace(0.0, 1.0, 4096), 4096, 64, 1),
    }  # fmt: skip
    out = {}
    for label, (f, init, length, window, unroll) in cases.items():

        def reductions(ys: Any, window: int = window) -> Any:
            tiles = ys.reshape(-1, window, *ys.shape[1:])
            return tiles.min(1), tiles.max(1), tiles.sum(1)

        def scan(c: Any, f: Any = f, length: int = length, unroll: int = unroll) -> Any:
            return lax.scan(f, c, None, length=length, unroll=unroll)

        plain = jax.jit(scan)
        after = jax.jit(reductions)
        fused = jax.jit(lambda c, scan=scan, reductions=reductions: (lambda r: (*r, reductions(r[1])))(scan(c)))
        carry, ys = plain(init)
        jax.block_until_ready((after(ys), fused(init)))
        times: dict[str, list[float]] = {"scan": [], "numpy_pieces": [], "xla_after": [], "xla_fused": []}
        for _ in range(repeat):
            t0 = time.process_time()
            carry, ys = jax.block_until_ready(plain(carry))
            times["scan"].append(time.process_time() - t0)
            t0 = time.process_time()
            jax.block_until_ready(after(ys))
            times["xla_after"].append(time.process_time() - t0)
            carry, ys = jax.block_until_ready(plain(carry))
            host = np.asarray(ys)
            t0 = time.process_time()
            _pyramid.block_pieces(host, 0, window, 2**62)
            times["numpy_pieces"].append(time.process_time() - t0)
            t0 = time.process_time()
            jax.block_until_ready(fused(carry))
            times["xla_fused"].append(time.process_time() - t0)
        med = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        med["xla_fused_less_scan"] = med.pop("xla_fused") - med["scan"]
        out[label] = {f"{k}_median_ms": round(v, 3) for k, v in med.items()}
        print(label, ", ".join(f"{k} {v:.2f} ms" for k, v in med.items()))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", action="store_true", help="time the reductions alone, per slice size")
    parser.add_argument("--xla", action="store_true", help="time the reductions by XLA against numpy's, per block")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--size", default="2**30")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("/tmp/streamacc-summaries"))
    parser.add_argument("--reference", type=Path, default=None, help="an output written before, to compare chunks with")
    parser.add_argument("--against", type=Path, default=None,
                        help="a checkout of another version: its write with summaries joins the rotation")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.slices or args.xla:
        info = machine()
        found = slices(args.repeat) if args.slices else xla(args.repeat)
        kind = "slices" if args.slices else "xla"
        result = {kind: found, "repeat": args.repeat, "machine": {**info, "load_end": load()}}
        if args.json:
            args.json.write_text(json.dumps(result, indent=1) + "\n")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    variants = {"summaries": [], "no-summaries": ["--no-summaries"]}
    if args.against is not None:
        variants["against"] = []
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    info = machine(args.out)
    hashes: dict[str, str] = {}
    for i in range(args.pairs):
        order = list(variants.items())
        for name, extra in order if i % 2 == 0 else reversed(order):
            out = args.out / f"{name}.zarr"
            shutil.rmtree(out, ignore_errors=True)
            cmd = [sys.executable, "-m", "streamacc", "write", str(out), "--size", args.size, "--no-progress", *extra]
            load_before = load()
            env = {"PYTHONPATH": str(args.against.resolve())} if name == "against" else None
            timed = time_command(cmd, env=env)
            if timed["returncode"]:
                raise SystemExit(f"{' '.join(cmd)} failed: {timed['stderr']}")
            timed["cpu_s"] = timed["user_s"] + timed["sys_s"]
            timed["load_before"] = load_before
            timed["command"] = " ".join(cmd[1:]).replace(str(out), "OUT")
            for key in ("stdout", "stderr", "returncode"):
                timed.pop(key, None)
            runs[name].append(timed)
            print(f"{name:13s} wall {timed['wall_s']:6.2f} s  user {timed['user_s']:6.2f}  sys {timed['sys_s']:5.2f}  "
                  f"load {load_before[0]}", file=sys.stderr)  # fmt: skip
            if i == args.pairs - 1 or i == args.pairs - 2:
                hashes[name] = digest(chunk_hashes(out))
    same = len(set(hashes.values())) == 1
    reference = None
    if args.reference is not None:
        reference = digest(chunk_hashes(args.reference)) == hashes["summaries"]
    med = {name: {key: statistics.median(r[key] for r in rs) for key in ("wall_s", "user_s", "sys_s", "cpu_s",
                                                                           "minor_faults", "max_rss_kib")}
           for name, rs in runs.items()}  # fmt: skip
    extra_cpu = med["summaries"]["cpu_s"] / med["no-summaries"]["cpu_s"] - 1
    result = {
        "size": args.size,
        "pairs": args.pairs,
        "machine": {**info, "load_end": load()},
        "runs": runs,
        "median": med,
        "summaries_extra_cpu": extra_cpu,
        "summaries_extra_wall": med["summaries"]["wall_s"] / med["no-summaries"]["wall_s"] - 1,
        "against": None if args.against is None else str(args.against),
        "against_extra_cpu": None
        if args.against is None
        else med["against"]["cpu_s"] / med["no-summaries"]["cpu_s"] - 1,
        "data_chunks_identical": same,
        "data_chunks_sha256": hashes,
        "reference_identical": reference,
    }
    print(json.dumps({k: result[k] for k in ("median", "summaries_extra_cpu", "summaries_extra_wall",
                                             "data_chunks_identical", "reference_identical")}, indent=1))  # fmt: skip
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    for name in variants:
        shutil.rmtree(args.out / f"{name}.zarr", ignore_errors=True)


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main()
