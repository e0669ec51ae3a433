"""Outputs written by 1.1.0 keep resuming, extending and verifying with what they recorded.

``data/outputs-1.1.0.tar.gz`` holds (``tests/data/README.md`` lists the commands): the seed's float64
progression from Python with no unroll given, for which 1.1.0 chose 2 on a CPU (2**20 steps, killed after
its first blocks were committed); and a run of it with a condition at unroll 8, tested the way 1.1.0
tested it (inside the steps, its identity recording no ``until_tested``), once killed part way and once
finished. Today a step that names no unroll runs at 1 on a CPU, and a condition is tested on the plain
scan's outputs where it can: these outputs keep their recorded unroll and 1.1.0's way, and their bytes.
"""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
import zarr
from helpers import copier, read_manifest, unpacked
from jax import lax

import streamacc

ARCHIVE = Path(__file__).parent / "data" / "outputs-1.1.0.tar.gz"


def gp(c, _):
    c = c * (1 + 1e-8)
    return c, c


def over(c, y):
    return c > 1.0002


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> Path:
    return unpacked(ARCHIVE, tmp_path_factory.mktemp("format110"))


@pytest.fixture
def copy(stored, tmp_path):
    return copier(stored, tmp_path)


def values(out: Path) -> np.ndarray:
    return zarr.open_group(str(out), mode="r")["x"][...]


def test_a_run_whose_unroll_1_1_0_chose_on_a_cpu_resumes_with_it_to_lax_scans_bits_at_it(copy):
    out = copy("gp_chosen.zarr")
    about = streamacc.info(out)
    assert about.unroll == 2 and about.unroll_chosen and 0 < about.committed_steps < 2**20
    carry = streamacc.write(out, gp, np.float64(1.0), length=2**20, block_size=2**11, names="x", mode="resume",
                            progress=False)  # fmt: skip
    want_carry, want = jax.jit(lambda c: lax.scan(gp, c, None, length=2**20, unroll=2))(np.float64(1.0))
    assert values(out).tobytes() == np.asarray(want).tobytes() and float(carry) == float(want_carry)
    assert read_manifest(out)["identity"]["unroll"] == 2
    assert streamacc.verify(out, gp, np.float64(1.0), blocks=4).complete


def test_a_condition_tested_the_1_1_0_way_resumes_to_the_finished_runs_bytes_and_extends(copy):
    partial, whole = copy("until_partial.zarr"), copy("until_complete.zarr")
    identity = read_manifest(whole)["identity"]
    assert identity["unroll"] == 8 and "until" in identity and "until_tested" not in identity
    kwargs = {"length": 2**20, "block_size": 2**10, "unroll": 8, "names": "x", "progress": False}
    carry = streamacc.write(partial, gp, np.float64(1.0), until=over, mode="resume", **kwargs)
    assert streamacc.info(partial).ended_at == streamacc.info(whole).ended_at
    assert values(partial).tobytes() == values(whole).tobytes()
    with pytest.warns(streamacc.errors.StreamaccWarning, match="already complete"):  # finished: as it is
        recorded = streamacc.write(whole, gp, np.float64(1.0), until=over, mode="resume", **kwargs)
    assert np.asarray(carry).tobytes() == np.asarray(recorded).tobytes()
    assert float(carry) != float(values(whole)[-1])  # 1.1.0's finder: the carry's last bits, not the stored y's
    assert "until_tested" not in read_manifest(partial)["identity"]
    assert streamacc.verify(whole, gp, np.float64(1.0), until=over).complete
    other = lambda c, y: c > 1.0004  # noqa: E731
    with pytest.raises(streamacc.errors.ResumeError, match=r"1\.1\.0 compiled into every step"):
        streamacc.write(whole, gp, np.float64(1.0), until=other, mode="extend", **kwargs)
    ended = streamacc.info(whole).ended_at
    streamacc.write(whole, gp, np.float64(1.0), until=over, mode="extend", **kwargs)  # tested from the step after
    assert streamacc.info(whole).ended_at == ended + 1
    assert values(whole)[: ended + 1].tobytes() == values(partial).tobytes()
    assert "until_tested" not in read_manifest(whole)["identity"]
    assert streamacc.verify(whole, gp, np.float64(1.0), until=over).complete
