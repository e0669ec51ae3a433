"""Run a command under ``/usr/bin/time -v`` and read back what it reports.

Wall time alone hides where time goes on this machine (the kernel zero-filling fresh
pages counts as system time), so every timed command records wall, user and system
CPU, minor and major page faults and peak RSS, from GNU time's own report.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

__all__ = ["parse_report", "seconds", "time_command"]

_FIELDS = {
    "Elapsed (wall clock) time (h:mm:ss or m:ss)": "wall_s",
    "User time (seconds)": "user_s",
    "System time (seconds)": "sys_s",
    "Minor (reclaiming a frame) page faults": "minor_faults",
    "Major (requiring I/O) page faults": "major_faults",
    "Maximum resident set size (kbytes)": "max_rss_kib",
    "Percent of CPU this job got": "cpu_percent",
}


def seconds(text: str) -> float:
    """GNU time's ``h:mm:ss`` or ``m:ss.ss`` as seconds."""
    total = 0.0
    for part in text.split(":"):
        total = total * 60 + float(part)
    return total


def parse_report(text: str) -> dict:
    """The measures of a ``/usr/bin/time -v`` report: wall and CPU seconds as floats, the others as ints.

    A measure GNU time could not take (``?``) is None; one the report lacks is left out.
    """
    result: dict = {}
    for line in text.splitlines():
        key, _, value = line.strip().rpartition(": ")
        name = _FIELDS.get(key)
        if name is None:
            continue
        value = value.strip().rstrip("%")
        if name == "wall_s":
            result[name] = seconds(value)
        elif name in ("user_s", "sys_s"):
            result[name] = float(value)
        else:
            result[name] = int(value) if re.fullmatch(r"\d+", value) else None
    return result


def time_command(
    cmd: list[str], *, env: dict | None = None, cwd: Path | None = None, timeout: float | None = 3600
) -> dict:
    """Run ``cmd`` under GNU time; return its exit code and the measures above (faults as ints).

    ``max_rss_kib`` is the largest single process of the command (GNU time reports the
    maximum over the process and its waited-for children, not their sum).
    """
    gnu_time = shutil.which("time", path="/usr/bin:/bin") or "/usr/bin/time"
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report:
        proc = subprocess.run(
            [gnu_time, "-v", "-o", report.name, *cmd],
            env={**os.environ, **(env or {})},
            cwd=cwd,
            timeout=timeout,
            capture_output=True,
            text=True,
        )
        text = Path(report.name).read_text()
    return {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr[-2000:], **parse_report(text)}
