"""The benchmark pages' tables and plots, generated from what the benchmark scripts wrote to ``benchmarks/results/``.

A page asks for one benchmark with ``<!-- benchmark: NAME -->``; :func:`render` turns it
into the command that reproduces it, the machine and versions it ran on (as far as the
file records them; where it does not, the page says so), and its tables, read from the
JSON (or, where a script kept only a Markdown table, that table as the script wrote it).
:func:`draw_all` draws the plots from the same JSON when the site is built.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
NOT_RECORDED = (
    "not recorded in the file; the runs were made on the development machine described on "
    "[the benchmarks page](index.md#the-machine)"
)


def _load(name: str) -> Any:
    return json.loads((RESULTS / name).read_text())


def _pow2(n: int) -> str:
    return f"2**{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else f"{n:,}"


def _num(x: Any, digits: int = 2) -> str:
    if x is None or x == "":
        return ""
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:,.{digits}f}"


def _table(header: list[str], rows: list[list[Any]], align: str = "") -> str:
    align = align or "l" + "r" * (len(header) - 1)
    marks = ["---" if a == "l" else "--:" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def _range(xs: list[float], digits: int = 1, unit: str = "") -> str:
    lo, hi = min(xs), max(xs)
    return f"{lo:.{digits}f}{unit}" if lo == hi else f"{lo:.{digits}f}-{hi:.{digits}f}{unit}"


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a benchmark's figures come from and how to make them again."""

    files: tuple[str, ...]
    command: str
    machine: str = NOT_RECORDED
    versions: str = ""

    def head(self) -> str:
        files = ", ".join(f"`benchmarks/results/{f}`" for f in self.files)
        lines = [f"- **Reproduce:** `{self.command}`", f"- **Data:** {files}", f"- **Machine:** {self.machine}"]
        if self.versions:
            lines.append(f"- **Versions:** {self.versions}")
        return "\n".join(lines) + "\n\n"


def _versions(meta: dict[str, Any]) -> str:
    parts = [f"{k} {v}" for k, v in meta.get("versions", {}).items()]
    parts += [f"{k} {meta[k]}" for k in ("jax", "numpy") if k in meta]
    if meta.get("git"):
        parts.append(f"git {meta['git']}")
    if meta.get("date"):
        parts.append(f"on {meta['date']}")
    return ", ".join(parts)


# --- one renderer per benchmark ---------------------------------------------------------------------------------


def headline() -> str:
    pool = _load("headline_2p32_pool.json")
    older = _load("headline_2p32.json")
    src = Source(
        ("headline_2p32_pool.json", "headline_2p32.json"),
        "python benchmarks/headline.py --size '2**32'",
        versions="the streamacc commits named in the table",
    )
    rows = []
    for r in sorted(pool, key=lambda r: r["order"]):
        rows.append([r["order"], r["version"], _num(r["wall_s"], 1), _num(r["user_s"], 1), _num(r["sys_s"], 1),
                     f"{r['minflt']:,}", _num(r["peak_rss_mib"], 1), _num(r["gib_per_s"], 2)])  # fmt: skip
    after = [r for r in pool if r["version"].startswith("after")]
    summary = (
        f"In this session the release labelled *after* wrote the 2**32 values in "
        f"{_range([r['wall_s'] for r in after])} s wall ({len(after)} runs) and peaked at "
        f"{_range([r['peak_rss_mib'] for r in after])} MiB; runs of the two "
        "releases alternated, so their ratio is what the session measured, not their absolute times.\n\n"
    )
    table = _table(["run", "release", "wall s", "user s", "system s", "minor faults", "peak RSS MiB", "GiB/s"], rows,
                   "rlrrrrrr")  # fmt: skip
    rows2 = [[i + 1, _num(r["wall_s"], 1), _num(r["user_s"], 1), _num(r["sys_s"], 1), f"{r['minflt']:,}",
              _num(r["peak_rss_mib"], 1), f"{r['disk_bytes']:,}", f"{r['sampled_blocks']} of {r['of_blocks']}"
              + (" bit-identical" if r["bit_identical"] else " DIFFER")] for i, r in enumerate(older)]  # fmt: skip
    table2 = _table(["run", "wall s", "user s", "system s", "minor faults", "peak RSS MiB", "bytes stored",
                     "blocks checked against numpy"], rows2, "rrrrrrrl")  # fmt: skip
    return (
        src.head() + summary + table + "\n\n"
        "An earlier release (the first with window summaries), two runs, from `headline_2p32.json`:\n\n" + table2 + "\n"
    )


SUITE_WRITERS = ("streamacc-api", "streamacc-cli", "numpy-loop", "dask-cumprod", "floor", "zarr-precomputed",
                 "seed-scan", "jnp-cumprod", "dask-blelloch")  # fmt: skip


def suite() -> str:
    d = _load("results.json")
    meta = d["meta"]
    src = Source(("results.json",), meta["command"], meta.get("machine", NOT_RECORDED), _versions(meta))
    out = [src.head()]
    out.append(
        "Each approach ran in its own process on the same job: the geometric progression in float64 to Zarr with "
        "`blosc-lz4`, chunks of 2**22, wall time including compilation and a final fsync. *api* is "
        "`streamacc.write`; the other columns are ratios to it at the same length, from this one run.\n\n"
    )
    by_size: dict[int, dict[str, Any]] = {}
    for r in d["summary"]:
        by_size.setdefault(r["size"], {})[r["approach"]] = r
    for size in sorted(by_size):
        rows = []
        for name in SUITE_WRITERS:
            r = by_size[size].get(name)
            if r is None:
                continue
            if r["status"] != "ok":
                rows.append([f"`{name}`", "", "", "", "", "", r["status"]])
                continue
            rows.append([f"`{name}`", _num(r["wall_s"]), _num(r["gib_per_s"], 3), _num(r["peak_rss_mib"], 0),
                         _num(r["wall_ratio"]), _num(r["rss_ratio"]), r["values"]])  # fmt: skip
        out.append(f"**{_pow2(size)} steps**\n\n")
        out.append(_table(["approach", "wall s", "GiB/s", "peak RSS MiB", "wall / api", "RSS / api", "values"], rows,
                          "lrrrrrl") + "\n\n")  # fmt: skip
    out.append("![peak RSS against length](suite_rss.png)\n\n![throughput against length](suite_throughput.png)\n")
    return "".join(out)


def _md(name: str, command: str, note: str) -> str:
    text = (RESULTS / name).read_text().strip()
    src = Source((name,), command)
    return src.head() + note + "\n\n" + text + "\n"


def suite_repeat() -> str:
    return _md(
        "results_2p30_repeat3.md",
        "python benchmarks/bench_suite.py --size 2**30 --repeat 3 --approaches streamacc-api streamacc-cli numpy-loop "
        "dask-cumprod floor",
        "The table as `bench_suite.py` wrote it (its JSON was not kept); machine and versions are in its own header.",
    )


ACCURACY_CASES = {
    "gp-f64-up": "geometric progression, float64, ratio above 1",
    "gp-f64-down": "geometric progression, float64, ratio below 1",
    "gp-f32": "geometric progression, float32",
    "cumsum-f64": "running sum of values in [0.5, 1), float64",
    "cumsum-f32": "running sum of values in [0.5, 1), float32",
}


def accuracy() -> str:
    d = _load("accuracy.json")
    meta = d["meta"]
    src = Source(("accuracy.json",), " && ".join(meta["commands"]), meta.get("machine", NOT_RECORDED), _versions(meta))
    out = [src.head()]
    out.append(
        f"Error in units in the last place against exact values (mpmath at 256 bits, or integer sums) at "
        f"{meta['samples']:,} sampled steps per case and length. The arithmetic is deterministic: the same versions "
        "give the same numbers on any machine.\n\n"
    )
    for case, title in ACCURACY_CASES.items():
        rows = [r for r in d["rows"] if r["case"] == case]
        sizes = sorted({r["n"] for r in rows})
        methods = list(dict.fromkeys(r["method"] for r in rows))
        cell = {(r["method"], r["n"]): r for r in rows}
        table_rows = []
        for m in methods:
            table_rows.append([f"`{m}`"] + [_ulp(cell.get((m, n))) for n in sizes])
        out.append(f"**{title}** (`{case}`): largest error in ulp, and the share of steps correctly rounded\n\n")
        out.append(_table(["method", *[_pow2(n) for n in sizes]], table_rows) + "\n\n")
    out.append("![largest error against length](accuracy.png)\n")
    return "".join(out)


def _ulp(r: dict[str, Any] | None) -> str:
    if r is None:
        return ""
    if "skipped" in r:
        return "skipped"
    return f"{r['max_ulp']:,.0f} ({100 * r['correctly_rounded']:.0f}%)"


def scale_out() -> str:
    d = _load("dist.json")
    src = Source(
        ("dist.json",),
        "python benchmarks/bench_dist.py parts|runs|pinned|model --size 2**28 --block 2**22 (see its --help)",
    )
    parts = d["parts"]
    rows = [[f"`{name}`", _num(p["a_ns_per_step"]), _num(p["b_ns_per_step"]), _num(p["ratio"], 1)]
            for name, p in parts["recipes"].items()]  # fmt: skip
    out = [src.head()]
    out.append(
        f"What a cluster can gain is set by two costs per step, measured at {_pow2(parts['size'])} steps in blocks of "
        f"{_pow2(parts['block'])}: the driver's carry pass (a) and a worker's block task (b, the block recomputed, "
        "encoded and written).\n\n"
    )
    out.append(_table(["recipe", "a: carry pass ns/step", "b: block task ns/step", "b / a"], rows) + "\n\n")
    for key, title in (("runs", "local disk"), ("pinned", "pinned to cores"), ("runs_s3", "S3 (moto's server)")):
        runs = d.get(key) or []
        if not runs:
            continue
        size = d.get(f"{key}_size")
        rows = [[r["run"], r["target"], _num(r["wall_s"]), _num(r.get("write_s")), _num(r["user_s"], 1),
                 _num(r["sys_s"], 1), _num(r["max_rss_kib"] / 1024, 0), f"{r['steps_per_s']:.3g}"]
                for r in runs]  # fmt: skip
        out.append(f"**Runs, {title}**" + (f", {_pow2(size)} steps" if size else "") + "\n\n")
        out.append(_table(["run", "target", "wall s", "write s (warm)", "user s", "system s", "peak RSS MiB",
                           "steps/s"], rows, "llrrrrrr") + "\n\n")  # fmt: skip
    out.append("The model's predictions, computed from these costs by `bench_dist.py`'s own `model` when the site was "
               "built (`T(W) = a + b + (n - 1) * max(a + o, b / W)` for n blocks on W workers):\n\n")
    out.append(_dist_model(None)[0] + "\n\n![the model against workers](dist_model.png)\n")
    return "".join(out)


def summaries() -> str:
    out = []
    for name in ("overview_2p32.json", "overview_2p32_run2.json"):
        d = _load(name)
        src = Source((name,), "python benchmarks/bench_overview.py --size '2**32' --dir DIR --pairs 2")
        writes = [[w["pair"] + 1, "on" if w["summaries"] else "off", _num(w["wall_s"], 1), _num(w["user_s"], 1),
                   _num(w["sys_s"], 1), f"{w['minflt']:,}", _num(w["peak_rss_mib"], 0)]
                  for w in d["writes"]]  # fmt: skip
        ratios = ", ".join(f"{r['wall_s']:.2f}x" for r in d["ratios_on_over_off"])
        reads = [[k, _num(v["wall_s"], 2), _num(v["user_s"], 2), _num(v["sys_s"], 2), _num(v["peak_rss_mib"], 0)]
                 for k, v in d["reads_cold"].items()]  # fmt: skip
        share = next((w["summary_percent"] for w in d["writes"] if w.get("summary_percent")), None)
        out.append(f"### `{name}`\n\n" + src.head())
        out.append(f"The headline ({_pow2(d['size'])} steps) with and without summaries, in pairs; wall time with "
                   f"summaries over without, pair by pair: {ratios}. The summaries took {share}% of the stored bytes."
                   "\n\n")  # fmt: skip
        out.append(_table(["pair", "summaries", "wall s", "user s", "system s", "minor faults", "peak RSS MiB"],
                          writes, "rlrrrrr") + "\n\n")  # fmt: skip
        out.append("A picture of the whole output from a cold page cache, three ways:\n\n")
        out.append(_table(["read", "wall s", "user s", "system s", "peak RSS MiB"], reads) + "\n\n")
    return "".join(out)


def simulations() -> str:
    out = []
    src = Source(("simulations_heat_run1.json", "simulations_heat_run2.json"),
                 "python benchmarks/bench_simulations.py heat --dir DIR")  # fmt: skip
    out.append("### The heat equation: a 4096-point state, 2**18 steps\n\n" + src.head())
    for run in (1, 2):
        rows = [[f"`{r['label']}`", _num(r["wall_s"], 1), _num(r["user_s"], 1), _num(r["sys_s"], 1),
                 _num(r["max_rss_kib"] / 1024, 0), f"{r['minor_faults']:,}",
                 _num(r.get("stored_bytes", r.get("bytes", 0)) / 2**30, 2)]
                for r in _load(f"simulations_heat_run{run}.json")]  # fmt: skip
        out.append(f"**Run {run}**\n\n" + _table(["run", "wall s", "user s", "system s", "peak RSS MiB",
                                                 "minor faults", "stored GiB"], rows) + "\n\n")  # fmt: skip
    src = Source(("simulations_ensemble.json",), "python benchmarks/bench_simulations.py ensemble --dir DIR")
    rows = [[r["label"], _num(r["wall_s"], 1), _num(r["user_s"], 1), _num(r["max_rss_kib"] / 1024, 0),
             f"{r['values'] / r['wall_s']:.3g}"] for r in _load("simulations_ensemble.json")]  # fmt: skip
    out.append("### An ensemble against the scalar path\n\n" + src.head())
    out.append(_table(["run", "wall s", "user s", "peak RSS MiB", "values/s"], rows) + "\n\n")
    src = Source(("simulations_lorenz.json",), "python benchmarks/bench_simulations.py lorenz --dir DIR")
    rows = [[r["label"], _num(r["wall_s"], 1), _num(r["user_s"], 1), _num(r["max_rss_kib"] / 1024, 0)]
            for r in _load("simulations_lorenz.json")]  # fmt: skip
    out.append("### Lorenz-63, every 1000th of 2**30 RK4 steps kept\n\n" + src.head())
    out.append(_table(["run", "wall s", "user s", "peak RSS MiB"], rows) + "\n\n")
    src = Source(("simulations_chunks.json",), "python benchmarks/bench_simulations.py chunks --dir DIR")
    rows = [[r["state"], r["layout"], "x".join(map(str, r["chunks"])), _num(r["chunk_mib"], 2),
             _num(1000 * r["snapshot_s"], 1), _num(r["series_s"], 3), f"{r['series_len']:,}", _num(r["wall_s"], 2)]
            for r in _load("simulations_chunks.json")]  # fmt: skip
    out.append("### Chunk layouts, read both ways\n\n" + src.head())
    out.append("A snapshot reads all of the state at one step; a time series one value over many steps.\n\n")
    out.append(_table(["state", "layout", "chunk", "chunk MiB", "snapshot ms", "series s", "series steps",
                       "write wall s"], rows, "llrrrrrr") + "\n")  # fmt: skip
    return "".join(out)


def limits() -> str:
    d = _load("limits_2p62.json")
    before = _load("limits_2p62_before.json")
    src = Source(("limits_2p62.json", "limits_2p62_before.json"),
                 "python benchmarks/bench_limits.py --seconds 30 --dir DIR --json FILE")  # fmt: skip
    rows = []
    for key, r in d.items():
        b = before.get(key, {})
        note = "killed: " + r["killed"] if r.get("killed") else f"exit {r['returncode']}"
        old = f"{_num(b.get('wall_s'), 2)} s, {_num(b.get('max_rss_kib', 0) / 1024, 0)} MiB" if b else ""
        if b.get("killed"):
            old += f" ({b['killed']})"
        rows.append([key, _num(r["wall_s"], 2), _num(r["max_rss_kib"] / 1024, 0), note, old])
    return (
        src.head() + "*short* is a complete write of 2**30 steps; *huge* an output of 2**62 steps stopped with Ctrl-C "
        "after 30 s. The last column is the release before (`limits_2p62_before.json`).\n\n"
        + _table(["command", "wall s", "peak RSS MiB", "outcome", "release before"], rows, "lrrll")
        + "\n\n![resident memory over time](limits_rss.png)\n"
    )


def verify() -> str:
    out = []
    for name in ("verify_2p28.json", "verify_2p31.json"):
        d = _load(name)
        for size, kinds in d.items():
            src = Source((name,), f"python benchmarks/bench_verify.py --sizes {size} --dir DIR --json FILE")
            rows = []
            for kind, runs in kinds.items():
                rows.append([kind, len(runs), _range([r["wall_s"] for r in runs], 2),
                             _range([r["user_s"] for r in runs], 2), _range([r["sys_s"] for r in runs], 2),
                             _range([r["max_rss_kib"] / 1024 for r in runs], 0)])  # fmt: skip
            out.append(f"**{size} steps**\n\n" + src.head())
            out.append(_table(["command", "runs", "wall s", "user s", "system s", "peak RSS MiB"], rows) + "\n\n")
    return "".join(out)


def adversarial() -> str:
    d = _load("adversarial.json")
    command = "python tests/chaos.py --trials 10 --json benchmarks/results/adversarial.json"
    src = Source(("adversarial.json",), command)
    rows = []
    for group, value in d.items():
        if not isinstance(value, dict):
            continue
        cases = value.items() if "trials" not in value else [(group, value)]
        for name, c in cases:
            extra = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in c.items()
                              if k not in ("trials", "held", "wrong", "wrong_notes"))  # fmt: skip
            rows.append([name, c["trials"], c["held"], c["wrong"], extra])
    return (
        src.head() + f"Counts of one run ({d.get('seconds', '?')} s); *wrong* counts any outcome where data was "
        "accepted that verify refuses, a writer wrote after losing its lease, a signal was ignored or a user's file "
        "deleted.\n\n" + _table(["category", "trials", "held", "wrong", "details"], rows, "lrrrl") + "\n"
    )


def codecs() -> str:
    command = "python benchmarks/bench_codecs.py --size '2**28' --repeat 3 --block '2**22' --sections codec durable"
    command += " inflight"
    return _md("codecs_2p28.md", command, "The table as `bench_codecs.py` wrote it (its JSON was not kept).")


def chunks() -> str:
    return _md("chunks_2p28.md", "python benchmarks/bench_chunks.py --size 2**28 --read --repeat 3",
               "The table as `bench_chunks.py` wrote it (its JSON was not kept).")  # fmt: skip


def compensated_cost() -> str:
    return _md("compensated_cost.md", "python benchmarks/bench_compensated_cost.py --sizes 2**28 --repeat 3",
               "The table as `bench_compensated_cost.py` wrote it (its JSON was not kept).")  # fmt: skip


def _machine_line(m: dict[str, Any]) -> str:
    end = m.get("load_end") or "not recorded"
    load = f"load {m.get('load_start')} at the start, {end} at the end (1, 5, 15 min)"
    return f"{m.get('cores')} cores, {m.get('memory_gib')} GiB, {m.get('cpu')}; {load}"


def _machine_versions(m: dict[str, Any]) -> str:
    return _versions({"versions": m.get("versions", {}), "git": m.get("git"), "date": m.get("date")})


def summaries_cost() -> str:
    """``bench_summaries.py``: the same write with and without summaries, alternating, before and after."""
    out = []
    runs = (("summaries_2p30_before.json", "before"), ("summaries_2p30_run1.json", "the reductions in slices"),
            ("summaries_2p30.json", "after"), ("summaries_2p30_run2.json", "after, again"),
            ("summaries_2p30_run3.json", "blocks computed in place"),
            ("summaries_2p30_run4.json", "windows reduced into arrays made once per block (1204a19)"),
            ("summaries_2p30_run5.json", "the final code from a fresh clone"),
            ("summaries_2p30_run6.json", "the final code from a fresh clone, again, against 1204a19"),
            ("summaries_2p30_run7.json", "a2b6d28, on a slower day"),
            ("summaries_2p30_run8.json", "4e5c093 (ml_dtypes 0.6.0) from a fresh clone"))  # fmt: skip
    for name, label in runs:
        d = _load(name)
        m = d["machine"]
        against = " --against OTHER_CHECKOUT" if d.get("against") else ""
        command = f"python benchmarks/bench_summaries.py --size '{d['size']}' --pairs {d['pairs']}{against} --json FILE"
        src = Source((name,), command, _machine_line(m), _machine_versions(m))
        rows = []
        for variant, runs in d["runs"].items():
            for i, r in enumerate(runs):
                rows.append([variant, i + 1, _num(r["wall_s"], 2), _num(r["user_s"], 2), _num(r["sys_s"], 2),
                             _num(r["cpu_s"], 2), f"{r['minor_faults']:,}", _num(r["max_rss_kib"] / 1024, 0),
                             r["load_before"][0]])  # fmt: skip
        med = d["median"]
        out.append(f"### {label}: `{name}`\n\n" + src.head())
        if d.get("code"):
            out.append(f"Code measured: {d['code']}.\n\n")
        out.append(
            f"Medians: {med['summaries']['cpu_s']:.2f} s of CPU (user + system) with summaries, "
            f"{med['no-summaries']['cpu_s']:.2f} s without: **{100 * d['summaries_extra_cpu']:+.1f}%** CPU, "
            f"{100 * d['summaries_extra_wall']:+.1f}% wall. The data chunks of the two outputs are "
            f"{'byte for byte the same' if d['data_chunks_identical'] else 'DIFFERENT'}.\n\n"
        )
        if d.get("against"):
            out.append(
                f"In the same rotation, *against* is the write with summaries by the code of "
                f"{d.get('against_code', '')} (`--against`): median {med['against']['cpu_s']:.2f} s of CPU, "
                f"{100 * d['against_extra_cpu']:+.1f}% over this code's write without summaries.\n\n"
            )
        out.append(_table(["variant", "run", "wall s", "user s", "system s", "CPU s", "minor faults", "peak RSS MiB",
                           "load"], rows, "lrrrrrrrr") + "\n\n")  # fmt: skip
    return "".join(out)


def headline_floor() -> str:
    """``headline.py --floor``: the headline against this machine's floor, measured in the same run."""
    out = []
    runs = (("headline_2p32_floor_before.json", "before"), ("headline_2p32_floor.json", "after"),
            ("headline_2p32_floor_run2.json", "after, again"),
            ("headline_2p32_floor_run3.json", "this release's code, a third run"),
            ("headline_2p32_floor_run4.json", "blocks computed in place, a fourth run"),
            ("headline_2p32_floor_run5.json", "the final code from a fresh clone"),
            ("headline_2p32_floor_run6.json", "the final code from a fresh clone, again"),
            ("headline_2p32_floor_run7.json", "a2b6d28, on a day the disk wrote 0.23 GiB/s"),
            ("headline_2p32_floor_run8.json", "a2b6d28, again"),
            ("headline_2p32_floor_run9.json", "4e5c093 (ml_dtypes 0.6.0) from a fresh clone"),
            ("headline_2p32_floor_run10.json", "a quicker day, the disk by one writer and by three"),
            ("headline_2p32_floor_run11.json", "350427c from a fresh clone, the disk by one and by three"))  # fmt: skip
    for name, label in runs:
        d = _load(name)
        m, fl = d["machine"], d["floor"]
        command = "python benchmarks/headline.py --size '2**32' --out /tmp/headline.zarr --floor --json FILE"
        src = Source((name,), command, _machine_line(m), _machine_versions(m))
        disk, carry = fl["disk"], fl["carry_only"]
        rows = [[_num(d["wall_s"], 1), _num(d["user_s"], 1), _num(d["sys_s"], 1), f"{d['minflt']:,}",
                 _num(d["peak_rss_mb"], 0), f"{d['disk_bytes']:,}", _num(disk["seconds"], 1),
                 _num(disk["gib_per_s"], 3), _num(carry["wall_s"], 2), f"**{d['floor_ratio']:.2f}**"]]  # fmt: skip
        out.append(f"### {label}: `{name}`\n\n" + src.head())
        if d.get("code"):
            out.append(f"Code measured: {d['code']}.\n\n")
        out.append(_table(["wall s", "user s", "system s", "minor faults", "peak RSS MB", "bytes stored",
                           "disk floor s", "disk GiB/s", "carry-only s", "wall / floor"], rows) + "\n\n")  # fmt: skip
        if fl.get("disk_ways"):
            ways = "; ".join(f"{w['writers']} writer{'s' if w['writers'] > 1 else ''}: {_num(w['seconds'], 1)} s "
                             f"({_num(w['gib_per_s'], 3)} GiB/s)" for w in fl["disk_ways"])  # fmt: skip
            out.append(f"The disk, written by one writer and by as many as the write keeps: {ways}; the floor takes "
                       f"the faster, and the write's wall time over one writer's is "
                       f"{d['wall_s'] / fl['disk_ways'][0]['seconds']:.2f}.\n\n")  # fmt: skip
    return "".join(out)


PROFILE_NOTE = (
    "Each CPU sample of `perf record -g` (499 Hz) is put in one category by its innermost frame; a category's "
    "CPU-seconds are its share of the samples times the user + system CPU that `/usr/bin/time` measured. The "
    "startup column is a run of 2**22 steps: imports and compilation, paid once."
)


def profile() -> str:
    """``bench_profile.py``: where the headline's CPU-seconds go."""
    d = _load("profile_2p32.json")
    m, run, start = d["machine"], d["run"], d["startup"]
    command = "python benchmarks/bench_profile.py --size '2**32' --out /tmp/profile.zarr --json FILE"
    src = Source(("profile_2p32.json",), command, _machine_line(m), _machine_versions(m))
    rows = [[c, _num(run["categories"].get(c, 0.0), 2), f"{100 * run['categories'].get(c, 0.0) / run['cpu_s']:.1f}%",
             _num(start["categories"].get(c, 0.0), 2)]
            for c in sorted(set(run["categories"]) | set(start["categories"]),
                            key=lambda c: -run["categories"].get(c, 0.0))]  # fmt: skip
    rows.append(["**all**", _num(run["cpu_s"], 2), "100%", _num(start["cpu_s"], 2)])
    head = (f"`{run['command'].split('streamacc', 1)[-1].strip()}` under perf: wall {run['wall_s']:.1f} s, user "
            f"{run['user_s']:.1f} s, system {run['sys_s']:.1f} s, {run['minor_faults']:,} minor faults, peak RSS "
            f"{run['max_rss_kib'] / 1024:.0f} MiB.\n\n")  # fmt: skip
    return (src.head() + PROFILE_NOTE + "\n\n" + head
            + _table(["category", "CPU s", "share", "startup CPU s"], rows) + "\n")  # fmt: skip


def summaries_profile() -> str:
    """``bench_profile.py`` at 2**30 with and without summaries: which categories the summaries add to."""
    names = ("profile_2p30_summaries.json", "profile_2p30_no_summaries.json")
    with_, without = (_load(n) for n in names)
    m = with_["machine"]
    command = "python benchmarks/bench_profile.py --size '2**30' --json FILE [-- --no-summaries]"
    src = Source(names, command, _machine_line(m), _machine_versions(m))
    a, b = with_["run"], without["run"]
    cats = sorted(set(a["categories"]) | set(b["categories"]),
                  key=lambda c: -(a["categories"].get(c, 0.0) - b["categories"].get(c, 0.0)))  # fmt: skip
    rows = [[c, _num(a["categories"].get(c, 0.0), 2), _num(b["categories"].get(c, 0.0), 2),
             f"{a['categories'].get(c, 0.0) - b['categories'].get(c, 0.0):+.2f}"] for c in cats]  # fmt: skip
    rows.append(["**all**", _num(a["cpu_s"], 2), _num(b["cpu_s"], 2), f"{a['cpu_s'] - b['cpu_s']:+.2f}"])
    head = (f"With summaries: wall {a['wall_s']:.1f} s, {a['minor_faults']:,} minor faults; without: wall "
            f"{b['wall_s']:.1f} s, {b['minor_faults']:,} minor faults (one run each, under perf).\n\n")  # fmt: skip
    slices = _load("summaries_slices.json")["slices"]
    tail = (f"\n\nThe reductions alone, on one headline block of 32 MiB (`python benchmarks/bench_summaries.py "
            f"--slices`, `summaries_slices.json`): a median of {slices['cold']['median_ms']:.2f} ms of CPU with the "
            f"block evicted from the caches, {slices['just_written']['median_ms']:.2f} ms right after it was "
            "written, as a writer finds it.\n")  # fmt: skip
    return src.head() + head + _table(["category", "with, CPU s", "without, CPU s", "difference"], rows) + tail


PEERS = ("streamacc-cli", "streamacc-api", "floor", "dask-cumprod", "numpy-loop", "zarr-precomputed")


def peers() -> str:
    """``bench_suite.py`` at 2**30, in six runs: streamacc against its peers, their wall time over streamacc's."""
    names = ("peers_2p30.json", "peers_2p30_run2.json", "peers_2p30_run3.json", "peers_2p30_run4.json",
             "peers_2p30_run5.json", "peers_2p30_run6.json")  # fmt: skip
    return "\n".join(_peers(name) for name in names)


def _peers(name: str) -> str:
    d = _load(name)
    meta = d["meta"]
    src = Source((name,), meta["command"], meta.get("machine", NOT_RECORDED), _versions(meta))
    runs = [r for r in d["runs"] if r.get("status") == "ok"]
    by: dict[str, list[dict[str, Any]]] = {}
    for r in runs:
        by.setdefault(r["approach"], []).append(r)
    base = _median([r["wall_s"] for r in by["streamacc-cli"]])
    rows = []
    for name in PEERS:
        rs = by.get(name)
        if not rs:
            continue
        walls = [r["wall_s"] for r in rs]
        rows.append([f"`{name}`", len(rs), _range(walls, 2), _num(_median(walls), 2),
                     _num(_median([r["peak_rss_kib"] / 1024 for r in rs]), 0),
                     f"{_median(walls) / base:.2f}x"])  # fmt: skip
    note = (f"Load on the machine: {_num(meta.get('load_start'))} at the start, {_num(meta.get('load_end'))} at the "
            "end (1-minute average, 2 cores). The approaches run in turn within each repeat; the last column is "
            "each one's median wall over the command line's (`streamacc-cli`, whose wall includes the interpreter's "
            "start, imports and compilation).\n\n")  # fmt: skip
    return src.head() + note + _table(["approach", "runs", "wall s", "median s", "peak RSS MiB",
                                        "wall / streamacc-cli"], rows) + "\n"  # fmt: skip

def _machine(meta: dict[str, Any]) -> str:
    m = meta.get("machine", {})
    if not m:
        return NOT_RECORDED
    load = f"load average {meta.get('load_after', ['?'])[0]} at the end" if meta.get("load_after") else ""
    return ", ".join(x for x in (f"{m.get('cpus')} cores", f"{m.get('mem_gib')} GiB RAM", f"Python {m.get('python')}",
                                 load) if x)  # fmt: skip


def _figure_value(v: Any) -> str:
    if isinstance(v, int) and not isinstance(v, bool):
        return _num(v)
    if isinstance(v, float):
        return _num(v, 3)
    if isinstance(v, list):
        return ", ".join(_figure_value(x) for x in v)
    if isinstance(v, dict):
        return "; ".join(f"{k} {_figure_value(x)}" for k, x in v.items())
    return str(v)


def _measured(name: str, figures: tuple[str, ...]) -> str:
    """A file written through ``benchmarks/_record.py``: its figures, then every run in the order it ran."""
    d = _load(name)
    m = d.get("machine", {})
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
    versions += f", git {m['git']}, on {m['date']}" if m.get("git") else ""
    src = Source((name,), d["command"], _machine(d), versions)
    rows = []
    for key in figures:
        for k, v in (d.get(key) or {}).items():
            rows.append([f"{key}: {k}" if key != "summary" else k, _figure_value(v)])
    runs = [[r["label"] + (f" ({r['tree']})" if "tree" in r else "") + (f", {_pow2(r['size'])}" if "size" in r
                                                                         else ""),
             _num(r["wall_s"], 2), _num(r["user_s"], 2), _num(r["sys_s"], 2), f"{r['minor_faults']:,}",
             _num(r["peak_rss_mb"], 0), _num(r.get("load_before", [None])[0], 1)] for r in d["records"]]  # fmt: skip
    return (
        src.head() + _table(["figure", "value"], rows, "ll") + "\n\nEvery run, in the order it ran (each a fresh "
        "process under GNU time; *load* is the 1-minute load average as it started):\n\n"
        + _table(["run", "wall s", "user s", "system s", "minor faults", "peak RSS MB", "load"], runs) + "\n"
    )


def tests_cpu() -> str:
    """``bench_tests.py``: the test command under GNU time, and the CPU of each test file."""
    d = _load("tests_cpu.json")
    m = d["machine"]
    versions = ", ".join(f"{k} {v}" for k, v in m.get("versions", {}).items())
    src = Source(("tests_cpu.json",), d["command"], _machine(d), versions + f", git {m['git']}, on {m['date']}")
    runs = d["runs"]
    totals = [[i + 1, r["passed"], _num(r["wall_s"], 0), _num(r["user_s"], 0), _num(r["sys_s"], 0),
               _num(r["cpu_s"], 0), _num(r["in_tests_cpu_s"], 0), _num(r["outside_tests_cpu_s"], 0),
               _num(sum(r["compile_s"].values()), 0), f"{r['minor_faults']:,}", _num(r["peak_rss_mb"], 0),
               _num(r["load_before"][0], 1)] for i, r in enumerate(runs)]  # fmt: skip
    last = runs[-1]
    files = [[f"`{f['file']}`", f["tests"], _num(f["cpu_s"], 1), _num(f["children_cpu_s"], 1)] for f in last["by_file"]]
    buckets = [[k, v["tests"], _num(v["cpu_s"], 0)] for k, v in last["buckets"].items()]
    return (
        src.head()
        + _table(["run", "passed", "wall s", "user s", "system s", "CPU s", "in tests", "outside tests",
                  "compiling", "minor faults", "peak RSS MB", "load"], totals)
        + "\n\n*In tests* is the CPU of the tests themselves (their process's and that of the processes they "
        "waited for); *outside tests* the rest of the command: interpreters starting and importing, collection, "
        "and the processes the session keeps (the dask cluster, the S3 server, the forked writers); *compiling* "
        "is JAX tracing, lowering and compiling, part of both.\n\nThe last run's tests by their CPU:\n\n"
        + _table(["tests taking", "tests", "CPU s"], buckets)
        + "\n\nIts test files that took the most CPU (s; *of it in processes* is what the processes a test "
        "waited for took). A process counts when it is waited for: the interpreter that forks the writers the "
        "tests kill serves the tests of several files and counts, with every writer it forked, in the test "
        "during which it ended, which may be a test that started no process.\n\n"
        + _table(["file", "tests", "CPU s", "of it in processes"], files)
        + "\n"
    )


RENDERERS: dict[str, Callable[[], str]] = {
    "headline": headline,
    "suite": suite,
    "suite-repeat": suite_repeat,
    "accuracy": accuracy,
    "scale-out": scale_out,
    "summaries": summaries,
    "simulations": simulations,
    "limits": limits,
    "verify": verify,
    "adversarial": adversarial,
    "codecs": codecs,
    "chunks": chunks,
    "compensated-cost": compensated_cost,
    "summaries-cost": summaries_cost,
    "summaries-profile": summaries_profile,
    "headline-floor": headline_floor,
    "profile": profile,
    "peers": peers,
    "tests-cpu": tests_cpu,

    "input-memory": lambda: _measured("input_memory.json", ("summary",)),
    "input-memory-run2": lambda: _measured("input_memory_run2.json", ("summary",)),
    "input-memory-run3": lambda: _measured("input_memory_run3.json", ("summary",)),
    "plot-cold": lambda: _measured("plot_2p30.json", ("summary", "importtime_plot_s")),
    "virtual": lambda: _measured("virtual.json", ("write", "slice", "read")),
    "virtual-write": lambda: _measured("virtual_write.json", ("write",)),
    "virtual-write-run2": lambda: _measured("virtual_write_run2.json", ("write",)),
    "virtual-levels": lambda: _measured("virtual_levels.json", ("write", "slice")),
    "virtual-levels-run2": lambda: _measured("virtual_levels_run2.json", ("write", "slice")),
    "virtual-read": lambda: _measured("virtual_read.json", ("read",)),
    "virtual-read-run2": lambda: _measured("virtual_read_run2.json", ("read",)),
    "heat-2p17": lambda: _measured("heat_2p17.json", ("summary",)),
    "heat-2p17-run2": lambda: _measured("heat_2p17_run2.json", ("summary",)),
    "mcmc": lambda: _measured("mcmc_2p18.json", ("summary",)),
    "mcmc-2p22": lambda: _measured("mcmc_2p22.json", ("summary",)),
}


def render(name: str) -> str:
    """The Markdown of benchmark ``name``."""
    if name not in RENDERERS:
        raise KeyError(f"no benchmark {name!r}; the benchmarks are: {', '.join(RENDERERS)}")
    return RENDERERS[name]()


# --- plots ------------------------------------------------------------------------------------------------------


def _figure() -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.2), dpi=100, layout="constrained")
    return fig, fig.add_subplot()


def _suite_plots(folder: Path) -> dict[str, Path]:
    d = _load("results.json")
    out = {}
    for key, label, name in (("peak_rss_mib", "peak RSS (MiB)", "suite_rss.png"),
                             ("gib_per_s", "output written (GiB/s)", "suite_throughput.png")):  # fmt: skip
        fig, ax = _figure()
        for approach in SUITE_WRITERS:
            pts = sorted((r["size"], r[key]) for r in d["summary"] if r["approach"] == approach and r["status"] == "ok")
            if pts:
                width = 2.2 if "streamacc" in approach else 1
                ax.plot(*zip(*pts, strict=True), marker="o", label=approach, linewidth=width)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("steps")
        ax.set_ylabel(label)
        ax.set_title(f"{label}: one run of bench_suite.py ({d['meta'].get('date', '')[:10]})")
        ax.legend(fontsize=7, ncols=2)
        ax.grid(alpha=0.3)
        fig.savefig(folder / name)
        out[name] = folder / name
    return out


def _accuracy_plot(folder: Path) -> dict[str, Path]:
    d = _load("accuracy.json")
    from matplotlib.figure import Figure

    cases = list(ACCURACY_CASES)
    fig = Figure(figsize=(10, 6), dpi=100, layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    for ax, case in zip(axes, cases, strict=False):
        rows = [r for r in d["rows"] if r["case"] == case]
        for method in dict.fromkeys(r["method"] for r in rows):
            pts = sorted((r["n"], max(r["max_ulp"], 0.5)) for r in rows if r["method"] == method and "max_ulp" in r)
            ax.plot(*zip(*pts, strict=True), marker="o", label=method)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(case, fontsize=9)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    axes[-1].set_axis_off()
    fig.suptitle("largest error in ulp against length (0 drawn at 0.5)")
    fig.savefig(folder / "accuracy.png")
    return {"accuracy.png": folder / "accuracy.png"}


def _limits_plot(folder: Path) -> dict[str, Path]:
    d = _load("limits_2p62.json")
    fig, ax = _figure()
    for key in ("write short", "write 2**62"):
        samples = d[key].get("rss_samples") or []
        if samples:
            ax.plot(*zip(*samples, strict=True), label=key)
    ax.set_xlabel("seconds")
    ax.set_ylabel("resident memory (MiB)")
    ax.set_title("a write of 2**30 steps and one of 2**62 (stopped after 30 s): one run each")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.savefig(folder / "limits_rss.png")
    return {"limits_rss.png": folder / "limits_rss.png"}


_MODEL: dict[str, Any] = {}


def _dist_model(folder: Path | None) -> tuple[str, Path]:
    """``bench_dist.model`` on ``dist.json``: its table, and its plot drawn into ``folder`` (once per build)."""
    if folder is not None or "text" not in _MODEL:
        import sys

        sys.path.insert(0, str(RESULTS.parent))
        try:
            import bench_dist
        finally:
            sys.path.remove(str(RESULTS.parent))
        folder = folder or Path(_MODEL["folder"])
        _MODEL.update(text=bench_dist.model(_load("dist.json"), folder), folder=str(folder))
    return _MODEL["text"], Path(_MODEL["folder"]) / "dist_model.png"


def _dist_plot(folder: Path) -> dict[str, Path]:
    return {"dist_model.png": _dist_model(folder)[1]}


def draw_all(folder: Path) -> dict[str, Path]:
    """Draw every plot of the benchmark pages into ``folder``; return them by file name."""
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for draw in (_suite_plots, _accuracy_plot, _limits_plot, _dist_plot):
        out.update(draw(folder))
    return out
