"""The benchmark pages' tables and plots, generated from the harness's results in ``benchmarks/results/``.

A page asks for one scenario with ``<!-- benchmark: GROUP -->`` (or ``<!-- benchmark-to-come:
GROUP -->``, for one that may have no run yet); :func:`render` shows every run of it that
the results hold, oldest first: the harness command that measures it
again, the commands it ran, the machine, its load, the versions and the commit, then its
figures and tables, and the plots its results ask for. Everything comes from the fields
of the one schema (``benchmarks/schema.json``); nothing here knows a file or a scenario.
:func:`draw_all` draws the plots when the site is built.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
NOT_RECORDED = "not recorded; the development machine described on [the benchmarks page](index.md#the-machine)"

_cache: dict[Path, list[tuple[Path, dict[str, Any]]]] = {}


def runs(folder: Path = RESULTS) -> list[tuple[Path, dict[str, Any]]]:
    """Every result file with its document, oldest run first."""
    if folder not in _cache:
        found = [(p, json.loads(p.read_text())) for p in sorted(folder.glob("*/*.json"))]
        _cache[folder] = sorted(found, key=lambda item: (item[1]["datetime"], item[0].name))
    return _cache[folder]


def groups(folder: Path = RESULTS) -> list[str]:
    return sorted({b["group"] for _, doc in runs(folder) for b in doc["benchmarks"]})


def fmt(v: Any) -> str:
    """A value as a table shows it."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"2**{v.bit_length() - 1}" if v >= 2**16 and v & (v - 1) == 0 else f"{v:,}"
    if isinstance(v, float):
        if v != 0 and (abs(v) >= 1e7 or abs(v) < 1e-3):
            return f"{v:.3g}"
        digits = ",.0f" if abs(v) >= 1000 else ".1f" if abs(v) >= 100 else ".2f" if abs(v) >= 1 else ".3g"
        return f"{v:{digits}}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def table(rows: list[dict[str, Any]], header: list[str] | None = None) -> str:
    cols = header or list(dict.fromkeys(k for r in rows for k in r if any(x.get(k) is not None for x in rows)))
    numeric = [all(r.get(c) is None or (isinstance(r[c], (int, float)) and not isinstance(r[c], bool)) for r in rows)
               for c in cols]  # fmt: skip
    lines = ["| " + " | ".join(cols) + " |", "| " + " | ".join("--:" if n else "---" for n in numeric) + " |"]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n\n"


def _load(values: Any) -> str:
    return ", ".join(fmt(x) for x in values) if isinstance(values, list) else fmt(values)


def machine(doc: dict[str, Any]) -> tuple[str, str, str]:
    """The machine, its load, and the versions with the commit, in words."""
    m = doc.get("machine_info", {})
    parts = []
    if m.get("cores"):
        parts.append(f"{m['cores']} cores")
    if m.get("memory_gib"):
        parts.append(f"{m['memory_gib']} GiB RAM")
    if m.get("cpu_model"):
        parts.append(m["cpu_model"])
    if m.get("python_version"):
        parts.append(f"Python {m['python_version']}")
    if m.get("description"):
        parts.append(m["description"])
    where = ", ".join(parts) or NOT_RECORDED
    if parts and not m.get("cores"):
        where += f" ({NOT_RECORDED.split(';')[1].strip()})"
    if "load_start" in m or "load_end" in m:
        start, end = _load(m.get("load_start", "not recorded")), _load(m.get("load_end", "not recorded"))
        load = f"{start} at the start, {end} at the end (1-, 5- and 15-minute averages where three are given)"
    else:
        load = "not recorded"
    c = doc.get("commit_info", {})
    commit = f"commit {c.get('id', 'unknown')[:10]}" + (" with uncommitted changes" if c.get("dirty") else "")
    if c.get("recorded") is False:
        commit = f"not recorded (the file was added at commit {c.get('id', '')[:10]})"
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
    return where, load, "; ".join(x for x in (versions, commit) if x)


def _benchmarks(group: str, folder: Path) -> Iterator[tuple[Path, dict[str, Any], list[dict[str, Any]]]]:
    for path, doc in runs(folder):
        mine = [b for b in doc["benchmarks"] if b["group"] == group]
        if mine:
            yield path, doc, mine


def plot_name(path: Path, bench: dict[str, Any], plot: dict[str, Any]) -> str:
    return f"{bench['group']}-{path.name[:4]}-{plot['name']}.png"


NOT_YET = "*No run of this benchmark is stored yet.*\n\n"
"""What a page shows for a benchmark it asks for with ``benchmark-to-come`` before its first run."""


def render(group: str, folder: Path = RESULTS, *, missing_ok: bool = False) -> str:
    """The Markdown of every run of scenario ``group``; with ``missing_ok``, :data:`NOT_YET` where it has none."""
    found = list(_benchmarks(group, folder))
    if not found and missing_ok:
        return NOT_YET
    if not found:
        raise KeyError(f"no results of benchmark {group!r} in benchmarks/results/; the groups are: "
                       f"{', '.join(groups(folder))}")  # fmt: skip
    out = []
    for path, doc, benches in found:
        when = doc["datetime"][:16].replace("T", " ") + " UTC"
        if doc.get("machine_info", {}).get("date_recorded") is False:
            when = f"{doc['datetime'][:10]} (the day the file was added; its run's date was not recorded)"
        note = doc.get("note", "")
        out.append(f"**Run of {when}**" + (f": {note}" if note else "") + "\n\n")
        where, load, versions = machine(doc)
        reproduce = list(dict.fromkeys(b["extra_info"]["reproduce"] for b in benches))
        head = [f"- **Reproduce:** {', '.join(f'`{r}`' for r in reproduce)}", f"- **Made by:** `{doc['command']}`",
                f"- **Machine:** {where}", f"- **Load:** {load}", f"- **Versions:** {versions}",
                f"- **Data:** `benchmarks/results/{path.parent.name}/{path.name}`"
                + (f", converted from `{doc['converted_from']}`" if doc.get("converted_from") else "")]  # fmt: skip
        out.append("\n".join(head) + "\n\n")
        for b in benches:
            out.append(_benchmark(path, b, len(benches) > 1))
    return "".join(out)


def _benchmark(path: Path, b: dict[str, Any], named: bool) -> str:
    extra = b["extra_info"]
    out = []
    if named:
        out.append(f"*{b['name']}*\n\n")
    if extra.get("note"):
        out.append(extra["note"].rstrip(".") + ".\n\n")
    commands = extra["commands"]
    if len(commands) == 1:
        out.append(f"Ran `{next(iter(commands.values()))}`.\n\n")
    else:
        out.append("Ran:\n\n" + "".join(f"- {k}: `{v}`\n" for k, v in commands.items()) + "\n")
    s = b.get("stats")
    if s:
        out.append(f"Wall time of a round ({s['rounds']} round{'s' if s['rounds'] > 1 else ''}): median "
                   f"{fmt(s['median'])} s, min {fmt(s['min'])}, max {fmt(s['max'])}.\n\n")  # fmt: skip
    if extra["figures"]:
        out.append(table([{"figure": k, "value": v} for k, v in extra["figures"].items()], ["figure", "value"]))
    for title, rows in extra["tables"].items():
        if any(p["table"] == title for p in extra.get("plots", [])) and len(rows) > 60:
            continue  # a series only a plot can show
        out.append(f"{title[0].upper()}{title[1:]}:\n\n" + table(rows))
    for p in extra.get("plots", []):
        out.append(f"![{p['title']}]({plot_name(path, b, p)})\n\n")
    return "".join(out)


# --- plots ------------------------------------------------------------------------------------------------------


def _draw(rows: list[dict[str, Any]], p: dict[str, Any], where: Path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.2), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    series = list(dict.fromkeys(r.get(p["series"]) for r in rows)) if p.get("series") else [None]
    for name in series:
        mine = [r for r in rows if name is None or r.get(p["series"]) == name]
        number = (int, float)
        pts = sorted((r[p["x"]], r[p["y"]]) for r in mine
                     if isinstance(r.get(p["x"]), number) and isinstance(r.get(p["y"]), number))  # fmt: skip
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o" if len(pts) < 20 else None, label=name,
                    linestyle="" if p.get("style") == "points" else "-")  # fmt: skip
    for axis, scale in (("x", p.get("xscale", "linear")), ("y", p.get("yscale", "linear"))):
        setter = ax.set_xscale if axis == "x" else ax.set_yscale
        setter("log", base=2) if scale == "log2" else setter(scale)
    ax.set_xlabel(p["x"])
    ax.set_ylabel(p["y"])
    ax.set_title(p["title"], fontsize=10)
    if p.get("series"):
        ax.legend(fontsize=7, ncols=2)
    ax.grid(alpha=0.3)
    fig.savefig(where)


def draw_all(folder: Path, results: Path = RESULTS) -> dict[str, Path]:
    """Draw every plot the results ask for into ``folder``; return them by file name."""
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for path, doc in runs(results):
        for b in doc["benchmarks"]:
            for p in b["extra_info"].get("plots", []):
                name = plot_name(path, b, p)
                _draw(b["extra_info"]["tables"][p["table"]], p, folder / name)
                out[name] = folder / name
    return out
