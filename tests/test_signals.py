"""Ctrl-C and SIGTERM always end a run within seconds, even in the middle of a block, with the
committed blocks safe; and the threads that compute keep the caller's JAX configuration.

Real processes get real signals. A block of the logistic map with ``--inner 2**40`` would
compute for hours: before the main thread stopped computing, such a run went on through
SIGTERM and SIGINT for 22 minutes. Waits poll with deadlines of a minute, far from both
the seconds a stop takes and the hours the block would.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import numpy as np
import pytest
import zarr
from helpers import Popen, cli, committed, read_manifest

import streamacc
from streamacc.cli import main

LONG_BLOCK = ["--recipe", "logistic", "--size", "1000", "--block-size", "64", "--inner", "2**40", "--no-progress"]
DEADLINE = 60.0
def safe(*argv: object) -> str:
    """What a write command ``argv`` says of its output as a signal ends it: the whole command that continues it."""
    return "committed blocks are safe: continue with " + shlex.join(["streamacc", *map(str, argv), "--resume"])


def start(argv: list[str]) -> Popen:
    """A process as started from a terminal: Ctrl-C (SIGINT) taken, whatever pytest inherited (see ``helpers``)."""
    return Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, proc: Popen, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not condition():
        assert proc.poll() is None, f"the process ended before {what}: {proc.communicate()}"
        assert time.monotonic() < end, f"{what} never happened"
        time.sleep(0.02)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def computing(proc: Popen, out: Path) -> None:
    """Return once ``proc`` has started its run and then spent 1 s of CPU: it is inside XLA by then
    (compiling this block takes a fraction of that)."""
    wait_for(lambda: committed(out) == 0, proc, "the run started")
    begun = cpu_seconds(proc.pid)
    wait_for(lambda: cpu_seconds(proc.pid) > begun + 1.0, proc, "1 s of computing")


def stop(proc: Popen, signum: int) -> tuple[str, str]:
    """Send ``signum``; the process must be gone within the deadline (it is killed otherwise)."""
    proc.send_signal(signum)
    try:
        return proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"still running {DEADLINE:.0f} s after signal {signum}") from None


@pytest.mark.slow
def test_sigterm_in_the_middle_of_a_long_block_ends_the_command(tmp_path):
    out = tmp_path / "out.zarr"
    proc = start(cli("write", out, *LONG_BLOCK))
    computing(proc, out)
    _, err = stop(proc, signal.SIGTERM)
    assert proc.returncode == 143, err
    assert err.splitlines() == [f"streamacc: error: terminated; {safe('write', out, *LONG_BLOCK)}"]
    assert read_manifest(out)["committed_blocks"] == 0  # recognisably streamacc's: --resume continues it


GC_SIGNAL = textwrap.dedent(
    """
    import gc, os, signal, sys, time
    from streamacc.cli import main

    out = sys.argv[2]
    fired = []

    def callback(phase, info):  # JAX keeps gc callbacks too: a handler raising here is dropped
        if phase == "start" and not fired and os.path.exists(os.path.join(out, "_streamacc")):
            fired.append(True)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # the signal is taken while this callback runs

    gc.callbacks.append(callback)
    sys.argv = ["streamacc", *sys.argv[1:]]
    sys.exit(main())
    """
)


@pytest.mark.slow
def test_a_signal_taken_inside_a_gc_callback_is_not_lost(tmp_path):
    """Python drops an exception raised in a gc callback ("Exception ignored"): the run went on to exit 0."""
    out = tmp_path / "out.zarr"
    args = ["write", str(out), "--size", "2**24", "--block-size", "2**12", "--codec", "none", "--no-progress"]
    proc = start([sys.executable, "-c", GC_SIGNAL, *args])
    _, err = proc.communicate(timeout=DEADLINE * 2)
    assert proc.returncode == 143, err
    assert err.splitlines() == [f"streamacc: error: terminated; {safe(*args)}"]
    assert 0 <= committed(out) < 2**12


LIBRARY_CTRL_C = textwrap.dedent(
    """
    import sys, time
    import numpy as np, jax, streamacc
    jax.config.update("jax_enable_x64", True)

    def logistic(x, _):
        x = jax.lax.fori_loop(0, 2**40, lambda i, v: 3.9 * v * (1 - v), x)
        return x, x

    try:
        streamacc.write(sys.argv[1], logistic, np.float64(0.5), length=1000, block_size=64, progress=False)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", time.monotonic(), flush=True)
    """
)


@pytest.mark.slow
def test_ctrl_c_interrupts_write_called_from_python_in_the_middle_of_a_block(tmp_path):
    out = tmp_path / "out.zarr"
    proc = start([sys.executable, "-c", LIBRARY_CTRL_C, str(out)])
    computing(proc, out)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    line = proc.stdout.readline()  # the script prints when write() raised, then exits
    assert line.startswith("KeyboardInterrupt"), (line, proc.stderr.read())
    assert float(line.split()[1]) - sent < DEADLINE  # a different process's clock: CLOCK_MONOTONIC is system-wide
    proc.kill()  # its block computes on in a daemon thread until the interpreter exits
    proc.communicate()
    assert read_manifest(out)["committed_blocks"] == 0


LIBRARY_EXIT_MID_BLOCK = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import jax, numpy as np
    from jax import lax
    jax.config.update("jax_enable_x64", True)
    import streamacc

    def at(i):
        if i == 300:  # inside the second block: Ctrl-C, and the script ends with the KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGINT)
        else:  # the second block's last step
            Path(sys.argv[2]).write_text(str(int(i)))

    def step(carry, _):  # a millisecond or so a step
        c, i = carry
        c = lax.fori_loop(0, 2**19, lambda k, v: v * (1 + 1e-12), c)
        i = i + 1
        lax.cond((i == 300) | (i == 512), lambda: jax.debug.callback(at, i), lambda: None)
        return (c, i), c

    streamacc.write(sys.argv[1], step, (np.float64(1.0), np.int64(0)), length=4096, block_size=256,
                    progress=False, summaries=False)
    """
)


@pytest.mark.slow
def test_a_script_that_ends_while_a_block_computes_lets_the_block_finish_and_exits_cleanly(tmp_path):
    """The exit waits for the block: the interpreter ending the computing thread inside XLA aborts the process
    (SIGABRT, "FATAL: exception not rethrown") with the block unfinished."""
    marker = tmp_path / "block-finished"
    proc = start([sys.executable, "-c", LIBRARY_EXIT_MID_BLOCK, str(tmp_path / "out.zarr"), str(marker)])
    _, err = proc.communicate(timeout=DEADLINE * 2)
    assert proc.returncode == -signal.SIGINT, err  # Python's own exit for an uncaught KeyboardInterrupt
    assert err.rstrip().endswith("KeyboardInterrupt") and "FATAL" not in err, err
    assert marker.read_text() == "512"  # the block in hand when the script ended was computed to its end
    assert read_manifest(tmp_path / "out.zarr")["committed_blocks"] <= 1


def test_a_thread_computing_ahead_begins_no_item_once_closed():
    """A source advanced on its own thread ``ahead`` items before they are asked for (a virtual run's carry pass)
    ends after the item in hand once the caller stops, as one that computes on demand does."""
    import threading

    from streamacc.base import on_own_thread

    begun, hold = [], threading.Event()

    def source():
        for i in range(100):
            begun.append(i)
            if i == 2:
                hold.wait(10)  # the item in hand when the caller stops
            yield i

    items = on_own_thread(source(), ahead=5)
    assert next(items) == 0
    while len(begun) < 3:
        time.sleep(0.001)
    items.close()  # the caller stops with items 1 and 2 computed ahead
    hold.set()
    deadline = time.monotonic() + 0.5  # time for a thread that went on to begin another
    while time.monotonic() < deadline and len(begun) == 3:
        time.sleep(0.01)
    assert begun == [0, 1, 2]


def test_write_computes_in_the_callers_x64_scope(tmp_path, x64_off):
    """Blocks are computed on another thread; ``jax.enable_x64()`` is per thread, yet float64 stays float64."""
    ratio = 1 + 2.0**-40  # 1.0 in float32

    def grow(carry, _):
        carry = carry * ratio
        return carry, carry

    out = tmp_path / "out.zarr"
    with jax.enable_x64(True):
        carry = streamacc.write(out, grow, np.float64(1.0), length=300, block_size=64, progress=False)
        report = streamacc.verify(out, grow, np.float64(1.0))
    expected = np.multiply.accumulate(np.full(300, ratio))
    y = zarr.open_array(str(out / "y"), mode="r")[:]
    assert y.dtype == np.float64 and y.tobytes() == expected.tobytes()
    assert np.asarray(carry).dtype == np.float64 and float(carry) == expected[-1] != 1.0
    assert report.checked_blocks == tuple(range(5))


def test_the_cli_restores_the_signal_handlers_it_takes_over():
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert main(["recipes"]) == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
