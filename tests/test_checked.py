"""Readers and checks find a chunk that is not the one committed, whatever the chunk grid.

A state of many values is stored in tiles (its trailing axes split) and a thinned run
stores one row per ``save_every`` steps, so a chunk's place in its block record is not its
index along ``step``: ``streamacc.open`` and ``verify --blocks`` must map every tile of
every row chunk to its own recorded CRC-32C, and refuse a tile copied from another run or
moved within the same output. The outputs here store each tile as an object of its own, as
streamacc 1.1 stored every output (the seam ``run.shard_shape``); the shards a new output
stores its tiles in are checked in ``test_shards.py``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import streamacc
from streamacc import testing

LENGTH, BLOCK, EVERY = 96, 16, 2  # 48 rows: 6 blocks of 8 rows, chunks of 4 rows, so 2 row chunks per block
CHUNKS = {"step": 4, "y_dim_1": 4, "y_dim_2": 3}  # a (8, 6) state in 2 x 2 tiles


def step(c, _):
    c = c * 1.001  # one rounding per step, as numpy's (no fused multiply-add to differ by)
    return c, c


def write(out: Path, start: float, reverse: bool = False) -> None:
    init = jnp.asarray(state(start))
    with testing.patched("run.shard_shape", lambda *_: None):  # a tile a file, as 1.1 wrote
        streamacc.write(out, step, init, length=LENGTH, block_size=BLOCK, save_every=EVERY, chunks=CHUNKS,
                        reverse=reverse, progress=False)  # fmt: skip


def state(start: float) -> np.ndarray:
    """An (8, 6) state whose values differ everywhere, so that no two tiles hold the same bytes."""
    return start + np.arange(48, dtype=np.float64).reshape(8, 6)


def expected(start: float, reverse: bool = False) -> np.ndarray:
    """``lax.scan(step, init, length=96, reverse=reverse)[1][1::2]`` by plain numpy.

    A reverse scan's y at position i is the state after ``96 - i`` steps.
    """
    states, c = [], state(start)
    for _ in range(LENGTH):
        c = c * 1.001
        states.append(c)
    ys = np.stack(states[::-1] if reverse else states)
    return ys[EVERY - 1 :: EVERY]


@pytest.fixture(scope="module", params=[False, True], ids=["forward", "reverse"])
def runs(request, tmp_path_factory) -> tuple[Path, Path, bool]:
    base = tmp_path_factory.mktemp("checked")
    ours, other = base / "ours.zarr", base / "other.zarr"
    write(ours, 1.0, request.param)
    write(other, 2.0, request.param)
    return ours, other, request.param


def test_an_untouched_tiled_thinned_output_reads_its_values(runs):
    ours, _, reverse = runs
    np.testing.assert_array_equal(streamacc.open(ours).y.values, expected(1.0, reverse))


@pytest.mark.parametrize("key", ["0/0/0", "3/1/1", "6/0/1", "11/1/0"])
def test_a_tile_from_another_run_is_refused_by_open_and_by_verify(tmp_path, runs, key):
    ours, other, reverse = runs
    out = tmp_path / "out.zarr"
    shutil.copytree(ours, out)
    shutil.copyfile(other / "y" / "c" / key, out / "y" / "c" / key)
    position = int(key.split("/")[0]) // 2  # two row chunks per block
    block = 5 - position if reverse else position  # blocks are numbered in scan order
    with pytest.raises(streamacc.errors.VerifyError, match=rf"chunk y/c/{key} .* committed for block {block} "):
        _ = streamacc.open(out).y.values
    init = jnp.asarray(state(1.0))
    for blocks in (1, "all"):  # one block recomputed (the others' trailers read), then every block
        with pytest.raises(streamacc.errors.VerifyError, match=rf"block {block} "):
            streamacc.verify(out, step, init, blocks=blocks)


def test_tiles_swapped_within_the_output_are_refused(tmp_path, runs):
    ours, _, _ = runs
    out = tmp_path / "out.zarr"
    shutil.copytree(ours, out)
    shutil.copyfile(ours / "y" / "c" / "3" / "1" / "1", out / "y" / "c" / "3" / "0" / "0")
    with pytest.raises(streamacc.errors.VerifyError, match=r"chunk y/c/3/0/0 .* is not the chunk committed"):
        _ = streamacc.open(out).y.values


def test_a_committed_chunk_that_is_missing_is_refused_never_read_as_fill_values(tmp_path, runs):
    ours, _, reverse = runs
    out = tmp_path / "out.zarr"
    shutil.copytree(ours, out)
    (out / "y" / "c" / "3" / "1" / "0").unlink()
    block = 5 - 1 if reverse else 1
    with pytest.raises(streamacc.errors.VerifyError, match=rf"chunk y/c/3/1/0 of .* is missing, though block "
                       rf"{block} committed it.*mode='overwrite'"):  # fmt: skip
        _ = streamacc.open(out).y.values
    ds = streamacc.open(out)  # what the chunk does not hold reads as before
    np.testing.assert_array_equal(ds.y[:, :4, 3:].values, expected(1.0, reverse)[:, :4, 3:])


def count(c, _):
    return c + 1, c + 1


def test_a_missing_chunk_of_integers_or_of_a_materialized_virtual_block_is_refused(tmp_path):
    for virtual in (False, True):
        out = tmp_path / f"out{virtual}.zarr"
        streamacc.write(out, count, np.int64(0), length=64, block_size=16, chunks={"step": 8}, summaries=False,
                        virtual=virtual, progress=False)  # fmt: skip
        if virtual:
            streamacc.materialize(out, f=count, steps=(16, 32), progress=False)  # block 1 stored, others recomputed
        (out / "y" / "c" / "1").unlink()  # the shard of block 1, rows 16-31 (zarr read them as 0)
        ds = streamacc.open(out, f=count if virtual else None)
        np.testing.assert_array_equal(ds.y[:16].values, np.arange(1, 17))
        for rows in (slice(20, 24), slice(None, 32)):  # an inner chunk alone, and the whole shard
            with pytest.raises(streamacc.errors.VerifyError, match=r"chunk y/c/1 .* missing, though block 1 committed"):
                _ = ds.y[rows].values
