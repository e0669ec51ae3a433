"""Move the pinned test, lint and docs tools of .ci/constraints.txt to their newest releases, on purpose.

Run it in a fresh virtual environment from the checkout's root, then run the test suite and commit what changed:

    python -m venv /tmp/tools && /tmp/tools/bin/python .ci/upgrade_tools.py && /tmp/tools/bin/python -m pytest -q

It installs the package with its test and bench extras under the constraints' other pins (the AWS stack, Icechunk),
leaving the tools free, so pip takes each tool's newest release that fits; then it rewrites each tool's pin, below
the constraints' "The test, lint and docs tools" line, to the version installed. Nothing else is changed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

CONSTRAINTS = Path(__file__).resolve().parent / "constraints.txt"
MARK = "# The test, lint and docs tools"


def _split(text: str) -> tuple[str, str]:
    head, found, tail = text.partition(MARK)
    if not found:
        raise SystemExit(f"{CONSTRAINTS}: no line beginning {MARK!r}; the tools' pins follow it")
    return head, found + tail


def main() -> int:
    head, tools = _split(CONSTRAINTS.read_text())
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as others:
        others.write(head)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--upgrade", "-c", others.name,
                    "-e", ".[test,bench]"], check=True, cwd=CONSTRAINTS.parents[1])  # fmt: skip
    lines = []
    for line in tools.splitlines():
        pin = re.fullmatch(r"([A-Za-z0-9._-]+)==(\S+)", line.strip())
        if pin is not None:
            line = f"{pin[1]}=={metadata.version(pin[1])}"
            if line != pin[0]:
                print(f"{pin[0]} -> {line}")
        lines.append(line)
    CONSTRAINTS.write_text(head + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
