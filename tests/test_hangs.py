"""Nothing a user can point streamacc at makes it hang: special files inside an output, an address
no dask transport knows, the root of the file system.

A command that hangs tells the user nothing, so each of these is refused at once: a named
pipe in place of ``x/zarr.json`` (opening it would wait for a writer for good), a
``--scheduler`` address no transport knows (dask's client would wait out its shutdown),
``write /`` (refused before walking the file system). Each runs in a subprocess with a
deadline, so that a hang fails its test rather than the suite.
"""

from __future__ import annotations

import os
import sys
import textwrap

import pytest
from helpers import SMALL, run, run_warm

from streamacc.cli import main

CHECKS = textwrap.dedent(
    """
    import sys
    import streamacc
    from streamacc.cli import main

    fifo_out, out = sys.argv[1:]
    print(main(["info", fifo_out]), flush=True)
    try:
        streamacc.open(fifo_out)
        print("opened", flush=True)
    except streamacc.errors.StoreError as exc:
        print("refused:", exc, flush=True)
    print(main(["write", out, "--size", "10", "--scheduler", "garbage://x"]), flush=True)
    """
)


@pytest.mark.slow
def test_a_named_pipe_and_an_unknown_scheduler_are_refused_without_hanging(tmp_path):
    fifo_out = tmp_path / "fifo.zarr"
    assert main(["write", str(fifo_out), *SMALL]) == 0
    (fifo_out / "x" / "zarr.json").unlink()
    os.mkfifo(fifo_out / "x" / "zarr.json")
    out = tmp_path / "out.zarr"
    proc = run_warm([sys.executable, "-c", CHECKS, str(fifo_out), str(out)], text=True, timeout=50)
    info, opened, scheduler = proc.stdout.splitlines()
    assert info == "1" and "special file" in proc.stderr
    assert opened.startswith("refused:") and "special file" in opened
    assert scheduler == "2" and "--scheduler garbage://x is not a dask scheduler address" in proc.stderr
    assert proc.stderr.count("\n") == 2 and proc.returncode == 0, proc.stderr  # one line each, no traceback
    assert not out.exists()


def test_writing_to_the_file_system_root_is_refused_without_walking_it(monkeypatch, capfd):
    def walk(*args, **kwargs):
        raise AssertionError("walked the file system")

    monkeypatch.setattr(os, "walk", walk)
    code, line = run("write", "/", *SMALL, capfd=capfd)
    assert code == 2 and "/ exists and is not a streamacc output" in line, line
