"""The length does not matter: a write of 2**62 steps against one of 2**30, and reading each.

Runs ``streamacc write`` of the headline recipe at 2**30 steps to the end, then at 2**62
steps for ``--seconds`` seconds before sending it SIGINT (what Ctrl-C sends), each under
``/usr/bin/time -v``, sampling the writer's RSS every 0.2 s so that a slow growth shows
even where the peak does not. Then ``streamacc info``, ``streamacc.open`` (with the
Dataset's repr) and ``streamacc verify --blocks 4`` on both outputs, each a fresh process
under GNU time. Prints a Markdown table and writes the figures as JSON.

    python benchmarks/bench_limits.py --seconds 30 --dir /tmp/streamacc-limits
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _timing import parse_report

OPEN = "import streamacc, sys; ds = streamacc.open(sys.argv[1]); print(repr(ds).splitlines()[0]); ds.x[-3:].values"


def _report(path: str) -> dict:
    """GNU time's report at ``path``, every measure but the wall time as a float (as these figures record them)."""
    return {k: v if k == "wall_s" else float(v or 0) for k, v in parse_report(Path(path).read_text()).items()}


def _child(pid: int, deadline: float) -> int:
    """The pid of the command GNU time (``pid``) started."""
    while time.monotonic() < deadline:
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except FileNotFoundError:
            break
        if children:
            return int(children[0])
        time.sleep(0.01)
    raise RuntimeError("the command did not start")


def _rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


RSS_LIMIT_MIB = 4096
"""A writer past this RSS is killed (SIGKILL) and reported so: the machine is shared."""

GRACE_S = 60.0
"""A writer still running this long after SIGINT is killed (SIGKILL) and reported so."""


def _ctrl_c_heard() -> None:
    """SIGINT as a terminal delivers it: a benchmark started in the background of a script (``cmd &``) inherits it
    ignored, and the write would then never hear the Ctrl-C this benchmark sends."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def timed(cmd: list[str], *, interrupt_after: float | None = None) -> dict:
    """Run ``cmd`` under GNU time, sampling its RSS; with ``interrupt_after``, send it SIGINT then.

    A command that grows past ``RSS_LIMIT_MIB`` or ignores SIGINT for ``GRACE_S`` is
    killed, and ``killed`` says why.
    """
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        gnu = subprocess.Popen(["/usr/bin/time", "-v", "-o", report.name, *cmd], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=_ctrl_c_heard)  # fmt: skip
        start = time.monotonic()
        pid = _child(gnu.pid, start + 60)
        samples, sent, killed = [], None, None
        while gnu.poll() is None:
            now = time.monotonic() - start
            rss = _rss_mib(pid)
            if rss is not None:
                samples.append((round(now, 2), round(rss, 1)))
            if interrupt_after is not None and sent is None and now >= interrupt_after:
                os.kill(pid, signal.SIGINT)
                sent = time.monotonic()
            too_big = rss is not None and rss > RSS_LIMIT_MIB
            if killed is None and (too_big or (sent is not None and time.monotonic() - sent > GRACE_S)):
                killed = f"RSS past {RSS_LIMIT_MIB} MiB" if too_big else f"still running {GRACE_S:.0f} s after SIGINT"
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.2)
        out, err = gnu.communicate()
        ended = time.monotonic()
        result = {"command": " ".join(cmd), "returncode": gnu.returncode, **_report(report.name)}
    result["stdout"], result["stderr"] = out.strip()[-2000:], err.strip()[-2000:]
    result["killed"] = killed
    if sent is not None:
        result["exit_after_sigint_s"] = round(ended - sent, 2)
    if samples:
        half = [rss for t, rss in samples if t >= samples[-1][0] / 2]
        first = [rss for t, rss in samples if t < samples[-1][0] / 2]
        result["rss_first_half_max_mib"] = max(first, default=0.0)
        result["rss_second_half_max_mib"] = max(half, default=0.0)
    result["rss_samples"] = samples
    return result


def first_line(text: str) -> str:
    return text.splitlines()[0] if text else ""


def last_line(text: str) -> str:
    return text.splitlines()[-1] if text else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "streamacc-limits")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the 2**62 run writes before SIGINT")
    parser.add_argument("--short", default="2**30", help="the length written to the end")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--keep", action="store_true", help="keep the outputs (they take several GB)")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "streamacc"]
    runs: dict[str, dict] = {}
    outputs = {"short": args.dir / "short.zarr", "huge": args.dir / "huge.zarr"}
    try:
        runs["write short"] = timed([*cli, "write", str(outputs["short"]), "--size", args.short, "--no-progress",
                                     "--overwrite"])  # fmt: skip
        runs["write 2**62"] = timed([*cli, "write", str(outputs["huge"]), "--size", "2**62", "--no-progress",
                                     "--overwrite"], interrupt_after=args.seconds)  # fmt: skip
        for label, out in outputs.items():
            runs[f"info {label}"] = timed([*cli, "info", str(out)])
            runs[f"open {label}"] = timed([sys.executable, "-c", OPEN, str(out)])
            runs[f"verify {label}"] = timed([*cli, "verify", str(out), "--blocks", "4"])
    finally:
        if not args.keep:
            for out in outputs.values():
                shutil.rmtree(out, ignore_errors=True)
    print("| command | exit | wall s | user s | sys s | minor faults | peak RSS MiB | RSS max 1st / 2nd half MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for label, r in runs.items():
        halves = f"{r.get('rss_first_half_max_mib', 0):.0f} / {r.get('rss_second_half_max_mib', 0):.0f}"
        print(f"| {label} | {r['returncode']} | {r['wall_s']:.2f} | {r['user_s']:.2f} | {r['sys_s']:.2f} | "
              f"{int(r['minor_faults'])} | {r['max_rss_kib'] / 1024:.0f} | {halves} |")  # fmt: skip
    huge = runs["write 2**62"]
    ended = f"killed: {huge['killed']}" if huge["killed"] else last_line(huge["stderr"])
    print(f"\n2**62 run: SIGINT after {args.seconds:.0f} s, exited {huge.get('exit_after_sigint_s')} s later "
          f"with status {huge['returncode']}; {ended}")  # fmt: skip
    for label in ("info", "open", "verify"):
        print(f"{label} 2**62: {first_line(runs[f'{label} huge']['stdout'])}")
    if args.json is not None:
        args.json.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
