"""The ``streamacc`` command line: every recipe round-trips against a numpy reference,
``info``, ``verify``, ``recipes``, ``--version``, and the real entry points.

Most tests call ``streamacc.cli.main`` in-process (it returns the exit code); a few run
``python -m streamacc`` and the ``streamacc`` console script to prove the real thing.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
import zarr
from helpers import assert_bits_equal, held_lock, read_manifest, rewind, root_says

import streamacc
import streamacc.read
from streamacc.cli import main
from streamacc.recipes import RECIPES
from streamacc.run import si

QUIET = ["--no-progress"]


def run_cli(*argv: str) -> int:
    return main([str(a) for a in argv])


def write_ok(out: Path, *argv: str) -> np.ndarray:
    """Run ``streamacc write OUT ...`` in-process, require success and ``verify`` to pass, return the output."""
    assert run_cli("write", out, *argv, *QUIET) == 0
    assert run_cli("verify", out) == 0
    group = zarr.open_group(out, mode="r")
    (name,) = group.array_keys()
    return group[name][:]


def make_input(path: Path, values: np.ndarray, chunk: int = 50) -> Path:
    array = zarr.create_array(path, shape=values.shape, chunks=(chunk,), dtype=values.dtype, fill_value=0)
    array[:] = values
    return path


def recurrence(first: float, size: int, step) -> np.ndarray:
    out = np.empty(size)
    out[0] = first
    for i in range(1, size):
        out[i] = step(out[i - 1])
    return out


# --- recipes against numpy -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "block", "x0", "ratio"),
    [
        (1000, 64, ("1", 1.0), ("1+1e-8", 1 + 1e-8)),
        (512, 64, ("2.5", 2.5), ("1-1e-3", 1 - 1e-3)),
        (77, 1000, ("-1e-3", -1e-3), ("-1.01", -1.01)),
    ],
    ids=["1000-by-64", "multiple-of-block", "one-short-block-negative"],
)
def test_gp_is_numpy_multiply_accumulate(tmp_path, size, block, x0, ratio):
    y = write_ok(tmp_path / "gp.zarr", "--size", size, "--block-size", block, "--x0", x0[0], "--ratio", ratio[0])
    expected = np.multiply.accumulate(np.array([x0[1]] + [ratio[1]] * (size - 1)))
    assert_bits_equal(y, expected)


def test_gp_default_parameters_and_size_expression(tmp_path):
    y = write_ok(tmp_path / "gp.zarr", "--size", "2**10-24", "--block-size", "2**6")
    assert_bits_equal(y, np.multiply.accumulate(np.array([1.0] + [1.0 + 1e-8] * 999)))


@pytest.mark.parametrize("spelling", ["float32", "f4"])
def test_gp_float32(tmp_path, spelling):
    out = tmp_path / "gp.zarr"
    y = write_ok(out, "--size", "300", "--block-size", "64", "--dtype", spelling, "--ratio", "1.01")
    assert y.dtype == np.float32
    expected = np.multiply.accumulate(np.array([1.0] + [1.01] * 299, dtype=np.float32))
    assert_bits_equal(y, expected)
    assert zarr.open_group(out).attrs["dtype"] == "float32"  # the canonical name, however it was spelled


def test_affine_matches_a_numpy_loop(tmp_path):
    y = write_ok(
        tmp_path / "affine.zarr", "--recipe", "affine", "--size", "1000", "--block-size", "64",
        "--a", "0.9", "--b", "0.1", "--x0", "-2",
    )  # fmt: skip
    np.testing.assert_allclose(y, recurrence(-2.0, 1000, lambda x: 0.9 * x + 0.1), rtol=1e-12)


def test_affine_defaults(tmp_path):
    y = write_ok(tmp_path / "affine.zarr", "--recipe", "affine", "--size", "100", "--block-size", "64")
    np.testing.assert_allclose(y, recurrence(0.0, 100, lambda x: 0.5 * x + 1.0), rtol=1e-12)


def test_logistic_matches_a_numpy_loop(tmp_path):
    # r = 3.2 has an attracting 2-cycle, so rounding differences cannot grow (3.7 is chaotic)
    y = write_ok(
        tmp_path / "logistic.zarr", "--recipe", "logistic", "--size", "1000", "--block-size", "64",
        "--r", "3.2", "--x0", "0.3",
    )  # fmt: skip
    np.testing.assert_allclose(y, recurrence(0.3, 1000, lambda x: 3.2 * x * (1 - x)), rtol=1e-12)


def test_logistic_inner_applies_the_map_several_times(tmp_path):
    y = write_ok(tmp_path / "l.zarr", "--recipe", "logistic", "--size", "200", "--block-size", "64", "--inner", "3")

    def three(x):
        for _ in range(3):
            x = 3.7 * x * (1 - x)
        return x

    np.testing.assert_allclose(y[:20], recurrence(0.5, 20, three), rtol=1e-12)
    assert ((y >= 0) & (y <= 1)).all()


def test_randomwalk_is_independent_of_block_size_and_depends_on_seed(tmp_path):
    """(Each block length draws its increments with a function of its own: two lengths, two compilations.)"""
    args = ("--recipe", "randomwalk", "--size", "1000", "--x0", "3", "--sigma", "0.5")
    a = write_ok(tmp_path / "a.zarr", *args, "--block-size", "125")
    b = write_ok(tmp_path / "b.zarr", *args, "--block-size", "200")
    assert_bits_equal(a, b)
    assert a[0] == 3.0
    assert np.isfinite(a).all() and np.unique(a).size == a.size
    steps = np.diff(a)
    assert 0.4 < steps.std() < 0.6
    c = write_ok(tmp_path / "c.zarr", *args, "--block-size", "125", "--seed", "1")
    assert c[0] == 3.0
    assert not np.array_equal(a, c)


INPUT = np.random.default_rng(3).uniform(0.9, 1.1, size=300)


@pytest.mark.parametrize(("recipe", "numpy_op"), [("cumsum", np.cumsum), ("cumprod", np.cumprod)])
def test_cumulative_of_an_input_array_is_numpy(tmp_path, recipe, numpy_op):
    source = make_input(tmp_path / "in.zarr", INPUT)
    y = write_ok(tmp_path / "all.zarr", "--recipe", recipe, "--input", source, "--block-size", "64")
    assert_bits_equal(y, numpy_op(INPUT))  # --size defaults to the input's length
    y = write_ok(tmp_path / "head.zarr", "--recipe", recipe, "--input", source, "--block-size", "64", "--size", "100")
    assert_bits_equal(y, numpy_op(INPUT[:100]))


def test_cumsum_of_an_int_input_in_float32(tmp_path):
    values = np.random.default_rng(4).integers(-1000, 1000, size=250).astype(np.int32)
    source = make_input(tmp_path / "in.zarr", values)
    y = write_ok(
        tmp_path / "out.zarr", "--recipe", "cumsum", "--input", source, "--block-size", "64", "--dtype", "float32"
    )
    assert_bits_equal(y, np.cumsum(values.astype(np.float32)))


def test_cumsum_with_a_relative_input_verifies_from_another_directory(tmp_path, monkeypatch):
    # the input path is recorded resolved, so that verify works from any directory, not only the writing one
    make_input(tmp_path / "in.zarr", INPUT)
    monkeypatch.chdir(tmp_path)
    assert run_cli("write", "out.zarr", "--recipe", "cumsum", "--input", "in.zarr", "--block-size", "64", *QUIET) == 0
    manifest = read_manifest(tmp_path / "out.zarr")
    assert manifest["identity"]["params"]["input"] == str(tmp_path / "in.zarr")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert run_cli("verify", "../out.zarr") == 0


def test_negative_arithmetic_values_are_values_not_options(tmp_path):
    # negative numbers are values, which argparse would take for options ("expected one argument")
    y = write_ok(tmp_path / "a.zarr", "--recipe", "affine", "--size", "5", "--x0", "-2**3", "--b", "-1e-3", "--a", "1")
    np.testing.assert_allclose(y, -8 - 1e-3 * np.arange(5), rtol=1e-12)


def test_codec_option_is_recorded(tmp_path):
    out = tmp_path / "out.zarr"
    write_ok(out, "--size", "100", "--block-size", "64", "--codec", "zstd")
    assert [type(c).__name__ for c in zarr.open_group(out)["x"].compressors] == ["ZstdCodec", "Crc32cCodec"]


def test_output_opens_in_xarray_with_recipe_attrs(tmp_path):
    out = tmp_path / "out.zarr"
    write_ok(out, "--recipe", "affine", "--size", "100", "--block-size", "64", "--a", "0.25")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = xr.open_zarr(out)
        assert set(ds.data_vars) == {"x"}
        assert ds["x"].dims == ("step",)
        assert ds.attrs["recipe"] == "affine"
        params = json.loads(ds.attrs["params"])  # JSON text: netCDF-safe
        assert params == {"x0": 0.0, "a": 0.25, "b": 1.0, "compensated": False}
        assert ds.attrs["dtype"] == "float64"
        assert ds.attrs["streamacc_version"] == streamacc.__version__
        assert ds.attrs["streamacc_complete"] == 1 and ds.attrs["streamacc_committed_steps"] == 100
        assert ds["x"].attrs["long_name"] == RECIPES["affine"].description and ds["x"].attrs["units"] == ""


def test_resume_of_a_complete_output_does_nothing(tmp_path):
    out = tmp_path / "out.zarr"
    y = write_ok(out, "--size", "200", "--block-size", "64")
    chunks = {p: p.read_bytes() for p in (out / "x" / "c").iterdir()}
    assert run_cli("write", out, "--size", "200", "--block-size", "64", "--resume", *QUIET) == 0
    assert {p: p.read_bytes() for p in (out / "x" / "c").iterdir()} == chunks
    assert_bits_equal(zarr.open_group(out)["x"][:], y)


def test_overwrite_replaces_an_output(tmp_path):
    out = tmp_path / "out.zarr"
    write_ok(out, "--size", "200", "--block-size", "64")
    y = write_ok(out, "--recipe", "affine", "--size", "50", "--block-size", "64", "--overwrite")
    assert y.shape == (50,)
    assert zarr.open_group(out).attrs["recipe"] == "affine"


# --- info, verify, recipes, version --------------------------------------------------------


@pytest.fixture(scope="module")
def gp_out(tmp_path_factory):
    out = tmp_path_factory.mktemp("gp") / "gp.zarr"
    assert run_cli("write", out, "--size", "1000", "--block-size", "64", "--ratio", "1.5**0.5", *QUIET) == 0
    return out


def test_info_describes_the_output(gp_out, capsys):
    assert run_cli("info", gp_out) == 0
    text = capsys.readouterr().out
    assert "1000 of 1000 steps committed, complete" in text
    assert "recipe: gp" in text
    assert "'ratio': 1.224744871391589" in text and "'x0': 1.0" in text
    assert "shape (1000,)" in text and "float64" in text and "chunks (64,)" in text
    assert "codec blosc-lz4" in text
    assert "compression" in text and "x)" in text
    assert "block size: 64" in text


def test_info_and_extend_count_the_blocks_a_short_run_holds(tmp_path, capsys):
    """A run shorter than its block size is one block of its own length; an extension writes the last block of the
    run again (200 steps in blocks of 64 are 64 + 64 + 72), and its line counts those steps in its rate."""
    out = tmp_path / "gp.zarr"
    assert run_cli("write", out, "--size", "100", *QUIET) == 0
    assert run_cli("info", out) == 0
    assert "block size: 100 steps, the whole run in one block" in capsys.readouterr().out
    assert run_cli("write", out, "--size", "200", "--block-size", "64", "--overwrite", *QUIET) == 0
    capsys.readouterr()
    assert run_cli("write", out, "--size", "300", "--extend", *QUIET) == 0
    line = capsys.readouterr().out
    assert "wrote 172 steps (1.38kB), extended at step 200 (steps 128-200 written again: its last block)" in line


def test_verify_accepts_a_good_output(gp_out, capsys):
    assert run_cli("verify", gp_out) == 0
    assert "OK, 16 of 16 committed blocks" in capsys.readouterr().out
    assert run_cli("verify", gp_out, "--blocks", "3") == 0
    assert "OK, 3 of 16" in capsys.readouterr().out


def test_verify_of_more_blocks_than_the_output_has_says_so(gp_out, capsys):
    assert run_cli("verify", gp_out, "--blocks", "20") == 0
    line = capsys.readouterr().out
    assert line.startswith(f"{gp_out}: OK, 16 of 16 committed blocks (the output has only 16) recomputed bit for bit")
    assert run_cli("verify", gp_out, "--blocks", "16") == 0
    assert capsys.readouterr().out.startswith(f"{gp_out}: OK, 16 of 16 committed blocks recomputed bit for bit")


def test_the_readme_headline_recomputes_the_16_blocks_it_promises(tmp_path, monkeypatch, capsys):
    """The README's first commands write, describe and verify 2**20 steps, "recompute 16 of its blocks": run as
    written, verify says so; 2**20 steps in the default blocks of 2**22 make one block, and verify says that."""
    import shlex

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    prose, block = re.search(r"\n\n([^\n]*(?:\n[^\n]+)*)\n\n```console\n(.*?)```", readme, re.S).groups()
    assert "recompute 16 of its blocks" in prose
    commands = [shlex.split(line.removeprefix("$ ")) for line in block.splitlines()]
    assert [c[:2] for c in commands] == [["streamacc", "write"], ["streamacc", "info"], ["streamacc", "verify"]]
    monkeypatch.chdir(tmp_path)
    for command in commands:
        assert run_cli(*command[1:], *(QUIET if command[1] == "write" else [])) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "out.zarr: OK, 16 of 16 committed blocks recomputed bit for bit (1048576 of 1048576 steps committed, complete)"
    )
    assert run_cli("write", "one.zarr", "--size", "2**20", *QUIET) == 0
    assert run_cli("verify", "one.zarr", "--blocks", "16") == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(
        "one.zarr: OK, 1 of 1 committed blocks (the output has only 1) recomputed bit for bit"
    )


def test_info_verify_and_resume_of_an_interrupted_output(tmp_path, capsys):
    out = tmp_path / "out.zarr"
    # no summaries: their committed tail would still describe all 8 blocks
    full = write_ok(out, "--recipe", "randomwalk", "--size", "1000", "--block-size", "125", "--no-summaries")
    # make it look killed after 4 of its 8 blocks: the manifest counts 4, later chunks were never written
    rewind(out, 4, 500)
    root_says(out, 500)
    for k in range(4, 8):
        (out / "x" / "c" / str(k)).unlink()
    assert np.isnan(zarr.open_group(out)["x"][500:]).all()
    capsys.readouterr()
    assert run_cli("info", out) == 0
    assert "500 of 1000 steps committed, incomplete" in capsys.readouterr().out
    assert run_cli("verify", out) == 0
    said = capsys.readouterr().out
    assert "4 of 4 committed blocks" in said and "incomplete: resume with --resume)" in said
    with held_lock(out):  # as a live writer holds it
        assert run_cli("verify", out) == 0
    said = capsys.readouterr().out
    assert f"incomplete: pid {os.getpid()} holds its writer lock and is writing it now; verify it again once that " \
           "run ends)" in said and "--resume" not in said  # fmt: skip
    resume = ["--resume", "--no-summaries"]
    assert run_cli("write", out, "--recipe", "randomwalk", "--size", "1000", "--block-size", "125", *resume) == 0
    assert_bits_equal(zarr.open_group(out)["x"][:], full)
    assert run_cli("info", out) == 0
    assert "1000 of 1000 steps committed, complete" in capsys.readouterr().out


def test_an_interrupted_write_says_the_whole_command_that_continues_it(tmp_path, capsys, monkeypatch):
    """The hint after Ctrl-C is a command to run as it is; and ``streamacc write OUT --resume`` alone continues the
    run too, taking the recipe, its options and every setting from what the output records."""
    out = tmp_path / "out.zarr"
    given = ["--recipe", "affine", "--a", "0.25", "--size", "2**12", "--block-size", "2**10", "--save-every", "2",
             "--time-step", "1", "--time-units", "seconds since 2000-01-01", "--codec", "zstd", "--dtype", "float32",
             "--chunks", "512", "--no-summaries", *QUIET]  # fmt: skip
    full = write_ok(out, *given)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(streamacc.run, "write", interrupted)  # what the write command calls
        assert run_cli("write", out, *given, "--overwrite") == 130
    (line,) = capsys.readouterr().err.splitlines()
    said, command = line.split(": continue with ")
    assert said == "streamacc: error: interrupted; committed blocks are safe"
    assert command == shlex.join(["streamacc", "write", str(out), *given, "--resume"])
    for continued in (shlex.split(command)[1:], ["write", str(out), "--resume"]):
        rewind(out, 2, 2048)  # as a writer interrupted after two of its four blocks leaves it
        root_says(out, 2048)
        for k in (2, 3):
            (out / "x" / "c" / str(k)).unlink()
        assert run_cli(*continued) == 0, capsys.readouterr().err
        assert "resumed at step 2048" in capsys.readouterr().out
        assert_bits_equal(zarr.open_group(out)["x"][:], full)
    assert run_cli("write", out, "--resume", "--a", "0.5") == 2  # what is given must be what the output records
    assert "params.a: stored 0.25, now 0.5" in capsys.readouterr().err
    assert run_cli("write", out, "--extend") == 2
    assert capsys.readouterr().err == (
        f"streamacc: error: --extend needs --size, the longer length to extend {out} to (it holds 4096 steps); pass "
        "e.g. --size 8192\n"
    )


def damage_in_place(chunk: Path) -> None:
    """Flip a bit of ``chunk``'s bytes and leave its trailer as it was: the bytes no longer give its checksum."""
    raw = bytearray(chunk.read_bytes())
    raw[2] ^= 0x01
    chunk.write_bytes(bytes(raw))


def test_a_damaged_carry_is_said_alike_by_verify_and_extend_and_rebuilt_as_said(tmp_path, capsys):
    """One wording for a chunk damaged in place, the command that rebuilds a carry in the command line's terms (the
    initial carry too), and counts said in the singular where there is one."""
    out = tmp_path / "out.zarr"
    write_ok(out, "--size", "4096", "--block-size", "1024")
    damage_in_place(out / "_streamacc" / "carries" / "leaf_0" / "c" / "2")
    capsys.readouterr()
    for argv in (["verify", out], ["write", out, "--extend", "--size", "8192", *QUIET]):
        assert run_cli(*argv) != 0
        err = capsys.readouterr().err
        assert "chunk _streamacc/carries/leaf_0/c/2 do not match their checksum (damaged in place)" in err, err
        assert "rebuild it from the blocks before it with verify and --repair" in err, err
    assert run_cli("verify", out, "--repair") == 0
    assert f"{out}: rebuilt 1 damaged kept carry by recomputation (after block 1)" in capsys.readouterr().out
    damage_in_place(out / "_streamacc" / "carries" / "leaf_0" / "c" / "0")
    assert run_cli("verify", out) == 1
    err = capsys.readouterr().err
    assert "the initial carry of" in err and "rebuild it with verify and --repair, which writes the run's initial " \
           "carry again once it gives the checksums its record names" in err and "from init" not in err
    assert run_cli("verify", out, "--blocks", "x") == 2
    assert capsys.readouterr().err.endswith("are allowed, e.g. '16'\n")


def test_verify_rejects_a_corrupted_chunk(tmp_path, capsys):
    out = tmp_path / "out.zarr"
    write_ok(out, "--size", "200", "--block-size", "64", "--codec", "none")
    chunk = out / "x" / "c" / "1"
    data = bytearray(chunk.read_bytes())
    data[8] ^= 0x01
    chunk.write_bytes(bytes(data))
    capsys.readouterr()
    assert run_cli("verify", out) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("streamacc: error: block 1 (steps 64-128) of ")


def test_info_of_an_output_written_from_python(tmp_path, capsys):
    def step(c, _):
        return c + 1.0, c

    streamacc.write(tmp_path / "out.zarr", step, np.float64(0.0), length=10, block_size=4, progress=False)
    assert run_cli("info", tmp_path / "out.zarr") == 0
    text = capsys.readouterr().out
    assert "10 of 10 steps committed" in text and "recipe: " in text and "step" in text
    assert "y: shape (10,) float64 dims ('step',) chunks (4,)" in text


def prefix_step(c, _):
    return c * 1.5, {"a": c, "ab": jnp.stack([c, c, c])}


def test_info_counts_only_chunk_bytes_of_each_array(tmp_path, capsys):
    # stored bytes count an array's chunks alone: not its zarr.json (getsize_prefix of a file key is 0 on a
    # LocalStore, so subtracting it would subtract nothing), nor, in a MemoryStore, array "ab"'s chunks as "a"'s
    store_path = tmp_path / "out.zarr"
    memory = zarr.storage.MemoryStore()
    for store in (store_path, memory):
        streamacc.write(store, prefix_step, np.float64(1.0), length=96, block_size=16, codec="none", progress=False)
        arrays = streamacc.info(store).arrays
        crc = 6 * 4  # 6 chunks, each followed by its 4-byte CRC-32C
        assert arrays["a"].stored_bytes == 96 * 8 + crc and arrays["a"].compression_ratio == 0.97
        assert arrays["ab"].stored_bytes == 96 * 3 * 8 + crc and arrays["ab"].compression_ratio == 0.99
    assert run_cli("info", store_path) == 0
    assert "stored 792 bytes (compression 0.97x)" in capsys.readouterr().out


def test_recipes_lists_every_recipe_and_parameter(capsys):
    assert run_cli("recipes") == 0
    text = capsys.readouterr().out
    assert set(RECIPES) == {"gp", "affine", "logistic", "randomwalk", "lorenz", "cumsum", "cumprod"}
    for recipe in RECIPES.values():
        assert f"{recipe.name}: " in text
        for param in recipe.params:
            assert f"--{param.name.replace('_', '-')} " in text


def test_version_and_help_return_zero_in_process(capsys):
    # main() returns the exit code of --help and --version: argparse's sys.exit does not escape it
    assert run_cli("--version") == 0
    assert capsys.readouterr().out.strip() == f"streamacc {streamacc.__version__}"
    assert run_cli("write", "--help") == 0
    text = capsys.readouterr().out
    assert "--input PATH" in text and "[cumsum, cumprod]" in text


# --- the summary line, --debug and --version everywhere --------------------------------------

SUMMARY = re.compile(
    r"(?P<path>\S+): wrote (?P<steps>\d+) steps \((?P<bytes>\S+)B\) in (?P<seconds>\d+\.\d\d) s "
    r"\((?P<rate>\S+) steps/s, (?P<byte_rate>\S+)B/s\); stored (?P<stored>\S+)B for (?P<total>\d+) steps "
    r"\(compression (?P<ratio>\d+\.\d\d)x\)"
)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("bar", [False, True], ids=["no-terminal", "progress-bar"])
def test_write_prints_one_summary_line_on_stdout(tmp_path, capsys, monkeypatch, bar):
    out = tmp_path / "out.zarr"
    stderr = Terminal()
    if bar:
        monkeypatch.setattr(sys, "stderr", stderr)
    assert run_cli("write", out, "--size", "1000", "--block-size", "64", "--codec", "zstd") == 0
    stdout = capsys.readouterr().out
    assert stdout.count("\n") == 1
    match = SUMMARY.fullmatch(stdout.strip())
    assert match, stdout
    chunk_bytes = sum(p.stat().st_size for p in (out / "x" / "c").iterdir())
    assert match["path"] == str(out) and match["steps"] == match["total"] == "1000"
    assert match["bytes"] == "8k" and match["stored"] == si(chunk_bytes)
    assert match["ratio"] == f"{8000 / chunk_bytes:.2f}"
    assert ("1k/1k steps" in stderr.getvalue()) is bar  # the bar went to stderr, not stdout


def test_summary_of_a_resumed_and_of_a_finished_run(tmp_path, capsys):
    """The bytes of every array's rows (lorenz: x, y and z, 24 a step) written from the step it resumed at."""
    out = tmp_path / "out.zarr"
    args = ["--recipe", "lorenz", "--size", "300", "--block-size", "64", "--codec", "none", "--no-summaries", *QUIET]
    assert run_cli("write", out, *args) == 0
    rewind(out, 2, 128)  # made to look killed after 2 of its 5 blocks
    root_says(out, 128)
    for name in "xyz":
        for k in range(2, 5):
            (out / name / "c" / str(k)).unlink()
    capsys.readouterr()
    assert run_cli("write", out, *args, "--resume") == 0
    line = capsys.readouterr().out.strip()
    # 172 steps of 24 bytes; each array stores 5 whole chunks of 64 float64 values and a 4-byte checksum
    assert line.startswith(f"{out}: wrote 172 steps (4.13kB), resumed at step 128, in "), line
    assert line.endswith("; stored 7.74kB for 300 steps (compression 0.93x)"), line
    assert run_cli("write", out, *args, "--resume") == 0
    assert capsys.readouterr().out == (
        f"{out}: nothing to write, all 300 steps were committed already; stored 7.74kB for 300 steps "
        "(compression 0.93x)\n"
    )


def test_debug_and_version_are_accepted_after_the_command(tmp_path, capsys, monkeypatch):
    out = tmp_path / "out.zarr"
    assert run_cli("write", out, "--size", "100", "--block-size", "64", "--debug", *QUIET) == 0
    assert run_cli("info", out, "--debug") == 0
    assert run_cli("verify", "--debug", out) == 0
    assert run_cli("recipes", "--debug") == 0
    assert "Traceback" not in capsys.readouterr().err
    for argv in (["write", "--version"], ["info", "--version"], ["verify", "--version"], ["recipes", "--version"]):
        assert run_cli(*argv) == 0
        assert capsys.readouterr().out == f"streamacc {streamacc.__version__}\n"

    def broken(*args, **kwargs):
        raise RuntimeError("unforeseen")

    monkeypatch.setattr(streamacc.read, "info", broken)  # what the info command calls
    for argv in (["info", out, "--debug"], ["--debug", "info", out]):  # before or after: both honoured
        assert run_cli(*argv) == 1
        assert "Traceback" in capsys.readouterr().err
    assert run_cli("info", out) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_a_usage_error_with_debug_is_one_line_without_traceback(capsys):
    # --debug after the command is an option like any other: a usage error says one line, not its traceback
    assert run_cli("write", "out.zarr", "--size", "2**22", "--bogus", "--debug") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "--bogus" in err


# --- the real entry points -----------------------------------------------------------------


def run_process(*argv, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "JAX_PLATFORMS": "cpu"}
    return subprocess.run([*argv], cwd=cwd, capture_output=True, text=True, timeout=120, env=env)


def test_python_dash_m_streamacc_end_to_end(tmp_path):
    proc = run_process(
        sys.executable, "-m", "streamacc", "write", "out.zarr", "--size", "300", "--block-size", "64", *QUIET,
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # stderr is a pipe: no progress bar
    assert proc.stdout.startswith("out.zarr: wrote 300 steps (2.4kB) in ") and proc.stdout.count("\n") == 1
    assert_bits_equal(
        zarr.open_group(tmp_path / "out.zarr")["x"][:], np.multiply.accumulate(np.array([1.0] + [1 + 1e-8] * 299))
    )
    assert run_cli("verify", tmp_path / "out.zarr") == 0


def test_console_script_info_and_version(tmp_path, gp_out):
    script = shutil.which("streamacc") or str(Path(sys.executable).parent / "streamacc")
    proc = run_process(script, "--version", cwd=tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"streamacc {streamacc.__version__}"
    proc = run_process(script, "info", gp_out, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "1000 of 1000 steps committed" in proc.stdout and "recipe: gp" in proc.stdout


def test_storage_options_reach_write_info_and_verify(capsys, s3_bucket):
    url = s3_bucket.url()
    option = ["--storage-option", f"endpoint_url={s3_bucket.server.endpoint}"]
    option += ["--storage-option", "skip_instance_cache=false"]  # JSON false: the boolean reaches fsspec
    assert run_cli("write", url, "--size", "300", "--block-size", "64", *QUIET, *option) == 0
    assert f"{url}: wrote 300 steps" in capsys.readouterr().out
    assert run_cli("info", url, *option) == 0
    assert "300 of 300 steps committed, complete" in capsys.readouterr().out
    assert run_cli("verify", url, *option, "--blocks", "2") == 0
    assert "OK, 2 of 5 committed blocks" in capsys.readouterr().out


@pytest.mark.parametrize("pair", ["endpoint_url", "=x", ""])
def test_a_storage_option_without_key_and_value_is_refused(tmp_path, capsys, pair):
    assert run_cli("write", "memory://x/out.zarr", "--size", "10", "--storage-option", pair) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not KEY=VALUE" in err and "--storage-option endpoint_url=" in err


def test_storage_options_are_parsed_as_json_where_they_parse():
    from streamacc.cli import storage_options

    parsed = storage_options(["endpoint_url=http://127.0.0.1:9000", "anon=true", "n=3", 'kw={"a": [1]}', "s=a=b"])
    assert parsed == {"endpoint_url": "http://127.0.0.1:9000", "anon": True, "n": 3, "kw": {"a": [1]}, "s": "a=b"}
    assert storage_options([]) is None


def help_entries(text: str) -> dict[str, str]:
    """Each argument a ``--help`` text lists (its invocation) and its help, the text after it ('' for none)."""
    entries = {}
    for section in re.split(r"\n\n(?=\S[^\n]*:\n)", text)[1:]:  # 'positional arguments:', 'options:', groups
        for entry in re.split(r"\n(?=  \S)", section.split("\n", 1)[1]):
            first, _, more = entry.strip().partition("\n")  # a long invocation's help starts on the next line
            invocation, _, text = first.partition("  ")
            entries[invocation] = " ".join(f"{text} {more}".split())
    return entries


def test_every_argument_of_every_command_has_help_that_fits_the_command(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")  # argparse wraps no help text
    assert run_cli("--help") == 0
    listed = capsys.readouterr().out.split("\n  COMMAND\n", 1)[1].split("\n\n")[0]
    commands = [line.split()[0] for line in listed.splitlines() if re.match(r"    \S", line)]
    assert {"write", "info", "verify", "recipes", "plot"} <= set(commands)
    for name in commands:
        assert run_cli(name, "--help") == 0
        entries = help_entries(capsys.readouterr().out)
        assert "-h, --help" in entries and ("OUT" in entries) == (name != "recipes"), (name, entries)
        for invocation, text in entries.items():
            assert text, (name, invocation)
        storage = entries.get("--storage-option KEY=VALUE", "")
        assert ("--input" in storage) == (name == "write"), (name, storage)  # only write reads one
