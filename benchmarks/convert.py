"""Bring a file a benchmark script wrote in its own format into the harness's storage, in the one schema.

    python benchmarks/convert.py FORMAT FILE [--note TEXT]

FORMAT is the script's (``python benchmarks/convert.py --help`` lists them: ``summaries-cost``
for ``bench_summaries.py --json``, ``virtual`` for ``bench_virtual.py --json``,
``input-memory`` for ``bench_input.py --json``, ...). The result goes to
``benchmarks/results/MACHINE/NNNN_COMMIT_DATE.json``, numbered after the runs already
there, with what the file recorded of its command, machine, load and versions, and
``converted_from`` naming it; where the file did not record its date or commit, those of
the commit that added it to the repository are taken, and the file says so.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _formats import READERS, Run
from _results import RESULTS, document, errors

ROOT = Path(__file__).resolve().parents[1]


def iso(text: str) -> str:
    """A recorded date in ISO 8601, UTC."""
    text = text.strip().replace(" UTC", "+00:00")
    when = dt.datetime.fromisoformat(text.replace(" ", "T", 1))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).isoformat(timespec="seconds")


def added(path: Path) -> tuple[str, str]:
    """The commit that added ``path`` to the repository, and its date ("" and now when it was never added)."""
    out = subprocess.run(["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%h %cI", "-1", "--", str(path)],
                         capture_output=True, text=True).stdout.split()  # fmt: skip
    return (out[0], iso(out[1])) if out else ("", dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))


def convert(fmt: str, path: Path, note: str = "") -> dict[str, Any]:
    """The document of ``path``, read as ``fmt``."""
    text = path.read_text()
    run: Run = READERS[fmt](text if path.suffix == ".md" else json.loads(text))
    first_commit, first_date = added(path)
    when = iso(run.datetime) if run.datetime else first_date
    git = run.git.replace("(dirty)", "-dirty").replace(" ", "")
    commit: dict[str, Any] = {"id": git.removesuffix("-dirty") or first_commit or "unknown",
                              "dirty": git.endswith("-dirty"), "project": "streamacc"}  # fmt: skip
    if not git:
        commit["recorded"] = False
        commit["note"] = "the commit that added the file; the file did not record the one it measured"
    machine = dict(run.machine)
    if not run.datetime:
        machine.setdefault("description", "")
        machine["date_recorded"] = False
    rel = path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path
    command = run.command or next(iter(run.benchmarks[0]["extra_info"]["commands"].values()))
    return document(datetime=when, command=command,
                    machine={k: v for k, v in machine.items() if v != ""}, commit=commit, benchmarks=run.benchmarks,
                    note="; ".join(x for x in (note, run.note) if x), converted_from=str(rel))  # fmt: skip


def save(doc: dict[str, Any], storage: Path = RESULTS) -> Path:
    """``doc`` into pytest-benchmark's storage: ``MACHINE/NNNN_COMMIT_DATE.json``, numbered after the others."""
    python = ".".join((doc["machine_info"].get("python_version") or "3.11").split(".")[:2])
    folder = storage / f"Linux-CPython-{python}-64bit"
    folder.mkdir(parents=True, exist_ok=True)
    numbers = [int(p.name[:4]) for p in folder.glob("[0-9][0-9][0-9][0-9]_*.json")]
    stamp = re.sub(r"[-:]", "", doc["datetime"][:19]).replace("T", "_")
    dirty = "_uncommited-changes" if doc["commit_info"].get("dirty") else ""
    path = folder / f"{max(numbers, default=0) + 1:04d}_{doc['commit_info']['id']}_{stamp}{dirty}.json"
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("format", choices=sorted(READERS))
    p.add_argument("file", type=Path)
    p.add_argument("--note", default="", help="what this run measured that the runs before it did not")
    p.add_argument("--storage", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    doc = convert(args.format, args.file, args.note)
    wrong = errors(doc)
    if wrong:
        print("\n".join(wrong), file=sys.stderr)
        return 1
    print(save(doc, args.storage))
    return 0


if __name__ == "__main__":
    sys.exit(main())
