"""Ways to encode and store blocks as Zarr chunks: page faults, CPU, wall, compression.

Each option runs in a fresh process that writes N float64 steps of the geometric
progression as blocks of B steps through three writer threads (streamacc's pipeline,
``run_ordered`` with depth 3), and reports the process's own counters over the write
(``getrusage``: minor page faults, user and system CPU; wall; peak RSS) plus the bytes
stored. The blocks are either one precomputed block written N/B times (``--compute
precomputed``: isolates encoding) or computed by the engine into its pool of recycled
buffers (``--compute engine``: the new write path without its bookkeeping)::

    python benchmarks/bench_chunks.py --size '2**28' --sections encode checksum
    python benchmarks/bench_chunks.py --size '2**30' --compute engine --fsync --options writer writer+crc32c-codec

Options (codec blosc-lz4, byte shuffle, level 5 everywhere):

  zarr                   ``array[s:e] = block``, chunk = block (write_empty_chunks=True)
  zarr-emptycheck        the same with zarr's default config, which compares each chunk
                         with the fill value first (what an array reopened without
                         ``config`` does)
  zarr-chunk/4, /8       chunk = block/4 or block/8, one ``array[s:e] =`` per block
  zarr-shard/8           one shard per block, inner chunks of block/8
  pipeline               the array's codec pipeline called directly, then ``store.set``
  writer                 ``streamacc.store._chunks.ChunkWriter``: blosc into per-thread reused buffers
  writer-chunk/8         the same with chunk = block/8
  +crc32c-codec          the array also has zarr's crc32c codec (readers check it)
  +zlib-raw, +crc32c-raw a checksum of the raw block in the writer thread (zlib.crc32, google_crc32c)

With ``--read`` each option also reads everything back through zarr (block by block)
and reports that CPU, to price the crc32c codec for readers. With ``--fsync --dontneed``
each chunk file's pages leave the page cache once they are durable
(``posix_fadvise(POSIX_FADV_DONTNEED)``), which keeps the kernel from growing the cache
by every byte written.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

OPTIONS = {
    "zarr": {"method": "zarr"},
    "zarr-emptycheck": {"method": "zarr", "empty_check": True},
    "zarr-chunk/4": {"method": "zarr", "split": 4},
    "zarr-chunk/8": {"method": "zarr", "split": 8},
    "zarr-shard/8": {"method": "zarr", "split": 8, "shard": True},
    "zarr+crc32c-codec": {"method": "zarr", "crc_codec": True},
    "pipeline": {"method": "pipeline"},
    "writer": {"method": "writer"},
    "writer-chunk/8": {"method": "writer", "split": 8},
    "writer+crc32c-codec": {"method": "writer", "crc_codec": True},
    "writer+zlib-raw": {"method": "writer", "raw": "zlib"},
    "writer+crc32c-raw": {"method": "writer", "raw": "crc32c"},
}
SECTIONS = {
    "encode": ["zarr", "zarr-emptycheck", "zarr-chunk/4", "zarr-chunk/8", "zarr-shard/8", "pipeline", "writer",
               "writer-chunk/8"],
    "checksum": ["writer", "writer+zlib-raw", "writer+crc32c-raw", "writer+crc32c-codec", "zarr+crc32c-codec"],
}  # fmt: skip
RATIO = 1 + 1e-8


def _pow2(text: str) -> int:
    from streamacc.cli._expr import parse_int

    return parse_int(text, name="size", minimum=1)


def _fmt(n: int) -> str:
    return f"2**{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


# --- child: one option in a fresh process --------------------------------------------------


def _create(path: Path, n: int, block: int, spec: dict):
    import numpy as np
    import zarr
    from zarr.codecs import BloscCodec, Crc32cCodec

    codecs = [BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")] + ([Crc32cCodec()] if spec.get("crc_codec") else [])
    chunk = block // spec.get("split", 1)
    kwargs = {"shards": (block,), "chunks": (chunk,)} if spec.get("shard") else {"chunks": (chunk,)}
    config = {} if spec.get("empty_check") else {"write_empty_chunks": True}
    group = zarr.open_group(path, mode="w")
    return group.create_array("x", shape=(n,), dtype="f8", fill_value=np.nan, compressors=codecs, config=config,
                              **kwargs)  # fmt: skip


def _pipeline_writer(array):
    """Encode with the array's own codec pipeline and store the bytes with ``store.set``."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.buffer.cpu import NDBuffer
    from zarr.core.sync import sync

    aa = array._async_array
    prototype = default_buffer_prototype()
    spec = aa.metadata.get_chunk_spec((0,), aa.config, prototype)
    chunk = spec.shape[0]

    def write(start: int, data) -> None:
        for s in range(0, len(data), chunk):
            (encoded,) = sync(aa.codec_pipeline.encode([(NDBuffer.from_numpy_array(data[s : s + chunk]), spec)]))
            key = f"x/{aa.metadata.encode_chunk_key(((start + s) // chunk,))}"
            sync(aa.store_path.store.set(key, encoded))

    return write


def _writer(array, spec: dict):
    if spec["method"] == "zarr":

        def write(start: int, data) -> None:
            array[start : start + len(data)] = data

        return write
    if spec["method"] == "pipeline":
        return _pipeline_writer(array)
    from streamacc.store._chunks import ChunkWriter

    writer = ChunkWriter(array)
    assert writer.direct
    return lambda start, data: writer.write(start, data)


def _raw_checksum(kind: str | None):
    if kind == "zlib":
        return lambda data: zlib.crc32(data)
    if kind == "crc32c":
        import google_crc32c

        return lambda data: google_crc32c.value(data)
    return lambda data: None


def _fsync_block(array, root: Path, start: int, length: int, dontneed: bool) -> None:
    """fsync the chunk files of rows ``[start, start + length)`` (and with ``dontneed`` drop their cached pages)."""
    chunk = array.chunks[0] if array.shards is None else array.shards[0]
    for i in range(start // chunk, -(-(start + length) // chunk)):
        fd = os.open(root / "x" / array.metadata.encode_chunk_key((i,)), os.O_RDONLY)
        os.fsync(fd)
        if dontneed:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)


def _blocks(n: int, block: int, compute: str):
    """(start, data, release) per block: one precomputed block, or the engine's blocks."""
    import numpy as np

    if compute == "precomputed":
        data = np.multiply.accumulate(np.full(block, RATIO))
        data.flags.writeable = False
        for start in range(0, n, block):
            yield start, data, lambda: None
        return
    import jax

    jax.config.update("jax_enable_x64", True)
    from streamacc.base._blocking import pool_size
    from streamacc.engine import make_plan, run_plan
    from streamacc.engine._memory import BlockPool
    from streamacc.recipes import get_recipe

    job = get_recipe("gp").build(n, "float64")
    plan = make_plan(job.f, job.init, job.xs, length=n, block_size=block, unroll=job.unroll)
    for b in run_plan(plan, pool=BlockPool(pool_size(3))):
        yield b.start, b.ys, b.release


def child(args: argparse.Namespace) -> None:
    import numpy as np

    from streamacc.base._threads import run_ordered

    spec = OPTIONS[args.option]
    path = args.scratch / "out.zarr"
    shutil.rmtree(path, ignore_errors=True)
    array = _create(path, args.n, args.block, spec)
    write, checksum = _writer(array, spec), _raw_checksum(spec.get("raw"))
    if args.compute == "engine":  # compile before the clock starts
        for _ in _blocks(2 * args.block, args.block, "engine"):
            pass

    def work(item):
        start, data, release = item
        write(start, data)
        checksum(data)
        if args.fsync:
            _fsync_block(array, path, start, len(data), args.dontneed)
        release()

    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    run_ordered(_blocks(args.n, args.block, args.compute), work, lambda item, r: None, depth=3, workers=3)
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    stored = sum(f.stat().st_size for f in (path / "x").rglob("*") if f.is_file() and f.name != "zarr.json")
    row = {
        "option": args.option, "n": args.n, "block": args.block, "compute": args.compute, "fsync": args.fsync,
        "dontneed": args.dontneed,
        "wall_s": t1 - t0, "user_s": r1.ru_utime - r0.ru_utime, "sys_s": r1.ru_stime - r0.ru_stime,
        "minflt": r1.ru_minflt - r0.ru_minflt, "peak_rss_mib": r1.ru_maxrss / 1024, "stored": stored,
    }  # fmt: skip
    if args.read:
        import zarr

        reread = zarr.open_array(path / "x", mode="r")
        r2, t2 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for start in range(0, args.n, args.block):
            got = reread[start : start + args.block]
        row["read_wall_s"] = time.perf_counter() - t2
        r3 = resource.getrusage(resource.RUSAGE_SELF)
        row["read_cpu_s"] = r3.ru_utime + r3.ru_stime - r2.ru_utime - r2.ru_stime
        want = np.multiply.accumulate(np.full(args.block, RATIO)) if args.compute == "precomputed" else None
        assert want is None or got.tobytes() == want.tobytes()
    shutil.rmtree(path, ignore_errors=True)
    print(json.dumps(row))


# --- parent ----------------------------------------------------------------------------


def table(rows: list[dict]) -> str:
    lines = [
        "| option | wall s | user s | sys s | minor faults / 1000 steps | peak RSS MiB | ratio | read CPU s |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in rows:
        read = f"{r['read_cpu_s']:.2f}" if "read_cpu_s" in r else ""
        lines.append(
            f"| {r['option']} | {r['wall_s']:.2f} | {r['user_s']:.2f} | {r['sys_s']:.2f} | "
            f"{1000 * r['minflt'] / r['n']:.3f} | {r['peak_rss_mib']:.0f} | {8 * r['n'] / r['stored']:.2f} | {read} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="2**28")
    p.add_argument("--block", default="2**22")
    p.add_argument("--sections", nargs="*", default=["encode", "checksum"], choices=list(SECTIONS))
    p.add_argument("--options", nargs="*", default=None, choices=list(OPTIONS), help="instead of --sections")
    p.add_argument("--compute", choices=["precomputed", "engine"], default="precomputed")
    p.add_argument("--fsync", action="store_true", help="fsync every chunk file after its block is written")
    p.add_argument("--dontneed", action="store_true", help="with --fsync: drop each file's cached pages after it")
    p.add_argument("--read", action="store_true", help="also read everything back through zarr")
    p.add_argument("--repeat", type=int, default=1, help="rounds; each option once per round, the fastest kept")
    p.add_argument("--scratch", type=Path, default=Path("/tmp/streamacc-bench-chunks"))
    p.add_argument("--out", type=Path, default=BENCH_DIR / "out" / "chunks")
    p.add_argument("--_child", dest="option", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.n, args.block = _pow2(args.size), _pow2(args.block)
    if args.option is not None:
        child(args)
        return 0
    options = args.options or list(dict.fromkeys(o for s in args.sections for o in SECTIONS[s]))
    args.scratch.mkdir(parents=True, exist_ok=True)
    best: dict[str, dict] = {}
    for _ in range(args.repeat):
        for option in options:
            cmd = [sys.executable, __file__, "--_child", option, "--size", str(args.n), "--block", str(args.block),
                   "--compute", args.compute, "--scratch", str(args.scratch)]  # fmt: skip
            cmd += ["--fsync"] * args.fsync + ["--dontneed"] * args.dontneed + ["--read"] * args.read
            row = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines()[-1])
            print(f"  {option}: {row['wall_s']:.2f} s, {row['minflt']} faults", file=sys.stderr)
            if option not in best or row["wall_s"] < best[option]["wall_s"]:
                best[option] = row
    command = "python benchmarks/bench_chunks.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = (
        f"`{command}`\n\nN = {_fmt(args.n)} float64 steps, blocks of {_fmt(args.block)}, blosc-lz4, "
        f"3 writer threads, blocks {args.compute}, fsync {'per block' if args.fsync else 'none'}"
        f"{' then POSIX_FADV_DONTNEED' if args.dontneed else ''}, "
        f"load average {os.getloadavg()[0]:.2f} at the end\n\n{table(list(best.values()))}\n"
    )
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "chunks.md").write_text(text)
    (args.out / "chunks.json").write_text(json.dumps(list(best.values()), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
