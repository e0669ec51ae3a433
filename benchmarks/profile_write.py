"""Where does ``streamacc.write`` spend its time? A pyinstrument profile plus per-thread timers.

pyinstrument samples the main thread only (it computes, dispatches and commits); the
encode/write/fsync work runs on the writer threads. So the main pieces of the write path
are also wrapped with timers here (in this process only; the library is not changed),
which gives the time per call on every thread::

    python benchmarks/profile_write.py --size 2**24
    python benchmarks/profile_write.py --size 2**24 --block 2**14 --no-pyinstrument
    python benchmarks/profile_write.py --ledger 1024     # cost of one block commit vs its index

Writes ``profile_write.txt`` (and ``.html`` with pyinstrument) to ``--out``.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import shutil
import sys
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from _approaches import enable_x64  # noqa: E402

TIMES: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
_LOCK = threading.Lock()


def timed(label: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            dt = time.perf_counter() - t0
            thread = "main" if threading.current_thread() is threading.main_thread() else "writer"
            with _LOCK:
                TIMES[(label, thread)].append(dt)

    return wrapper


def instrument() -> None:
    """Wrap the write path's pieces where the library looks them up (module globals, class attributes)."""
    from streamacc.engine import _scan as _engine
    from streamacc.run import _executor, _manifest, _output
    from streamacc.store import _chunks, _target, _zarr

    _engine._dispatch = timed("engine._dispatch (trace/dispatch a block)", _engine._dispatch)
    _engine._hand_over = timed("engine._hand_over (host views of a block)", _engine._hand_over)
    _executor.to_host = timed("carry to_host", _executor.to_host)
    _output.encode_leaves = timed("encode_leaves (carry to JSON)", _output.encode_leaves)
    _zarr.ZarrSink.write = timed("ZarrSink.write (encode + write + fsync)", _zarr.ZarrSink.write)
    _chunks.ChunkWriter.encode = timed("ChunkWriter.encode (blosc + crc32c)", _chunks.ChunkWriter.encode)
    local = _target.LocalTarget
    local.make_durable = timed("LocalTarget.make_durable (fsync chunks)", local.make_durable)
    _manifest.Ledger.record = timed("Ledger.record (block record, fsync)", _manifest.Ledger.record)
    _manifest.Ledger.save = timed("Ledger.save (manifest, fsync)", _manifest.Ledger.save)
    _zarr.ZarrSink.publish = timed("ZarrSink.publish (root attributes)", _zarr.ZarrSink.publish)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    import streamacc
    from streamacc.cli._expr import parse_int

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", default="2**24")
    p.add_argument("--block", default=str(streamacc.DEFAULT_BLOCK_SIZE))
    p.add_argument("--codec", default=streamacc.DEFAULT_CODEC, choices=list(streamacc.CODECS))
    p.add_argument("--no-durable", action="store_true", help="durable=False")
    p.add_argument("--no-pyinstrument", action="store_true", help="timers only")
    p.add_argument("--ledger", type=int, default=0, metavar="BLOCKS", help="only time Ledger.record for BLOCKS blocks")
    p.add_argument("--scratch", type=Path, default=Path("/tmp/streamacc-bench"))
    p.add_argument("--out", type=Path, default=BENCH_DIR / "out")
    args = p.parse_args(argv)
    args.n = parse_int(args.size, name="--size", minimum=1)
    args.block = parse_int(args.block, name="--block", minimum=1)
    return args


def ledger_costs(blocks: int, scratch: Path) -> str:
    """Time ``Ledger.record`` for blocks 0..blocks-1 (what each commit adds on the main thread)."""
    import numpy as np

    from streamacc.run._manifest import BlockRecord, Ledger, encode_leaves
    from streamacc.store._target import BOOKKEEPING, open_target

    lines = [f"Ledger.record for blocks 0..{blocks - 1}, scalar float64 carry (ms per call)"]
    carry = encode_leaves([(np.asarray(1.0), None)])
    for sync in (False, True):
        root = scratch / f"ledger-{os.getpid()}-{int(sync)}"
        target = open_target(str(root))
        target.fsync = sync
        (root / BOOKKEEPING).mkdir(parents=True)
        ledger, times = Ledger(target), []
        for k in range(blocks):
            rec = BlockRecord(k, k * 2**20, (k + 1) * 2**20, carry, {"x": 123456789})
            t0 = time.perf_counter()
            ledger.record(rec)
            times.append(time.perf_counter() - t0)
        segment = sum(f.stat().st_size for f in (root / BOOKKEEPING / "blocks").iterdir())
        shutil.rmtree(root)
        ms = np.array(times) * 1e3
        k, mid = max(1, min(16, blocks // 4)), blocks // 2
        lines.append(
            f"fsync={sync!s:5s} first {k}: {ms[:k].mean():.2f}  middle {k}: {ms[mid : mid + k].mean():.2f}"
            f"  last {k}: {ms[-k:].mean():.2f}  total {ms.sum() / 1e3:.2f} s; record files {segment / 1024:.0f} KiB"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    enable_x64()
    if args.ledger:
        args.scratch.mkdir(parents=True, exist_ok=True)
        print(ledger_costs(args.ledger, args.scratch))
        return 0
    import streamacc
    from streamacc.recipes import get_recipe

    job = get_recipe("gp").build(args.n, "float64")
    args.scratch.mkdir(parents=True, exist_ok=True)
    out = args.scratch / f"profile-{os.getpid()}"
    kw = dict(length=job.length, block_size=args.block, unroll=job.unroll, names=job.names, codec=args.codec)
    kw.update(progress=False, durable=not args.no_durable, attrs=job.attrs)
    # warm up: compile the block lengths, touch the codec
    streamacc.write(out, job.f, job.init, **{**kw, "length": min(args.n, 2 * args.block)}, overwrite=True)
    shutil.rmtree(out)
    instrument()
    profiler = None
    if not args.no_pyinstrument:
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001)
        profiler.start()
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        streamacc.write(out, job.f, job.init, **kw)
    finally:
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        if profiler is not None:
            profiler.stop()
        shutil.rmtree(out, ignore_errors=True)
    lines = [
        f"streamacc.write: N={args.size} block={args.block} codec={args.codec} durable={not args.no_durable}",
        f"wall {wall:.2f} s, process CPU {cpu:.2f} s, {8 * args.n / wall / 2**30:.3f} GiB/s of output",
        "",
        f"{'piece':52s} {'thread':7s} {'calls':>6s} {'total s':>8s} {'mean ms':>8s} {'max ms':>8s}",
    ]
    for (label, thread), ts in sorted(TIMES.items(), key=lambda kv: -sum(kv[1])):
        lines.append(
            f"{label:52s} {thread:7s} {len(ts):6d} {sum(ts):8.3f} {1e3 * sum(ts) / len(ts):8.2f} {1e3 * max(ts):8.2f}"
        )
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    if profiler is not None:
        text += "\n" + profiler.output_text(unicode=False, color=False, show_all=False)
        (args.out / "profile_write.html").write_text(profiler.output_html())
    (args.out / "profile_write.txt").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
