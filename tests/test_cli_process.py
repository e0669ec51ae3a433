"""The command line as a process: what it imports to start, how it ends on a closed pipe,
and whose log messages reach the terminal. Each case runs a fresh Python, or (what a start
imports) a child forked from one that has imported streamacc and nothing heavy."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import HEAVY, imported_by, python


def cli(*argv: str) -> str:
    """Code that runs the command line in-process and keeps going whatever it returns."""
    return f"from streamacc.cli import main; main({list(argv)!r})"


@pytest.mark.parametrize(
    ("code", "allowed"),
    [
        pytest.param("import streamacc", set(), id="import"),
        pytest.param(
            "import streamacc as s; s.__version__, s.errors.InputError, s.StreamaccError, dir(s)", set(), id="light"
        ),
        pytest.param("import streamacc.base, streamacc.cli, streamacc.recipes", set(), id="wings"),
        pytest.param("from streamacc.base import CODEC_NAMES", set(), id="codec-names"),
        pytest.param("from streamacc.base import block_count", set(), id="layout-arithmetic"),
        pytest.param(cli("--help"), set(), id="help"),
        pytest.param(cli("write", "--help"), set(), id="write-help"),
        pytest.param(cli("--version"), set(), id="version"),
        pytest.param(cli("recipes"), set(), id="recipes"),
        pytest.param(cli("write", "o.zarr", "--bogus"), set(), id="unknown-option"),
        pytest.param(cli("write", "o.zarr", "--size", "lambda: 1"), set(), id="size-not-arithmetic"),
        pytest.param(cli("write", "o.zarr", "--size", "10", "--recipe", "nope"), set(), id="unknown-recipe"),
        pytest.param(cli("write", "o.zarr", "--size", "10", "--ratio", "1/0"), set(), id="ratio-division-by-zero"),
        # a dtype is a numpy question, so numpy may come; JAX and Zarr still may not
        pytest.param(cli("write", "o.zarr", "--size", "10", "--dtype", "float32"), {"numpy"}, id="ratio-rounds-to-1"),
        pytest.param(cli("write", "o.zarr", "--size", "10", "--dtype", "int8"), {"numpy"}, id="bad-dtype"),
        pytest.param(cli("write", "o.zarr", "--recipe", "affine", "--size", "10", "--r", "3"), set(), id="wrong-param"),
        pytest.param(cli("write", "o.zarr", "--size", "10", "--workers", "0"), set(), id="no-workers"),
        pytest.param(cli("write", "o.zarr", "--size", "10", "--workers", "abc"), set(), id="workers-not-a-number"),
        pytest.param(cli("write", "o.zarr", "--size", "2**63"), set(), id="size-too-long"),
        pytest.param(cli("write", "o.zarr", "--size", "100", "--block-size", "7"), {"numpy"}, id="block-vs-unroll"),
        pytest.param(
            cli("write", "o.zarr", "--size", "100", "--block-size", "3", "--compensated"),
            {"numpy"},
            id="compensated-block-vs-unroll",
        ),
        pytest.param(cli("plot", "--help"), set(), id="plot-help"),
        pytest.param(cli("plot", "o.zarr", "--steps", "1"), set(), id="plot-bad-steps"),
    ],
)
def test_start_up_and_argument_errors_do_not_import_jax_or_zarr(tmp_path, code, allowed):
    assert imported_by(code, tmp_path) <= allowed


def test_reading_an_output_imports_no_jax(tmp_path):
    import numpy as np

    import streamacc

    streamacc.write(tmp_path / "out.zarr", lambda c, _: (c + 1.0, c), np.float64(0), length=40, block_size=16,
                    names=["x"], progress=False)  # fmt: skip
    read = "import streamacc; ds = streamacc.open('out.zarr'); assert ds.x.values[-1] == 39; "
    assert "jax" not in imported_by(read + cli("info", "out.zarr"), tmp_path)  # open, then the info command


def test_plotting_imports_neither_jax_nor_xarray(tmp_path):
    import numpy as np

    import streamacc

    streamacc.write(tmp_path / "out.zarr", lambda c, _: (c + 1.0, c), np.float64(0), length=64, block_size=16,
                    names=["x"], summaries=[4, 16], progress=False)  # fmt: skip
    code = (
        "import sys; " + cli("plot", "out.zarr", "-o", "x.png") + "; "
        "found = {'jax', 'xarray', 'pandas', 'dask'} & set(sys.modules); assert not found, found"
    )
    assert imported_by(code, tmp_path) == {"numpy"}  # the summaries of a local output are read without Zarr
    assert (tmp_path / "x.png").stat().st_size > 0


def test_a_plain_write_imports_neither_xarray_nor_pandas(tmp_path):
    """A write tries its arrays' attributes with xarray only where one changes what xarray decodes: a plain write,
    and one given attributes that decode to nothing else, import neither xarray nor pandas."""
    code = """
        import numpy as np, streamacc
        from streamacc.cli import main
        assert main(["write", "cli.zarr", "--size", "1024", "--no-progress"]) == 0
        attrs = {"x": {"long_name": "a count", "units": "m"}}
        streamacc.write("lib.zarr", lambda c, _: (c + 1.0, c), np.float64(0), length=64, names="x", array_attrs=attrs,
                        progress=False)
        """
    assert imported_by(code, tmp_path) == {"jax", "zarr", "numpy"}
    assert json.loads((tmp_path / "lib.zarr" / "x" / "zarr.json").read_text())["attributes"]["units"] == "m"


def test_reading_a_local_output_imports_only_what_it_needs(tmp_path):
    """``info`` reads the arrays' metadata through Zarr; ``overview`` reads the summaries without it and returns an
    xarray Dataset (``plot``, above, needs neither); neither imports JAX."""
    import numpy as np

    import streamacc

    streamacc.write(tmp_path / "out.zarr", lambda c, _: (c + 1.0, c), np.float64(0), length=256, block_size=64,
                    names=["x"], summaries=[4, 16], progress=False)  # fmt: skip
    info = cli("info", "out.zarr") + "; import streamacc; assert streamacc.info('out.zarr').committed_steps == 256"
    assert imported_by(info, tmp_path) == {"numpy", "zarr"}
    overview = "import streamacc; assert streamacc.overview('out.zarr', points=16).sizes['step'] == 16"
    assert imported_by(overview, tmp_path) == {"numpy", "xarray", "pandas"}


def test_the_check_sees_heavy_imports(tmp_path):
    # the same check notices JAX and Zarr once something needs them, so the tests above can fail
    code = f"""
        import json, sys
        import streamacc
        streamacc.scan
        print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
        from streamacc import write
        print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
        import xarray
        print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))
        """
    proc = python(code, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    after_scan, after_write, after_xarray = (set(json.loads(line)) for line in proc.stdout.splitlines()[-3:])
    assert {"jax", "numpy"} <= after_scan and after_write == {"jax", "zarr", "numpy"} and after_xarray == set(HEAVY)


def test_matplotlib_only_for_a_picture_and_jax_never(tmp_path):
    # `streamacc plot` reads summaries: it must not pay for JAX's import, and nothing else may pay for matplotlib's
    from streamacc.cli import main

    out = tmp_path / "o.zarr"
    assert main(["write", str(out), "--size", "100", "--no-progress"]) == 0
    code = f"""
        import json, sys
        import streamacc
        from streamacc.cli import main
        main(["--help"])
        before = "matplotlib" in sys.modules
        main(["plot", {str(out)!r}])
        print(json.dumps([before, "matplotlib" in sys.modules, "jax" in sys.modules]))
        """
    proc = python(code)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == [False, True, False]


def closed_pipe_run(*argv: str) -> subprocess.CompletedProcess:
    """Run ``streamacc ARGV`` with stdout a pipe whose reader has already gone, as `| head -0` leaves it."""
    read, write = os.pipe()
    os.close(read)
    try:
        env = {**os.environ, "JAX_PLATFORMS": "cpu"}
        return subprocess.run(
            [sys.executable, "-m", "streamacc", *argv], stdout=write, stderr=subprocess.PIPE, env=env, timeout=120
        )
    finally:
        os.close(write)


@pytest.mark.parametrize("argv", [["recipes"], ["--help"], ["recipes", "--help"]])
def test_a_closed_pipe_ends_quietly_with_sigpipe_status(argv):
    proc = closed_pipe_run(*argv)
    assert proc.stderr == b""  # no BrokenPipeError, no traceback
    assert proc.returncode == 141  # as `seq 1 1000000 | head -1` leaves seq under bash: 128 + SIGPIPE


def test_head_reads_the_first_line_of_recipes():
    shell = f"{sys.executable} -m streamacc recipes | head -1; exit ${{PIPESTATUS[0]}}"
    proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("gp: ") and proc.stdout.count("\n") == 1
    assert proc.stderr == "" and proc.returncode in (0, 141)  # 0 when all was written before head left


LOGGING = """
    import logging, sys
    import streamacc.read
    from streamacc.cli import main

    def talk(path, storage_options=None):  # the library the info command calls, as it logs
        logging.getLogger("botocore.credentials").info("Found credentials in environment variables.")
        logging.getLogger("fsspec").warning("a warning from another library")
        logging.getLogger("streamacc").info("resuming out.zarr at step 4 of 8")
        return f"{path} described"

    streamacc.read.info = talk
    sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("debug", [[], ["--debug"]], ids=["quiet", "debug"])
def test_only_streamacc_messages_reach_stderr_unless_debug(debug):
    proc = python(LOGGING, "info", "out.zarr", *debug)
    assert proc.returncode == 0 and proc.stdout == "out.zarr described\n"
    lines = proc.stderr.splitlines()
    assert "streamacc: resuming out.zarr at step 4 of 8" in lines
    if debug:
        assert "botocore.credentials: INFO: Found credentials in environment variables." in lines
        assert "fsspec: WARNING: a warning from another library" in lines
    else:
        assert lines == ["streamacc: resuming out.zarr at step 4 of 8"]
