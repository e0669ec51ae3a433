"""Bad command lines: each exits 2 (bad usage or input) or 1 (runtime failure) with exactly
one line on stderr that starts with 'streamacc' (no traceback), and leaves the working
directory exactly as it was: no output created, an existing output or input untouched.

Every row runs in a fresh copy of a small workspace (an existing output, 1-D and 2-D
input arrays, a plain file, a foreign directory) as the current directory, and the
whole workspace is compared file by file (bytes and mtimes) before and after.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from helpers import failing, held_lock, listing, run_warm

import streamacc
import streamacc.read
from streamacc.cli import main
from streamacc.errors import StoreError
from streamacc.store import LocalTarget

LOCK = "out.zarr"  # writers lock the output folder itself


def directories(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir()}


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """The workspace every row starts from."""
    root = tmp_path_factory.mktemp("workspace")

    def step(c, _):
        return c * 1.5, c

    streamacc.write(root / "out.zarr", step, np.float64(1.0), length=100, block_size=64, progress=False, attrs={"k": 1})
    one = zarr.create_array(root / "in1d.zarr", shape=(100,), chunks=(50,), dtype="f8", fill_value=0.0)
    one[:] = np.linspace(1.0, 2.0, 100)
    two = zarr.create_array(root / "in2d.zarr", shape=(10, 10), chunks=(5, 5), dtype="f8", fill_value=0.0)
    two[:] = 1.0
    (root / "afile").write_text("a plain file, not a directory\n")
    (root / "foreign").mkdir()
    (root / "foreign" / "notes.txt").write_text("not a streamacc output\n")
    return root


@pytest.fixture
def workspace(template, tmp_path, monkeypatch) -> Path:
    root = tmp_path / "ws"
    shutil.copytree(template, root)
    monkeypatch.chdir(root)
    return root


def W(*args: str) -> list[str]:
    """A ``write`` command line for a new output (``new.zarr``) unless OUT is in ``args``."""
    return ["write", "new.zarr", *args]


ROWS = [
    # --size: the safe arithmetic parser and its bounds
    pytest.param(W("--size", "-5"), 2, id="size-negative"),
    pytest.param(W("--size", "0"), 2, id="size-zero"),
    pytest.param(W("--size", "2.5"), 2, id="size-fractional"),
    pytest.param(W("--size", "2**1000"), 2, id="size-2**1000"),
    pytest.param(W("--size", "1e18"), 2, id="size-inexact-float"),
    pytest.param(W("--size", "__import__('os')"), 2, id="size-import"),
    pytest.param(W("--size", "os.system"), 2, id="size-os.system"),
    pytest.param(W("--size", "a.b"), 2, id="size-attribute"),
    pytest.param(W("--size", "x"), 2, id="size-name"),
    pytest.param(W("--size", "lambda: 1"), 2, id="size-lambda"),
    pytest.param(W("--size", ""), 2, id="size-empty"),
    pytest.param(W("--size", "(2**3"), 2, id="size-unbalanced"),
    pytest.param(W(), 2, id="gp-without-size"),
    # general options
    pytest.param(W("--size", "10", "--recipe", "nope"), 2, id="unknown-recipe"),
    pytest.param(W("--size", "10", "--dtype", "int8"), 2, id="dtype-int8"),
    pytest.param(W("--size", "10", "--dtype", "float16"), 2, id="dtype-float16"),
    pytest.param(W("--size", "10", "--codec", "bogus"), 2, id="unknown-codec"),
    pytest.param(W("--size", "10", "--block-size", "0"), 2, id="block-size-zero"),
    pytest.param(W("--size", "10", "--block-size", "-3"), 2, id="block-size-negative"),
    pytest.param(W("--size", "10", "--block-size", "2**0.5"), 2, id="block-size-irrational"),
    pytest.param(W("--size", "10", "--bogus"), 2, id="unknown-option"),
    pytest.param(W("--size", "10", "--overwrite", "--resume"), 2, id="overwrite-with-resume"),
    pytest.param(W("--size", "10", "--x0"), 2, id="option-without-value"),
    pytest.param(["write", "--size", "10"], 2, id="missing-OUT"),
    pytest.param([], 2, id="no-command"),
    pytest.param(["bogus"], 2, id="unknown-command"),
    # recipe parameters
    pytest.param(W("--size", "10", "--x0", "nan"), 2, id="x0-nan"),
    pytest.param(W("--size", "10", "--x0", "1e400"), 2, id="x0-overflow"),
    pytest.param(W("--size", "10", "--ratio", "1/0"), 2, id="ratio-division-by-zero"),
    pytest.param(W("--size", "10", "--recipe", "affine", "--ratio", "2"), 2, id="ratio-for-affine"),
    pytest.param(W("--size", "10", "--seed", "1"), 2, id="seed-for-gp"),
    pytest.param(W("--size", "10", "--recipe", "logistic", "--r", "5"), 2, id="logistic-r-5"),
    pytest.param(W("--size", "10", "--recipe", "logistic", "--x0", "2"), 2, id="logistic-x0-2"),
    pytest.param(W("--size", "10", "--recipe", "logistic", "--inner", "0"), 2, id="logistic-inner-0"),
    pytest.param(W("--size", "10", "--recipe", "randomwalk", "--sigma", "-1"), 2, id="sigma-negative"),
    pytest.param(W("--size", "10", "--recipe", "randomwalk", "--seed", "1.5"), 2, id="seed-fractional"),
    pytest.param(W("--size", "10", "--recipe", "randomwalk", "--seed", "-1"), 2, id="seed-negative"),
    pytest.param(W("--size", "2**33", "--recipe", "randomwalk"), 2, id="randomwalk-too-long"),
    pytest.param(W("--size", "5000", "--block-size", "1004"), 2, id="block-size-not-a-multiple-of-unroll"),
    pytest.param(W("--size", "2**63-1", "--virtual", "--block-size", "2**40"), 2, id="block-larger-than-memory"),
    pytest.param(W("--size", "2**40", "--block-size", "2**40"), 2, id="stored-block-larger-than-memory"),
    pytest.param(
        ["write", "out.zarr", "--size", "2**41", "--block-size", "2**40", "--overwrite"], 2, id="overwrite-huge-block"
    ),
    # parameters that round to a degenerate value in the chosen dtype
    pytest.param(W("--size", "10", "--dtype", "float32"), 2, id="float32-ratio-rounds-to-1"),
    pytest.param(W("--size", "10", "--dtype", "float32", "--ratio", "2", "--x0", "1e39"), 2, id="float32-x0-inf"),
    pytest.param(
        W("--size", "10", "--dtype", "float32", "--recipe", "randomwalk", "--sigma", "1e-50"), 2, id="float32-sigma-0"
    ),
    # cumsum / cumprod inputs
    pytest.param(W("--recipe", "cumsum"), 2, id="cumsum-without-input"),
    pytest.param(W("--recipe", "cumsum", "--input", "missing.zarr"), 2, id="input-missing"),
    pytest.param(W("--recipe", "cumprod", "--input", "in2d.zarr"), 2, id="input-2d"),
    pytest.param(W("--recipe", "cumsum", "--input", "afile"), 2, id="input-plain-file"),
    pytest.param(W("--recipe", "cumsum", "--input", "in1d.zarr", "--size", "101"), 2, id="size-beyond-input"),
    pytest.param(
        ["write", "in1d.zarr", "--recipe", "cumsum", "--input", "in1d.zarr", "--overwrite"], 2, id="input-is-OUT"
    ),
    pytest.param(["write", ".", "--recipe", "cumsum", "--input", "in1d.zarr", "--overwrite"], 2, id="input-inside-OUT"),
    # existing outputs and other runtime refusals
    pytest.param(["write", "out.zarr", "--size", "100", "--block-size", "64"], 2, id="existing-output"),
    pytest.param(["write", "out.zarr", "--size", "50", "--resume"], 2, id="resume-different-run"),
    pytest.param(["write", "foreign", "--size", "10", "--resume"], 2, id="resume-foreign-directory"),
    pytest.param(["write", "afile", "--size", "10", "--overwrite"], 2, id="OUT-is-a-file"),
    pytest.param(["write", "afile/out.zarr", "--size", "10"], 1, id="OUT-inside-a-file"),
    pytest.param(["write", "pp/q/r/out.zarr", "--size", "10", "--extend"], 2, id="extend-in-folders-not-there"),
    pytest.param(["plot", "out.zarr", "-o", "out.zarr/_streamacc/pic"], 2, id="plot-into-the-output"),
    pytest.param(["write", "out.zarr", "--size", "10", "--overwrite"], 1, id="output-locked-by-a-writer"),
    pytest.param(["info", "missing.zarr"], 2, id="info-missing"),
    pytest.param(["info", "in1d.zarr"], 2, id="info-not-an-output"),
    pytest.param(["verify", "missing.zarr"], 2, id="verify-missing"),
    pytest.param(["verify", "out.zarr", "--blocks", "0"], 2, id="verify-blocks-zero"),
    pytest.param(["verify", "out.zarr"], 2, id="verify-python-output"),  # not a failed check: one it cannot run
]


def assert_one_error_line(err: str) -> None:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("streamacc"), err
    assert "Traceback" not in err


@pytest.mark.parametrize(("argv", "code"), ROWS)
def test_bad_command_line(workspace, capfd, request, argv, code):
    before, dirs_before = listing(workspace), directories(workspace)
    locked = "locked" in request.node.callspec.id
    with held_lock(workspace / LOCK) if locked else contextlib.nullcontext():
        assert main(argv) == code
    out, err = capfd.readouterr()
    assert_one_error_line(err)
    assert out == ""
    assert listing(workspace) == before
    assert directories(workspace) == dirs_before


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            W("--size", "5000", "--block-size", "1004"),
            "--block-size 1004 must be a multiple of the scan's unroll (8) and at least 16, so that blocks line up "
            "with lax.scan's unrolled groups; pass e.g. --block-size 1000",
        ),
        (
            W("--size", "10", "--dtype", "float32"),
            "--ratio 1.00000001 rounds to 1.0 in float32, so every value would equal x0; "
            "pass --dtype float64 or a ratio farther from 1",
        ),
        (W("--recipe", "gp"), "recipe 'gp' needs --size, the number of output values; pass e.g. --size 1000000"),
        (W("--recipe", "cumsum"), "; pass --input in.zarr"),
        (W("--size", "3", "--dtype", "int8"), "--dtype must be float64 or float32, got 'int8'; pass --dtype float64"),
        (W("--size", "3", "--recipe", "affine", "--ratio", "2"), "--ratio does not apply to recipe 'affine'"),
        (W("--size", "3", "--codec", "bogus"), "--codec bogus is unknown; choose one of: none, zstd"),
    ],
    ids=["block-size", "ratio-rounds", "size-missing", "input-missing", "dtype", "foreign-option", "codec"],
)
def test_errors_name_command_line_options(workspace, capfd, argv, says):
    assert main(argv) == 2
    err = capfd.readouterr().err
    assert_one_error_line(err)
    assert says in err
    assert not re.search(r"\b[a-z_0-9]+=", err)  # no Python keyword arguments


def test_table_is_large_enough():
    assert len(ROWS) >= 25


SUBPROCESS_ROWS = [
    pytest.param(W("--size", "lambda: 1"), 2, id="size-lambda"),  # refused before JAX is imported
    pytest.param(["write", "out.zarr", "--size", "100"], 2, id="existing-output"),  # and after
]
"""A process's own exit code and stderr (``python -m streamacc`` in a process of its own; the rows above run
in-process, and test_cli runs the installed entry points): one refusal before JAX is imported and one after."""


@pytest.mark.parametrize(("argv", "code"), SUBPROCESS_ROWS)
def test_real_exit_codes(workspace, argv, code):
    before = listing(workspace)
    proc = run_warm([sys.executable, "-m", "streamacc", *argv], text=True, timeout=120)
    assert proc.returncode == code
    assert_one_error_line(proc.stderr)
    assert proc.stdout == ""
    assert listing(workspace) == before


def test_interrupt_exits_130_with_one_line(workspace, capfd, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(streamacc.run, "write", interrupted)  # what the write command calls
    assert main(W("--size", "10")) == 130
    err = capfd.readouterr().err
    assert_one_error_line(err)
    assert "--resume" in err


def test_unexpected_error_is_one_line_and_debug_shows_the_traceback(workspace, capfd, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("something\nunforeseen")

    monkeypatch.setattr(streamacc.read, "info", broken)  # what the info command calls
    assert main(["info", "out.zarr"]) == 1
    err = capfd.readouterr().err
    assert_one_error_line(err)
    assert "RuntimeError: something unforeseen" in err and "--debug" in err
    assert main(["--debug", "info", "out.zarr"]) == 1
    err = capfd.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1].startswith("streamacc: error: RuntimeError")


def test_a_store_failure_before_any_block_names_the_command_to_rerun(workspace, monkeypatch, capsys):
    """A local folder's files are written and deleted by the run itself, not through the zarr store: they fail there."""

    def read_only(self, *args):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(LocalTarget, "delete", read_only)  # an output on a read-only file system
    gp = "write {} --size 100 --block-size 64 --no-progress"
    assert main([*gp.format("out.zarr").split(), "--overwrite"]) == 1
    line = capsys.readouterr().err.strip()
    assert "Permission denied" in line and line.endswith("fix the cause and rerun with --overwrite")
    monkeypatch.setattr(LocalTarget, "write", read_only)
    assert main(gp.format("new.zarr").split()) == 1
    assert capsys.readouterr().err.strip().endswith("fix the cause and rerun")  # nothing was left behind
    assert not (workspace / "new.zarr").exists()


def test_resuming_where_nothing_is_says_so_and_starts(workspace, capsys, recwarn):
    assert main(["write", "typo.zarr", "--size", "100", "--block-size", "64", "--no-progress", "--resume"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["streamacc: nothing to resume at typo.zarr (check the path if a run was expected there); "
                   "starting a new run"]  # fmt: skip
    with pytest.warns(streamacc.errors.StreamaccWarning, match="nothing to resume at"):
        streamacc.write(workspace / "other.zarr", lambda c, _: (c * 2.0, c), np.float64(1.0), length=10,
                        progress=False, mode="resume")  # fmt: skip


def growth(c, _):
    return c * 1.5, c


def test_an_interrupted_python_write_is_continued_from_python_never_by_overwriting(workspace, capfd):
    """info, --resume and --extend of an output written from Python all point at write(mode="resume")."""
    out = workspace / "py.zarr"
    with pytest.raises(StoreError):  # the run stops after 2 of its 16 blocks
        streamacc.write(failing(out, "y/c/2"), growth, np.float64(1.0), length=1000, block_size=64, progress=False)
    before = listing(workspace)
    assert main(["info", "py.zarr"]) == 0
    state = capfd.readouterr().out.splitlines()[0]
    assert state.endswith('incomplete (written from Python: continue it with streamacc.write(path, f, init, '
                          'mode="resume"))'), state  # fmt: skip
    for argv, mode in [(["--size", "1000", "--resume"], "resume"), (["--size", "2000", "--extend"], "extend")]:
        assert main(["write", "py.zarr", "--no-progress", *argv]) == 2
        err = capfd.readouterr().err
        assert_one_error_line(err)
        assert f"cannot {mode} py.zarr with a recipe: it was written from Python" in err
        assert f'{mode} it from Python with streamacc.write(path, f, init' in err and "overwrite" not in err
    assert listing(workspace) == before
    streamacc.write(out, growth, np.float64(1.0), length=1000, block_size=64, progress=False, mode="resume")
    want = np.concatenate([[1.0], np.multiply.accumulate(np.full(999, 1.5))])  # y is the carry before each step
    assert np.asarray(zarr.open_array(out / "y")[...]).tobytes() == want.tobytes()
