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
