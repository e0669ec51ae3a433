"""Every warning streamacc gives points at the caller's line, wherever the caller's code runs.

A script file, ``python -c``, a script on standard input, the interactive interpreter and a
notebook cell each give ``__main__`` a different loader; the warning must reach the user from
all of them, naming the line that called streamacc.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest

import streamacc
from streamacc.errors import StreamaccWarning

# init=1.0 with x64 off warns that the run is float32: the warning a newcomer meets first.
CALL = "streamacc.write(sys.argv[-1], lambda c, x: (c * 1.5, c), 1.0, length=8, progress=False)"
CODE = f"import sys, streamacc\n{CALL}\nprint('done')\n"
WORDS = "init is a Python float, which JAX computes as float32"


def _run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_ENABLE_X64": "0"}
    return subprocess.run([sys.executable, *args], input=stdin, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("how", ["file", "-c", "stdin", "repl"])
def test_a_warning_reaches_the_user_from_every_way_of_running_python(how, tmp_path):
    out = str(tmp_path / "o.zarr")
    script = tmp_path / "script.py"
    script.write_text(CODE)
    args, stdin, where = {
        "file": ([str(script), out], None, f"{script}:2: StreamaccWarning"),
        "-c": (["-c", CODE, out], None, "<string>:2: StreamaccWarning"),
        "stdin": (["-", out], CODE, "<stdin>:2: StreamaccWarning"),
        "repl": (["-i", "-q", "-", out], CODE, "<stdin>:1: StreamaccWarning"),  # the REPL numbers each statement
    }[how]
    done = _run(args, stdin)
    assert done.returncode == 0, done.stderr
    assert "done" in done.stdout and "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if WORDS in line]
    assert line.removeprefix(">>> " * line.count(">>> ")).startswith(where), line  # the REPL's prompts go first
    assert (tmp_path / "o.zarr" / "zarr.json").is_file()


def test_a_warning_points_at_a_notebook_cell(tmp_path, x64_off):
    """A notebook runs each cell as code compiled under a made-up file name, in a ``__main__`` of its own."""
    cell = f"import streamacc\n\n\n{CALL}\n"
    main = types.ModuleType("__main__")
    main.__dict__["sys"] = types.SimpleNamespace(argv=[str(tmp_path / "o.zarr")])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(cell, "/tmp/ipykernel_1/2345.py", "exec"), main.__dict__)
    (warning,) = [w for w in caught if issubclass(w.category, StreamaccWarning)]
    assert (warning.filename, warning.lineno) == ("/tmp/ipykernel_1/2345.py", 4)
    assert WORDS in str(warning.message)


def test_the_warnings_of_resume_and_of_a_finished_output_point_at_the_callers_line(tmp_path):
    out = tmp_path / "o.zarr"

    def grow(c, _):
        return c * 1.5, c

    with pytest.warns(StreamaccWarning, match="nothing to resume") as caught:
        line = sys._getframe().f_lineno + 1
        streamacc.write(out, grow, 1.0, length=8, mode="resume", progress=False)
    assert [(Path(w.filename).name, w.lineno) for w in caught] == [("test_warnings.py", line)]
    with pytest.warns(StreamaccWarning, match="already complete") as caught:
        line = sys._getframe().f_lineno + 1
        streamacc.write(out, grow, 1.0, length=8, mode="resume", progress=False)
    assert [(Path(w.filename).name, w.lineno) for w in caught] == [("test_warnings.py", line)]
