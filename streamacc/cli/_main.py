"""The ``streamacc`` command line: write, info, verify, plot, recipes.

A thin shell over the library: it parses options (numbers through the safe arithmetic
parser, never ``eval``), turns library errors into one line on stderr, and maps them to
exit codes: 0 success, 2 bad usage or input, 1 runtime failure, 130 interrupted (Ctrl-C), 143
terminated (SIGTERM), 141 when the reader of stdout went away (as for a tool killed by
SIGPIPE, ``... | head -1``).

It imports JAX and Zarr only once a command needs them, so that ``--help``, ``recipes``
and mistakes in the arguments answer at once. Only streamacc's own log messages are
shown, as ``streamacc: ...``; ``--debug`` adds other libraries' and tracebacks.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import logging
import os
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ..base import DEFAULT_CODEC, Terminated, check_written_length, counted, run_interruptibly
from ..errors import InputError, NoOutputError, OutputExistsError, ResumeError, StreamaccError, StreamaccWarning, arg
from ..recipes import Recipe, option
from ._continued import committed_steps, continued_unroll, dtype_name_of, recorded_run, resume_command
from ._expr import parse_int, parse_number
from ._parser import (
    UsageError,
    _Exit,
    _StdoutClosed,
    build_parser,
    check_no_overlap,
    chunks_option,
    recipe_params,
    step_range,
    storage_options,
    summary_windows,
    time_options,
)

if TYPE_CHECKING:
    from ..base import Mode
from ._parser import cli_message, cli_terms

__all__ = ["build_parser", "main", "storage_options"]

USAGE_ERRORS = (InputError, NoOutputError, OutputExistsError, ResumeError)


def _out(text: str) -> None:
    """Print ``text`` on stdout now, so that a closed pipe or a full device is noticed here and not at exit."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        raise _StdoutClosed from None
    except OSError as exc:
        raise _StdoutFailed(exc.strerror or str(exc)) from None


class _StdoutFailed(Exception):
    """stdout failed (a full device): the command did its work, only its report is lost."""


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that Python's flush at exit does not fail on the closed pipe again."""
    with contextlib.suppress(AttributeError, OSError, ValueError):  # no file descriptor: nothing to flush at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _enable_x64() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)  # the CLI owns its process: float64 must stay float64


def summary(about: Any, before: int, seconds: float, how: str = "resumed", again: int | None = None) -> str:
    """The line ``write`` prints on success: steps and bytes written, time, rates, bytes stored, compression.

    ``about`` is :func:`streamacc.info` of the finished output, ``before`` the steps it
    had committed before this run (``how``: resumed or extended), ``seconds`` this run's
    wall time. Bytes count the rows stored (every ``save_every``-th step). An extension
    writes the last block of the run it extends again (from step ``again``), so its steps
    and rate count them.
    """
    import numpy as np

    from ..run import si

    arrays = about.arrays.values()
    row_bytes = sum(int(np.prod(a.shape[1:], dtype=np.int64)) * np.dtype(a.dtype).itemsize for a in arrays)
    stored = sum(a.stored_bytes for a in arrays)
    committed, rows, every = about.committed_steps, about.committed_rows, about.save_every
    ratio = f"{rows * row_bytes / stored:.2f}x" if stored else "n/a"
    kept = "" if every == 1 else f" ({rows} rows, every {every}th step)"
    kept = f"stored {si(stored)}B for {committed} steps{kept} (compression {ratio})"
    if committed == before:
        return f"{about.path}: nothing to write, all {committed} steps were committed already; {kept}"
    resumed = f", {how} at step {before}," if before else ""
    again = before if again is None else again
    if again < before:
        resumed = f", {how} at step {before} (steps {again}-{before} written again: its last block),"
    steps = committed - again
    rate = steps / max(seconds, 1e-9)
    out_bytes = (rows - again // every) * row_bytes
    return (
        f"{about.path}: wrote {steps} steps ({si(out_bytes)}B){resumed} in {seconds:.2f} s "
        f"({si(rate)} steps/s, {si(out_bytes / max(seconds, 1e-9))}B/s); {kept}"
    )


def _mode(args: argparse.Namespace) -> Mode:
    return "overwrite" if args.overwrite else "resume" if args.resume else "extend" if args.extend else "create"


def _check_time_step(recipe: Recipe, params: dict[str, Any], time: dict[str, Any] | None) -> None:
    """Refuse a ``--time-step`` that contradicts the time a step of ``recipe`` takes (lorenz's ``--dt``)."""
    if recipe.time_step is None or time is None:
        return
    name = recipe.time_step
    step = params.get(name, next(p.default for p in recipe.params if p.name == name))
    if time["step"] != step:
        raise InputError(
            f"--time-step {time['step']} contradicts {arg(name, step)}, the time each step of {recipe.name} takes, "
            f"so the time axis would mislabel every step; pass --time-step {step}, or change {arg(name)}"
        )


def cmd_write(args: argparse.Namespace) -> int:
    from ..recipes import check_dtype, get_recipe

    options = storage_options(args.storage_option)
    if args.out.startswith("memory://"):
        raise InputError(
            f"OUT {args.out!r} is a store in this process's memory, which ends with the command, so nothing "
            "would be kept; write to a path or an object-store URL such as s3://bucket/out.zarr"
        )
    mode = _mode(args)
    stored = recorded_run(args.out, options) if mode in ("resume", "extend") else None
    recipe = get_recipe(args.recipe or (stored.recipe if stored is not None else None) or "gp")
    recorded = stored if stored is not None and stored.recipe == recipe.name else None  # what the output says
    size = None if args.size is None else parse_int(args.size, name=arg("length"))
    if size is None and recorded is not None and mode == "resume":
        size = recorded.blocking.length
    if size is None and recorded is not None and mode == "extend" and not any(p.kind == "path" for p in recipe.params):
        longer = 2 * recorded.blocking.length
        raise InputError(
            f"--extend needs --size, the longer length to extend {args.out} to (it holds "
            f"{recorded.blocking.length} steps); pass e.g. --size {longer}"
        )
    if size is not None:
        check_written_length(size)  # write's own rule, before the recipe is asked for its steps
    block_size = None
    if args.block_size is not None:
        block_size = parse_int(args.block_size, name=arg("block_size"), example="2**20")
    given_unroll = None if args.unroll is None else parse_int(args.unroll, name=arg("unroll"), minimum=1, example="8")
    save_every = 1 if recorded is None else recorded.blocking.save_every
    if args.save_every is not None:
        save_every = parse_int(args.save_every, name=arg("save_every"), example="10")
    time_axis = time_options(args)
    if time_axis is None and recorded is not None:
        time_axis = recorded.time
    workers = None if args.workers is None else parse_int(args.workers, name=arg("workers"), minimum=1, example="4")
    params = {**(recorded.params or {} if recorded is not None else {}), **recipe_params(args, recipe)}
    _check_time_step(recipe, params, time_axis)
    check_no_overlap(args.out, params, recipe)
    dtype = args.dtype or ("float64" if recorded is None else dtype_name_of(next(iter(recorded.arrays.values()))[0]))
    job = recipe.make(size, dtype, params, options)  # an --input URL takes the same storage options
    attrs = {**job.attrs, "dtype": check_dtype(dtype)}  # the canonical name: 'f8' is recorded as float64
    array_attrs = {name: {"long_name": job.attrs["description"], "units": job.attrs["units"]} for name in job.names}
    from ..base import Blocking, Layout

    # ScanSpec's own, before JAX, with the CPU's unroll: an accelerator's is a multiple of it, and larger
    unroll_here = job.cpu_unroll if given_unroll is None else given_unroll
    Blocking.checked(length=job.length, block_size=block_size, unroll=unroll_here, save_every=save_every)

    layout = Layout(
        names=job.names, dims=job.dims, chunks=chunks_option(args.chunks),
        codec=args.codec or (DEFAULT_CODEC if recorded is None else recorded.codec), attrs=attrs,
        array_attrs=array_attrs, time=time_axis, summaries=summary_windows(args),
        virtual=args.virtual or (recorded is not None and recorded.virtual),
    )  # fmt: skip
    _enable_x64()
    from ..engine import ScanSpec, compute_platform
    from ..read import info
    from ..run import Dask, Local, cluster_client, write

    unroll = continued_unroll(job, recorded, given_unroll)
    spec = ScanSpec(
        job.f, job.init, job.xs, length=job.length, block_size=block_size, unroll=unroll, save_every=save_every
    )
    if args.dtype is None and compute_platform() == "tpu":
        logging.getLogger("streamacc").info(
            "float64, the default --dtype, is emulated on a TPU, many times slower than float32; "
            "--dtype float32 --compensated is the chip's exact mode (errors within an ulp of the exact values)"
        )
    before, again = committed_steps(args.out, options) if mode in ("resume", "extend") else (0, 0)
    start = time.perf_counter()
    gc.freeze()  # the CLI owns its process: spare the collector the objects that live for the whole run
    with _warnings_as_messages(args.debug), cluster_client(workers, args.scheduler) as client:
        where = Local() if client is None else Dask(client)
        write(args.out, spec, mode=mode, layout=layout, executor=where, storage_options=options,
              progress=not args.no_progress)  # fmt: skip
    how = "extended" if mode == "extend" else "resumed"
    seconds = time.perf_counter() - start
    _out(summary(info(args.out, storage_options=options), before, seconds, how, again if mode == "extend" else None))
    return 0


@contextlib.contextmanager
def _warnings_as_messages(debug: bool) -> Iterator[None]:
    """streamacc's warnings shown at once as its messages (``streamacc: ...``); other libraries' only with --debug."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", StreamaccWarning)
        original = warnings.showwarning

        def show(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if issubclass(category, StreamaccWarning):
                text = message if isinstance(message, StreamaccWarning) else str(message)
                logging.getLogger("streamacc").info("%s", cli_terms(text))
            elif debug:
                original(message, category, *args, **kwargs)

        warnings.showwarning = show
        yield


def cmd_info(args: argparse.Namespace) -> int:
    from ..read import info

    _out(str(info(args.out, storage_options=storage_options(args.storage_option))))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    blocks = "all" if args.blocks == "all" else parse_int(args.blocks, name=arg("blocks"), minimum=1, example="16")
    _enable_x64()
    from ..run import verify_recipe_output

    options = storage_options(args.storage_option)
    report = verify_recipe_output(args.out, blocks=blocks, storage_options=options, repair=args.repair)
    if report.rewritten:
        _out(f"{args.out}: rewrote the kept carries' metadata as the manifest says ({', '.join(report.rewritten)})")
    if report.repaired:
        which = ", ".join("the initial carry" if b == 0 else f"after block {b - 1}" for b in report.repaired)
        _out(f"{args.out}: rebuilt {counted(len(report.repaired), 'damaged kept carry', 'damaged kept carries')} by "
             f"recomputation ({which})")  # fmt: skip
    summaries = f"; {report.summary_windows} summary windows match" if report.summary_windows else ""
    committed = report.committed_blocks
    fewer = f" (the output has only {committed})" if isinstance(blocks, int) and blocks > committed else ""
    writer = None if report.complete else _writer(args.out, storage_options(args.storage_option))
    state = (", complete" if report.complete else ", incomplete: resume with " + arg("mode", "resume")
             if writer is None else f", incomplete: {writer} holds its writer lock and is writing it now; verify "
             "it again once that run ends")  # fmt: skip
    _out(cli_terms(
        f"{args.out}: OK, {len(report.checked_blocks)} of {committed} committed blocks{fewer} recomputed "
        f"bit for bit ({report.committed_steps} of {report.total_steps} steps committed{state}){summaries}"
    ))  # fmt: skip
    return 0


def _writer(out: str, options: dict[str, Any] | None) -> str | None:
    """Who is writing ``out`` now (its lock or lease tells), or None; a question that fails answers None."""
    from ..store import open_target

    try:
        return open_target(out, storage_options=options, read_only=True).writer()
    except Exception:
        return None


def cmd_materialize(args: argparse.Namespace) -> int:
    steps = step_range(args.steps)
    options = storage_options(args.storage_option)
    _enable_x64()
    from ..read import info
    from ..run import materialize

    start = time.perf_counter()
    with _warnings_as_messages(args.debug):
        stored = materialize(args.out, steps=steps, storage_options=options, progress=not args.no_progress)
    about = info(args.out, storage_options=options)
    _out(
        f"{about.path}: stored the data of {counted(stored, 'block')} in {time.perf_counter() - start:.2f} s; "
        f"{about.stored_blocks} of {about.committed_blocks} committed blocks stored"
        + ("" if about.stored_blocks < about.committed_blocks else ": it reads as a plain Zarr output now")
    )
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    steps = step_range(args.steps)
    options = storage_options(args.storage_option)
    seconds = None if args.watch is None else parse_number(args.watch, name="--watch")
    if seconds is not None and seconds <= 0:
        raise InputError(f"--watch {args.watch} must be more than 0 seconds between two looks; pass e.g. --watch 5")
    from ._plot import plot_output, watch_output

    if seconds is not None:
        watch_output(args.out, seconds, _out, var=args.var, path=args.output, steps=steps, storage_options=options)
        return 0
    _out(plot_output(args.out, var=args.var, path=args.output, steps=steps, storage_options=options))
    return 0


def cmd_recipes(args: argparse.Namespace) -> int:
    from ..recipes import DEGENERATE_RULE, RECIPES

    lines = []
    width = max(len(option(p.name)) for recipe in RECIPES.values() for p in recipe.params)
    for recipe in RECIPES.values():
        lines.append(f"{recipe.name}: {recipe.description}")
        for p in recipe.params:
            default = "required" if p.default is None else f"default {p.default!r}"
            lines.append(f"    {option(p.name):<{width}} {p.kind:<5} {default:<22} {p.help}")
    lines.append(DEGENERATE_RULE)
    _out("\n".join(lines))
    return 0


COMMANDS = {
    "write": cmd_write,
    "info": cmd_info,
    "verify": cmd_verify,
    "materialize": cmd_materialize,
    "plot": cmd_plot,
    "recipes": cmd_recipes,
}


def _fail(message: str, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    print(f"streamacc: error: {' '.join(str(message).split())}", file=sys.stderr)
    return code


def _not_ours(record: logging.LogRecord) -> bool:
    return record.name != "streamacc" and not record.name.startswith("streamacc.")


@contextlib.contextmanager
def _logging(debug: bool) -> Iterator[None]:
    """Show streamacc's log messages as ``streamacc: ...``, other libraries' only with ``--debug``.

    Without it, botocore's "Found credentials in environment variables." and the like stay
    out of the user's terminal. Everything is undone on exit, as main() may run in-process.
    """
    ours, root = logging.getLogger("streamacc"), logging.getLogger()
    saved = ours.level, root.level
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("streamacc: %(message)s"))
    if debug:
        others: logging.Handler = logging.StreamHandler(sys.stderr)
        others.setFormatter(logging.Formatter("%(name)s: %(levelname)s: %(message)s"))
        others.addFilter(_not_ours)  # ours are shown once, by their own handler
        root.setLevel(logging.INFO)
    else:
        others = logging.NullHandler()  # else Python's last-resort handler prints their warnings
    ours.addHandler(handler)
    ours.setLevel(logging.DEBUG if debug else logging.INFO)
    root.addHandler(others)
    try:
        yield
    finally:
        ours.removeHandler(handler)
        root.removeHandler(others)
        ours.level, root.level = saved


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``streamacc`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit code.

    The command runs on a thread of its own while this thread waits for it and takes
    Ctrl-C and SIGTERM, so that either ends the command within seconds even while XLA
    computes a long block. Called without ``argv`` (as the program itself), a command that
    failed or was interrupted leaves whatever still runs behind (a block in XLA, a copy from
    the device, a store client's request): the process exits at once with its code.
    """
    own_process = argv is None
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        code = run_interruptibly(_main, argv, signals=(signal.SIGINT, signal.SIGTERM))
    except KeyboardInterrupt as exc:
        code = _interrupted(exc, argv, debug=False)
    if own_process and code != 0:
        # a command that failed or was interrupted: what its threads still do would be discarded anyway
        # (XLA cannot be interrupted). Left to run into the interpreter's exit, a thread that is inside
        # native code then (XLA, or a copy from the device as a lost lease stops a writer) is ended there,
        # which aborts the process (SIGABRT) after the one line was printed
        _exit_now(code)
    if own_process and "zarr.core.sync" in sys.modules:
        from ..store import settle_event_loop

        # run before zarr's own exit handler (registered earlier, as zarr was imported), which closes its loop
        # still running on a busy machine, printing a warning and a traceback after the command's answer
        atexit.register(settle_event_loop)
    if own_process and "icechunk" in sys.modules:
        # Icechunk's runtime threads, still about as the interpreter finalizes, can abort it (SIGABRT, a bus
        # error) after the command's answer; whatever the command wrote is committed by now
        _exit_now(code)
    return code


def _interrupted(exc: BaseException, argv: list[str], *, debug: bool) -> int:
    """The one line and the exit code of a command ended by Ctrl-C (130) or SIGTERM (143)."""
    what, code = ("terminated", 143) if isinstance(exc, Terminated) else ("interrupted", 130)
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command == "write":
        what += f"; committed blocks are safe: continue with {resume_command(argv)}"
    return _fail(what, code, debug)


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _main(argv: list[str]) -> int:
    debug = False
    try:
        args = build_parser().parse_args(argv)
        debug = args.debug
        with _logging(debug):
            return COMMANDS[args.command](args)
    except _Exit as exc:
        return exc.status
    except _StdoutClosed:
        _drop_stdout()
        return 141  # what a shell reports for a tool killed by SIGPIPE, as `seq 1 1000000 | head -1` is
    except _StdoutFailed as exc:
        _drop_stdout()
        return _fail(f"the command completed, but its report could not be written to stdout ({exc})", 1, debug)
    except UsageError as exc:
        return _fail(str(exc), 2, False)  # argparse's own traceback would say nothing
    except USAGE_ERRORS as exc:
        return _fail(cli_message(exc), 2, debug)
    except StreamaccError as exc:
        return _fail(cli_message(exc), 1, debug)
    except KeyboardInterrupt as exc:
        return _interrupted(exc, argv, debug=debug)
    except Exception as exc:  # a bug or an unforeseen failure: still one line, traceback with --debug
        return _fail(f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1, debug)
