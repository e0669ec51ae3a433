"""The benchmark harness writes results in its one schema, every stored result follows it, the pages are
generated from it, and the scripts behind the harness run and print what they promise."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest
from helpers import run_warm

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

import _formats  # noqa: E402
import _results  # noqa: E402


def _hook():
    """The site's benchmark hook (``docs/_hooks/benchmarks.py``), under a name of its own."""
    spec = importlib.util.spec_from_file_location("benchmarks_hook", ROOT / "docs" / "_hooks" / "benchmarks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_stored_result_follows_the_schema():
    files = sorted(p for p in _results.RESULTS.rglob("*") if p.is_file())
    assert len(files) >= 60
    for path in files:
        assert path.suffix == ".json" and path.parent.parent == _results.RESULTS, f"{path}: not a result of the harness"
        doc = json.loads(path.read_text())
        assert _results.errors(doc) == [], path
        assert re.fullmatch(r"\d{4}_\w+_\d{8}_\d{6}(_uncommit?ted-changes)?\.json", path.name), path


def test_a_result_without_its_machine_or_load_is_refused():
    doc = _sample()
    del doc["machine_info"]["load_end"]
    assert any("load_end" in e for e in _results.errors(doc))
    doc = _sample()
    doc["benchmarks"][0]["extra_info"]["tables"]["runs"][0]["wall s"] = [1.0]
    assert _results.errors(doc)
    doc = _sample()
    del doc["command"]
    assert _results.errors(doc)


def _sample() -> dict:
    rows = [{"side": "a", "round": 1, "wall s": 1.25, "peak RSS MB": 410.5, "load": 1.5},
            {"side": "b", "round": 1, "wall s": 2.5, "peak RSS MB": 420.0, "load": 1.6}]  # fmt: skip
    bench = _results.entry(
        "sample-scenario", "test_sample[2**20]", params={"size": "2**20"},
        commands={"a": "python -m streamacc write OUT --size 1048576", "b": "python other.py"},
        reproduce="python -m pytest benchmarks/test_sample.py::test_sample --size '2**20' --benchmark-autosave",
        figures={"b / a": 2.0, "identical": True}, tables={"runs": rows},
        plots=[{"name": "walls", "table": "runs", "x": "load", "y": "wall s", "series": "side", "title": "walls"}],
        walls=[3.75], module="test_sample.py",
    )  # fmt: skip
    return _results.document(
        datetime="2026-12-04T10:00:00+00:00", command="python -m pytest benchmarks -k sample --benchmark-autosave",
        machine={"cores": 2, "memory_gib": 23.6, "cpu_model": "a processor", "python_version": "3.11.7",
                 "load_start": [1.5, 1.2, 1.0], "load_end": [1.7, 1.3, 1.0], "versions": {"streamacc": "0.3.0"}},
        commit={"id": "0123456789abcdef", "dirty": False}, benchmarks=[bench], note="a sample",
    )  # fmt: skip


def test_the_pages_are_generated_from_a_result_in_the_schema(tmp_path):
    hook = _hook()
    doc = _sample()
    assert _results.errors(doc) == []
    folder = tmp_path / "results" / "Linux-CPython-3.11-64bit"
    folder.mkdir(parents=True)
    (folder / "0001_0123456_20261204_100000.json").write_text(json.dumps(doc))
    page = hook.render("sample-scenario", tmp_path / "results")
    assert page.startswith("**Run of 2026-12-04 10:00 UTC**: a sample")
    assert "- **Reproduce:** `python -m pytest benchmarks/test_sample.py::test_sample --size '2**20'" in page
    assert "- **Made by:** `python -m pytest benchmarks -k sample --benchmark-autosave`" in page
    assert "2 cores, 23.6 GiB RAM, a processor, Python 3.11.7" in page
    assert "1.50, 1.20, 1.00 at the start, 1.70, 1.30, 1.00 at the end" in page
    assert "streamacc 0.3.0; commit 0123456789" in page
    assert "| b / a | 2.00 |" in page and "| identical | yes |" in page
    assert "| side | round | wall s | peak RSS MB | load |" in page and "| b | 1 | 2.50 | 420.0 | 1.60 |" in page
    assert "- a: `python -m streamacc write OUT --size 1048576`" in page
    assert "![walls](sample-scenario-0001-walls.png)" in page
    drawn = hook.draw_all(tmp_path / "site", tmp_path / "results")
    assert list(drawn) == ["sample-scenario-0001-walls.png"] and drawn["sample-scenario-0001-walls.png"].stat().st_size
    with pytest.raises(KeyError, match=r"no results of benchmark 'other'.*sample-scenario"):
        hook.render("other", tmp_path / "results")


def test_every_scenario_with_results_is_on_a_page_and_every_page_shows_results():
    """A page shows every group that has results, and asks for none without, except for a benchmark to come: one
    that a script's reader makes (the accelerator's, which no machine of the results has run)."""
    hook = _hook()
    marked, later = set(), set()
    for page in (ROOT / "docs" / "benchmarks").glob("*.md"):
        marked |= set(re.findall(r"<!-- benchmark: ([\w-]+) -->", page.read_text()))
        later |= set(re.findall(r"<!-- benchmark-to-come: ([\w-]+) -->", page.read_text()))
    assert marked | later >= set(hook.groups()) and marked <= set(hook.groups())
    assert later <= set(_formats.ACCELERATOR_GROUPS) and not marked & later


def test_a_benchmark_to_come_renders_without_runs_and_an_unknown_one_still_fails(tmp_path):
    hook = _hook()
    (tmp_path / "results" / "Linux-CPython-3.11-64bit").mkdir(parents=True)
    assert hook.render("accelerator-seed", tmp_path / "results", missing_ok=True) == hook.NOT_YET
    with pytest.raises(KeyError, match="no results of benchmark 'accelerator-seed'"):
        hook.render("accelerator-seed", tmp_path / "results")


@pytest.mark.slow
def test_the_harness_records_a_scenario_in_the_schema(tmp_path):
    """One scenario of the harness at a tiny size: its result follows the schema and records the command,
    the machine, its load, the versions, each side's runs, and the harness command that measures it again."""
    out = tmp_path / "result.json"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}, "PYTHONPATH": str(ROOT)}
    proc = run_warm(
        [sys.executable, "-m", "pytest", "benchmarks/test_summaries.py::test_summaries_cost", "--size", "2**12",
         "--repeat", "1", "--scratch", str(tmp_path / "scratch"), f"--benchmark-json={out}", "--note", "a check"],
        cwd=ROOT, env=env, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0 and out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert _results.errors(doc) == []
    (bench,) = doc["benchmarks"]
    test = "benchmarks/test_summaries.py::test_summaries_cost"
    assert doc["command"].startswith(f"python -m pytest {test} --size '2**12'")
    assert doc["note"] == "a check" and doc["machine_info"]["cores"] == os.cpu_count()
    assert len(doc["machine_info"]["load_start"]) == 3 and doc["machine_info"]["versions"]["jax"]
    assert bench["group"] == "summaries-cost" and bench["stats"]["rounds"] == 1
    extra = bench["extra_info"]
    assert [r["side"] for r in extra["tables"]["runs"]] == ["summaries", "no-summaries"]
    assert extra["figures"]["data chunks identical"] is True
    assert extra["reproduce"] == f"python -m pytest {test} --size '2**12' --repeat 1 --benchmark-autosave"
    assert not (tmp_path / "scratch").exists() or not any((tmp_path / "scratch").iterdir())


@pytest.mark.slow
def test_headline_prints_one_json_document_and_leaves_nothing_behind(tmp_path):
    proc = run_warm(
        [sys.executable, BENCHMARKS / "headline.py", "--size", "2**16", "--samples", "2", "--block-size", "2**12"],
        text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)  # the whole of stdout, nothing before or after
    assert result["size"] == 2**16 and result["sampled_blocks"] >= 1 and result["bit_identical"]
    assert "wrote 65536 steps" in result["summary"] and result["summary"] in proc.stderr
    assert not Path(result["command"].split()[4]).parent.exists()  # its temporary folder is gone
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_suite_benchmark_counts_every_test_it_ran_and_every_cpu_second(tmp_path):
    """bench_tests.py on one small test file: its plugin sees each test pytest reports passed, in that file,
    and the CPU it gives the tests and the rest adds up to what GNU time measured of the whole command."""
    out = tmp_path / "tests.json"
    proc = run_warm(
        [sys.executable, BENCHMARKS / "bench_tests.py", "--top", "3", "--json", out,
         "--", "-n", "0", "-p", "no:cacheprovider", "tests/test_expr.py"],
        text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["command"].endswith("-- -n 0 -p no:cacheprovider tests/test_expr.py") and doc["machine"]["git"]
    (run,) = doc["runs"]
    assert run["passed"] > 100 and run["tests"] == run["passed"]
    assert [(f["file"], f["tests"]) for f in run["by_file"]] == [("tests/test_expr.py", run["passed"])]
    assert len(run["slowest"]) == 3 and sum(b["tests"] for b in run["buckets"].values()) == run["passed"]
    assert run["in_tests_cpu_s"] > 0 and run["outside_tests_cpu_s"] > 0
    assert abs(run["in_tests_cpu_s"] + run["outside_tests_cpu_s"] - run["user_s"] - run["sys_s"]) < 0.02


@pytest.mark.slow
def test_the_accelerator_benchmark_runs_every_scenario_on_a_cpu_and_converts_into_the_schema(tmp_path):
    """``accelerator.py --smoke``, as the chip runs it at its sizes: every scenario without failure, blocked
    output bit for bit one ``lax.scan``, the compensated recipes within 1 ulp of exact values (Python's
    ``decimal``), each Stream the bytes of ``write``; its file converts into the results' schema, one benchmark
    per group the Accelerators page asks for."""
    out = tmp_path / "accelerator.json"
    proc = run_warm([sys.executable, BENCHMARKS / "accelerator.py", "--smoke", "--json", out, "--dir", tmp_path],
                    text=True, timeout=600, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    scenarios = doc["scenarios"]
    assert set(scenarios) == {name for names in _formats.ACCELERATOR_GROUPS.values() for name in names}
    assert [name for name, s in scenarios.items() if s["status"] != "ok"] == []
    assert scenarios["exact"]["figures"]["all identical"] and scenarios["exact"]["figures"]["checked"] >= 13
    errors = scenarios["compensated"]["tables"]["errors"]
    assert len(errors) == 8 and all(r["largest ulp"] <= 1.0 for r in errors if r["recipe"].endswith("compensated"))
    assert any(r["largest ulp"] > 2.0 for r in errors if not r["recipe"].endswith("compensated"))
    for name in ("stream-ordered", "stream-chained", "stream-pinned", "stream-wide"):
        assert scenarios[name]["figures"]["same bytes as write"] is True, name
    assert scenarios["ensemble"]["figures"]["full buffer"] == "ran"  # a CPU's memory holds the toy ensemble
    converted = _formats.READERS["accelerator"](doc)
    assert {b["group"] for b in converted.benchmarks} == set(_formats.ACCELERATOR_GROUPS)
    result = _results.document(datetime="2026-12-06T00:00:00+00:00", command=converted.command,
                               machine=converted.machine, commit={"id": "0123456"}, benchmarks=converted.benchmarks,
                               converted_from="accelerator.json")  # fmt: skip
    assert _results.errors(result) == []
    assert list(tmp_path.iterdir()) == [out]  # its scratch outputs are gone


def test_the_peers_hand_written_approaches_run_and_store_streamaccs_layout(tmp_path):
    """The approaches the peers' benchmark times beside the command (zarr alone, a numpy loop, dask) create the
    array as streamacc stores it, through its store's helpers: each runs, and its values are the progression's."""
    out = tmp_path / "suite"
    approaches = ["zarr-precomputed", "numpy-loop", "dask-cumprod"]
    proc = run_warm([sys.executable, BENCHMARKS / "bench_suite.py", "--size", "2**12", "--chunk", "2**10",
                     "--repeat", "1", "--approaches", *approaches, "--out", out, "--scratch", tmp_path / "s"],
                    text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert sorted(r["approach"] for r in runs) == sorted(approaches)
    assert [(r["approach"], r["status"]) for r in runs if r["status"] != "ok"] == []
    assert all(r["values"].startswith(("bit-identical", "max rel err")) for r in runs), runs
