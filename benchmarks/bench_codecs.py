"""Write-path settings of ``streamacc.write`` on the seed's job: codec, block, inflight, chunk, durability.

Each case writes the geometric progression (float64, ``x[i] = x[i-1] * (1 + 1e-8)``) with
``streamacc.write`` in this process (compiles are warmed up first, so they are not timed)
and reports wall time, GiB/s of input (8N bytes / wall), CPU time, the compression ratio
(8N / bytes of the array's chunks) and the sampled peak RSS during the case::

    python benchmarks/bench_codecs.py --size 2**26
    python benchmarks/bench_codecs.py --size 2**22 --sections codec chunk --repeat 3

Sections: ``codec`` (every codec in ``streamacc.CODECS``), ``block`` (block sizes, default
codec), ``inflight``, ``chunk`` (chunk = block vs block/4) and ``durable`` (fsync per block
vs none, and none plus one fsync of every file at the end). All other settings stay at
the library's defaults. Prints a Markdown table and saves it with a JSON copy to ``--out``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import statistics
import sys
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _approaches import enable_x64, fsync_tree  # noqa: E402
from _harness import disk_bytes  # noqa: E402

from streamacc import base  # noqa: E402
from streamacc.base import CODEC_NAMES as CODECS  # noqa: E402

SECTIONS = ("codec", "block", "inflight", "chunk")
GiB, MiB = 2**30, 2**20


class PeakRSS:
    """Samples this process's RSS every few milliseconds while in use.

    ``peak`` is the highest RSS seen, ``growth`` its rise above the RSS at entry (the cases
    share one process, so only the growth is the case's own).
    """

    def __init__(self, interval: float = 0.005) -> None:
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._page = os.sysconf("SC_PAGE_SIZE")

    def _rss(self) -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * self._page

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            self._stop.wait(self.interval)

    @property
    def growth(self) -> int:
        return self.peak - self.start

    def __enter__(self) -> PeakRSS:
        self.start = self.peak = self._rss()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from streamacc.base import DEFAULT_INFLIGHT
    from streamacc.cli._expr import parse_int

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="2**26", help="steps (default 2**26)")
    p.add_argument("--repeat", type=int, default=1, help="runs per case (median reported)")
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    p.add_argument("--codecs", nargs="+", default=list(CODECS), choices=list(CODECS))
    p.add_argument("--block", default=str(base.DEFAULT_BLOCK_SIZE), help="block size of the other sections")
    p.add_argument("--blocks", nargs="+", default=["2**20", "2**22", "2**24"], help="block sizes to compare")
    p.add_argument("--inflight", nargs="+", type=int, default=[2, 3, 4], help="inflight values to compare")
    p.add_argument("--scratch", type=Path, default=Path("/tmp/streamacc-bench"), help="where outputs go (deleted)")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "out", help="where codecs.md and codecs.json go")
    args = p.parse_args(argv)
    args.n = parse_int(args.size, name="--size", minimum=1)
    args.block = parse_int(args.block, name="--block", minimum=1)
    args.blocks = [parse_int(b, name="--blocks", minimum=1) for b in args.blocks]
    args.default_codec = base.DEFAULT_CODEC
    args.default_inflight = DEFAULT_INFLIGHT
    return args


def cases(args: argparse.Namespace) -> list[dict]:
    """(section, label, write kwargs, final fsync) for every case, in run order (no-fsync cases last)."""
    base = {"codec": args.default_codec, "block_size": args.block, "inflight": args.default_inflight}
    out = []
    if "codec" in args.sections:
        out += [{"section": "codec", "label": c, "kw": {**base, "codec": c}} for c in args.codecs]
    if "block" in args.sections:
        out += [{"section": "block", "label": fmt(b), "kw": {**base, "block_size": b}} for b in args.blocks]
    if "inflight" in args.sections:
        out += [{"section": "inflight", "label": str(i), "kw": {**base, "inflight": i}} for i in args.inflight]
    if "chunk" in args.sections:
        out += [
            {"section": "chunk", "label": "block", "kw": base},
            {"section": "chunk", "label": "block/4", "kw": {**base, "chunks": {"step": max(1, args.block // 4)}}},
        ]
    return out


def fmt(n: int) -> str:
    e = n.bit_length() - 1
    return f"2**{e}" if n == 1 << e else str(n)


def warm_up(job, blocks: set[int], codecs: set[str], scratch: Path) -> None:
    """Compile every block length the cases use (the compile cache is keyed by it); touch every codec once."""
    import streamacc

    for b in sorted(blocks):
        for _ in streamacc.iter_blocks(job.f, job.init, job.xs, length=b, block_size=b, unroll=job.unroll):
            pass
    for codec in sorted(codecs):
        streamacc.write(scratch / "warm", job.f, job.init, length=2**16, block_size=2**16, unroll=job.unroll,
                        names=job.names, codec=codec, progress=False)  # fmt: skip
        shutil.rmtree(scratch / "warm")


def run_case(case: dict, job, n: int, out: Path) -> dict:
    import streamacc

    kw = case["kw"]
    cpu0, t0 = time.process_time(), time.perf_counter()
    with PeakRSS() as rss:
        streamacc.write(out, job.f, job.init, job.xs, length=n, unroll=job.unroll, names=job.names,
                        progress=False, attrs=job.attrs, **kw)  # fmt: skip
        if case.get("sync"):
            fsync_tree(out)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    data = disk_bytes(out / "x")
    return {"wall_s": wall, "cpu_s": cpu, "data_bytes": data, "total_bytes": disk_bytes(out), "peak_rss": rss.peak,
            "rss_growth": rss.growth}  # fmt: skip


def markdown(rows: list[dict], meta: dict) -> str:
    a = meta["args"]
    lines = [
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}; load average before/after: {meta['load_start']:.2f} / {meta['load_end']:.2f}; "
        f"N = {fmt(a['n'])} steps ({8 * a['n'] / GiB:.2f} GiB of float64); repeats {a['repeat']} (median).  ",
        f"Unless the section varies it: codec `{a['default_codec']}`, block {fmt(a['block'])}, chunk = block, "
        f"inflight {a['default_inflight']}. GiB/s is of input (8N bytes / wall); CPU s is the "
        "process's user+system time (2 cores); ratio = 8N / bytes of the chunks; RSS growth is the peak "
        "(sampled every 5 ms) above the RSS at the case's start, in one shared process.",
        "",
        "| section | setting | wall s | GiB/s | CPU s | ratio | stored MiB | RSS growth MiB |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        wall = f"{r['wall_s']:.2f}"
        if len(r["walls"]) > 1:
            wall += f" ({min(r['walls']):.2f}-{max(r['walls']):.2f})"
        lines.append(
            f"| {r['section']} | {r['label']} | {wall} | {r['gib_per_s']:.3f} | {r['cpu_s']:.2f} | "
            f"{r['ratio']:.2f} | {r['data_bytes'] / MiB:.1f} | {r['rss_growth'] / MiB:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    enable_x64()
    from streamacc.recipes import get_recipe

    job = get_recipe("gp").build(args.n, "float64")
    todo = cases(args)
    args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = args.scratch / f"codecs-{os.getpid()}"
    scratch.mkdir()
    meta = {
        "command": "python " + " ".join(shlex.quote(x) for x in [os.path.relpath(__file__), *sys.argv[1:]]),
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "load_start": os.getloadavg()[0],
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    runs = []
    try:
        blocks = {min(c["kw"]["block_size"], args.n) for c in todo} | {args.n % c["kw"]["block_size"] for c in todo}
        warm_up(job, blocks - {0}, {c["kw"]["codec"] for c in todo}, scratch)
        for rep in range(args.repeat):
            for i, case in enumerate(todo):
                out = scratch / f"case-{i}"
                result = run_case(case, job, args.n, out)
                shutil.rmtree(out)
                runs.append({"case": i, "rep": rep, "section": case["section"], "label": case["label"], **result})
                print(
                    f"{case['section']:8s} {case['label']:26s} rep {rep}: {result['wall_s']:.2f} s, "
                    f"{8 * args.n / result['wall_s'] / GiB:.3f} GiB/s, ratio {8 * args.n / result['data_bytes']:.2f}",
                    flush=True,
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    meta["load_end"] = os.getloadavg()[0]
    rows = []
    for i, case in enumerate(todo):
        mine = [r for r in runs if r["case"] == i]
        wall = statistics.median(r["wall_s"] for r in mine)
        rows.append({
            "section": case["section"],
            "label": case["label"],
            "walls": [r["wall_s"] for r in mine],
            "wall_s": wall,
            "gib_per_s": 8 * args.n / wall / GiB,
            "cpu_s": statistics.median(r["cpu_s"] for r in mine),
            "data_bytes": mine[0]["data_bytes"],
            "ratio": 8 * args.n / mine[0]["data_bytes"],
            "peak_rss": max(r["peak_rss"] for r in mine),
            "rss_growth": max(r["rss_growth"] for r in mine),
        })  # fmt: skip
    text = markdown(rows, meta)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "codecs.md").write_text(text)
    (args.out / "codecs.json").write_text(json.dumps({"meta": meta, "runs": runs, "summary": rows}, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
