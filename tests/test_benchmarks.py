"""The benchmark scripts that README and RESULTS.md figures come from run, and print what they promise."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import run_warm

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


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
