"""Kept carries: binary Zarr arrays written once, every few blocks when the carry is large beside a block's data.

A 1024-value float64 state in blocks of 8 steps, stored uncompressed, keeps its carry after every
third block (8 KiB of carry against 64 KiB of data a block: within 5% needs one in three) and after
its last.
References are numpy's recurrence and one ``lax.scan``; runs killed at a kept carry resume to
the bytes of one never interrupted.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import google_crc32c
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import RECORDS, assert_same_output, faultrun_process, node_attribute, read_manifest, run, store_files

import streamacc
from streamacc import testing
from streamacc.cli import main

WIDTH, LENGTH, BLOCK = 1024, 64, 8
CARRIES = "_streamacc/carries/leaf_0"


def halve(c, _):
    """``c * 0.5 + 1``: the product is exact, so numpy's two operations and a fused multiply-add agree."""
    c = c * 0.5 + 1.0
    return c, c


def init() -> np.ndarray:
    return np.arange(WIDTH, dtype=np.float64) * 1e3


def states(steps: int) -> list[np.ndarray]:
    """The state after each number of steps, by numpy."""
    c, out = init(), [init()]
    for _ in range(steps):
        c = c * 0.5 + 1.0
        out.append(c)
    return out


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wide") / "out.zarr"
    streamacc.write(out, halve, init(), length=LENGTH, block_size=BLOCK, codec="none", progress=False)
    return out


def test_a_large_carry_is_kept_after_every_third_block_and_reads_as_a_zarr_array(wide):
    manifest = read_manifest(wide)
    assert manifest["format"] == "streamacc-manifest/4" and "carry" not in manifest
    assert manifest["carries"]["every"] == 3 == streamacc.info(wide).carries_every
    kept = [r["index"] + 1 for r in node_attribute(wide / RECORDS, "streamacc_records") if r["carry"] is not None]
    assert kept == [3, 6, 8]  # and boundary 0, the initial carry, named in the manifest
    carries = zarr.open_array(wide / CARRIES, mode="r")
    assert carries.shape == (LENGTH // BLOCK + 1, WIDTH) and carries.dtype == np.float64
    truth = states(LENGTH)
    for b in range(LENGTH // BLOCK + 1):
        if b in (0, *kept):
            np.testing.assert_array_equal(carries[b], truth[b * BLOCK])
        else:
            assert np.isnan(carries[b]).all()  # not kept: the fill value
    np.testing.assert_array_equal(streamacc.open(wide).y.values, np.stack(truth[1:]))


def test_verify_recomputes_a_block_from_the_carry_kept_before_it(wide):
    report = streamacc.verify(wide, halve, init(), blocks=2)
    assert report.checked_blocks == (0, 6, 7)  # block 7 from the carry after block 5, through block 6
    assert streamacc.verify(wide, halve, init()).checked_blocks == tuple(range(8))


def test_a_kept_carry_changed_with_its_checksums_is_found(wide, tmp_path, capfd):
    """The carry after block 5 replaced by another value, its trailer and record made to match: the blocks
    recomputed up to it end elsewhere, and verify, resume and extension say so."""
    out = tmp_path / "out.zarr"
    shutil.copytree(wide, out)
    chunk = out / CARRIES / "c" / "6" / "0"
    body = (np.frombuffer(chunk.read_bytes()[:-4], dtype="<f8") + 1.0).tobytes()
    crc = google_crc32c.value(body)
    chunk.write_bytes(body + crc.to_bytes(4, "little"))
    doc = json.loads((out / RECORDS).read_text())
    records = json.loads(doc["attributes"]["streamacc_records"])
    records[5]["carry"] = [crc]
    doc["attributes"]["streamacc_records"] = json.dumps(records)
    (out / RECORDS).write_text(json.dumps(doc))
    with pytest.raises(streamacc.errors.VerifyError, match=r"block 5 .*its final carry is not the carry"):
        streamacc.verify(out, halve, init())
    with pytest.raises(streamacc.errors.VerifyError, match=r"block 6 .* does not recompute"):
        streamacc.verify(out, halve, init(), blocks=2)  # block 7 is recomputed from the changed carry


def test_a_damaged_kept_carry_is_refused_by_its_checksum(wide, tmp_path):
    """A bit flipped in the carry after block 5, its trailer intact: read back, its bytes fail their CRC-32C."""
    out = tmp_path / "out.zarr"
    shutil.copytree(wide, out)
    chunk = out / CARRIES / "c" / "6" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[8] ^= 0x01
    chunk.write_bytes(bytes(raw))
    before = store_files(out)
    with pytest.raises(streamacc.errors.VerifyError, match=r"carry kept after block 5 .* damaged .*c/6/0"):
        streamacc.verify(out, halve, init())
    assert store_files(out) == before
    with pytest.raises(streamacc.errors.ResumeError, match=r"block 5 .* chunk _streamacc/carries/leaf_0/c/6/0 do not"):
        streamacc.write(out, halve, init(), length=2 * LENGTH, block_size=BLOCK, mode="extend", codec="none",
                        progress=False)  # fmt: skip


def test_an_extension_of_a_large_carry_is_the_longer_run(wide, tmp_path):
    """The stored run's last block (its carry kept as the run's last) is recomputed from the carry after block 6."""
    out, longer = tmp_path / "out.zarr", tmp_path / "longer.zarr"
    shutil.copytree(wide, out)
    streamacc.write(out, halve, init(), length=3 * LENGTH, block_size=BLOCK, mode="extend", codec="none",
                    progress=False)  # fmt: skip
    streamacc.write(longer, halve, init(), length=3 * LENGTH, block_size=BLOCK, codec="none", progress=False)
    assert_same_output(out, longer)


@pytest.mark.parametrize(("kind", "boundary"), [("carry", 3), ("carry-written", 3), ("carry", 6), ("carry", 8)])
def test_a_run_killed_at_a_kept_carry_resumes_to_the_uninterrupted_run(tmp_path, kind, boundary, capfd):
    """SIGKILLed just before the carry after block 2 (or 5, or the last) is written, its block's data durable, or
    just after it, before the record naming it: a resume recomputes from the carry kept before."""
    args = ["--recipe", "randomwalk", "--paths", str(WIDTH), "--size", str(LENGTH), "--block-size", str(BLOCK),
            "--no-progress"]  # fmt: skip
    ref, out = tmp_path / "ref.zarr", tmp_path / "out.zarr"
    assert main(["write", str(ref), *args]) == 0
    assert read_manifest(ref)["carries"]["every"] == 3
    killed = faultrun_process(kind, boundary, "write", out, *args)
    assert killed.returncode == -9, killed.stderr
    assert read_manifest(out)["committed_blocks"] == boundary - 1
    assert run("write", out, *args, "--resume", capfd=capfd)[0] == 0
    assert_same_output(out, ref)


@pytest.mark.parametrize("how", ["in_place", "ordered", "chained", "pinned"])
def test_a_stream_with_inputs_resumes_through_the_blocks_since_its_last_kept_carry(tmp_path, how):
    """The inputs live in the program: it recomputes blocks 3 and 4 from the carry after block 2, each judged on
    the host, and goes on from where block 4 ends; whichever way blocks cross to the host (the unordered ones
    chain the checks by their tokens)."""
    xs = jnp.asarray(np.random.default_rng(0).normal(size=(LENGTH, WIDTH)))

    def f(c, x):
        c = 0.999 * c + 0.01 * jnp.sin(x) + x * c * 1e-3
        return c, c

    def stream(out, mode="create", inputs=xs):
        with testing.patched("stream.handover", lambda: how), streamacc.Stream(
            out, f, length=LENGTH, block_size=BLOCK, mode=mode, progress=False
        ) as s:
            return jax.jit(s.scan)(jnp.asarray(init()), inputs)

    ref, out = tmp_path / "ref.zarr", tmp_path / "out.zarr"
    want = streamacc.write(ref, f, init(), xs, length=LENGTH, block_size=BLOCK, progress=False)
    with pytest.raises(streamacc.errors.StoreError):
        stream(streamacc_failing(out, "y/c/5/0"))
    assert read_manifest(out)["committed_blocks"] == 5 and read_manifest(out)["carries"]["every"] == 3
    np.testing.assert_array_equal(np.asarray(stream(out, mode="resume")), np.asarray(want))
    assert_same_output(out, ref)
    # a change of the inputs is found by their values as the program starts, before anything is written
    partial = tmp_path / "partial.zarr"
    with pytest.raises(streamacc.errors.StoreError):
        stream(streamacc_failing(partial, "y/c/5/0"))
    before = store_files(partial)
    with pytest.raises(streamacc.errors.ResumeError, match=r"the values of the inputs of its \d+ steps differ"):
        stream(partial, mode="resume", inputs=xs.at[3 * BLOCK + 1].add(1.0))
    assert store_files(partial) == before


def streamacc_failing(out: Path, key: str):
    from helpers import failing

    return failing(out, key, OSError(28, "No space left on device"))
