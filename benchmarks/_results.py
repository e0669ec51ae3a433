"""The results' one schema (``schema.json``): checking a file against it, reading every file, making one.

Every file of ``benchmarks/results/MACHINE/`` is one run of the harness, as
pytest-benchmark's storage keeps it (``NNNN_COMMIT_DATE.json``, numbered in the order the
runs were saved): its ``machine_info``, ``commit_info``, ``datetime`` and ``benchmarks``,
plus the command that made it. Each benchmark's ``extra_info`` holds what streamacc
measures beyond pytest-benchmark's timing of rounds: the commands it ran, the harness
command that measures it again, its figures (name: value), its tables (rows of name:
value) and the plots drawn from them. The documentation's benchmark pages are generated
from these fields alone.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCHEMA = HERE / "schema.json"
RESULTS = HERE / "results"
FORMAT_VERSION = "5.3.1"
"""The pytest-benchmark version whose file format the converted files follow."""

__all__ = ["RESULTS", "SCHEMA", "document", "errors", "load_all", "stats"]


def errors(doc: Any) -> list[str]:
    """What is wrong with ``doc`` against the schema (nothing: an empty list)."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in validator.iter_errors(doc)]


def load_all(folder: Path = RESULTS) -> list[tuple[Path, dict[str, Any]]]:
    """Every result file under ``folder`` with its document, oldest run first."""
    found = [(path, json.loads(path.read_text())) for path in sorted(folder.glob("*/*.json"))]
    return sorted(found, key=lambda item: (item[1].get("datetime", ""), item[0].name))


def stats(walls: list[float]) -> dict[str, Any] | None:
    """pytest-benchmark's statistics of round times, for files converted from rounds it did not time."""
    if not walls:
        return None
    mean = statistics.fmean(walls)
    q = statistics.quantiles(walls, n=4, method="inclusive") if len(walls) > 1 else [walls[0]] * 3
    return {
        "min": min(walls), "max": max(walls), "mean": mean,
        "stddev": statistics.stdev(walls) if len(walls) > 1 else 0.0,
        "rounds": len(walls), "median": statistics.median(walls), "iqr": q[2] - q[0], "q1": q[0], "q3": q[2],
        "total": sum(walls), "iterations": 1, "ops": 1 / mean if mean else 0.0, "data": list(walls),
    }  # fmt: skip


def document(*, datetime: str, command: str, machine: dict[str, Any], commit: dict[str, Any],
             benchmarks: list[dict[str, Any]], note: str = "", converted_from: str = "") -> dict[str, Any]:  # fmt: skip
    """A result file in the schema, for results that pytest-benchmark did not save itself."""
    doc: dict[str, Any] = {
        "machine_info": machine,
        "commit_info": commit,
        "benchmarks": benchmarks,
        "datetime": datetime,
        "version": FORMAT_VERSION,
        "command": command,
    }
    if note:
        doc["note"] = note
    if converted_from:
        doc["converted_from"] = converted_from
    return doc


def entry(group: str, name: str, *, params: dict[str, Any] | None, commands: dict[str, str], reproduce: str,
          figures: dict[str, Any] | None = None, tables: dict[str, list[dict[str, Any]]] | None = None,
          plots: list[dict[str, Any]] | None = None, walls: list[float] | None = None,
          note: str = "", module: str = "") -> dict[str, Any]:  # fmt: skip
    """One benchmark of a result file, as pytest-benchmark's ``as_dict`` lays it out."""
    extra: dict[str, Any] = {"commands": commands, "reproduce": reproduce, "figures": figures or {},
                             "tables": {k: v for k, v in (tables or {}).items() if v}}  # fmt: skip
    if plots:
        extra["plots"] = plots
    if note:
        extra["note"] = note
    return {
        "group": group,
        "name": name,
        "fullname": f"{module}::{name}" if module else name,
        "params": params,
        "param": None if not params else "-".join(map(str, params.values())),
        "extra_info": extra,
        "options": {},
        "stats": stats(walls or []),
    }
