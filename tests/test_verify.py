"""``streamacc.verify`` from Python: outputs written with any step function are rechecked."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from helpers import root_says

import streamacc

LENGTH, BLOCK = 1000, 128
XS = np.linspace(0.0, 1.0, LENGTH)


def step(c, x):
    c = c * 0.999 + x
    return c, {"level": c, "double": 2.0 * c}


def other_step(c, x):
    c = c * 0.998 + x
    return c, {"level": c, "double": 2.0 * c}


@pytest.fixture
def out(tmp_path):
    path = tmp_path / "out.zarr"
    streamacc.write(path, step, np.float64(0.0), XS, block_size=BLOCK, codec="none", progress=False)
    return path


def test_verify_all_and_a_sample(out):
    report = streamacc.verify(out, step, np.float64(0.0), XS)
    assert report.checked_blocks == tuple(range(8)) and report.complete
    assert report.committed_steps == report.total_steps == LENGTH
    sample = streamacc.verify(out, step, np.float64(0.0), XS, blocks=3)
    assert sample.checked_blocks == (0, 4, 7)


def test_verify_without_the_step_function_says_what_to_pass(out):
    with pytest.raises(streamacc.errors.InputError) as refused:
        streamacc.verify(out)
    message = str(refused.value)
    assert message.startswith("verify recomputes the output's blocks, so it needs the step function that wrote it")
    assert "pass streamacc.verify(store, f, init) (and xs, if the run had inputs), or a ScanSpec" in message
    assert "`streamacc verify PATH`" in message and "\n" not in message
    with pytest.raises(streamacc.errors.InputError, match=r"init is needed with the step function f"):
        streamacc.verify(out, step)


def test_a_flipped_value_names_its_block(out):
    arr = zarr.open_array(out / "level", mode="r+")
    arr[5 * BLOCK + 3] = arr[5 * BLOCK + 3] + 1.0
    with pytest.raises(streamacc.errors.VerifyError, match=r"block 5 \(steps 640-768\)"):
        streamacc.verify(out, step, np.float64(0.0), XS)
    with pytest.raises(streamacc.errors.VerifyError, match=r"block 5 \(steps 640-768\).*not the chunk it committed"):
        streamacc.verify(out, step, np.float64(0.0), XS, blocks=1)  # not recomputed, but its trailer is read


def test_another_function_is_refused(out):
    with pytest.raises(streamacc.errors.VerifyError, match="other_step"):
        streamacc.verify(out, other_step, np.float64(0.0), XS)


def test_other_inputs_give_different_bytes(out):
    with pytest.raises(streamacc.errors.VerifyError, match=r"block 0 .*does not recompute"):
        streamacc.verify(out, step, np.float64(0.0), XS * 2.0)


def test_a_root_that_lags_the_complete_manifest_is_refused(out):
    root_says(out, 0)
    with pytest.raises(streamacc.errors.VerifyError) as refused:
        streamacc.verify(out, step, np.float64(0.0), XS)
    assert str(refused.value) == (
        f"{out}: its root metadata (zarr.json) has out-of-date attributes (streamacc_committed_steps, "
        "streamacc_complete) though the run is complete; resume the run with mode='resume' to rewrite it from the "
        "manifest"
    )
    with pytest.warns(streamacc.errors.StreamaccWarning, match="is already complete"):  # and rewrites the root
        streamacc.write(out, step, np.float64(0.0), XS, block_size=BLOCK, codec="none", mode="resume", progress=False)
    assert streamacc.verify(out, step, np.float64(0.0), XS).complete


def test_bad_blocks_argument(out):
    with pytest.raises(streamacc.errors.InputError, match=r"blocks must be >= 1, got 0; pass e.g. blocks=16"):
        streamacc.verify(out, step, np.float64(0.0), XS, blocks=0)


@pytest.fixture
def compressed(tmp_path):
    path = tmp_path / "lz4.zarr"
    streamacc.write(path, step, np.float64(0.0), XS, block_size=BLOCK, chunks={"step": 64}, progress=False)
    return path


def test_chunks_are_checked_without_decoding_them(compressed, monkeypatch):
    real = zarr.Array.__getitem__

    def no_decoding(self, selection):
        if self.path.startswith("_streamacc/"):  # the window summaries, a few KiB, are compared decoded
            return real(self, selection)
        raise AssertionError("a stored chunk was decoded")

    monkeypatch.setattr(zarr.Array, "__getitem__", no_decoding)
    assert streamacc.verify(compressed, step, np.float64(0.0), XS).checked_blocks == tuple(range(8))


def test_chunks_another_encoder_wrote_are_compared_by_value(compressed, monkeypatch):
    from streamacc.store import ChunkWriter

    real = ChunkWriter.encode

    def other_encoder(self, chunk, out):  # as if another c-blosc had written the chunks: other bytes, same values
        encoded, crc = real(self, chunk, out)
        return np.concatenate([encoded, np.zeros(1, np.uint8)]), crc

    monkeypatch.setattr(ChunkWriter, "encode", other_encoder)
    assert streamacc.verify(compressed, step, np.float64(0.0), XS).checked_blocks == tuple(range(8))
    with pytest.raises(streamacc.errors.VerifyError, match=r"block 0 .*does not recompute .*'double' differs"):
        streamacc.verify(compressed, step, np.float64(0.0), XS * 2.0)
