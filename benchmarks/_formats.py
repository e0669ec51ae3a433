"""The scripts' own JSON formats, read into the results' schema: one reader per script.

The scenarios that stay scripts (the 2**32 headline, the 2**62 limits, the suites of
peers, accuracy, scale-out, ...) write JSON of their own; the harness runs them
(``test_scripts.py``) and reads what they wrote with :data:`READERS`, and
``convert.py`` reads the files those scripts wrote before the harness existed the same
way. Each reader returns the run's facts as far as the file records them
(:class:`Run`) and its benchmarks, each with its commands, figures and tables.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Callable
from typing import Any

from _results import entry

WORKERS = (1, 2, 4, 8, 16, 32, 64)
"""The workers the scale-out model predicts for (``bench_dist.WORKERS``)."""


@dataclasses.dataclass
class Run:
    """What a script's file says about its run, beside its benchmarks."""

    benchmarks: list[dict[str, Any]]
    command: str = ""
    datetime: str = ""
    machine: dict[str, Any] = dataclasses.field(default_factory=dict)
    git: str = ""
    note: str = ""


def harness(test: str, *options: str) -> str:
    """The harness command that measures a script's scenario again."""
    words = ["python -m pytest", f"benchmarks/test_scripts.py::{test}", *options, "--benchmark-autosave"]
    return " ".join(w for w in words if w)


def pow2(n: Any) -> str:
    """``2**k`` for a power of two (an int or its text), else the value as it is."""
    if isinstance(n, str):
        return n
    return f"2**{n.bit_length() - 1}" if isinstance(n, int) and n > 0 and n & (n - 1) == 0 else str(n)


def python(cmd: str) -> str:
    """A recorded command as a reader would type it: ``python``, not the interpreter's path."""
    cmd = re.sub(r"\S*/bin/python3?(\.\d+)?", "python", cmd or "")
    return re.sub(r"(?<=\s)/\S*?/(benchmarks|tests)/", r"\1/", cmd).strip()


def timing(r: dict[str, Any], side: str, **extra: Any) -> dict[str, Any]:
    """One process's row, whatever the script called its fields."""
    rss_mb = r.get("peak_rss_mb")
    if rss_mb is None and r.get("max_rss_kib") is not None:
        rss_mb = round(r["max_rss_kib"] * 1024 / 1e6, 1)
    if rss_mb is None and r.get("peak_rss_mib") is not None:
        rss_mb = round(r["peak_rss_mib"] * 2**20 / 1e6, 1)
    if rss_mb is None and r.get("peak_rss_kib") is not None:
        rss_mb = round(r["peak_rss_kib"] * 1024 / 1e6, 1)
    row: dict[str, Any] = {"side": side, **extra}
    for key, name in (("wall_s", "wall s"), ("user_s", "user s"), ("sys_s", "system s")):
        if r.get(key) is not None:
            row[name] = round(r[key], 3)
    if "user s" in row and "system s" in row:
        row["CPU s"] = round(row["user s"] + row["system s"], 2)
    for keys, name in ((("minor_faults", "minflt"), "minor faults"), (("major_faults", "majflt"), "major faults")):
        value = next((r[k] for k in keys if r.get(k) is not None), None)
        if value is not None:
            row[name] = int(value)
    if rss_mb is not None:
        row["peak RSS MB"] = rss_mb
    load = r.get("load_before")
    if load:
        row["load"] = load[0] if isinstance(load, list) else round(load, 2)
    return row


def scalars(d: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The scalar fields of ``d``, rounded for reading."""
    out = {}
    for k, v in d.items():
        if k in skip or isinstance(v, (dict, list)):
            continue
        out[k] = round(v, 4) if isinstance(v, float) else v
    return out


def walls(rows: list[dict[str, Any]]) -> list[float]:
    return [r["wall s"] for r in rows if isinstance(r.get("wall s"), (int, float))]


# --- the run's facts, from the three ways the scripts recorded them ----------------------------------------------


def record_machine(d: dict[str, Any]) -> tuple[dict[str, Any], str, str]:
    """``_record.py``'s ``machine`` and ``_machine.py``'s: the machine, its git and date."""
    m = d.get("machine") or {}
    if not isinstance(m, dict) or ("note" in m and len(m) == 1):
        return ({"description": m["note"]} if isinstance(m, dict) else {"description": str(m)}), "", ""
    info: dict[str, Any] = {}
    if m.get("cores") or m.get("cpus"):
        info["cores"] = m.get("cores") or m.get("cpus")
    if m.get("memory_gib") or m.get("mem_gib"):
        info["memory_gib"] = m.get("memory_gib") or m.get("mem_gib")
    if m.get("cpu"):
        info["cpu_model"] = m["cpu"]
    if m.get("python"):
        info["python_version"] = m["python"]
    if m.get("versions"):
        info["versions"] = {k: str(v) for k, v in m["versions"].items()}
    start = m.get("load_start") or next((r.get("load_before") for r in d.get("records", []) if r.get("load_before")),
                                        None)  # fmt: skip
    end = m.get("load_end") or d.get("load_after")
    if start:
        info["load_start"] = list(start)
    if end:
        info["load_end"] = list(end)
    return info, str(m.get("git", "")), str(m.get("date", ""))


def meta_machine(meta: dict[str, Any]) -> dict[str, Any]:
    """``bench_suite.py``'s and ``bench_accuracy.py``'s ``meta``."""
    info: dict[str, Any] = {}
    if meta.get("machine"):
        info["description"] = str(meta["machine"])
    versions = dict(meta.get("versions") or {})
    versions |= {k: meta[k] for k in ("jax", "numpy") if k in meta}
    if versions:
        info["versions"] = {k: str(v) for k, v in versions.items()}
    for key in ("load_start", "load_end"):
        if meta.get(key) is not None:
            info[key] = [round(meta[key], 2)] if isinstance(meta[key], (int, float)) else list(meta[key])
    return info


# --- one reader per script ----------------------------------------------------------------------------------------


def headline(d: Any) -> Run:
    """``headline.py``: one document, or a list of them (several runs, or releases alternating)."""
    docs = d if isinstance(d, list) else [d]
    rows, floors = [], []
    for i, r in enumerate(docs):
        side = r.get("version", "streamacc write")
        extra = {"round": r.get("order", i + 1)}
        row = timing(r, side, **extra)
        row |= {"GiB/s": round(r["gib_per_s"], 3), "stored bytes": r["disk_bytes"],
                "blocks checked": f"{r['sampled_blocks']} of {r['of_blocks']}",
                "bit-identical": r["bit_identical"]}  # fmt: skip
        rows.append(row)
        if r.get("floor"):
            fl = r["floor"]
            for way in fl.get("disk_ways") or [fl["disk"]]:
                floors.append({"floor": f"disk, {way.get('writers', 1)} writer(s)", "seconds": round(way["seconds"], 2),
                               "GiB/s": round(way["gib_per_s"], 3),
                               "wall / it": round(r["wall_s"] / way["seconds"], 2)})  # fmt: skip
            floors.append({"floor": f"carry-only scan, unroll {fl['carry_only'].get('unroll', '')}",
                           "seconds": round(fl["carry_only"]["wall_s"], 2),
                           "wall / it": round(r["wall_s"] / fl["carry_only"]["wall_s"], 2)})  # fmt: skip
    first = docs[0]
    size = pow2(first["size"])
    floor = bool(floors)
    group = "headline-floor" if floor else "headline"
    figures: dict[str, Any] = {}
    if floor:
        figures = {"wall / floor": round(first["floor_ratio"], 2), "wall s": round(first["wall_s"], 2)}
    elif len(docs) > 1:
        for side in dict.fromkeys(r["side"] for r in rows):
            mine = [r["wall s"] for r in rows if r["side"] == side]
            figures[f"{side}: median wall s"] = round(statistics.median(mine), 2)
    b = entry(group, f"test_{group.replace('-', '_')}[{size}]", params={"size": size},
              commands={"streamacc write": python(first["command"]).replace(str(first["size"]), size)},
              reproduce=harness(f"test_{group.replace('-', '_')}", f"--size '{size}'"), figures=figures,
              tables={"runs": rows, "floor": floors}, walls=walls(rows), module="test_scripts.py")  # fmt: skip
    machine, git, date = record_machine(first)
    command = f"python benchmarks/headline.py --size '{size}'{' --floor' if floor else ''} --json FILE"
    return Run([b], machine=machine, git=git, datetime=date, note=first.get("code", ""), command=command)


def summaries_cost(d: dict[str, Any]) -> Run:
    """``bench_summaries.py``: the writes with and without summaries, alternating (and ``--against``)."""
    size = d["size"]
    rows = []
    for side, runs in d["runs"].items():
        for i, r in enumerate(runs):
            rows.append(timing(r, "ref" if side == "against" else side, round=i + 1))
    rows.sort(key=lambda r: r["round"])
    med = d["median"]
    figures = {
        "median CPU s, summaries": round(med["summaries"]["cpu_s"], 2),
        "median CPU s, no summaries": round(med["no-summaries"]["cpu_s"], 2),
        "summaries' extra CPU %": round(100 * d["summaries_extra_cpu"], 1),
        "summaries' extra wall %": round(100 * d["summaries_extra_wall"], 1),
        "data chunks identical": d["data_chunks_identical"],
    }
    if d.get("against"):
        figures["ref's extra CPU over no summaries %"] = round(100 * d["against_extra_cpu"], 1)
    write = f"python -m streamacc write OUT --size {size} --no-progress"
    commands = {"summaries": write, "no-summaries": f"{write} --no-summaries"}
    if d.get("against"):
        commands["ref"] = f"PYTHONPATH=OTHER_CHECKOUT python -m streamacc write OUT --size {size} --no-progress"
    ref = " --ref OTHER_CHECKOUT" if d.get("against") else ""
    b = entry("summaries-cost", f"test_summaries_cost[{size}]", params={"size": size}, commands=commands,
              reproduce=f"python -m pytest benchmarks/test_summaries.py::test_summaries_cost --size '{size}' "
                        f"--repeat {d['pairs']}{ref} --benchmark-autosave",
              figures=figures, tables={"runs": rows}, module="test_summaries.py",
              note=(f"ref: {d['against_code']}" if d.get("against_code") else ""))  # fmt: skip
    machine, git, date = record_machine(d)
    note = d.get("code", "")
    return Run([b], machine=machine, git=git, datetime=date, note=note,
               command=f"python benchmarks/bench_summaries.py --size '{size}' --pairs {d['pairs']}"
                       f"{' --against OTHER_CHECKOUT' if d.get('against') else ''} --json FILE")  # fmt: skip


def one_table(d: dict[str, Any], group: str, test: str, tables: dict[str, list[dict[str, Any]]], *,
              commands: dict[str, str], reproduce: str, module: str, command: str) -> Run:  # fmt: skip
    """A run of one benchmark whose figures are ``tables``, on the machine (and date) file ``d`` records."""
    b = entry(group, test, params=None, commands=commands, reproduce=reproduce, tables=tables, module=module)
    machine, git, date = record_machine(d)
    return Run([b], machine=machine, git=git, datetime=date, command=command)


def summaries_slices(d: dict[str, Any]) -> Run:
    """``bench_summaries.py --slices``: the reductions alone, per slice size, in thread CPU ms."""
    rows = []
    for key, v in d["slices"].items():
        label = f"{int(key) // 1024} KiB slices, cold" if key.isdigit() else f"{key.replace('_', ' ')} (1 MiB slices)"
        rows.append({"block": label, "best ms": round(v["best_ms"], 2), "median ms": round(v["median_ms"], 2)})
    return one_table(d, "summaries-slices", "test_summaries_slices", {"reductions": rows},
                     commands={"reductions": "streamacc.summaries._pyramid.block_pieces(block, 0, 4096, 2**32), "
                                             "thread CPU"},
                     reproduce="python -m pytest benchmarks/test_summaries.py::test_summaries_slices "
                               "--benchmark-autosave",
                     module="test_summaries.py", command="python benchmarks/bench_summaries.py --slices")  # fmt: skip


def summaries_xla(d: dict[str, Any]) -> Run:
    """``bench_summaries.py --xla``: one block's window reductions by numpy's pieces and by XLA, in CPU ms."""
    rows = [
        {"block": key.replace("_", " ").replace("2p22", "2**22"), "scan ms": v["scan_median_ms"],
         "numpy pieces ms": v["numpy_pieces_median_ms"], "XLA after the scan ms": v["xla_after_median_ms"],
         "XLA inside the scan, more ms": v["xla_fused_less_scan_median_ms"]}
        for key, v in d["xla"].items()
    ]  # fmt: skip
    command = "python benchmarks/bench_summaries.py --xla"
    return one_table(d, "summaries-xla", "test_summaries_xla", {"reductions (medians)": rows},
                     commands={"reductions": "numpy's pieces, a jitted function of the block, the scan's own "
                                             "returning them"},
                     reproduce=command, module="bench_summaries.py", command=command)  # fmt: skip


def icechunk(d: dict[str, Any]) -> Run:
    """``bench_icechunk.py``: a write into a plain folder and into an Icechunk repository, and its commits' cost."""
    rows = []
    for r in d["runs"]:
        row = timing(r, r["label"], size=pow2(d["size"]), **{"block size": pow2(d["block_size"])})
        for key, name in (("commits", "commits"), ("commit_ms_first_tenth", "commit ms, first tenth"),
                          ("commit_ms_last_tenth", "commit ms, last tenth"), ("last_over_first", "last / first")):
            if key in r:
                row[name] = r[key]
        row["wall / plain"] = d["wall_over_plain"].get(r["label"], 1.0)
        rows.append(row)  # fmt: skip
    command = python(d["command"])
    return one_table(d, "icechunk", "test_icechunk", {"writes": rows}, commands={"write": command},
                     reproduce=command, module="bench_icechunk.py", command=command)  # fmt: skip


def measured(group_of: Callable[[str], str]) -> Callable[[dict[str, Any]], Run]:
    """A file of ``_record.py`` (``bench_input``, ``bench_virtual``, ``bench_plot``, ``bench_heat``): its
    records, and its figures, split into benchmarks by ``group_of(figure section)``."""

    def read(d: dict[str, Any]) -> Run:
        machine, git, date = record_machine(d)
        rows = []
        for r in d["records"]:
            extra = {k: r[k] for k in ("tree",) if k in r} | ({"size": pow2(r["size"])} if "size" in r else {})
            row = timing(r, r["label"], **extra)
            row |= {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
                    if k in ("run_s", "first_s", "median_after_first_s", "call_s", "stored_bytes")}  # fmt: skip
            rows.append(row)
        commands = {}
        for r in d["records"]:
            commands.setdefault(r["label"], python(r["command"]).split(" -c ")[0] if " -c " in r["command"]
                                else python(r["command"]))  # fmt: skip
        sections = [k for k in ("summary", "write", "slice", "read", "importtime_plot_s") if k in d]
        out = []
        for section in sections:
            group = group_of(section)
            if group is None:
                continue
            value = d[section]
            figures: dict[str, Any] = {}
            tables: dict[str, list[dict[str, Any]]] = {}
            if isinstance(value, dict) and all(isinstance(v, dict) for v in value.values()):
                tables["summary"] = [{"of": k, **scalars(v)} for k, v in value.items()]
            elif isinstance(value, dict):
                figures = {k: (", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in value.items()}
            else:
                figures = {section: value}
            mine = {"write": ("carry-only scan", "virtual", "virtual --no-summaries", "stored write"),
                    "slice": ("slices", "virtual"), "read": ("read", "write")}.get(section)  # fmt: skip
            section_rows = [r for r in rows if mine is None or r["side"].startswith(mine)]
            for b in out:
                if b["group"] == group:  # a second section of the same scenario
                    b["extra_info"]["figures"] |= figures
                    break
            else:
                out.append(entry(group, f"test_{group.replace('-', '_')}", params=_params(d, group),
                                 commands={k: v for k, v in commands.items()
                                           if any(r["side"] == k for r in section_rows)} or commands,
                                 reproduce=_reproduce(d, group), figures=figures,
                                 tables={**tables, "runs": section_rows}, walls=None))  # fmt: skip
        return Run(out, command=d["command"], machine=machine, git=git, datetime=date, note=d.get("code", ""))

    return read


def _params(d: dict[str, Any], group: str) -> dict[str, Any] | None:
    if group.startswith("virtual"):
        return {"size": pow2(d["read_size"] if group == "virtual-read" else d["size"])}
    if group == "input-memory":
        return {"size": " ".join(pow2(s) for s in d["sizes"])}
    return None


def _reproduce(d: dict[str, Any], group: str) -> str:
    if group.startswith("virtual"):
        size = pow2(d["read_size"] if group == "virtual-read" else d["size"])
        test = group.replace("-", "_")
        return f"python -m pytest benchmarks/test_virtual.py::test_{test} --size '{size}' --benchmark-autosave"
    if group == "input-memory":
        sizes = " ".join(f"--size '{pow2(s)}'" for s in d["sizes"])
        ref = " --ref OTHER_CHECKOUT" if "ref" in d.get("trees", {}) else ""
        return f"python -m pytest benchmarks/test_input.py::test_input_memory {sizes}{ref} --benchmark-autosave"
    return harness(f"test_{group.replace('-', '_')}")


VIRTUAL = measured(lambda s: {"write": "virtual-write", "slice": "virtual-slices", "read": "virtual-read"}.get(s))
INPUT = measured(lambda s: "input-memory" if s == "summary" else None)
PLOT = measured(lambda s: "plot-cold")
HEAT = measured(lambda s: "heat-alternating" if s == "summary" else None)


def suite(group: str) -> Callable[[dict[str, Any]], Run]:
    """``bench_suite.py``: every approach at every length (``suite``), or the peers at one (``peers``)."""

    def read(d: dict[str, Any]) -> Run:
        meta = d["meta"]
        rows = [timing(r, r["approach"], size=pow2(r["size"]), status=r["status"]) for r in d["runs"]]
        tables: dict[str, list[dict[str, Any]]] = {"runs": rows}
        plots = []
        if d.get("summary") and group == "suite":
            tables["summary"] = [{"approach": r["approach"], "size": r["size"], "status": r["status"],
                                  "wall s": r.get("wall_s"), "GiB/s": r.get("gib_per_s"),
                                  "peak RSS MiB": r.get("peak_rss_mib"), "wall / api": r.get("wall_ratio"),
                                  "RSS / api": r.get("rss_ratio"), "values": r.get("values")}
                                 for r in d["summary"]]  # fmt: skip
            plots = [{"name": "rss", "table": "summary", "x": "size", "y": "peak RSS MiB", "series": "approach",
                      "xscale": "log2", "yscale": "log", "title": "peak RSS against length"},
                     {"name": "throughput", "table": "summary", "x": "size", "y": "GiB/s", "series": "approach",
                      "xscale": "log2", "yscale": "log", "title": "output written (GiB/s) against length"}]  # fmt: skip
        figures = {}
        ok = [r for r in rows if r.get("status") == "ok" and "wall s" in r]
        base = [r["wall s"] for r in ok if r["side"] == "streamacc-cli"]
        for side in dict.fromkeys(r["side"] for r in ok):
            mine = [r["wall s"] for r in ok if r["side"] == side]
            if group == "peers" and base:
                ratio = statistics.median(mine) / statistics.median(base)
                figures[f"{side}: median wall / streamacc-cli"] = round(ratio, 2)
        sizes = sorted({r["size"] for r in d["runs"]})
        approaches = meta.get("args", {}).get("approaches") or []
        options = " ".join(f"--size '{pow2(s)}'" for s in sizes)
        b = entry(group, f"test_{group}", params={"size": " ".join(pow2(s) for s in sizes)},
                  commands={"suite": python(meta["command"])},
                  reproduce=harness(f"test_{group}", options, f"--repeat {meta.get('args', {}).get('repeat', 1)}",
                                    ("--approaches " + " ".join(approaches)) if group == "peers" else ""),
                  figures=figures, tables=tables, plots=plots, module="test_scripts.py")  # fmt: skip
        git = str(meta.get("git", ""))
        return Run([b], command=python(meta["command"]), machine=meta_machine(meta), git=git,
                   datetime=str(meta.get("date", "")))

    return read


def overview(d: dict[str, Any]) -> Run:
    """``bench_overview.py``: the headline with and without summaries in pairs; a picture three ways, cold."""
    size = pow2(d["size"])
    writes = [timing(w, "summaries" if w["summaries"] else "no-summaries", round=w["pair"] + 1) for w in d["writes"]]
    reads = [timing(v, k) for k, v in d["reads_cold"].items()]
    ratios = ", ".join(f"{r['wall_s']:.2f}" for r in d["ratios_on_over_off"])
    share = next((w["summary_percent"] for w in d["writes"] if w.get("summary_percent")), None)
    figures = {"wall with summaries / without, pair by pair": ratios}
    if share is not None:
        figures["summaries' share of the stored bytes %"] = share
    commands = {"write": f"python -m streamacc write OUT --size {size} --no-progress [--no-summaries]"}
    commands |= {k: python(v["command"]) for k, v in d["reads_cold"].items()}
    b = entry("overview", f"test_overview[{size}]", params={"size": size}, commands=commands,
              reproduce=harness("test_overview", f"--size '{size}'", "--repeat 2"), figures=figures,
              tables={"writes": writes, "reads from a cold page cache": reads}, walls=None,
              module="test_scripts.py")  # fmt: skip
    return Run([b], command=f"python benchmarks/bench_overview.py --size '{size}' --dir DIR --pairs 2")


def profile(group: str = "profile") -> Callable[[dict[str, Any]], Run]:
    """``bench_profile.py``: the headline under perf, its CPU by category (the startup run's beside)."""

    def read(d: dict[str, Any]) -> Run:
        run, start = d["run"], d.get("startup") or {"categories": {}, "cpu_s": 0.0}
        cats = sorted(set(run["categories"]) | set(start["categories"]),
                      key=lambda c: (-run["categories"].get(c, 0.0), c))  # fmt: skip
        rows = [{"category": c, "CPU s": round(run["categories"].get(c, 0.0), 2),
                 "share %": round(100 * run["categories"].get(c, 0.0) / run["cpu_s"], 1),
                 "startup CPU s": round(start["categories"].get(c, 0.0), 2)} for c in cats]  # fmt: skip
        rows.append({"category": "all", "CPU s": round(run["cpu_s"], 2), "share %": 100.0,
                     "startup CPU s": round(start.get("cpu_s", 0.0), 2)})  # fmt: skip
        size = re.search(r"--size (\S+)", run["command"])
        size_text = pow2(int(size[1])) if size and size[1].isdigit() else (size[1] if size else "")
        summaries = "--no-summaries" not in run["command"]
        top = [{"symbol": s["symbol"], "CPU s": round(s["cpu_s"], 2), "share %": round(100 * s["share"], 1)}
               for s in run.get("top_symbols", [])[:12]]  # fmt: skip
        name = f"test_{group.replace('-', '_')}[{size_text}{'' if summaries else '-no-summaries'}]"
        b = entry(group, name, params={"size": size_text, "summaries": summaries},
                  commands={"under perf": python(run["command"])},
                  reproduce=harness(f"test_{group.replace('-', '_')}", f"--size '{size_text}'"),
                  figures={"wall s": round(run["wall_s"], 1), "user s": round(run["user_s"], 1),
                           "system s": round(run["sys_s"], 1), "minor faults": run["minor_faults"],
                           "peak RSS MB": round(run["max_rss_kib"] * 1024 / 1e6, 0), "perf samples": run["samples"]},
                  tables={"CPU by category": rows, "top symbols": top}, module="test_scripts.py",
                  note="Each CPU sample of perf record -g (499 Hz) goes to one category by its innermost frame; a "
                       "category's CPU-seconds are its share of the samples times the user + system CPU that GNU "
                       "time measured. The startup column is a run of 2**22 steps: imports and "
                       "compilation.")  # fmt: skip
        machine, git, date = record_machine(d)
        note = "; ".join(x for x in (d.get("code", ""), d.get("note", "")) if x)
        return Run([b], machine=machine, git=git, datetime=date, note=note,
                   command=f"python benchmarks/bench_profile.py --size '{size_text}' --json FILE"
                           f"{'' if summaries else ' -- --no-summaries'}")  # fmt: skip

    return read


def limits(d: dict[str, Any]) -> Run:
    """``bench_limits.py``: a write of 2**30 steps to its end, one of 2**62 stopped by SIGINT, and reading each."""
    rows, rss = [], []
    for key, r in d.items():
        row = timing(r, key)
        row["outcome"] = "killed: " + r["killed"] if r.get("killed") else f"exit {r['returncode']}"
        if r.get("exit_after_sigint_s") is not None:
            row["exit after SIGINT s"] = r["exit_after_sigint_s"]
        rows.append(row)
        if key.startswith("write"):
            rss += [{"run": key, "seconds": t, "RSS MiB": m} for t, m in r.get("rss_samples") or []]
    plots = [{"name": "rss", "table": "resident memory", "x": "seconds", "y": "RSS MiB", "series": "run",
              "title": "resident memory of the two writes"}] if rss else []  # fmt: skip
    b = entry("limits", "test_limits", params=None, commands={k: python(r["command"]) for k, r in d.items()},
              reproduce=harness("test_limits", "--size '2**30'"), tables={"runs": rows, "resident memory": rss},
              plots=plots, module="test_scripts.py")  # fmt: skip
    return Run([b], command="python benchmarks/bench_limits.py --seconds 30 --dir DIR --json FILE")


def verify(d: dict[str, Any]) -> Run:
    """``bench_verify.py``: the headline's output written, then verified, each a fresh process."""
    out = []
    for size, kinds in d.items():
        rows = [timing(r, kind, round=i + 1) for kind, runs in kinds.items() for i, r in enumerate(runs)]
        out.append(entry("verify", f"test_verify[{size}]", params={"size": size},
                         commands={"write": f"python -m streamacc write OUT --size {size}",
                                   "verify": "python -m streamacc verify OUT"},
                         reproduce=harness("test_verify", f"--size '{size}'"), tables={"runs": rows},
                         module="test_scripts.py"))  # fmt: skip
    size = next(iter(d))
    return Run(out, command=f"python benchmarks/bench_verify.py --sizes {size} --dir DIR --json FILE")


def accuracy(d: dict[str, Any]) -> Run:
    """``bench_accuracy.py``: errors in ulp against exact values, per case, method and length."""
    meta = d["meta"]
    out = []
    for case in dict.fromkeys(r["case"] for r in d["rows"]):
        rows = [{"method": r["method"], "steps": r["n"], "largest ulp": r.get("max_ulp"),
                 "median ulp": r.get("median_ulp"), "correctly rounded %": None if "correctly_rounded" not in r
                 else round(100 * r["correctly_rounded"], 1), "skipped": r.get("skipped")}
                for r in d["rows"] if r["case"] == case]  # fmt: skip
        rows = [{k: v for k, v in r.items() if v is not None} for r in rows]
        plot = [{"method": r["method"], "steps": r["steps"], "largest ulp (0 drawn at 0.5)": max(r["largest ulp"], 0.5)}
                for r in rows if "largest ulp" in r]  # fmt: skip
        out.append(entry("accuracy", f"test_accuracy[{case}]", params={"case": case},
                         commands={f"run {i + 1}": python(c) for i, c in enumerate(meta["commands"])},
                         reproduce=harness("test_accuracy"), figures={"samples per length": meta["samples"]},
                         tables={"errors": rows, "largest error": plot},
                         plots=[{"name": case, "table": "largest error", "x": "steps",
                                 "y": "largest ulp (0 drawn at 0.5)",
                                 "series": "method", "xscale": "log2", "yscale": "log",
                                 "title": f"{case}: largest error in ulp against length"}],
                         module="test_scripts.py"))  # fmt: skip
    return Run(out, command=" && ".join(python(c) for c in meta["commands"]), machine=meta_machine(meta))


SCALE_OUT = "python benchmarks/bench_dist.py parts|runs|pinned|model --size 2**28 --block 2**22"


def scale_out(d: dict[str, Any]) -> Run:
    """``bench_dist.py``: the carry pass against a block task, runs on clusters, and the model."""
    p = d["parts"]
    parts = [{"recipe": name, "a: carry pass ns/step": round(x["a_ns_per_step"], 2),
              "b: block task ns/step": round(x["b_ns_per_step"], 2), "b / a": round(x["ratio"], 1)}
             for name, x in p["recipes"].items()]  # fmt: skip
    tables: dict[str, list[dict[str, Any]]] = {"costs per step": parts}
    for key, title in (("runs", "runs, local disk"), ("pinned", "runs pinned to cores"), ("runs_s3", "runs, S3")):
        tables[title] = [timing(r, r["run"], target=r["target"]) | {"write s (warm)": round(r.get("write_s") or 0, 2),
                                                                    "steps/s": float(f"{r['steps_per_s']:.3g}")}
                         for r in d.get(key) or []]  # fmt: skip
    n = -(-p.get("model_size", 2**32) // p["block"])
    o = p["o_s"] / p["blocks_per_task"]

    def predict(part: dict[str, Any], workers: int) -> float:  # bench_dist.predict
        a, b = part["a_s"], part["b_s"]
        return a + b + (n - 1) * max(a + o, b / workers)

    model = [{"recipe": name, "workers": w, "speedup": round(predict(x, 1) / predict(x, w), 2)}
             for name, x in p["recipes"].items() for w in WORKERS]  # fmt: skip
    tables["the model's speedup over 1 worker"] = model
    figures = {"model: steps": p.get("model_size", 2**32), "model: blocks": n,
               "scheduler's round trip per task ms": round(p["o_s"] * 1e3, 2),
               "blocks per task": p["blocks_per_task"],
               "o: scheduler's cost per block ms": round(o * 1e3, 2)}  # fmt: skip
    b = entry("scale-out", "test_scale_out", params={"size": pow2(p["size"]), "block": pow2(p["block"])},
              commands={"sections": SCALE_OUT},
              reproduce=harness("test_scale_out", "--size '2**28'"), figures=figures, tables=tables,
              plots=[{"name": "model", "table": "the model's speedup over 1 worker", "x": "workers", "y": "speedup",
                      "series": "recipe", "xscale": "log2", "yscale": "log2",
                      "title": "T(W) = a + b + (n - 1) max(a + o, b / W): the carry pass bounds the speedup"}],
              module="test_scripts.py",
              note="a: the driver's carry pass per block; b: a worker's block task (the block recomputed, encoded "
                   "and written); driver, scheduler and workers share the machine's 2 cores.")  # fmt: skip
    return Run([b], command=SCALE_OUT)


def simulations(group: str) -> Callable[[Any], Run]:
    """``bench_simulations.py``: one of its sections (heat, ensemble, lorenz, chunks), a list of processes."""

    def read(d: list[dict[str, Any]]) -> Run:
        rows = []
        for r in d:
            row = timing(r, r["label"])
            for key in ("stored_bytes", "values", "run_s", "chunk_mib", "snapshot_s", "series_s", "series_len"):
                if r.get(key) is not None:
                    row[key.replace("_", " ")] = round(r[key], 4) if isinstance(r[key], float) else r[key]
            if r.get("chunks"):
                row["chunks"] = "x".join(map(str, r["chunks"]))
            rows.append(row)
        section = group.removeprefix("simulations-")
        b = entry(group, f"test_simulations[{section}]", params={"section": section},
                  commands={r["label"]: python(r["command"]) for r in d},
                  reproduce=harness("test_simulations", f"-k {section}"), tables={"runs": rows},
                  module="test_scripts.py")  # fmt: skip
        return Run([b], command=f"python benchmarks/bench_simulations.py {section} --dir DIR")

    return read


def adversarial(d: dict[str, Any]) -> Run:
    """``tests/chaos.py``: counts of every category."""
    rows = []
    for group, value in d.items():
        if not isinstance(value, dict):
            continue
        cases = [(group, value)] if "trials" in value else list(value.items())
        for name, c in cases:
            details = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in c.items()
                                if k not in ("trials", "held", "wrong", "wrong_notes"))  # fmt: skip
            rows.append({"category": name, "trials": c["trials"], "held": c["held"], "wrong": c["wrong"],
                         "details": details})  # fmt: skip
    b = entry("adversarial", "test_adversarial", params=None,
              commands={"chaos": "python tests/chaos.py --trials 10 --json FILE"},
              reproduce=harness("test_adversarial", "--repeat 10"), figures={"seconds": d.get("seconds")},
              tables={"counts": rows}, module="test_scripts.py",
              note="wrong counts any outcome where data was accepted that verify refuses, a writer wrote after "
                   "losing its lease, a signal was ignored or a user's file deleted")  # fmt: skip
    return Run([b], command="python tests/chaos.py --trials 10 --json benchmarks/results/adversarial.json")


def tests_cpu(d: dict[str, Any]) -> Run:
    """``bench_tests.py``: the test command under GNU time, and where its CPU went."""
    runs = d["runs"]
    rows = [timing(r, "python -m pytest -q", round=i + 1) | {
        "passed": r["passed"], "in tests CPU s": round(r["in_tests_cpu_s"], 1),
        "outside tests CPU s": round(r["outside_tests_cpu_s"], 1),
        "compiling s": round(sum(r["compile_s"].values()), 1)} for i, r in enumerate(runs)]  # fmt: skip
    last = runs[-1]
    files = [{"file": f["file"], "tests": f["tests"], "CPU s": round(f["cpu_s"], 1),
              "of it in processes s": round(f["children_cpu_s"], 1)} for f in last["by_file"]]  # fmt: skip
    buckets = [{"tests taking": k, "tests": v["tests"], "CPU s": round(v["cpu_s"], 1)}
               for k, v in last["buckets"].items()]  # fmt: skip
    b = entry("tests-cpu", "test_tests_cpu", params=None, commands={"tests": "python -m pytest -q"},
              reproduce=harness("test_tests_cpu", "--repeat 2"),
              tables={"runs": rows, "the last run's tests by their CPU": buckets,
                      "the last run's test files by their CPU": files}, module="test_scripts.py",
              note="in tests: the CPU of the tests and of the processes they waited for; outside tests: the rest "
                   "(interpreters starting, collection, the session's dask cluster and S3 server, forked writers); "
                   "compiling: JAX tracing, lowering and compiling, part of both")  # fmt: skip
    machine, git, date = record_machine(d)
    return Run([b], command=d["command"], machine=machine, git=git, datetime=date)


ACCELERATOR_GROUPS = {
    "accelerator-user-steps": ("user-steps",),
    "accelerator-costs": ("costs",),
    "accelerator-seed": ("seed",),
    "accelerator-ensemble": ("ensemble",),
    "accelerator-d2h": ("d2h",),
    "accelerator-compute": ("compute",),
    "accelerator-write": ("write", "stream-ordered", "stream-chained", "stream-pinned", "stream-wide", "loops"),
    "accelerator-exact": ("exact", "compensated"),
    "accelerator-accuracy": ("accuracy", "float64"),
}
"""The benchmarks of one run of ``accelerator.py``, by group, and the scenarios each gathers."""

ACCELERATOR_PLOTS = {
    "compute": {"name": "unroll", "x": "unroll", "y": "ns/step", "series": "recipe", "xscale": "log2",
                "yscale": "log", "title": "ns a step of one jitted lax.scan, float32, against its unroll"},
    "device to host": {"name": "d2h", "x": "MiB", "y": "GiB/s", "series": "how", "xscale": "log2",
                       "yscale": "log2", "title": "device to host, GiB/s against the array's MiB"},
}  # fmt: skip


def _significant(row: dict[str, Any]) -> dict[str, Any]:
    return {k: float(f"{v:.4g}") if isinstance(v, float) else v for k, v in row.items()}


def accelerator(d: dict[str, Any]) -> Run:
    """``accelerator.py``: one benchmark per group of its scenarios, a scenario's failure among the figures."""
    device = d["device"]
    machine, git, date = record_machine(d)
    described = f"{device.get('kind') or device['platform']} ({device['platform']})"
    if device.get("memory_gib"):
        described += f", {device['memory_gib']} GiB of device memory"
    machine["description"] = described + ("; smoke sizes, nothing measured" if d.get("smoke") else "")
    machine.setdefault("versions", {})["jax"] = device["jax"]
    machine["versions"]["streamacc"] = device["streamacc"]
    command = python(d["command"])
    out = []
    for group, names in ACCELERATOR_GROUPS.items():
        figures: dict[str, Any] = {}
        tables: dict[str, list[dict[str, Any]]] = {}
        for name in names:
            scenario = d["scenarios"].get(name)
            if scenario is None:
                continue
            if scenario["status"] != "ok":
                figures[f"{name}: {scenario['status']}"] = (scenario.get("error") or scenario.get("why", "")).split(
                    "\n")[0][:300]  # fmt: skip
                continue
            figures |= {k: (round(v, 4) if isinstance(v, float) else v) for k, v in scenario.get("figures", {}).items()}
            for title, rows in scenario.get("tables", {}).items():
                tables.setdefault(title, []).extend(_significant(r) for r in rows)
        if not figures and not tables:
            continue
        plots = [{"table": title, **p} for title, p in ACCELERATOR_PLOTS.items() if tables.get(title)]
        test = f"test_{group.replace('-', '_')}"
        out.append(entry(group, test, params=None, commands={"accelerator.py": command},
                         reproduce="python benchmarks/accelerator.py --json FILE",
                         figures=figures, tables=tables, plots=plots, module="accelerator.py"))  # fmt: skip
    return Run(out, command=command, machine=machine, git=git, datetime=date)


def markdown(group: str, test: str) -> Callable[[str], Run]:
    """A script whose JSON was not kept, only its Markdown: its header lines, and its table as it wrote it."""

    def read(text: str) -> Run:
        lines = text.strip().splitlines()
        command = ""
        m = re.search(r"`((?:python )?benchmarks/[^`]+)`", text)
        if m:
            command = m[1] if m[1].startswith("python") else "python " + m[1]
        date = re.search(r"Date: (\S+?);?\s", text)
        load = re.search(r"load average before/after: ([\d.]+) / ([\d.]+)", text) or re.search(
            r"load average ([\d.]+) at the end", text)
        table = [line for line in lines if line.startswith("|")]
        header = [c.strip() for c in table[0].strip("|").split("|")]
        rows = []
        for line in table[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows.append({h: _cell(c) for h, c in zip(header, cells, strict=False)})
        prose = " ".join(line.strip() for line in lines if not line.startswith("|") and "`" not in line[:2]
                         and not line.startswith("Command:") and line.strip())  # fmt: skip
        machine: dict[str, Any] = {}
        if load:
            machine["load_start" if load.lastindex == 2 else "load_end"] = [float(load[1])]
            if load.lastindex == 2:
                machine["load_end"] = [float(load[2])]
        git = re.search(r"git (\w+)( \(dirty\))?", text)
        size = re.search(r"--sizes? '?(2\*\*\d+)", command)
        b = entry(group, test, params={"size": size[1]} if size else None, commands={"script": command},
                  reproduce=harness(test, f"--size '{size[1]}'" if size else ""), tables={"table": rows},
                  module="test_scripts.py", note=prose)  # fmt: skip
        return Run([b], command=command, datetime=date[1] if date else "", machine=machine,
                   git=(git[1] + ("-dirty" if git[2] else "")) if git else "")

    return read


def _cell(text: str) -> Any:
    plain = text.replace(",", "")
    if re.fullmatch(r"-?\d+", plain):
        return int(plain)
    if re.fullmatch(r"-?\d+\.\d*(e[-+]?\d+)?", plain):
        return float(plain)
    return text


READERS: dict[str, Callable[[Any], Run]] = {
    "headline": headline,
    "accelerator": accelerator,
    "summaries-cost": summaries_cost,
    "summaries-slices": summaries_slices,
    "summaries-xla": summaries_xla,
    "icechunk": icechunk,
    "virtual": VIRTUAL,
    "input-memory": INPUT,
    "plot-cold": PLOT,
    "heat-alternating": HEAT,
    "suite": suite("suite"),
    "peers": suite("peers"),
    "overview": overview,
    "profile": profile("profile"),
    "summaries-profile": profile("summaries-profile"),
    "limits": limits,
    "verify": verify,
    "accuracy": accuracy,
    "scale-out": scale_out,
    "simulations-heat": simulations("simulations-heat"),
    "simulations-ensemble": simulations("simulations-ensemble"),
    "simulations-lorenz": simulations("simulations-lorenz"),
    "simulations-chunks": simulations("simulations-chunks"),
    "adversarial": adversarial,
    "tests-cpu": tests_cpu,
    "codecs": markdown("codecs", "test_codecs"),
    "chunks": markdown("chunks", "test_chunks"),
    "compensated-cost": markdown("compensated-cost", "test_compensated_cost"),
    "suite-table": markdown("suite", "test_suite"),
}
"""The reader of each format, by the name ``convert.py`` takes."""
