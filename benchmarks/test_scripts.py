"""The scenarios that stay scripts of their own, run by the harness and read into its schema.

Each test runs one script in a child process under GNU time (the 2**32 headline through
``headline.py``, the 2**62 limits through ``bench_limits.py``, the peers through
``bench_suite.py``, ...), with the length from ``--size`` and the script's own repeats
from ``--repeat``, then reads the JSON (or, for the scripts that write a table, the
Markdown) it wrote with ``_formats.READERS``: its commands, figures and tables become the
benchmark's ``extra_info``, as a scenario of the harness records its own.

The test suite's CPU (``test_tests_cpu``) and the adversarial categories
(``test_adversarial``) take many minutes at any size: they run with ``-m long``.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from _formats import READERS

from streamacc.cli._expr import parse_int

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def script(scenario: Any, fmt: str, name: str, *args: Any, output: Path) -> None:
    """Run ``benchmarks/NAME ARGS`` once, then read ``output`` as ``fmt`` into the scenario."""
    cmd = [sys.executable, ROOT / name if "/" in name else HERE / name, *args]
    scenario.benchmark.pedantic(lambda: scenario.run(cmd, name), rounds=1, iterations=1, warmup_rounds=0)
    read(scenario, fmt, output)


def read(scenario: Any, fmt: str, output: Path) -> None:
    text = output.read_text()
    run = READERS[fmt](text if output.suffix == ".md" else json.loads(text))
    scenario.tables["the script, under GNU time"] = scenario.rows
    scenario.rows = []
    several = len(run.benchmarks) > 1
    for b in run.benchmarks:
        extra = b["extra_info"]
        prefix = f"{b['name']}: " if several else ""
        scenario.commands |= {prefix + k: v for k, v in extra["commands"].items()}
        scenario.figures |= {prefix + k: v for k, v in extra["figures"].items()}
        scenario.tables |= {prefix + k: v for k, v in extra["tables"].items()}
        scenario.plots += [p | {"table": prefix + p["table"]} for p in extra.get("plots", [])]


def steps(size: str) -> int:
    return parse_int(size, name="--size")


@pytest.mark.benchmark(group="headline")
@pytest.mark.sizes("2**16")
def test_headline(scenario, size):
    """``streamacc write OUT --size N`` under GNU time, then blocks compared with a numpy loop."""
    out = scenario.folder / "headline.json"
    script(scenario, "headline", "headline.py", "--size", size, "--samples", 2, "--out", scenario.folder / "h.zarr",
           "--json", out, output=out)  # fmt: skip


@pytest.mark.benchmark(group="headline-floor")
@pytest.mark.sizes("2**16")
def test_headline_floor(scenario, size):
    """The headline, then the disk's and the compute's floor of the same job, in the same run."""
    out = scenario.folder / "headline.json"
    script(scenario, "headline", "headline.py", "--size", size, "--samples", 2, "--floor",
           "--out", scenario.folder / "h.zarr", "--json", out, output=out)  # fmt: skip


def _perf() -> None:
    if shutil.which("perf") is None:
        pytest.skip("needs perf (linux-perf)")


@pytest.mark.benchmark(group="profile")
@pytest.mark.sizes("2**24")
def test_profile(scenario, size):
    """The headline under ``perf record -g``: its CPU by category."""
    _perf()
    out = scenario.folder / "profile.json"
    script(scenario, "profile", "bench_profile.py", "--size", size, "--out", scenario.folder / "p.zarr",
           "--json", out, output=out)  # fmt: skip


@pytest.mark.benchmark(group="summaries-profile")
@pytest.mark.sizes("2**24")
def test_summaries_profile(scenario, size):
    """The headline under perf with and without summaries."""
    _perf()
    with_, without = scenario.folder / "with.json", scenario.folder / "without.json"
    base = [sys.executable, HERE / "bench_profile.py", "--size", size, "--out", scenario.folder / "p.zarr"]

    def both() -> None:
        scenario.run([*base, "--json", with_], "with summaries")
        scenario.run([*base, "--json", without, "--", "--no-summaries"], "without summaries")

    scenario.benchmark.pedantic(both, rounds=1, iterations=1, warmup_rounds=0)
    rows = scenario.rows
    read(scenario, "summaries-profile", with_)
    first = (scenario.commands, scenario.figures, scenario.tables)
    scenario.commands, scenario.figures, scenario.tables = {}, {}, {}
    scenario.rows = []
    read(scenario, "summaries-profile", without)
    scenario.commands = {**{f"with: {k}": v for k, v in first[0].items()},
                         **{f"without: {k}": v for k, v in scenario.commands.items()}}  # fmt: skip
    scenario.figures = {**{f"with: {k}": v for k, v in first[1].items()},
                        **{f"without: {k}": v for k, v in scenario.figures.items()}}  # fmt: skip
    scenario.tables = {"the scripts, under GNU time": rows,
                       **{f"with: {k}": v for k, v in first[2].items() if k != "the script, under GNU time"},
                       **{f"without: {k}": v for k, v in scenario.tables.items()
                          if k != "the script, under GNU time"}}  # fmt: skip


PEERS = ("streamacc-cli", "floor", "dask-cumprod", "numpy-loop", "zarr-precomputed")


@pytest.mark.benchmark(group="suite")
@pytest.mark.sizes("2**20")
def test_suite(scenario, size):
    """Every approach to the job at each length (``--size`` repeated for several)."""
    sizes = scenario.request.config.getoption("size") or [size]
    if size != sizes[0]:
        pytest.skip("the suite runs every --size in one run, under the first")
    script(scenario, "suite", "bench_suite.py", "--size", *sizes, "--repeat", scenario.repeat(1),
           "--out", scenario.folder, output=scenario.folder / "results.json")  # fmt: skip


@pytest.mark.benchmark(group="peers")
@pytest.mark.sizes("2**20")
def test_peers(scenario, size):
    """The command line against its peers at one length, the approaches in turn within each repeat."""
    script(scenario, "peers", "bench_suite.py", "--size", size, "--repeat", scenario.repeat(2),
           "--approaches", *PEERS, "--out", scenario.folder, output=scenario.folder / "results.json")  # fmt: skip


@pytest.mark.benchmark(group="overview")
@pytest.mark.sizes("2**22")
def test_overview(scenario, size):
    """The headline with and without summaries in pairs, and a picture of it three ways from a cold page cache."""
    out = scenario.folder / "overview.json"
    script(scenario, "overview", "bench_overview.py", "--size", size, "--dir", scenario.folder / "o",
           "--pairs", scenario.repeat(2), "--json", out, output=out)  # fmt: skip


@pytest.mark.benchmark(group="plot-cold")
@pytest.mark.sizes("2**22")
def test_plot_cold(scenario, size):
    """``streamacc plot`` and ``streamacc.overview`` from a cold page cache (``--ref``: another checkout's too)."""
    out = scenario.folder / "plot.json"
    ref = ["--ref", scenario.ref] if scenario.ref else []
    script(scenario, "plot-cold", "bench_plot.py", "--size", size, "--dir", scenario.folder / "p",
           "--repeat", scenario.repeat(2), *ref, "--importtime", "--json", out, output=out)  # fmt: skip


@pytest.mark.benchmark(group="limits")
@pytest.mark.sizes("2**20")
def test_limits(scenario, size):
    """A write of ``--size`` steps to its end against one of 2**62 stopped by SIGINT (after 30 s at 2**28 steps
    or more, else 3 s), then ``info``, ``open`` and ``verify`` of both."""
    out = scenario.folder / "limits.json"
    seconds = 30 if steps(size) >= 2**28 else 3
    script(scenario, "limits", "bench_limits.py", "--short", size, "--seconds", seconds, "--dir", scenario.folder / "l",
           "--json", out, output=out)  # fmt: skip


@pytest.mark.benchmark(group="verify")
@pytest.mark.sizes("2**22")
def test_verify(scenario, size):
    """The headline's output written, then verified, each a fresh process (``--ref``: the release before's too)."""
    out = scenario.folder / "verify.json"
    ref = ["--before", scenario.ref] if scenario.ref else []
    script(scenario, "verify", "bench_verify.py", "--sizes", size, "--repeat", scenario.repeat(2), *ref,
           "--dir", scenario.folder / "v", "--json", out, output=out)  # fmt: skip


@pytest.mark.benchmark(group="accuracy")
@pytest.mark.sizes("2**16")
def test_accuracy(scenario, size):
    """Errors in ulp against exact values (mpmath, integers), per case, method and length."""
    sizes = scenario.request.config.getoption("size") or [size]
    if size != sizes[0]:
        pytest.skip("the accuracy runs every --size in one run, under the first")
    script(scenario, "accuracy", "bench_accuracy.py", "--sizes", *sizes, "--samples", 1000, "--block", "2**12",
           "--chunk", "2**12", "--out", scenario.folder, output=scenario.folder / "accuracy.json")  # fmt: skip


@pytest.mark.benchmark(group="scale-out")
@pytest.mark.sizes("2**24")
def test_scale_out(scenario, size):
    """The driver's carry pass against a worker's block task, then runs on local clusters, and the model."""
    block = str(min(steps(size) // 4, 2**22))
    base = [sys.executable, HERE / "bench_dist.py"]

    def sections() -> None:
        for section in ("parts", "runs"):
            scenario.run([*base, section, "--size", size, "--block", block, "--out", scenario.folder], section)

    scenario.benchmark.pedantic(sections, rounds=1, iterations=1, warmup_rounds=0)
    read(scenario, "scale-out", scenario.folder / "dist.json")


@pytest.mark.benchmark(group="simulations")
@pytest.mark.sizes("2**12")
@pytest.mark.parametrize("section", ["heat", "ensemble", "lorenz", "chunks"])
def test_simulations(scenario, size, section):
    """States of many values: the heat equation, an ensemble, Lorenz-63 thinned, the chunk layouts
    (``--size default``: each section's own length, as on the pages)."""
    out = scenario.folder / f"{section}.json"
    scenario.benchmark.group = f"simulations-{section}"
    steps = [] if size == "default" else ["--steps", size]
    script(scenario, f"simulations-{section}", "bench_simulations.py", section, "--dir", scenario.folder / "s",
           *steps, "--json", out, output=out)  # fmt: skip


@pytest.mark.benchmark(group="heat-alternating")
@pytest.mark.sizes("2**10")
def test_heat_alternating(scenario, size):
    """The heat equation's three writers (streamacc, zarr's append, xarray's), each in turn, ``--repeat`` times."""
    out = scenario.folder / "heat.json"
    script(scenario, "heat-alternating", "bench_heat.py", "--steps", size, "--repeat", scenario.repeat(2),
           "--dir", scenario.folder / "h", "--json", out, output=out)  # fmt: skip


def _markdown(scenario: Any, fmt: str, name: str, size: str, *args: Any, table: str) -> None:
    script(scenario, fmt, name, *args, "--repeat", scenario.repeat(1), "--out", scenario.folder,
           output=scenario.folder / table)  # fmt: skip


@pytest.mark.benchmark(group="codecs")
@pytest.mark.sizes("2**22")
def test_codecs(scenario, size):
    """The codec, durability and writer threads of the write path."""
    block = str(min(steps(size) // 4, 2**22))
    _markdown(scenario, "codecs", "bench_codecs.py", size, "--size", size, "--block", block,
              "--sections", "codec", "inflight", table="codecs.md")  # fmt: skip


@pytest.mark.benchmark(group="chunks")
@pytest.mark.sizes("2**22")
def test_chunks(scenario, size):
    """The chunk encoding: zarr's pipeline, chunks and shards, streamacc's writer; and reading each back."""
    _markdown(scenario, "chunks", "bench_chunks.py", size, "--size", size, "--read", table="chunks.md")


@pytest.mark.benchmark(group="compensated-cost")
@pytest.mark.sizes("2**22")
def test_compensated_cost(scenario, size):
    """What ``--compensated`` costs against the plain recurrence, per recipe."""
    _markdown(scenario, "compensated-cost", "bench_compensated_cost.py", size, "--sizes", size,
              table="compensated_cost.md")  # fmt: skip


@pytest.mark.long
@pytest.mark.benchmark(group="adversarial")
def test_adversarial(scenario):
    """``tests/chaos.py``: writers killed, paused past their lease, signalled; outputs tampered with."""
    out = scenario.folder / "chaos.json"
    script(scenario, "adversarial", "tests/chaos.py", "--trials", scenario.repeat(3), "--json", out, output=out)


@pytest.mark.long
@pytest.mark.benchmark(group="tests-cpu")
def test_tests_cpu(scenario):
    """The test command under GNU time, and which tests its CPU went to."""
    out = scenario.folder / "tests.json"
    script(scenario, "tests-cpu", "bench_tests.py", "--repeat", scenario.repeat(1), "--json", out, output=out)
