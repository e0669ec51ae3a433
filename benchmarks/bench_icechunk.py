"""What writing into an Icechunk repository costs: the time of each commit, early and late, and the whole write.

Writes the geometric progression (float64, blosc-lz4, summaries on) four ways, in one
process, alternately for ``--repeat`` rounds: into a plain folder; into a local Icechunk
repository at the default commit interval; and, to see how a commit's cost grows with the
output, into repositories that commit after every block, with streamacc's manifest
splitting (``MANIFEST_SPLIT`` chunks of the step axis per manifest) and with Icechunk's
default configuration (one manifest, rewritten by each commit). For the per-block runs it
records each commit's wall time and compares the median of the first and last tenth::

    python benchmarks/bench_icechunk.py --size '2**26' --block-size '2**16' --repeat 1 \\
        --json benchmarks/results/icechunk_2p26.json
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for where in (ROOT, ROOT / "benchmarks"):
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))


def main(argv: list[str] | None = None) -> int:
    import icechunk
    from _record import load, save

    import streamacc
    from streamacc import testing
    from streamacc.cli import main as cli, parse_int
    from streamacc.store import IcechunkTarget

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", default="2**26", help="steps")
    p.add_argument("--block-size", default=None, help="steps per block (one commit each in the per-block runs); "
                   "streamacc's own when omitted")  # fmt: skip
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    size = parse_int(args.size, name="--size", minimum=1)
    block = None if args.block_size is None else parse_int(args.block_size, name="--block-size", minimum=1)
    common = ["--size", str(size), *(["--block-size", str(block)] if block else []), "--no-progress"]

    timings: list[float] = []
    real_commit = IcechunkTarget.commit

    def timed(self: Any, message: str) -> str | None:
        start = time.perf_counter()
        try:
            return real_commit(self, message)
        finally:
            timings.append(time.perf_counter() - start)

    IcechunkTarget.commit = timed  # type: ignore[method-assign]
    work = Path(tempfile.mkdtemp(prefix="bench-icechunk-"))
    rows: list[dict[str, Any]] = []
    try:
        for _ in range(args.repeat):
            for label in ("plain", "icechunk", "icechunk-per-block", "icechunk-per-block-unsplit"):
                where = work / label
                shutil.rmtree(where, ignore_errors=True)
                url = str(where) if label == "plain" else f"icechunk://{where}"
                if label.endswith("unsplit"):
                    icechunk.Repository.create(icechunk.local_filesystem_storage(str(where)))
                timings.clear()
                before = load()
                with testing.patched("store.icechunk_commit_seconds", 0.0 if "per-block" in label else 10.0):
                    start = time.perf_counter()
                    assert cli(["write", url, *common]) == 0
                    wall = time.perf_counter() - start
                row: dict[str, Any] = {"label": label, "wall_s": round(wall, 3), "load_before": before}
                if timings:
                    tenth = max(1, len(timings) // 10)
                    first, last = statistics.median(timings[:tenth]), statistics.median(timings[-tenth - 1 : -1])
                    row |= {
                        "commits": len(timings),
                        "commit_s_total": round(sum(timings), 3),
                        "commit_ms_first_tenth": round(first * 1e3, 2),
                        "commit_ms_last_tenth": round(last * 1e3, 2),
                        "last_over_first": round(last / first, 2),
                    }
                rows.append(row)
                print(row, file=sys.stderr, flush=True)
                if block is None:  # the size streamacc chose, the same for every side
                    block = streamacc.info(url).block_size
                shutil.rmtree(where, ignore_errors=True)
    finally:
        IcechunkTarget.commit = real_commit  # type: ignore[method-assign]
        shutil.rmtree(work, ignore_errors=True)
    plain = statistics.median(r["wall_s"] for r in rows if r["label"] == "plain")
    ratios = {
        label: round(statistics.median(r["wall_s"] for r in rows if r["label"] == label) / plain, 2)
        for label in ("icechunk", "icechunk-per-block", "icechunk-per-block-unsplit")
    }
    print(ratios, file=sys.stderr)
    if args.json is not None:
        command = shlex.join(["python", "benchmarks/bench_icechunk.py", *(argv if argv is not None else sys.argv[1:])])
        save(args.json, command, {"size": size, "block_size": block, "runs": rows, "wall_over_plain": ratios})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
