"""Errors and warnings keep the arguments their messages name apart from their text: ``str``, ``args`` and
``repr`` read as plain Python text, the command line spells the same arguments as its options, and both
survive a pickle round trip (the way an error comes back from a dask worker)."""

from __future__ import annotations

import os
import pickle
import re
import time

import jax
import numpy as np
import pytest
from helpers import failing
from zarr.storage import LocalStore

import streamacc
from streamacc.cli import cli_message, main
from streamacc.errors import ABSENT, Arg, InputError, ResumeError, StreamaccError, StreamaccWarning, arg, one_line


def step(x, _):
    return x + 1, x


def refusal(tmp_path, **keywords) -> StreamaccError:
    with pytest.raises(StreamaccError) as refused:
        streamacc.write(tmp_path / "out.zarr", step, np.int32(0), progress=False, **keywords)
    assert not (tmp_path / "out.zarr").exists()
    return refused.value


# keywords of write -> (the error's type, str(error), the command line's one line)
REFUSALS = {
    "unroll": (
        {"length": 100, "block_size": 10, "unroll": 8},
        InputError,
        "block_size=10 must be a multiple of the scan's unroll (8) and at least 16, so that blocks line up with "
        "lax.scan's unrolled groups; pass e.g. block_size=16",
        "--block-size 10 must be a multiple of the scan's unroll (8) and at least 16, so that blocks line up with "
        "lax.scan's unrolled groups; pass e.g. --block-size 16",
    ),
    "length": (
        {"length": -1},
        InputError,
        "length must be >= 1, got -1; pass e.g. length=1048576",
        "--size must be >= 1, got -1; pass e.g. --size 1048576",
    ),
    "mode": (
        {"length": 100, "mode": "bogus"},
        InputError,
        "mode='bogus' is unknown; pass one of mode='create', mode='overwrite', mode='resume', mode='extend'",
        "--bogus is unknown; pass one of --create, --overwrite, --resume, --extend",
    ),
    "time": (
        {"length": 100, "time": {"step": "x"}},
        InputError,
        "time['step'] must be a finite number, got 'x'; pass e.g. time={'step': 0.001, 'start': 0.0, 'units': 's'}",
        "--time-step must be a finite number, got 'x'; pass e.g. --time-step 0.001 --time-start 0.0 --time-units s",
    ),
    "summaries": (
        {"length": 100, "summaries": [3, 5]},
        InputError,
        "summaries=[3, 5] does not give increasing window lengths in steps, each a multiple of the one before; "
        "pass e.g. summaries=[4096, 16384, 65536, 262144, 1048576]",
        "--summary-windows 3,5 does not give increasing window lengths in steps, each a multiple of the one before; "
        "pass e.g. --summary-windows 4096,16384,65536,262144,1048576",
    ),
}


def assert_plain(error: BaseException) -> None:
    """``args`` is the message alone, as ``str`` reads it, and ``repr`` holds no marker of an argument."""
    assert error.args == (str(error),)
    assert repr(error) == f"{type(error).__name__}({str(error)!r})"
    for text in (repr(error), error.args[0]):
        assert "\x02" not in text and "\x03" not in text and '{"name"' not in text


@pytest.mark.parametrize("case", list(REFUSALS))
def test_an_errors_str_args_and_repr_are_plain_text_and_the_command_line_spells_its_options(tmp_path, case):
    keywords, kind, text, cli = REFUSALS[case]
    error = refusal(tmp_path, **keywords)
    assert type(error) is kind
    assert str(error) == text
    assert_plain(error)
    assert cli_message(error) == cli
    assert error.render() == text
    assert error.arguments and all(isinstance(a, Arg) for a in error.arguments)
    assert "".join(p if isinstance(p, str) else p.python for p in error.parts) == text


def test_the_arguments_an_error_names_are_its_parts_in_order(tmp_path):
    error = refusal(tmp_path, length=-1)
    assert error.parts == (
        Arg("length", ABSENT, "length"),
        " must be >= 1, got -1; pass e.g. ",
        Arg("length", 1048576, "length=1048576"),
    )
    assert error.arguments == [Arg("length", ABSENT, "length"), Arg("length", 1048576, "length=1048576")]
    assert error.render(lambda a: f"<{a.name}>") == "<length> must be >= 1, got -1; pass e.g. <length>"


@pytest.mark.parametrize("dumps, loads", [(pickle.dumps, pickle.loads), ("cloudpickle", None)])
def test_an_error_pickled_and_unpickled_reads_the_same_in_python_and_on_the_command_line(tmp_path, dumps, loads):
    if dumps == "cloudpickle":
        cloudpickle = pytest.importorskip("cloudpickle")
        dumps, loads = cloudpickle.dumps, pickle.loads
    for case in ("time", "mode", "length"):
        error = refusal(tmp_path, **REFUSALS[case][0])
        again = loads(dumps(error))
        assert type(again) is type(error)
        assert (str(again), again.args, repr(again)) == (str(error), error.args, repr(error))
        assert cli_message(again) == cli_message(error) == REFUSALS[case][3]
        assert again.parts == error.parts and again.arguments == error.arguments  # ABSENT compares by identity
    assert pickle.loads(pickle.dumps(ABSENT)) is ABSENT


def test_an_error_sent_back_by_a_dask_worker_keeps_its_arguments(tmp_path):
    """A worker's error travels as distributed's error message (pickled), and the client re-raises it."""
    core = pytest.importorskip("distributed.core")
    from distributed.protocol import pickle as dask_pickle

    error = refusal(tmp_path, **REFUSALS["summaries"][0])
    message = core.error_message(error)
    assert message["exception_text"] == repr(error)  # what a worker's log shows: plain text
    again = dask_pickle.loads(message["exception"].data)
    assert str(again) == REFUSALS["summaries"][2] and cli_message(again) == REFUSALS["summaries"][3]
    assert_plain(again)


def test_an_error_inside_another_keeps_its_arguments_in_the_readers_terms():
    inner = InputError(f"{arg('block_size', 10)} is too small")
    outer = ResumeError(f"cannot resume: {one_line(inner)}; rerun with {arg('mode', 'overwrite')}")
    assert str(outer) == "cannot resume: block_size=10 is too small; rerun with mode='overwrite'"
    assert_plain(outer)
    assert cli_message(outer) == "cannot resume: --block-size 10 is too small; rerun with --overwrite"
    assert [a.name for a in outer.arguments] == ["block_size", "mode"]


def test_an_error_without_arguments_or_a_message_reads_as_any_exception():
    assert repr(StreamaccError("no arguments here")) == "StreamaccError('no arguments here')"
    assert StreamaccError("no arguments here").parts == ("no arguments here",)
    assert (StreamaccError().args, str(StreamaccError()), StreamaccError().render()) == ((), "", "")
    two = StreamaccError("a", 2)
    assert two.args == ("a", 2) and two.render() == str(two) == "('a', 2)"


def test_a_warning_is_plain_text_too_and_keeps_its_arguments():
    """(The command line's spelling of a real warning: the last test below.)"""
    warning = StreamaccWarning(f"rewrite it with {arg('mode', 'overwrite')} or pass {arg('summaries', [16, 256])}")
    text = "rewrite it with mode='overwrite' or pass summaries=[16, 256]"
    assert str(warning) == text
    assert_plain(warning)
    assert warning.render(lambda a: f"<{a.name}>") == "rewrite it with <mode> or pass <summaries>"
    again = pickle.loads(pickle.dumps(warning))
    assert (str(again), again.args, again.parts) == (text, warning.args, warning.parts)


def test_the_command_line_prints_a_bad_option_in_its_own_terms(tmp_path, capsys):
    out = tmp_path / "out.zarr"
    assert main(["write", str(out), "--size", "64", "--save-every", "0", "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        "streamacc: error: --save-every must be >= 1, got 0; pass e.g. --save-every 1024\n"
    )
    assert main(["write", str(out), "--size", "64", "--summary-windows", "3,5", "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        "streamacc: error: --summary-windows 3,5 does not give increasing window lengths in steps, each a "
        "multiple of the one before; pass e.g. --summary-windows 4096,16384,65536,262144,1048576\n"
    )
    assert not out.exists()


def test_the_command_line_prints_a_warning_in_its_own_terms(tmp_path, capsys):
    out = tmp_path / "grow.zarr"
    assert main(["write", str(out), "--size", "1000", "--summary-windows", "16,256", "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["write", str(out), "--size", "2**18", "--no-progress", "--extend"]) == 0
    assert (
        f"streamacc: {out} keeps the summary levels it was begun with, windows of [16, 256] rows, so its 262144 "
        "rows get 16384 windows at the finest level (the default for 262144 rows is [256, 1024, 4096, 16384, 65536]); "
        "to have "
        "those, rewrite it with --overwrite, or begin an output meant to grow with --summary-windows "
        "4096,16384,65536,262144,1048576\n"
    ) in capsys.readouterr().err


def _diverges(x):
    """A host check of the step (as equinox's ``error_if`` or diffrax's ``max_steps``): it raises past a limit set
    outside the step (the environment), so that fixing it leaves the step, and the run's identity, the same."""
    if x > int(os.environ.get("STREAMACC_TEST_LIMIT", "40")):
        raise ValueError(f"diverged at {x}")


def _checked_step(x, _):
    jax.debug.callback(_diverges, x)
    return x + 1, x


@pytest.mark.parametrize("how", ["write", "stream"])
def test_a_step_failing_at_run_time_says_its_block_what_is_committed_and_how_to_resume(tmp_path, monkeypatch, how):
    """One message: the block and its steps, the steps committed, JAX's error chained, and the way on; the cause fixed
    (outside the step), the resume continues and ends equal to one scan."""
    out = tmp_path / "out.zarr"

    def run(mode):
        if how == "write":
            return streamacc.write(out, _checked_step, np.int32(0), length=64, block_size=16, mode=mode,
                                   progress=False)  # fmt: skip
        with streamacc.Stream(out, _checked_step, length=64, block_size=16, mode=mode, progress=False) as stream:
            return jax.jit(lambda c: stream.scan(c))(np.int32(0))

    with pytest.raises(streamacc.errors.StepError) as caught:
        run("create")
    assert str(caught.value) == (
        f"the step failed at run time in block 2 (steps 32 to 48) of {out} (ValueError: diverged at 41); the 32 "
        "steps before it are committed: with a cause outside the step fixed (memory, a file it reads), rerun with "
        "mode='resume' to continue from there; a step changed to fix it is another run, which mode='overwrite' "
        "writes afresh"
    )
    assert isinstance(caught.value.__cause__, jax.errors.JaxRuntimeError)
    assert streamacc.info(out).committed_steps == 32
    monkeypatch.setenv("STREAMACC_TEST_LIMIT", "100")
    assert int(run("resume")) == 64
    np.testing.assert_array_equal(streamacc.open(out)["y"].values, np.arange(64))


def _returned(x):
    _diverges(x)
    return x


def _callback_step(x, _):
    """The check as a ``pure_callback`` whose value the step uses: JAX raises its failure as it dispatches the
    block, a ``JaxRuntimeError`` on the block function's first call and a ``ValueError`` on its cached calls."""
    x = jax.pure_callback(_returned, jax.ShapeDtypeStruct((), np.int32), x)
    return x + 1, x


def _error_if_step(x, _):
    import equinox

    x = equinox.error_if(x, x > 40, "diverged")
    return x + 1, x


def _max_steps_step(c, _):
    """diffrax's adaptive solve of ``y' = -k y`` over one unit of time, at most 16 solver steps: stiff past step
    40 (``k = 10**4``), where an explicit solver needs more and diffrax raises."""
    import diffrax
    import jax.numpy as jnp

    k = jnp.where(c[0] > 40, 1e4, 1.0)
    solution = diffrax.diffeqsolve(
        diffrax.ODETerm(lambda t, y, k: -k * y), diffrax.Tsit5(), 0.0, 1.0, 0.1, c[1], args=k, max_steps=16,
        stepsize_controller=diffrax.PIDController(rtol=1e-3, atol=1e-6),
    )  # fmt: skip
    return (c[0] + 1, c[1]), solution.ys[-1]


LATER_FAILURES = {
    "pure_callback": (_callback_step, np.int32(0), "ValueError: diverged at 41"),
    "error_if": (_error_if_step, np.int32(0), "_EquinoxRuntimeError: diverged"),
    "max_steps": (
        _max_steps_step, (np.int32(0), np.float32(1)),
        "_EquinoxRuntimeError: The maximum number of solver steps was reached. Try increasing `max_steps`.",
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    "how", ["pure_callback", "error_if", pytest.param("max_steps", marks=pytest.mark.slow)]  # diffrax compiles for s
)
def test_a_step_failing_after_the_first_block_is_a_step_error_whatever_raised_it(tmp_path, how):
    """The block function's cached call raises a bare ``ValueError`` (``INTERNAL: CpuCallback error ...``): it is
    the same ``StepError`` as in block 0, chained, naming its block and the steps committed."""
    step, init, said = LATER_FAILURES[how]
    out = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.StepError) as caught:
        streamacc.write(out, step, init, length=64, block_size=16, progress=False)
    assert str(caught.value) == (
        f"the step failed at run time in block 2 (steps 32 to 48) of {out} ({said}); the 32 steps before it are "
        "committed: with a cause outside the step fixed (memory, a file it reads), rerun with mode='resume' to "
        "continue from there; a step changed to fix it is another run, which mode='overwrite' writes afresh"
    )
    assert isinstance(caught.value.__cause__, (ValueError, jax.errors.JaxRuntimeError))
    assert "CpuCallback error" in str(caught.value.__cause__)
    assert streamacc.info(out).committed_steps == 32


def test_a_failing_production_still_commits_what_it_produced_before():
    """The write loop's items failing (a block's step raising) lets the blocks computed before it be written and
    committed, in order, however slow their writes, before the error is raised: a step error's message counts them."""
    from streamacc.base import run_ordered

    committed: list[int] = []

    def produced():
        yield from range(3)
        raise ValueError("the step raised")

    def slow(item: int) -> int:
        time.sleep(0.05)
        return item * 10

    with pytest.raises(ValueError, match="the step raised"):  # one writer: items 1 and 2 wait in its queue
        run_ordered(produced(), slow, lambda item, result: committed.append(result), depth=4, workers=1)
    assert committed == [0, 10, 20]


def test_a_step_failing_after_the_first_block_is_a_step_error_in_memory_and_in_verify(tmp_path, monkeypatch):
    """``iter_blocks`` and ``scan`` raise it naming the block's steps (still a ``JaxRuntimeError``, as before);
    ``verify`` names the block it recomputed and says that the output is as it was."""
    for run in (
        lambda: list(streamacc.iter_blocks(_callback_step, np.int32(0), length=64, block_size=16)),
        lambda: streamacc.scan(_callback_step, np.int32(0), length=64, block_size=16),
    ):
        with pytest.raises(streamacc.errors.StepError) as caught:
            run()
        assert str(caught.value) == (
            "the step failed at run time in the block of steps 32 to 48 (ValueError: diverged at 41): fix the cause "
            "(JAX's error is chained as this error's __cause__) and run again"
        )
        assert isinstance(caught.value, jax.errors.JaxRuntimeError)
        assert "CpuCallback error" in str(caught.value.__cause__)
    out = tmp_path / "out.zarr"
    monkeypatch.setenv("STREAMACC_TEST_LIMIT", "100")
    streamacc.write(out, _callback_step, np.int32(0), length=64, block_size=16, progress=False)
    monkeypatch.setenv("STREAMACC_TEST_LIMIT", "40")
    with pytest.raises(streamacc.errors.StepError) as caught:
        streamacc.verify(out, _callback_step, np.int32(0))
    assert str(caught.value) == (
        f"the step failed at run time in block 2 (steps 32 to 48) of {out} as it was recomputed (ValueError: "
        "diverged at 41); the output is as it was (64 steps committed): fix the cause and verify it again"
    )
    assert "CpuCallback error" in str(caught.value.__cause__)
    assert streamacc.info(out).committed_steps == 64


def _fails_on_a_worker(x):
    """The check failing on a dask worker alone: the driver's carry pass goes through, a block task fails."""
    from distributed import get_worker

    try:
        get_worker()
    except ValueError:
        return x
    return _returned(x)


def _worker_checked_step(x, _):
    x = jax.pure_callback(_fails_on_a_worker, jax.ShapeDtypeStruct((), np.int32), x)
    return x + 1, x


def test_a_step_failing_in_a_block_task_on_a_worker_is_a_step_error(tmp_path, dask_client):
    out = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.StepError) as caught:
        streamacc.write(out, _worker_checked_step, np.int32(0), length=64, block_size=16, progress=False,
                        executor=streamacc.Dask(dask_client))  # fmt: skip
    committed = streamacc.info(out).committed_steps
    assert committed in (0, 16, 32)  # the blocks before it commit as their tasks come back
    assert str(caught.value).startswith(
        f"the step failed at run time in block 2 (steps 32 to 48) of {out} (ValueError: diverged at 41); "
    )
    assert "CpuCallback error" in str(caught.value.__cause__)


def test_a_store_object_is_named_by_the_path_it_holds_not_by_zarrs_spelling_of_it(tmp_path, monkeypatch):
    """zarr spells a ``LocalStore`` ``file://PATH``, and a wrapper of one ``wrapping-file://PATH``: messages say
    ``PATH``, as the caller gave it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(streamacc.errors.StoreError) as caught:
        streamacc.write(failing("full.zarr", "y/c/1"), step, np.int32(0), length=64, block_size=16, progress=False)
    assert str(caught.value).startswith("writing full.zarr failed after 16 of 64 steps (")
    assert streamacc.info(LocalStore("full.zarr")).path == "full.zarr"


def _slow(x):
    time.sleep(0.01)


def _slow_step(x, _):
    jax.debug.callback(_slow, x)
    return x + 1, x


def test_blocks_that_take_long_are_said_once_with_the_block_size_that_commits_often(tmp_path, seam):
    """Past ``SLOW_BLOCK_SECONDS`` a block (16 steps of 10 ms here, against 0.1 s) is said once, with the block size
    that commits about every ten seconds: hundreds of steps, not one block more per warning."""
    seam("run.SLOW_BLOCK_SECONDS", 0.1)
    with pytest.warns(StreamaccWarning, match="took") as caught:
        streamacc.write(tmp_path / "out.zarr", _slow_step, np.int32(0), length=64, block_size=16, progress=False)
    (said,) = [str(w.message) for w in caught if "took" in str(w.message)]
    found = re.search(
        r"a block of 16 steps took [\d.]+ s to compute and commit, so a run killed loses up to that much; "
        r"a new run with block_size=(\d+) commits about every 10 s",
        said,
    )
    assert found is not None and 16 < int(found[1]) <= 1000, said
