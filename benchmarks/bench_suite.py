"""Benchmark suite: streamacc against the other ways to run the seed's job, each in its own process.

The job is the seed's geometric progression, ``x[0] = 1, x[i] = x[i-1] * (1 + 1e-8)`` in
float64, written to Zarr v3 with one codec and one chunking for every approach; plus a
compute-heavy case (the logistic map, 32 map applications per step) that computes only.
Each approach runs as its own process (``benchmarks/_approaches.py``), so peak RSS is its
own; the suite checks the values on a sample, measures bytes on disk, deletes the output
and writes ``results.json``, ``results.md`` and PNG plots to ``--out``::

    python benchmarks/bench_suite.py --size 2**20 2**22 --repeat 1
    python benchmarks/bench_suite.py --size 2**26 --approaches streamacc-api numpy-loop floor

Every writer's wall time ends with an fsync of all its output files (the page cache
would otherwise hide the disk); compile time counts; imports do not, except for
``streamacc-cli``, which is timed as a whole command.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))

from _approaches import COMPUTE_ONLY, WRITERS, gp_block  # noqa: E402
from _harness import disk_bytes  # noqa: E402

from streamacc import base  # noqa: E402
from streamacc.base import CODEC_NAMES as CODECS  # noqa: E402

GP_APPROACHES = tuple(a for a in WRITERS if a != "dask-blelloch-axisnone")
DEFAULT_APPROACHES = GP_APPROACHES + COMPUTE_ONLY
ALL_APPROACHES = WRITERS + COMPUTE_ONLY

FULL_BUFFER = {"seed-scan": 3.0, "jnp-cumprod": 4.0, "logistic-jit-scan": 2.0}
"""Approaches that hold the whole output in memory: estimated peak bytes per output byte."""

BLELLOCH_MAX = {"dask-blelloch": 2**26, "dask-blelloch-axisnone": 2**16}
"""Largest size at which the Blelloch scans run without ``--allow-blelloch``."""

BASELINE = {"gp": "streamacc-api", "logistic": "logistic-streamacc"}
MiB = 2**20
GiB = 2**30


def kind_of(name: str) -> str:
    return "logistic" if name in COMPUTE_ONLY else "gp"


# --- arguments --------------------------------------------------------------------------


def parse_size(text: str) -> int:
    from streamacc.cli._expr import parse_int

    return parse_int(text, name="--size", minimum=1)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from streamacc.base import DEFAULT_INFLIGHT

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--size", nargs="+", default=["2**20", "2**22"], help="steps, e.g. 2**24 2**26")
    p.add_argument("--repeat", type=int, default=1, help="runs of each approach at each size (median reported)")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "out", help="where results and plots go")
    p.add_argument("--codec", default=base.DEFAULT_CODEC, choices=sorted(CODECS))
    p.add_argument(
        "--approaches", nargs="+", default=list(DEFAULT_APPROACHES), choices=ALL_APPROACHES, metavar="NAME",
        help="subset to run (default: all but dask-blelloch-axisnone):\n  " + " ".join(ALL_APPROACHES),
    )  # fmt: skip
    p.add_argument("--scratch", type=Path, default=Path("/tmp/streamacc-bench"), help="where outputs go (deleted)")
    p.add_argument("--chunk", default="2**22", help="zarr chunk length, capped at the size (default 2**22)")
    p.add_argument("--block", default=None, help="steps per block of the blocked approaches (default: the chunk)")
    p.add_argument("--inflight", type=int, default=DEFAULT_INFLIGHT, help="for zarr-precomputed and streamacc-api")
    p.add_argument("--inner", type=int, default=32, help="logistic map applications per step (default 32)")
    p.add_argument("--python-steps", default="2**16", help="steps the Python logistic loop runs (then scaled)")
    p.add_argument("--mem-budget-gb", type=float, default=16.0, help="skip full-buffer approaches above this")
    p.add_argument("--allow-blelloch", action="store_true", help="run the Blelloch scans above their size guard")
    p.add_argument("--blelloch-timeout", type=float, default=300.0, help="seconds before a Blelloch run is killed")
    p.add_argument("--blelloch-mem-gib", type=float, default=12.0, help="RLIMIT_AS of a Blelloch run")
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds before any other run is killed")
    args = p.parse_args(argv)
    args.sizes = [parse_size(s) for s in args.size]
    args.chunk = parse_size(args.chunk)
    args.block = args.chunk if args.block is None else parse_size(args.block)
    args.python_steps = parse_size(args.python_steps)
    if args.block % args.chunk:
        p.error(f"--block {args.block} must be a multiple of --chunk {args.chunk}")
    if args.repeat < 1:
        p.error("--repeat must be >= 1")
    return args


# --- running one approach ---------------------------------------------------------------


def skip_reason(name: str, n: int, args: argparse.Namespace) -> str | None:
    if name in FULL_BUFFER:
        need = FULL_BUFFER[name] * 8 * n
        if need > args.mem_budget_gb * 1e9:
            return f"skipped: full buffer needs ~{need / 1e9:.2g} GB > {args.mem_budget_gb:g} GB budget"
    if name in BLELLOCH_MAX and n > BLELLOCH_MAX[name] and not args.allow_blelloch:
        return f"skipped: N > {fmt_size(BLELLOCH_MAX[name])} without --allow-blelloch"
    return None


def last_json(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def run_process(cmd: list[str], timeout: float, log: Path) -> tuple[int | None, bool, float, str, str]:
    """Run ``cmd`` in its own session; return (exit code, timed out, seconds, stdout, stderr).

    Its RSS is not taken from here: a child's ``ru_maxrss`` includes this (large) process's
    RSS at the ``exec``, which is why ``_approaches.py`` relaunches itself from a small one.
    """
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    out_path, err_path = log.with_suffix(".stdout"), log.with_suffix(".stderr")
    with open(out_path, "w") as fo, open(err_path, "w") as fe:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=fo, stderr=fe, cwd=REPO, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        timed_out = False
        while True:
            pid, status = os.waitpid(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)  # the session this run started, and nothing else
                pid, status = os.waitpid(proc.pid, 0)
                break
            time.sleep(0.02)
        seconds = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    stdout, stderr = out_path.read_text(), err_path.read_text()
    out_path.unlink()
    err_path.unlink()
    return proc.returncode, timed_out, seconds, stdout, stderr


def run_one(name: str, n: int, rep: int, args: argparse.Namespace, scratch: Path) -> dict:
    out = scratch / f"{name}-{n}-{rep}"
    samples = scratch / f"{name}-{n}-{rep}.samples.npz"
    cmd = [sys.executable, str(BENCH_DIR / "_approaches.py"), name, "--size", str(n), "--out", str(out)]
    cmd += ["--codec", args.codec, "--chunk", str(args.chunk), "--block", str(args.block)]
    cmd += ["--inflight", str(args.inflight), "--inner", str(args.inner), "--python-steps", str(args.python_steps)]
    cmd += ["--samples", str(samples)]
    timeout, limited = args.timeout, name in BLELLOCH_MAX
    if limited:
        cmd += ["--mem-limit-gib", str(args.blelloch_mem_gib)]
        timeout = args.blelloch_timeout
    load = os.getloadavg()[0]
    rc, timed_out, seconds, stdout, stderr = run_process(cmd, timeout, scratch / f"{name}-{n}-{rep}")
    record = last_json(stdout) or {"approach": name, "size": n}
    record.update(rep=rep, process_s=seconds, load_before=load)
    if timed_out:
        record["status"] = f"timeout ({timeout:g} s)"
    elif rc != 0 or "status" not in record:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        memory = limited and (rc < 0 or "MemoryError" in stderr)
        record["status"] = "killed: memory" if memory else f"failed (exit {rc}): {tail[:200]}"
    if record["status"] == "ok" and name in WRITERS:
        record["bytes_stored"] = disk_bytes(out)
    record["_out"], record["_samples"] = str(out), str(samples)
    return record


# --- checking the values ----------------------------------------------------------------


def sample_chunks(n: int, chunk: int) -> list[int]:
    count = -(-n // chunk)
    return sorted({0, count // 2, count - 1})


def gp_reference(n: int, chunk: int) -> dict[int, np.ndarray]:
    """The sample chunks of the progression by ``numpy.multiply.accumulate``, block by block."""
    wanted, ref, prev = set(sample_chunks(n, chunk)), {}, None
    for i, start in enumerate(range(0, n, chunk)):
        x = gp_block(start, min(start + chunk, n), prev)
        if i in wanted:
            ref[i] = x
        prev = x[-1]
    return ref


def compare(got: np.ndarray, want: np.ndarray) -> tuple[bool, float, int]:
    """(bit-identical, max relative error, NaN count)."""
    nans = int(np.isnan(got).sum())
    same = got.shape == want.shape and got.tobytes() == want.tobytes()
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = float(np.nanmax(np.abs(got - want) / np.abs(want))) if got.size else 0.0
    return same, rel, nans


def describe(results: list[tuple[bool, float, int]], what: str = "") -> str:
    nans = sum(r[2] for r in results)
    if nans:
        return f"WRONG: {nans} missing values"
    if all(r[0] for r in results):
        return "bit-identical" + what
    return f"max rel err {max(r[1] for r in results):.1e}" + what


def verify_writer(record: dict, n: int, chunk: int, ref: dict[int, np.ndarray]) -> str:
    import zarr

    out, c = Path(record["_out"]), min(chunk, n)
    name = record["approach"]
    first_only = name in ("floor", "zarr-precomputed")  # one precomputed block, repeated by design
    indices = [0] if first_only else sample_chunks(n, c)
    if name == "floor":
        raw = np.fromfile(out / "x.raw", dtype="<f8", count=min(c, n))
        got = {0: raw}
    else:
        arr = zarr.open_group(str(out), mode="r")["x"]
        got = {i: arr[i * c : min((i + 1) * c, n)] for i in indices}
    results = [compare(got[i], ref[i]) for i in indices]
    return describe(results, " (first chunk; block repeated)" if first_only else "")


def verify_logistic(records: list[dict]) -> None:
    """Compare the logistic samples: Python loop (first values) and the full jit scan are the references."""
    loaded = {}
    for r in records:
        path = Path(r["_samples"])
        if r["status"] == "ok" and path.exists():
            loaded[r["approach"]] = dict(np.load(path))
    scan, python = loaded.get("logistic-jit-scan"), loaded.get("logistic-python")
    for r in records:
        mine = loaded.get(r["approach"])
        if mine is None:
            continue
        checks, against = [], []
        if python is not None and r["approach"] != "logistic-python":
            k = len(python["first"])
            checks.append(compare(mine["first"][:k], python["first"]))
            against.append(f"python loop (first {k})")
        if scan is not None and r["approach"] != "logistic-jit-scan":
            keys = [k for k in ("first", "middle", "last") if k in mine]
            checks += [compare(mine[k], scan[k][: len(mine[k])]) for k in keys]
            against.append("jit scan (" + "/".join(keys) + ")")
        if checks:
            r["values"] = describe(checks, " vs " + ", ".join(against))
        else:
            r["values"] = "reference"


# --- summarising ------------------------------------------------------------------------


def fmt_size(n: int) -> str:
    e = n.bit_length() - 1
    return f"2**{e}" if n == 1 << e else str(n)


def summarise(records: list[dict]) -> list[dict]:
    """One row per (approach, size): medians over repeats, and ratios to the baseline."""
    rows = []
    keys = sorted({(r["approach"], r["size"]) for r in records}, key=lambda k: (k[1], ALL_APPROACHES.index(k[0])))
    for name, n in keys:
        runs = [r for r in records if r["approach"] == name and r["size"] == n]
        ok = [r for r in runs if r["status"] == "ok"]
        row = {"approach": name, "size": n, "kind": kind_of(name), "runs": len(runs), "ok_runs": len(ok)}
        if not ok:
            row["status"] = runs[0]["status"]
            rows.append(row)
            continue
        walls = [r["wall_s"] * n / r.get("steps_run", n) for r in ok]
        row.update(
            status="ok" if len(ok) == len(runs) else f"{len(ok)}/{len(runs)} ok",
            wall_s=statistics.median(walls),
            wall_min_s=min(walls),
            wall_max_s=max(walls),
            gib_per_s=8 * n / statistics.median(walls) / GiB,
            peak_rss_mib=statistics.median(r["peak_rss_kib"] for r in ok) / 1024,
            bytes_stored=ok[0].get("bytes_stored"),
            values=worst_value([r.get("values", "") for r in ok]),
            scaled_from=ok[0].get("steps_run"),
            note=ok[0].get("note", ""),
            sync_s=statistics.median(r.get("sync_s", 0.0) for r in ok),
            import_s=statistics.median(r.get("import_s", 0.0) for r in ok),
        )
        rows.append(row)
    for row in rows:
        base = next(
            (b for b in rows if b["approach"] == BASELINE[row["kind"]] and b["size"] == row["size"] and "wall_s" in b),
            None,
        )
        if base is None or "wall_s" not in row:
            continue
        row["wall_ratio"] = row["wall_s"] / base["wall_s"]
        row["rss_ratio"] = row["peak_rss_mib"] / base["peak_rss_mib"]
        if row.get("bytes_stored") and base.get("bytes_stored"):
            row["bytes_ratio"] = row["bytes_stored"] / base["bytes_stored"]
    return rows


def worst_value(values: list[str]) -> str:
    for prefix in ("WRONG", "max rel err"):
        hits = [v for v in values if v.startswith(prefix)]
        if hits:
            return max(hits, key=lambda v: float(v.split()[3]) if prefix == "max rel err" else 0)
    return values[0] if values else ""


def _num(x: float | None, spec: str) -> str:
    return "" if x is None else format(x, spec)


def markdown(rows: list[dict], meta: dict) -> str:
    a = meta["args"]
    lines = [
        f"Command: `{meta['command']}`  ",
        f"Date: {meta['date']}; machine: {meta['machine']}; load average before/after: "
        f"{meta['load_start']:.2f} / {meta['load_end']:.2f}; git {meta['git']}  ",
        f"Codec `{a['codec']}`, chunks {fmt_size(a['chunk'])} (capped at the size), blocks {fmt_size(a['block'])}, "
        f"inflight {a['inflight']}, repeats {a['repeat']} (median wall; RSS median of runs).",
        "",
        "Writers (geometric progression, float64, N steps to Zarr). Wall includes compile and a final fsync "
        "of every output file; GiB/s is of output (8N bytes / wall); ratios are to `streamacc-api` at the same size.",
        "",
        "| approach | N | wall s | GiB/s | peak RSS MiB | stored MiB | wall / api | RSS / api | stored / api "
        "| values | note |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|---|---|",
    ]
    for r in (r for r in rows if r["kind"] == "gp"):
        lines.append(table_row(r, stored=True))
    lines += [
        "",
        f"Compute only (logistic map, r=3.7, x0=0.5, {a['inner']} map applications per step, float64, "
        "unroll 1). Wall ends when every value is on the host; ratios are to `logistic-streamacc`.",
        "",
        "| approach | N | wall s | GiB/s | ns/step | peak RSS MiB | wall / streamacc | RSS / streamacc "
        "| values | note |",
        "|---|---|--:|--:|--:|--:|--:|--:|---|---|",
    ]
    for r in (r for r in rows if r["kind"] == "logistic"):
        lines.append(table_row(r, stored=False))
    notes = [
        "",
        "Notes: `streamacc-cli` is timed as a whole command (interpreter start and imports included, "
        "about the `import_s` of `streamacc-api` plus ~0.1 s); the others are timed from after their imports. "
        "`floor` writes raw float64 (uncompressed, one file) and `zarr-precomputed` writes one precomputed block "
        "N/B times through streamacc's write pipeline with an fsync per block, so only their first chunk is "
        "checked. `logistic-python` runs "
        f"{fmt_size(a['python_steps'])} steps and its time is scaled to N. Values are compared on the first, "
        "middle and last chunks against `numpy.multiply.accumulate` of the same factors (logistic: against "
        "the Python loop's first values and the one-scan JAX run).",
    ]
    return "\n".join(lines + notes) + "\n"


def table_row(r: dict, *, stored: bool) -> str:
    size = fmt_size(r["size"])
    if "wall_s" not in r:
        cells = ["", "", "", "", "", "", ""] if stored else ["", "", "", "", "", ""]
        return f"| {r['approach']} | {size} | " + " | ".join(cells) + f" | {r['status']} | |"
    wall = f"{r['wall_s']:.2f}"
    if r["ok_runs"] > 1:
        wall += f" ({r['wall_min_s']:.2f}-{r['wall_max_s']:.2f})"
    note = r.get("note", "")
    if r.get("scaled_from") and r["scaled_from"] != r["size"]:
        note = f"scaled from {fmt_size(r['scaled_from'])} steps"
    if r["status"] != "ok":
        note = f"{r['status']}; {note}"
    cells = [r["approach"], size, wall, _num(r["gib_per_s"], ".3f")]
    if stored:
        cells += [
            _num(r["peak_rss_mib"], ".0f"),
            _num(r["bytes_stored"] / MiB if r.get("bytes_stored") else None, ".1f"),
            _num(r.get("wall_ratio"), ".2f"),
            _num(r.get("rss_ratio"), ".2f"),
            _num(r.get("bytes_ratio"), ".2f"),
        ]
    else:
        cells += [
            _num(r["wall_s"] / r["size"] * 1e9, ".1f"),
            _num(r["peak_rss_mib"], ".0f"),
            _num(r.get("wall_ratio"), ".2f"),
            _num(r.get("rss_ratio"), ".2f"),
        ]
    cells += [r.get("values", ""), note]
    return "| " + " | ".join(cells) + " |"


# --- plots ------------------------------------------------------------------------------


def line_plot(done: list[dict], names: list[str], styles: dict, key: str, ylabel: str, title: str, path: Path) -> Path:
    """One log-log line per approach of ``key`` against the length; saved to ``path``."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5.5))
    for a in names:
        pts = sorted((r["size"], r[key]) for r in done if r["approach"] == a)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=a, **styles[a])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("length N (steps)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    if names:
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot(rows: list[dict], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if "wall_s" in r]
    names = [a for a in ALL_APPROACHES if any(r["approach"] == a for r in done)]
    palette = [*plt.get_cmap("tab10").colors, "black", "saddlebrown", "darkgreen"]
    markers = "os^vD<>Ph*XdPo"
    styles = {
        a: {"linestyle": "--" if kind_of(a) == "logistic" else "-", "color": palette[i], "marker": markers[i]}
        for i, a in enumerate(ALL_APPROACHES)
    }
    paths = []

    rss_title = "Peak RSS vs length (dashed: logistic, compute only)"
    paths.append(line_plot(done, names, styles, "peak_rss_mib", "peak RSS (MiB)", rss_title, out / "rss_vs_length.png"))

    largest = max(r["size"] for r in rows)
    at = [r for r in rows if r["size"] == largest]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(at) + 1.5))
    labels, values, colors = [], [], []
    for r in at:
        labels.append(r["approach"])
        values.append(r.get("gib_per_s", 0.0))
        colors.append("tab:orange" if r["approach"].startswith("streamacc") or r["approach"] == "logistic-streamacc"
                      else ("tab:gray" if r["kind"] == "gp" else "tab:blue"))  # fmt: skip
    y = np.arange(len(at))
    ax.barh(y, values, color=colors)
    for yi, r, v in zip(y, at, values, strict=True):
        text = f"{v:.3f}" if "wall_s" in r else r["status"]
        ax.text(v, yi, " " + text, va="center", fontsize=8)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("GiB/s of output (8N bytes / wall)")
    legend = "orange: streamacc; gray: other writers; blue: logistic, compute only"
    ax.set_title(f"Throughput at N = {fmt_size(largest)}\n({legend})")
    ax.set_xlim(0, max([*values, 1e-3]) * 1.35)
    fig.tight_layout()
    paths.append(out / "throughput.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    path = out / "throughput_vs_length.png"
    paths.append(line_plot(done, names, styles, "gib_per_s", "GiB/s of output", "Throughput vs length", path))
    return paths


# --- main -------------------------------------------------------------------------------


def machine() -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GiB
    return f"{platform.machine()}, {os.cpu_count()} cores, {mem:.0f} GiB RAM, Python {platform.python_version()}"


def git_rev() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True)
        return rev.stdout.strip() + (" (dirty)" if dirty.stdout.strip() else "")
    except OSError:
        return "unknown"


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {p: version(p) for p in ("streamacc", "jax", "jaxlib", "zarr", "numpy", "dask", "numcodecs")}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = args.scratch / f"suite-{os.getpid()}"
    scratch.mkdir()
    meta = {
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, REPO), *sys.argv[1:]]),
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(),
        "git": git_rev(),
        "versions": versions(),
        "load_start": os.getloadavg()[0],
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    records: list[dict] = []
    try:
        for n in args.sizes:
            ref = gp_reference(n, min(args.chunk, n)) if any(kind_of(a) == "gp" for a in args.approaches) else {}
            for rep in range(args.repeat):
                group = []
                for name in args.approaches:
                    reason = skip_reason(name, n, args)
                    if reason:
                        if rep == 0:
                            records.append({"approach": name, "size": n, "rep": rep, "status": reason})
                            print(f"{name:24s} N={fmt_size(n):6s} {reason}", flush=True)
                        continue
                    record = run_one(name, n, rep, args, scratch)
                    if record["status"] == "ok" and name in WRITERS:
                        record["values"] = verify_writer(record, n, args.chunk, ref)
                    shutil.rmtree(record["_out"], ignore_errors=True)
                    group.append(record)
                    records.append(record)
                    print(progress_line(record), flush=True)
                verify_logistic([r for r in group if r["approach"] in COMPUTE_ONLY])
                for r in group:
                    Path(r.pop("_samples")).unlink(missing_ok=True)
                    r.pop("_out", None)
                save(args.out, meta, records)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    meta["load_end"] = os.getloadavg()[0]
    rows = save(args.out, meta, records)
    (args.out / "results.md").write_text(markdown(rows, meta))
    paths = plot(rows, args.out)
    print(markdown(rows, meta))
    print("wrote", ", ".join(str(p) for p in [args.out / "results.json", args.out / "results.md", *paths]))
    return 0


def progress_line(r: dict) -> str:
    text = f"{r['approach']:24s} N={fmt_size(r['size']):6s} rep {r['rep']}: {r['status']}"
    if r["status"] == "ok":
        text += f", {r['wall_s']:.2f} s, {r['peak_rss_kib'] / 1024:.0f} MiB RSS"
        if "bytes_stored" in r:
            text += f", {r['bytes_stored'] / MiB:.1f} MiB stored, {r.get('values', '')}"
    return text


def save(out: Path, meta: dict, records: list[dict]) -> list[dict]:
    rows = summarise(records)
    clean = [{k: v for k, v in r.items() if not k.startswith("_")} for r in records]
    (out / "results.json").write_text(json.dumps({"meta": meta, "runs": clean, "summary": rows}, indent=1))
    return rows


if __name__ == "__main__":
    sys.exit(main())
