"""Kept carries trusted no further than the data: checked before a resume, an extension or verify uses them.

A 1024-value float64 state halved each step (``c * 0.5 + 1``, exact in binary), 8 blocks of 8
steps without summaries, its carries compressed with the data's codec. Each test damages the
kept carries as an attacker or a failing disk would (a chunk flipped or removed, the initial
carry's included; the arrays' metadata edited; the manifest's spacing edited) or a data chunk
behind its trailer, and checks that a resume and an extension refuse it in one line naming the
file, leave every file as it was, and that ``verify(repair=True)`` rebuilds what the data can
rebuild, byte for byte. Also here: attributes ``open`` cannot decode, a link loop given as the
output, zarr's event loop at a command's exit, and carries that the data's codec compresses.
"""

from __future__ import annotations

import json
import math
import shutil
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from helpers import python, read_manifest, rewind, root_says, run, store_files, tree, write_manifest

import streamacc
from streamacc.errors import InputError, NoOutputError, ResumeError, VerifyError

WIDTH, LENGTH, BLOCK = 1024, 64, 8
CARRIES = "_streamacc/carries/leaf_0"


def halve(c, _):
    c = c * 0.5 + 1.0
    return c, c


def init() -> np.ndarray:
    return np.arange(WIDTH, dtype=np.float64) * 1e3


def write(out: Path, length: int = LENGTH, **kw):
    return streamacc.write(out, halve, init(), length=length, block_size=BLOCK, summaries=False, progress=False, **kw)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("carries") / "out.zarr"
    write(out)
    return out


@pytest.fixture
def copy(finished, tmp_path):
    def make(*, killed: bool = False, name: str = "out") -> Path:
        out = tmp_path / f"{name}.zarr"
        shutil.copytree(finished, out)
        if killed:  # as a writer killed after its 5th commit leaves it
            rewind(out, 5, 5 * BLOCK)
            root_says(out, 5 * BLOCK)
        return out

    return make


def kept(out: Path) -> list[int]:
    """The boundaries whose carry the output keeps (its chunks, in scan order)."""
    return sorted(int(p.parent.name) for p in (out / CARRIES / "c").glob("*/0"))


def flip(out: Path, boundary: int) -> None:
    chunk = out / CARRIES / "c" / str(boundary) / "0"
    raw = bytearray(chunk.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    chunk.write_bytes(bytes(raw))


def continue_(out: Path, mode: str) -> None:
    write(out, LENGTH if mode == "resume" else 2 * LENGTH, mode=mode)


def edit_metadata(out: Path, change) -> None:
    path = out / CARRIES / "zarr.json"
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def int32(doc: dict) -> None:
    doc.update(data_type="int32", fill_value=0)


def big_endian(doc: dict) -> None:
    doc["codecs"][0]["configuration"]["endian"] = "big"


def uncompressed(doc: dict) -> None:
    doc["codecs"] = [c for c in doc["codecs"] if c["name"] in ("bytes", "crc32c")]


def test_carries_are_compressed_with_the_data_codec_and_kept_at_their_spacing(finished):
    carries = read_manifest(finished)["carries"]
    assert carries["codec"] == "blosc-lz4"  # the default codec, the data's
    every = carries["every"]
    assert every > 1 and kept(finished) == sorted({*range(0, LENGTH // BLOCK + 1, every), LENGTH // BLOCK})
    chunk = (finished / CARRIES / "c" / str(every) / "0").read_bytes()
    assert len(chunk) < WIDTH * 8  # compressed: the raw carry is 8 KiB


@pytest.mark.parametrize("damage", ["flipped", "removed"])
@pytest.mark.parametrize("mode", ["resume", "extend"])
def test_a_damaged_initial_carry_is_refused_and_rebuilt_from_init(copy, finished, damage, mode):
    out = copy(killed=mode == "resume")
    if damage == "flipped":
        flip(out, 0)
    else:
        (out / CARRIES / "c" / "0" / "0").unlink()
    before = store_files(out)
    refused = rf"cannot {mode}: the initial carry of .* is damaged \(.*c/0/0 .*repair=True"
    with pytest.raises(ResumeError, match=refused):
        continue_(out, mode)
    assert store_files(out) == before
    if mode == "extend":
        with pytest.raises(VerifyError, match="the initial carry"):
            streamacc.verify(out, halve, init())
        with pytest.raises(VerifyError, match=r"is not the carry its run kept there.* init"):
            streamacc.verify(out, halve, init() + 1, repair=True)  # another init: nothing written
        assert store_files(out) == before
        assert streamacc.verify(out, halve, init(), repair=True).repaired == (0,)
        assert store_files(out) == store_files(finished)


@pytest.mark.parametrize(
    ("change", "what"),
    [(int32, "data_type, fill_value"), (big_endian, "codecs"), (uncompressed, "codecs"), (None, "is missing"),
     ("not json", "is not the Zarr array metadata")],
)  # fmt: skip
@pytest.mark.parametrize("mode", ["resume", "extend"])
def test_changed_carries_metadata_is_refused_and_rewritten_by_repair(copy, finished, change, what, mode):
    out = copy(killed=mode == "resume")
    if change is None:
        (out / CARRIES / "zarr.json").unlink()
    elif change == "not json":
        (out / CARRIES / "zarr.json").write_text("{not json")
    else:
        edit_metadata(out, change)
    before = store_files(out)
    with pytest.raises(ResumeError, match=rf"cannot {mode}: .*{CARRIES}/zarr.json\) .*{what}.*repair=True"):
        continue_(out, mode)
    assert store_files(out) == before
    assert streamacc.verify(out, halve, init(), repair=True).repaired == ()
    if mode == "resume":
        continue_(out, mode)
    assert store_files(out) == store_files(finished)


@pytest.mark.parametrize("every", [1, 3, 8])
def test_a_spacing_the_records_do_not_keep_is_refused(copy, every):
    refused = rf"keeps a carry after every {every} blocks \(carries.every\).*mode='overwrite'"
    for mode in ("resume", "extend", "verify"):
        out = copy(killed=mode == "resume", name=mode)
        manifest = read_manifest(out)
        assert manifest["carries"]["every"] != every
        manifest["carries"]["every"] = every
        write_manifest(out, manifest)
        before = store_files(out)
        with pytest.raises(VerifyError if mode == "verify" else ResumeError, match=refused):
            streamacc.verify(out, halve, init()) if mode == "verify" else continue_(out, mode)
        assert store_files(out) == before


def test_a_damaged_kept_carry_is_rebuilt_from_the_blocks_before_it(copy, finished, capfd):
    out = copy()
    inner = kept(finished)[1]
    flip(out, inner)
    (out / CARRIES / "c" / str(kept(finished)[2]) / "0").unlink()
    with pytest.raises(VerifyError, match=rf"carry kept after block {inner - 1} .* from the blocks before it"):
        streamacc.verify(out, halve, init())
    report = streamacc.verify(out, halve, init(), repair=True)
    assert report.repaired == tuple(kept(finished)[1:3]) and report.checked_blocks == tuple(range(LENGTH // BLOCK))
    assert store_files(out) == store_files(finished)


def test_a_recipe_output_is_repaired_from_the_command_line(tmp_path, capfd):
    args = ["--recipe", "randomwalk", "--paths", "256", "--size", "64", "--block-size", "8", "--no-progress"]
    out, ref = tmp_path / "out.zarr", tmp_path / "ref.zarr"
    assert run("write", ref, *args, capfd=capfd)[0] == 0
    shutil.copytree(ref, out)
    (out / CARRIES / "c" / "8" / "0").unlink()
    code, line = run("verify", out, capfd=capfd)
    assert code == 1 and "carry kept after block 7" in line and "verify and --repair" in line, line
    assert run("verify", out, "--repair", capfd=capfd)[0] == 0
    assert store_files(out) == store_files(ref)


def test_a_folder_where_a_carry_chunk_was_is_named(copy):
    out = copy(killed=True)
    chunk = out / CARRIES / "c" / str(kept(out)[1]) / "0"
    chunk.unlink()
    chunk.mkdir()
    before = store_files(out)
    with pytest.raises(ResumeError, match=rf"{chunk.relative_to(out)} is a folder where a file belongs: remove it"):
        continue_(out, "resume")
    assert store_files(out) == before


def test_a_refused_extension_leaves_the_output_byte_for_byte(copy):
    """A data chunk rotted behind its intact trailer: the extension reads every committed chunk whole first."""
    out = copy()
    chunk = out / "y" / "c" / "3" / "0"
    raw = bytearray(chunk.read_bytes())
    raw[20] ^= 0x01
    chunk.write_bytes(bytes(raw))
    before = store_files(out)
    refused = r"cannot extend: block 3 .*y/c/3/0 do not match .*\(damaged in place\).*left as it was"
    with pytest.raises(ResumeError, match=refused):
        continue_(out, "extend")
    assert store_files(out) == before
    assert streamacc.info(out).complete


@pytest.mark.parametrize(
    ("attrs", "named"),
    [({"_FillValue": 0}, "_FillValue=0"), ({"scale_factor": "abc", "long_name": "u"}, "scale_factor='abc'"),
     ({"units": "days since never"}, "units='days since never'")],
)  # fmt: skip
def test_attributes_open_cannot_decode_are_refused_before_anything_is_written(tmp_path, attrs, named):
    out = tmp_path / "out.zarr"
    with pytest.raises(InputError, match=rf"array_attrs of 'y' hold {named}, which streamacc.open cannot decode"):
        write(out, 16, array_attrs={"y": attrs})
    assert not out.exists()
    write(out, 16, array_attrs={"y": {"units": "days since 2000-01-01", "scale_factor": 2.0}})
    assert streamacc.open(out).y.shape == (16, WIDTH)


def test_a_link_loop_is_named_and_nothing_is_written(tmp_path, capfd):
    (tmp_path / "loop").symlink_to("loop")
    before = tree(tmp_path)
    for args in (["info", "loop"], ["write", "loop", "--size", "16"], ["verify", "loop"],
                 ["write", "loop/out.zarr", "--size", "16"]):  # fmt: skip
        code, line = run(*args[:1], tmp_path / args[1], *args[2:], capfd=capfd)
        assert code == 2 and "runs into a loop of symbolic links" in line, (args, line)
    with pytest.raises(NoOutputError, match="loop of symbolic links"):
        streamacc.info(tmp_path / "loop")
    assert tree(tmp_path) == before


def test_nothing_is_printed_after_a_successful_command(finished):
    """zarr's exit handler closes its event loop after waiting 0.2 s for it: on a busy machine, a warning and a
    traceback followed the command's answer. Here the loop is kept busy as the process exits."""
    code = textwrap.dedent(
        """
        import sys, time
        import zarr.core.sync
        from streamacc.cli import main
        sys.argv = ["streamacc", "info", sys.argv[1]]
        status = main()
        zarr.core.sync._get_loop().call_soon_threadsafe(time.sleep, 0.6)  # the loop not scheduled in time
        sys.exit(status)
        """
    )
    done = python(code, str(finished))
    assert done.returncode == 0 and done.stdout and done.stderr == "", done.stderr


def test_a_mostly_zero_field_keeps_its_carries_within_a_tenth_of_its_data(tmp_path):
    """A 512x512 float32 field, zero but for a square that halves each step: its data compress some hundredfold,
    and its carries with them (uncompressed, the 4 carries of 64 steps in blocks of 8 took 4 MiB beside 0.3)."""
    out = tmp_path / "field.zarr"
    u = np.zeros((512, 512), np.float32)
    u[200:216, 300:316] = 1.0

    def fade(c, _):
        c = c * jnp.float32(0.5)
        return c, c

    streamacc.write(out, fade, u, length=64, block_size=8, summaries=False, progress=False)
    data = sum(p.stat().st_size for p in (out / "y").rglob("*") if p.is_file())
    carries = sum(p.stat().st_size for p in (out / "_streamacc" / "carries").rglob("*") if p.is_file())
    assert carries <= 0.1 * data, (carries, data)


def test_the_spacing_of_kept_carries_is_judged_against_their_stored_bytes(tmp_path):
    """A mostly-zero field carried, a small incompressible series stored: by their raw bytes a carry is 16 times a
    block's data, kept every 8 blocks; stored, it is a small fraction of a block's data, kept after every block."""
    out = tmp_path / "thin.zarr"
    u = np.zeros((256, 256), np.float32)
    u[10:20, 10:20] = 1.0
    carry = {"u": u, "t": np.float32(1.0)}

    def step(c, _):
        t = c["t"] * jnp.float32(1.0001)
        return {"u": c["u"] * jnp.float32(0.5), "t": t}, jnp.sin(t * jnp.arange(4096, dtype=jnp.float32) * 1.7)

    streamacc.write(out, step, carry, length=32, block_size=8, summaries=False, progress=False)
    raw_every = min(8, math.ceil((u.nbytes + 4) / (0.05 * 4096 * 4 * 8)))
    assert raw_every == 8
    assert read_manifest(out)["carries"]["every"] == 1
    field = out / "_streamacc" / "carries" / "leaf_1" / "c"  # the leaves in JAX's order: t, u
    assert sorted(int(p.name) for p in field.iterdir()) == [0, 1, 2, 3, 4]  # every boundary
