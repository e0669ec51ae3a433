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
from streamacc.base import MAX_LENGTH, block_bounds, block_count, committed_span
from streamacc.run import Output, select_blocks

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
    assert ds.x.nbytes == steps * 8 and ds.indexes["step"].nbytes < 1000  # the step labels: three numbers
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


# --- blocks that do not fit in memory -------------------------------------------------------


def memory_is(seam, nbytes: int) -> None:
    """This machine has ``nbytes`` of memory, as far as the engine's checks ask."""
    seam("engine.physical_memory", lambda: nbytes)


def grow(c, _):
    return c + 1.0, c


TIB8 = "8.0 TiB"  # 2**40 float64 rows


@pytest.mark.parametrize("virtual", [False, True])
def test_a_block_larger_than_memory_is_refused_before_anything_is_created(tmp_path, virtual):
    """2**40 float64 steps per block are 8 TiB of ys, more than any machine has: one line names block_size before
    anything is made, where numpy's MemoryError at the first block's buffer would leave an output behind."""
    out = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.InputError) as refused:
        streamacc.write(out, grow, np.float64(0), length=MAX_LENGTH, block_size=2**40, virtual=virtual, progress=False)
    text = str(refused.value)
    held = 3 if virtual else 4  # the pool: the blocks in flight (2 virtual, 3 stored) and the one computing
    assert "\n" not in text
    assert text.startswith(
        f"block_size=1099511627776 makes blocks that do not fit in memory: a block's ys take {TIB8} and this write "
        f"holds {held} of them at once ({8 * held}.0 TiB in all), more than this machine's "
    )
    assert text.endswith("of memory; pass a smaller block_size, or leave it out for blocks of about 32.0 MiB of ys")
    assert [a.name for a in refused.value.arguments] == ["block_size", "block_size"]
    assert not out.exists()
    without = tmp_path / "carries.zarr"  # a virtual run without summaries computes its first block in full
    with pytest.raises(streamacc.errors.InputError, match="this write holds one at a time"):
        streamacc.write(without, grow, np.float64(0), length=MAX_LENGTH, block_size=2**40, virtual=True,
                        summaries=False, progress=False)  # fmt: skip
    assert not without.exists()


def test_a_block_larger_than_memory_leaves_an_existing_output_untouched(tmp_path):
    from helpers import listing

    out = tmp_path / "out.zarr"
    streamacc.write(out, grow, np.float64(0), length=64, block_size=16, progress=False)
    before = listing(out)
    with pytest.raises(streamacc.errors.InputError, match="makes blocks that do not fit in memory"):
        streamacc.write(out, grow, np.float64(0), length=2**41, block_size=2**40, mode="overwrite", progress=False)
    assert listing(out) == before


def test_iter_blocks_and_scan_refuse_a_block_larger_than_memory_when_called():
    with pytest.raises(streamacc.errors.InputError) as refused:
        streamacc.iter_blocks(grow, np.float64(0), length=2**41, block_size=2**40)  # before any next()
    assert str(refused.value).startswith(
        f"block_size=1099511627776 makes blocks that do not fit in memory: a block's ys take {TIB8} and iter_blocks "
        "holds 2 of them at once (16.0 TiB in all)"
    )
    assert str(refused.value).endswith("or leave it out for blocks of about 8.0 MiB of ys")


def test_blocks_that_fit_are_not_refused_and_one_byte_more_is(tmp_path, seam):
    """The bound is exact: a write holds 4 buffers of a block's ys (3 in flight, 1 computing) on a CPU, and
    scan its whole ys besides 2 blocks; with memory for exactly that they run, one byte less is refused."""
    block = 2**16 * 8  # 2**16 float64 rows
    memory_is(seam, 4 * block)
    streamacc.write(tmp_path / "fits.zarr", grow, np.float64(0), length=2**17, block_size=2**16, progress=False)
    assert streamacc.info(tmp_path / "fits.zarr").complete
    carry, ys = streamacc.scan(grow, np.float64(0), length=2**17, block_size=2**16)  # ys 2 blocks, and 2 buffers
    assert float(carry) == 2**17
    np.testing.assert_array_equal(ys, np.arange(2**17, dtype=np.float64))
    assert len(list(streamacc.iter_blocks(grow, np.float64(0), length=2**17, block_size=2**16))) == 2
    memory_is(seam, 4 * block - 1)
    with pytest.raises(streamacc.errors.InputError, match="this write holds 4 of them at once"):
        streamacc.write(tmp_path / "tight.zarr", grow, np.float64(0), length=2**17, block_size=2**16, progress=False)
    assert not (tmp_path / "tight.zarr").exists()
    with pytest.raises(streamacc.errors.InputError) as refused:
        streamacc.scan(grow, np.float64(0), length=2**17, block_size=2**16)
    assert "a block's ys take 512.0 KiB and scan holds 2 of them at once besides the 1.0 MiB of ys it returns" in str(
        refused.value
    )
    memory_is(seam, 2 * block - 1)
    with pytest.raises(streamacc.errors.InputError, match="iter_blocks holds 2 of them at once"):
        streamacc.iter_blocks(grow, np.float64(0), length=2**17, block_size=2**16)
    # a length shorter than the block size makes one block of that length, and only that is held
    memory_is(seam, 4 * 8 * 1000)
    streamacc.write(tmp_path / "short.zarr", grow, np.float64(0), length=1000, block_size=2**40, progress=False)
    assert streamacc.info(tmp_path / "short.zarr").committed_steps == 1000


def test_the_longest_length_with_the_default_blocks_is_not_refused(tmp_path):
    """2**63 - 1 steps in blocks sized by bytes (32 MiB): the run starts, and stops where its input ends."""
    for virtual in (False, True):
        out = tmp_path / f"longest-{virtual}.zarr"
        with pytest.raises(RuntimeError, match="the input ends here"):
            streamacc.write(out, count, np.float64(0), OnesUntil(MAX_LENGTH, 2**23), names=["x"], virtual=virtual,
                            progress=False)  # fmt: skip
        about = streamacc.info(out)
        assert about.total_steps == MAX_LENGTH and about.block_size == 2**22  # 32 MiB of x, 8 bytes a step
        assert about.committed_steps <= 2**23


def test_the_command_line_refuses_a_block_larger_than_memory_in_its_terms(tmp_path, monkeypatch, capfd):
    from helpers import run

    monkeypatch.chdir(tmp_path)
    code, line = run("write", "o.zarr", "--size", "2**63-1", "--virtual", "--block-size", "2**40", capfd=capfd)
    assert code == 2
    assert line.startswith(
        f"streamacc: error: --block-size 1099511627776 makes blocks that do not fit in memory: a block's ys take "
        f"{TIB8} and this write holds 3 of them at once (24.0 TiB in all), more than this machine's "
    )
    assert line.endswith("pass a smaller --block-size, or leave it out for blocks of about 32.0 MiB of ys")
    assert list(tmp_path.iterdir()) == []
