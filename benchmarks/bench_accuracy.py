"""Accuracy of long accumulations against exact values: plain, compensated, and the peers.

For each case (the geometric progression in float64 and float32, the running sum of
values in [0.5, 1) in float64 and float32) and each length, every method's output is
streamed block by block (nothing holds more than a block, except ``jnp``, which needs
the whole array and is skipped where it would not fit), and compared at a sample of
steps (``--samples`` spread evenly, plus the last) with the exact value rounded to the
dtype. The error at a step is the distance, counted in floats of the dtype, from that
correctly rounded value: 0 means correctly rounded, 1 a neighbour. Exact values come
from mpmath at 256 bits (the geometric progression: ``x0 * ratio**i``) or from integer
sums (the inputs are integers times a power of two), then are rounded by mpmath at the
dtype's precision::

    python benchmarks/bench_accuracy.py --sizes 2**20 2**22
    nohup python benchmarks/bench_accuracy.py --sizes 2**20 2**22 2**24 2**26 2**28 2**30 &

Methods: ``plain`` (streamacc's recipe as it is, sequential, bit-identical to numpy's
loop), ``compensated`` (the recipe with ``compensated=True``), ``pair`` (float32 only:
the compensated step with a carry of two float32 numbers instead of three, to show why
float32 carries three), ``numpy`` (a block loop of
``np.multiply.accumulate`` / ``np.cumsum`` carrying the last value, which equals one
call over the whole array), ``dask`` (``da.cumprod`` / ``da.cumsum`` over chunks of
``--chunk``, at least 8 of them), ``jnp`` (``jnp.cumprod`` / ``jnp.cumsum`` of the whole
array). Results go to ``accuracy.json``, ``accuracy.md`` and ``accuracy.png`` in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import mpmath  # noqa: E402

mpmath.mp.prec = 256

import streamacc  # noqa: E402
from streamacc.recipes import get_recipe  # noqa: E402
from streamacc.recipes._compensated import UNROLL, CompensatedCumulative, initial  # noqa: E402
from streamacc.recipes._cumulative import Cumulative  # noqa: E402

PRECISION = {"float64": 53, "float32": 24}
METHODS = ("plain", "compensated", "pair", "numpy", "dask", "jnp")
JNP_BYTES_PER_OUTPUT_BYTE = 4.5
"""``jnp.cumprod`` of 2**30 float64 values peaked at 34 GB (benchmarks/RESULTS.md): about
4 bytes of memory per output byte; ``jnp`` runs only where that fits in half the free RAM."""

CASES = {
    "gp-f64-up": {"kind": "gp", "dtype": "float64", "x0": 1.0, "ratio": 1 + 1e-8, "title": "gp float64, ratio 1+1e-8"},
    "gp-f64-down": {
        "kind": "gp",
        "dtype": "float64",
        "x0": 1.0,
        "ratio": 1 - 3e-9,
        "title": "gp float64, ratio 1-3e-9",
    },
    # x0 = 2**-64 keeps 2**30 steps of ratio 1 + 2**-23 (a factor 2**184.7) inside float32's range; scaling
    # by a power of two is exact, so every error is the same as with x0 = 1 wherever that stays finite.
    "gp-f32": {
        "kind": "gp",
        "dtype": "float32",
        "x0": 2.0**-64,
        "ratio": 1 + 2**-23,
        "title": "gp float32, ratio 1+2**-23",
    },
    "cumsum-f64": {"kind": "cumsum", "dtype": "float64", "title": "cumsum float64, values in [0.5, 1)"},
    "cumsum-f32": {"kind": "cumsum", "dtype": "float32", "title": "cumsum float32, values in [0.5, 1)"},
}


# --- inputs of the running sums: random, reproducible, readable at any offset ------------------


def draws(start: int, stop: int, dtype: str) -> np.ndarray:
    """Integers ``k`` in ``[2**(p-1), 2**p)`` for steps ``[start, stop)`` (``p`` the precision): a
    splitmix64 hash of the step index, so any slice can be drawn on its own."""
    z = np.arange(start, stop, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x632BE59BD9B4E019)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    p = PRECISION[dtype]
    return ((z >> np.uint64(64 - (p - 1))) | np.uint64(1 << (p - 1))).astype(np.int64)


def values(start: int, stop: int, dtype: str) -> np.ndarray:
    """The inputs ``k * 2**-p``: values in [0.5, 1) that the dtype holds exactly."""
    return np.ldexp(draws(start, stop, dtype).astype(np.float64), -PRECISION[dtype]).astype(dtype)


class HashedInput:
    """A lazy 1-D input for ``streamacc.iter_blocks``: slices are drawn when asked for."""

    def __init__(self, n: int, dtype: str) -> None:
        self.shape, self.dtype, self.ndim, self.n = (n,), np.dtype(dtype), 1, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, _ = key.indices(self.n)
        return values(start, stop, self.dtype.name)


# --- the sampled comparison ------------------------------------------------------------------


def sample_steps(n: int, count: int) -> np.ndarray:
    return np.unique(np.r_[np.linspace(0, n - 1, min(count, n)).astype(np.int64), n - 1])


class Sampler:
    """Keeps the values of a streamed output at the sample steps; also a ``dask.array.store`` target."""

    def __init__(self, steps: np.ndarray, dtype: str) -> None:
        self.steps, self.got = steps, np.full(len(steps), np.nan, dtype=dtype)
        self.dtype, self.shape, self.ndim = np.dtype(dtype), (int(steps[-1]) + 1,), 1

    def add(self, start: int, block: np.ndarray) -> None:
        lo, hi = np.searchsorted(self.steps, [start, start + len(block)])
        self.got[lo:hi] = block[self.steps[lo:hi] - start]

    def __setitem__(self, key: tuple, block: np.ndarray) -> None:
        self.add(key[0].start or 0, np.asarray(block))


def exact_gp(case: dict, steps: np.ndarray) -> np.ndarray:
    """``x0 * ratio**i`` at 256 bits, rounded to the dtype (the ratio as the dtype holds it)."""
    dtype = case["dtype"]
    x0, ratio = (mpmath.mpf(float(np.asarray(v, dtype))) for v in (case["x0"], case["ratio"]))
    return np.array([round_to(x0 * ratio ** int(i), dtype) for i in steps], dtype=dtype)


def exact_cumsum(case: dict, steps: np.ndarray, block: int) -> np.ndarray:
    """Exact running sums of the drawn integers (two int64 limbs each), rounded to the dtype."""
    dtype, p = case["dtype"], PRECISION[case["dtype"]]
    n, out, high, low = int(steps[-1]) + 1, [], 0, 0
    for start in range(0, n, block):
        k = draws(start, min(n, start + block), dtype)
        hs, ls = np.cumsum(k >> 26), np.cumsum(k & (2**26 - 1))
        lo, hi = np.searchsorted(steps, [start, start + len(k)])
        for i in steps[lo:hi] - start:
            total = ((high + int(hs[i])) << 26) + low + int(ls[i])
            out.append(round_to(mpmath.ldexp(mpmath.mpf(total), -p), dtype))
        high, low = high + int(hs[-1]), low + int(ls[-1])
    return np.array(out, dtype=dtype)


def round_to(value: mpmath.mpf, dtype: str) -> float:
    """``value`` rounded to the nearest ``dtype`` value, ties to even; refuses a value so near a tie
    that 256 bits cannot tell which way it rounds (none has come up)."""
    with mpmath.workprec(PRECISION[dtype]):
        rounded, below, above = (+(value * (1 + k * mpmath.mpf(2) ** -200)) for k in (0, -1, 1))
    if not below == rounded == above:
        raise ArithmeticError(f"{value} is within 2**-200 of a tie between two {dtype} values")
    return float(rounded)


def distances(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """How many floats of the dtype lie between each value and the exact one (0: correctly rounded)."""

    def ordered(a: np.ndarray) -> np.ndarray:
        signed = a.view(np.int64 if a.itemsize == 8 else np.int32).astype(np.int64)
        return np.where(signed < 0, np.iinfo(np.int64).min // 2 - signed, signed)

    bad = ~np.isfinite(got)
    d = np.abs(ordered(got) - ordered(exact)).astype(np.float64)
    d[bad] = np.inf
    return d


# --- the methods, each streaming blocks -------------------------------------------------------


def streamacc_blocks(case: dict, n: int, method: str, block: int) -> Iterator[tuple[int, np.ndarray]]:
    dtype, compensated = case["dtype"], method != "plain"
    if case["kind"] == "gp":
        job = get_recipe("gp").build(n, dtype, x0=case["x0"], ratio=case["ratio"], compensated=compensated)
        f, init, xs, unroll = job.f, job.init, None, job.unroll
    elif compensated:
        f, init, xs, unroll = CompensatedCumulative("add", dtype), initial(0.0, dtype), HashedInput(n, dtype), UNROLL
    else:  # the cumsum recipe's own step, as it runs for an input read block by block
        f, init, xs, unroll = Cumulative("add", dtype), np.zeros((), dtype), HashedInput(n, dtype), 8
    if method == "pair":  # the same steps on the first two numbers: they then run as a pair
        init = init[:2]
    for b in streamacc.iter_blocks(f, init, xs, length=n, block_size=block, unroll=unroll):
        yield b.start, b.ys


def numpy_blocks(case: dict, n: int, block: int) -> Iterator[tuple[int, np.ndarray]]:
    dtype = np.dtype(case["dtype"])
    carry = None
    for start in range(0, n, block):
        stop = min(n, start + block)
        if case["kind"] == "gp":
            ratio = dtype.type(case["ratio"])
            a = np.full(stop - start, ratio, dtype)
            a[0] = dtype.type(case["x0"]) if carry is None else carry * ratio
            ys = np.multiply.accumulate(a)
        else:
            a = values(start, stop, dtype.name)
            if carry is not None:
                a[0] += carry
            ys = np.cumsum(a)
        carry = ys[-1]
        yield start, ys


def dask_array(case: dict, n: int, chunk: int):
    import dask.array as da

    dtype = np.dtype(case["dtype"])
    index = da.arange(n, chunks=chunk, dtype=np.int64)
    if case["kind"] == "gp":
        x = da.where(index == 0, dtype.type(case["x0"]), dtype.type(case["ratio"])).astype(dtype)
        return da.cumprod(x)

    def draw(block, block_info=None):
        start, stop = block_info[0]["array-location"][0]
        return values(start, stop, dtype.name)

    return da.cumsum(index.map_blocks(draw, dtype=dtype))


def jnp_output(case: dict, n: int) -> np.ndarray | jax.Array:
    import jax.numpy as jnp

    dtype = case["dtype"]
    if case["kind"] == "gp":
        x = jnp.full(n, case["ratio"], dtype=dtype).at[0].set(case["x0"])
        return jnp.cumprod(x)
    return jnp.cumsum(jnp.asarray(np.concatenate([values(s, min(n, s + 2**24), dtype) for s in range(0, n, 2**24)])))


def free_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(method: str, case: dict, n: int, steps: np.ndarray, args: argparse.Namespace) -> dict:
    dtype = case["dtype"]
    sampler = Sampler(steps, dtype)
    start = time.perf_counter()
    if method == "pair" and dtype != "float32":
        return {"skipped": "the same as compensated (float64 carries a pair)"}
    if method in ("plain", "compensated", "pair"):
        for first, ys in streamacc_blocks(case, n, method, args.block):
            sampler.add(first, ys)
    elif method == "numpy":
        for first, ys in numpy_blocks(case, n, args.block):
            sampler.add(first, ys)
    elif method == "dask":
        import dask.array as da

        chunk = min(args.chunk, max(1, n // 8))
        da.store(dask_array(case, n, chunk), sampler, lock=False, scheduler="threads")
    else:
        need = JNP_BYTES_PER_OUTPUT_BYTE * n * np.dtype(dtype).itemsize
        if need > free_bytes() / 2:
            return {"skipped": f"needs the whole array: about {need / 2**30:.1f} GiB, over half the free memory"}
        out = jnp_output(case, n)
        sampler.got[:] = np.asarray(out[steps])
        del out
    return {"got": sampler.got, "seconds": time.perf_counter() - start}


def summary(d: np.ndarray) -> dict:
    return {
        "max_ulp": float(d.max()),
        "median_ulp": float(np.median(d)),
        "correctly_rounded": float(np.mean(d == 0)),
        "within_1_ulp": float(np.mean(d <= 1)),
    }


def run(args: argparse.Namespace) -> list[dict]:
    rows = json.loads((args.out / "accuracy.json").read_text())["rows"] if args.append else []
    for name in args.cases:
        case = CASES[name]
        for n in args.sizes:
            steps = sample_steps(n, args.samples)
            t0 = time.perf_counter()
            exact = exact_gp(case, steps) if case["kind"] == "gp" else exact_cumsum(case, steps, args.block)
            print(f"{name} n=2**{n.bit_length() - 1}: exact values in {time.perf_counter() - t0:.1f} s", flush=True)
            for method in args.methods:
                result = measure(method, case, n, steps, args)
                row = {"case": name, "n": n, "method": method, "samples": len(steps)}
                if "skipped" in result:
                    row["skipped"] = result["skipped"]
                else:
                    row.update(summary(distances(result["got"], exact)), seconds=round(result["seconds"], 2))
                rows = [r for r in rows if (r["case"], r["n"], r["method"]) != (name, n, method)] + [row]
                print(json.dumps(row), flush=True)
                save(rows, args)
    return rows


# --- report ----------------------------------------------------------------------------------


def label(n: int) -> str:
    return f"2**{n.bit_length() - 1}" if n & (n - 1) == 0 else str(n)


def fmt(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:,.0f}" if x >= 10 else f"{x:g}"


def table(rows: list[dict]) -> str:
    lines = [
        "| case | steps | method | max ulp | median ulp | correctly rounded | within 1 ulp |",
        "|---|--:|---|--:|--:|--:|--:|",
    ]
    for r in sorted(rows, key=lambda r: (list(CASES).index(r["case"]), r["n"], METHODS.index(r["method"]))):
        if "skipped" in r:
            lines.append(f"| {r['case']} | {label(r['n'])} | {r['method']} | skipped: {r['skipped']} | | | |")
        else:
            lines.append(
                f"| {r['case']} | {label(r['n'])} | {r['method']} | {fmt(r['max_ulp'])} | {fmt(r['median_ulp'])} "
                f"| {100 * r['correctly_rounded']:.2f}% | {100 * r['within_1_ulp']:.2f}% |"
            )
    return "\n".join(lines) + "\n"


def summary_table(rows: list[dict]) -> str:
    """One line per case and length: compensated in full, every other method's max (median) error."""
    others = [m for m in METHODS if m != "compensated"]
    lines = [
        "| case | steps | compensated: max ulp, correctly rounded | "
        + " | ".join(f"{m}: max (median) ulp" for m in others)
        + " |",
        "|---|--:|--:|" + "--:|" * len(others),
    ]
    found = {(r["case"], r["n"], r["method"]): r for r in rows}
    for case, n in sorted({(r["case"], r["n"]) for r in rows}, key=lambda k: (list(CASES).index(k[0]), k[1])):
        comp = found.get((case, n, "compensated"), {})
        cells = [f"{fmt(comp['max_ulp'])}, {100 * comp['correctly_rounded']:.3f}%" if "max_ulp" in comp else "-"]
        for m in others:
            r = found.get((case, n, m), {})
            cells.append(f"{fmt(r['max_ulp'])} ({fmt(r['median_ulp'])})" if "max_ulp" in r else "-")
        lines.append(f"| {case} | {label(n)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


STYLE = {
    "plain": ("o-", "tab:blue"),
    "compensated": ("s-", "tab:orange"),
    "pair": ("s:", "tab:brown"),
    "numpy": ("x--", "tab:green"),
    "dask": ("^-", "tab:red"),
    "jnp": ("v-", "tab:purple"),
}


def plot(rows: list[dict], path: Path) -> None:
    """One panel per case (max error against length, log-log), and one with the fraction of
    float32 steps correctly rounded by the compensated triple and by a pair."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def series(case: str, method: str, key: str) -> list[tuple[int, float]]:
        return sorted((r["n"], r[key]) for r in rows if (r["case"], r["method"]) == (case, method) and key in r)

    cases = [c for c in CASES if any(r["case"] == c for r in rows)]
    columns, panels = 3, len(cases) + 1
    fig, axes = plt.subplots(-(-panels // columns), columns, figsize=(13.5, 3.7 * -(-panels // columns)))
    axes = np.atleast_1d(axes).ravel()
    for ax, case in zip(axes, cases, strict=False):
        for method in METHODS:
            if pts := series(case, method, "max_ulp"):
                xs, ys = zip(*pts, strict=True)
                marker, color = STYLE[method]
                ax.plot(xs, [max(y, 0.5) for y in ys], marker, color=color, label=method, alpha=0.85)
        ax.set_yscale("log")
        ax.axhline(1, color="grey", lw=0.5)
        ax.set_title(CASES[case]["title"], fontsize=10)
        ax.set_ylabel("max error (ulp); 0 drawn at 0.5", fontsize=8)
    ax = axes[len(cases)]
    for case in ("gp-f32", "cumsum-f32"):
        for method, dash in (("compensated", "-"), ("pair", ":")):
            if pts := series(case, method, "correctly_rounded"):
                xs, ys = zip(*pts, strict=True)
                marker = "s" if case == "gp-f32" else "D"
                ax.plot(xs, [100 * y for y in ys], marker + dash, color=STYLE[method][1], label=f"{case} {method}")
    ax.axhline(95, color="grey", lw=0.5)
    ax.set_title("float32: steps correctly rounded (%)", fontsize=10)
    ax.legend(fontsize=7)
    for ax in axes[: len(cases) + 1]:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("steps", fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[len(cases) + 1 :]:
        ax.axis("off")
    handles = [plt.Line2D([], [], linestyle=STYLE[m][0][1:], marker=STYLE[m][0][0], color=STYLE[m][1]) for m in METHODS]
    fig.legend(handles, METHODS, loc="upper center", ncol=len(METHODS), fontsize=9, bbox_to_anchor=(0.5, 0.955))
    fig.suptitle("Largest error against the exact value over 100,001 sampled steps (0 = correctly rounded)")
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=100)
    plt.close(fig)


def save(rows: list[dict], args: argparse.Namespace) -> None:
    args.out.mkdir(parents=True, exist_ok=True)
    before = json.loads((args.out / "accuracy.json").read_text())["meta"]["commands"] if args.append else []
    meta = {
        "commands": [*before, "python " + " ".join(sys.argv)],
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}",
        "jax": jax.__version__,
        "numpy": np.__version__,
        "samples": args.samples,
        "block": args.block,
        "dask_chunk": args.chunk,
    }
    (args.out / "accuracy.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    report(meta, rows, args.out)


def report(meta: dict, rows: list[dict], out: Path) -> None:
    commands = "".join(f"    {c}\n" for c in meta["commands"])
    (out / "accuracy.md").write_text(f"Produced by\n\n{commands}\n" + summary_table(rows) + "\n" + table(rows))
    plot(rows, out / "accuracy.png")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from streamacc.cli._expr import parse_int

    def size(text: str) -> int:
        return parse_int(text, name="--sizes", minimum=1)

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", nargs="+", type=size, default=[2**20, 2**22], help="lengths, e.g. 2**20 2**30")
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument("--samples", type=int, default=100_000, help="steps compared, spread evenly, plus the last")
    p.add_argument("--block", type=size, default=2**22, help="steps per streamed block")
    p.add_argument("--chunk", type=size, default=2**22, help="dask chunk (at most a length / 8)")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results", help="where accuracy.{json,md,png} go")
    p.add_argument("--replot", action="store_true", help="redraw the table and plot from --out's accuracy.json")
    p.add_argument("--append", action="store_true", help="add to (or replace rows of) --out's accuracy.json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.replot:
        saved = json.loads((args.out / "accuracy.json").read_text())
        report(saved["meta"], saved["rows"], args.out)
        return
    run(args)


if __name__ == "__main__":
    main()
