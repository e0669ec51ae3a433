"""What a block checksum costs, next to encoding and decoding the same chunk.

For one chunk of the geometric progression (float64, default 2**22 steps = 32 MiB raw)
this times, on one thread and in thread CPU time (best of --repeat, so other load on
the machine matters less): CRC-32 (zlib) and CRC-32C (google_crc32c) of the raw bytes,
CRC-32C of the blosc-lz4 bytes (what zarr's crc32c codec computes when writing and
checks on every read), blosc-lz4 compression into a reused buffer and decompression.
The GIL column is from the sources, not measured: CPython's zlib releases the GIL for
buffers over 5 KiB; google_crc32c's C extension (``_crc32c.c``) never does, so a CRC-32C
of a raw 32 MiB chunk stops every other Python thread for about 2 ms; ctypes calls (the
blosc compression of ``streamacc.store._chunks``) and numcodecs' decompression release it::

    python benchmarks/bench_checksum.py --chunk '2**22' --repeat 20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    import google_crc32c
    import numcodecs
    import numpy as np
    import zarr  # noqa: F401  (sets numcodecs.blosc.use_threads = False, as in a write)

    from streamacc.cli._expr import parse_int
    from streamacc.store._chunks import _BLOSC_OVERHEAD, _Blosc

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chunk", default="2**22", help="steps per chunk (float64)")
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args(argv)
    n = parse_int(args.chunk, name="--chunk", minimum=1)
    raw = np.multiply.accumulate(np.full(n, 1 + 1e-8)).view(np.uint8)
    blosc = _Blosc(b"lz4", 5, 1, 8, 0)
    dest = np.empty(raw.nbytes + _BLOSC_OVERHEAD, np.uint8)
    encoded = dest[: blosc.compress(raw, dest)].copy()
    decoded = np.empty_like(raw)
    codec = numcodecs.Blosc("lz4", 5, 1)
    cases = {  # name: (call, bytes it reads, releases the GIL)
        "zlib.crc32 of the raw chunk": (lambda: zlib.crc32(raw), raw.nbytes, "yes"),
        "google_crc32c of the raw chunk": (lambda: google_crc32c.value(raw), raw.nbytes, "no"),
        "google_crc32c of the encoded chunk (crc32c codec)": (lambda: google_crc32c.value(encoded), encoded.nbytes,
                                                              "no"),
        "blosc-lz4 compress into a reused buffer": (lambda: blosc.compress(raw, dest), raw.nbytes, "yes"),
        "blosc-lz4 decompress into a reused buffer": (lambda: codec.decode(encoded, out=decoded), encoded.nbytes,
                                                      "yes"),
    }  # fmt: skip
    rows = []
    for name, (fn, nbytes, gil) in cases.items():
        fn()
        best = min(_thread_seconds(fn) for _ in range(args.repeat))
        rows.append({"case": name, "ms": 1e3 * best, "gib_s": nbytes / best / 2**30, "releases_gil": gil})
    print(f"`python benchmarks/bench_checksum.py {' '.join(sys.argv[1:] if argv is None else argv)}`\n")
    print(f"chunk {raw.nbytes / 2**20:.0f} MiB raw, {encoded.nbytes / 2**20:.1f} MiB blosc-lz4; "
          f"load average {os.getloadavg()[0]:.2f}\n")  # fmt: skip
    print("| per chunk | thread CPU ms | GiB/s of its input | releases the GIL |")
    print("|---|--:|--:|---|")
    for r in rows:
        print(f"| {r['case']} | {r['ms']:.2f} | {r['gib_s']:.1f} | {r['releases_gil']} |")
    print("\n" + json.dumps(rows))
    return 0


def _thread_seconds(fn) -> float:
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


if __name__ == "__main__":
    sys.exit(main())
