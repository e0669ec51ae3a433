"""Lengths up to 2**63 - 1: the bookkeeping follows the committed blocks, never the length.

A run of 2**62 steps is as cheap to start, commit, stop, resume, describe, open and verify
as a short one: the layout answers by arithmetic (no list of blocks), the manifest counts
exact integers, and the public attributes hold those integers exactly. The runs here
stop themselves after a few blocks: their input fails past a given row.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from helpers import OnesUntil

import streamacc
from streamacc.engine import MAX_LENGTH, block_bounds, block_count, committed_span
from streamacc.run.output import Output
from streamacc.run.recompute._verify import select_blocks

HUGE = 2**62
BLOCK = 64


def finishes(fn: Callable[[], object], seconds: float = 60.0) -> object:
    """``fn()``'s result; fails (instead of hanging the suite) if it runs for minutes, as a loop over 2**62 would."""
    result: list[object] = []
    worker = threading.Thread(target=lambda: result.append(fn()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert result, "did not finish: something loops over every block of the length"
    return result[0]


# --- the layout: arithmetic, at any length ------------------------------------------------


def spans_by_enumeration(length: int, block: int, reverse: bool, unroll: int) -> list[tuple[int, int]]:
    """The committed span after each number of blocks, from the blocks themselves (small lengths only)."""
    blocks = list(block_bounds(length, block, reverse, 0, unroll))
    spans = [(length, length) if reverse else (0, 0)]
    for start, stop in blocks:
        low, high = spans[-1]
        spans.append((start, high) if reverse else (low, stop))
    return spans


@pytest.mark.parametrize("unroll", [1, 2, 3])
@pytest.mark.parametrize("reverse", [False, True])
def test_committed_span_is_the_union_of_the_committed_blocks(reverse, unroll):
    for length in range(1, 40):
        for block in range(1, 10):
            expected = spans_by_enumeration(length, block, reverse, unroll)
            assert len(expected) == block_count(length, block, unroll) + 1
            assert expected[-1] == (0, length)
            for blocks, span in enumerate(expected):
                assert committed_span(length, block, reverse, blocks, unroll) == span
            assert committed_span(length, block, reverse, len(expected) + 5, unroll) == (0, length)


def test_the_layout_of_the_longest_length_is_arithmetic():
    # one step per block: 2**63 - 1 blocks, which no list could hold
    assert finishes(lambda: committed_span(MAX_LENGTH, 1, False, 3)) == (0, 3)
    assert finishes(lambda: committed_span(MAX_LENGTH, 1, True, 3)) == (MAX_LENGTH - 3, MAX_LENGTH)
    # a tail of 9 steps joins the block before it under unroll 8: the last block is [2**62 - 16, 2**62 + 9)
    assert finishes(lambda: committed_span(2**62 + 9, 16, True, 2, 8)) == (2**62 - 32, 2**62 + 9)
    assert finishes(lambda: committed_span(2**62 + 9, 16, False, 2**58 - 1, 8)) == (0, 2**62 - 16)
    assert finishes(lambda: committed_span(2**62 + 9, 16, False, 2**58, 8)) == (0, 2**62 + 9)
    assert finishes(lambda: next(block_bounds(MAX_LENGTH, 1, True, 5))) == (MAX_LENGTH - 6, MAX_LENGTH - 5)


def test_blocks_to_verify_are_spread_exactly_at_any_count():
    assert select_blocks(8, 3) == [0, 4, 7]
    committed = 2**60 + 3  # past 2**53, where a float division rounds to the wrong block
    chosen = finishes(lambda: select_blocks(committed, 5))
    assert chosen == [i * (committed - 1) // 4 + (2 * (i * (committed - 1) % 4) >= 4) for i in range(5)]
    assert chosen[0] == 0 and chosen[-1] == committed - 1


# --- a run of 2**62 steps ------------------------------------------------------------------


def count(c, x):
    return c + x, c + x  # y[i] = i + 1 exactly: a reference needs only integers


def write_until(out: Path, limit: int, **kw) -> None:
    with pytest.raises(RuntimeError, match="the input ends here"):
        streamacc.write(
            out, count, np.float64(0), OnesUntil(HUGE, limit), block_size=BLOCK, names=["x"], progress=False, **kw
        )


def check_committed(out: Path, least: int, most: int) -> int:
    """The output holds a prefix of ``least`` to ``most`` blocks with exact counts everywhere; return its steps."""
    info = finishes(lambda: streamacc.info(out))
    steps = info.committed_steps
    assert least * BLOCK <= steps <= most * BLOCK and steps % BLOCK == 0
    assert info.total_steps == HUGE and not info.complete
    assert f"{steps} of {HUGE} steps committed" in str(info)
    attrs = json.loads((out / "zarr.json").read_bytes())["attributes"]
    assert attrs["streamacc_total_steps"] == HUGE and isinstance(attrs["streamacc_total_steps"], int)
    assert attrs["streamacc_committed_steps"] <= steps and attrs["streamacc_committed_start"] == 0  # may lag
    assert zarr.open_array(out / "x", mode="r").shape == (HUGE,)
    ds = finishes(lambda: streamacc.open(out))
    assert ds.sizes["step"] == steps and ds.encoding["streamacc_total_steps"] == HUGE
    assert ds.nbytes == steps * 8  # the step coordinate costs nothing, and says so
    ds.isel(step=slice(0, 10)).to_netcdf(out.parent / "head.nc")
    with xr.open_dataset(out.parent / "head.nc") as head:
        assert "streamacc_total_steps" not in head.attrs and head.x.values.tolist() == list(range(1, 11))
    np.testing.assert_array_equal(ds.x.values, np.arange(1, steps + 1, dtype=np.float64))
    np.testing.assert_array_equal(ds.step[-2:].values, [steps - 2, steps - 1])
    report = finishes(lambda: streamacc.verify(out, count, np.float64(0), OnesUntil(HUGE, steps)))
    assert report.total_steps == HUGE and report.committed_steps == steps
    assert report.checked_blocks == tuple(range(steps // BLOCK))
    return steps


def test_a_run_of_2_62_steps_stops_resumes_and_reads_like_a_short_one(tmp_path):
    out = tmp_path / "huge.zarr"
    write_until(out, 8 * BLOCK)  # blocks 0-7 computed; the writer holds at most a few in flight
    first = check_committed(out, 3, 8)
    write_until(out, first + 6 * BLOCK, mode="resume")
    assert check_committed(out, first // BLOCK + 1, first // BLOCK + 6) > first


class Enough(Exception):
    """Stops a run from its commits."""


def test_a_run_of_2_62_steps_on_a_cluster(tmp_path, dask_client, monkeypatch):
    """Stopped from its commits: a store object cannot travel to the workers, so no store wrapper can stop it."""
    real = Output.commit

    def commit(self, *results):
        real(self, *results)
        if self.manifest.committed_blocks >= 6:
            raise Enough

    monkeypatch.setattr(Output, "commit", commit)
    out = tmp_path / "huge.zarr"
    with pytest.raises(Enough):
        streamacc.write(
            out, count, np.float64(0), OnesUntil(HUGE, HUGE), block_size=BLOCK, names=["x"], progress=False,
            client=dask_client,
        )  # fmt: skip
    check_committed(out, 6, 9)


class FromTheEnd(OnesUntil):
    """As :class:`OnesUntil`, failing before row ``limit`` instead: a reverse scan reads from the end."""

    def __getitem__(self, key: slice) -> np.ndarray:
        if key.start < self.limit:
            raise RuntimeError("the input ends here")
        return np.ones(key.stop - key.start)


def test_a_reverse_run_of_2_62_steps_commits_its_end(tmp_path):
    out = tmp_path / "reverse.zarr"
    with pytest.raises(RuntimeError, match="the input ends here"):
        streamacc.write(
            out,
            count,
            np.float64(0),
            FromTheEnd(HUGE, HUGE - 6 * BLOCK),
            block_size=BLOCK,
            reverse=True,
            names=["x"],
            progress=False,
        )
    ds = finishes(lambda: streamacc.open(out))
    steps, start = ds.encoding["streamacc_committed_steps"], ds.encoding["streamacc_committed_start"]
    assert 3 * BLOCK <= steps <= 6 * BLOCK and start == HUGE - steps and isinstance(start, int)
    assert ds.sizes["step"] == steps and int(ds.step[0]) == start and int(ds.step[-1]) == HUGE - 1
    np.testing.assert_array_equal(ds.x.values, np.arange(steps, 0, -1, dtype=np.float64))  # y[i] = HUGE - i
    report = streamacc.verify(out, count, np.float64(0), FromTheEnd(HUGE, start))
    assert report.committed_steps == steps and len(report.checked_blocks) == steps // BLOCK
