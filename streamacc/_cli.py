"""The ``streamacc`` command line: write, info, verify, recipes.

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
import contextlib
import gc
import json
import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from ._codecs import CODECS
from ._defaults import DEFAULT_CODEC, DEFAULT_WRITE_BLOCK_SIZE
from ._errors import (
    InputError,
    NoOutputError,
    OutputExistsError,
    ResumeError,
    StreamaccError,
    StreamaccWarning,
    cli_spelling,
    spell,
)
from ._expr import parse_int, parse_number
from ._progress import si
from ._version import __version__
from .recipes._base import Recipe, option, refusal

__all__ = ["main"]

USAGE_ERRORS = (InputError, NoOutputError, OutputExistsError, ResumeError)


class UsageError(Exception):
    """A command-line mistake found by argparse."""


class _Exit(Exception):
    """argparse finished the command itself (``--help``, ``--version``) with this exit status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _StdoutClosed(Exception):
    """The reader of stdout went away (``streamacc recipes | head -1``)."""


def _out(text: str) -> None:
    """Print ``text`` on stdout now, so that a closed pipe is noticed here and not at exit."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        raise _StdoutClosed from None


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that Python's flush at exit does not fail on the closed pipe again."""
    with contextlib.suppress(AttributeError, OSError, ValueError):  # no file descriptor: nothing to flush at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # argparse takes '-1e-3' or '-2**3' for an option (it knows only '-1' and '-1.5') and then
        # fails with "expected one argument"; no option starts with a digit, '.' or '(', so such
        # words are always values.
        self._negative_number_matcher = re.compile(r"^-[\d.(]")

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        # argparse would call sys.exit; main() returns the status instead, as it does for every other outcome.
        if message:
            self._print_message(message, sys.stderr)
        raise _Exit(status)

    def _print_message(self, message: str, file: Any = None) -> None:
        # as argparse's, but a closed pipe (`streamacc --help | head -1`) is not ignored: main() exits as on SIGPIPE
        if not message:
            return
        try:
            file = file or sys.stderr
            file.write(message)
            file.flush()
        except BrokenPipeError:
            raise _StdoutClosed from None
        except (AttributeError, OSError):  # no stderr at all (pythonw), or it is closed
            pass


def _add_common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """--debug and --version, accepted before the command and after it alike."""
    # a subcommand's default would overwrite the value given before the command: it has none
    default = False if top else argparse.SUPPRESS
    parser.add_argument("--debug", action="store_true", default=default, help="show tracebacks and all libraries' logs")
    parser.add_argument("--version", action="version", version=f"streamacc {__version__}")


def _recipe_options() -> dict[str, tuple[str, str]]:
    """Every recipe option: dest -> (kind, help), merged across recipes, naming every recipe that takes it."""
    from .recipes import RECIPES

    helps: dict[str, tuple[str, str]] = {}
    users: dict[str, list[str]] = {}
    for recipe in RECIPES.values():
        for p in recipe.params:
            helps.setdefault(p.name, (p.kind, p.help))
            users.setdefault(p.name, []).append(recipe.name)
    return {name: (kind, f"{text} [{', '.join(users[name])}]") for name, (kind, text) in helps.items()}


def _add_storage(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an fsspec storage option for OUT (and an --input) given as a URL, repeatable; VALUE is read as JSON "
        "where it parses, e.g. --storage-option endpoint_url=http://127.0.0.1:9000; credentials come from the "
        "usual environment variables",
    )


def storage_options(pairs: list[str]) -> dict[str, Any] | None:
    """``--storage-option KEY=VALUE`` pairs as a dict: VALUE as JSON where it parses, else as text."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise InputError(
                f"--storage-option {pair!r} is not KEY=VALUE; pass e.g. --storage-option endpoint_url=http://host:9000"
            )
        try:
            options[key.strip()] = json.loads(text)
        except ValueError:
            options[key.strip()] = text
    return options or None


def _add_write(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser("write", allow_abbrev=False, help="run a recipe and stream its output to a Zarr store")
    _add_common(w, top=False)
    w.add_argument("out", metavar="OUT", help="output path or fsspec URL (a Zarr v3 group)")
    _add_storage(w)
    w.add_argument("--size", help="number of steps, e.g. '2**32' (cumsum/cumprod default: the input's length)")
    w.add_argument("--recipe", default="gp", help="recipe name (default gp; see `streamacc recipes`)")
    w.add_argument("--dtype", default="float64", help="float64 (default) or float32")
    w.add_argument(
        "--block-size", default=None, help=f"steps per block, e.g. '2**22' (default {DEFAULT_WRITE_BLOCK_SIZE})"
    )
    w.add_argument("--codec", default=DEFAULT_CODEC, help=f"one of {', '.join(CODECS)} (default {DEFAULT_CODEC})")
    mode = w.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true", help="replace an existing output")
    mode.add_argument("--resume", action="store_true", help="continue an interrupted run with the same settings")
    w.add_argument("--no-progress", action="store_true", help="no progress bar")
    where = w.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        default=None,
        metavar="N",
        help="run the blocks on a local dask cluster of N single-threaded worker processes (started and closed "
        "by this command); the output is the same bytes",
    )
    where.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="run the blocks on a running dask cluster, e.g. tcp://host:8786",
    )
    group = w.add_argument_group("recipe options (numbers accept arithmetic such as 1+1e-8)")
    for name, (kind, text) in _recipe_options().items():
        if kind == "flag":
            group.add_argument(option(name), dest=f"param_{name}", action="store_true", default=None, help=text)
            continue
        metavar = {"float": "NUMBER", "int": "INT", "path": "PATH"}.get(kind, "VALUE")
        group.add_argument(option(name), dest=f"param_{name}", default=None, metavar=metavar, help=text)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``streamacc`` command."""
    parser = _Parser(
        prog="streamacc", allow_abbrev=False, description="Long JAX accumulations streamed to Zarr in bounded memory."
    )
    _add_common(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    _add_write(sub)
    info = sub.add_parser("info", help="describe an output: shape, dtype, codec, recipe, steps written")
    _add_common(info, top=False)
    info.add_argument("out", metavar="OUT")
    _add_storage(info)
    verify = sub.add_parser("verify", help="recompute stored blocks from their carry-ins and compare bytes")
    _add_common(verify, top=False)
    verify.add_argument("out", metavar="OUT")
    _add_storage(verify)
    verify.add_argument("--blocks", default="all", help="'all' (default) or N, the number of blocks to check")
    _add_common(sub.add_parser("recipes", help="list recipes and their parameters"), top=False)
    return parser


def _recipe_params(args: argparse.Namespace, recipe: Recipe) -> dict[str, Any]:
    """The recipe options given on the command line, parsed by kind; others are refused."""
    kinds = {p.name: p.kind for p in recipe.params}
    given = {k[len("param_") :]: v for k, v in vars(args).items() if k.startswith("param_") and v is not None}
    params: dict[str, Any] = {}
    for name, text in given.items():
        opt = spell(name)
        if name not in kinds:
            refused = refusal(recipe.name, recipe.refused, name, text)
            if refused is not None:
                raise InputError(refused)
            valid = ", ".join(spell(n) for n in kinds) or "none"
            raise InputError(f"{opt} does not apply to recipe {recipe.name!r}; its options are: {valid}")
        if kinds[name] == "float":
            params[name] = parse_number(text, name=opt)
        elif kinds[name] == "int":
            params[name] = parse_int(text, name=opt)
        elif kinds[name] == "flag":
            params[name] = text
        else:
            params[name] = _absolute(text)
    return params


def _is_url(text: str) -> bool:
    return "://" in text and not text.startswith("file://")


def _absolute(path: str) -> str:
    """A local path made absolute, so that the recorded parameters name the same file from any directory."""
    if not path or _is_url(path):
        return path
    return os.path.abspath(path.removeprefix("file://"))


def _check_no_overlap(out: str, params: dict[str, Any], recipe: Recipe) -> None:
    """Refuse a path parameter that is OUT, lies inside it or contains it: --overwrite would delete the input."""

    def norm(text: str) -> str:
        text = text if _is_url(text) else os.path.realpath(text.removeprefix("file://"))
        return text.rstrip("/") + "/"

    target = norm(out)
    for p in recipe.params:
        value = params.get(p.name)
        if p.kind != "path" or not value:
            continue
        source = norm(value)
        if source.startswith(target) or target.startswith(source):
            raise InputError(
                f"{spell(p.name, repr(value))} and the output {out!r} overlap, so writing the output would destroy "
                "its input; choose an output path outside the input"
            )


def _enable_x64() -> None:
    import jax

    jax.config.update("jax_enable_x64", True)  # the CLI owns its process: float64 must stay float64


def _committed_steps(out: str, options: dict[str, Any] | None) -> int:
    """How many steps ``out`` has committed already; 0 where it holds no readable run."""
    from ._inspect import describe_output

    try:
        return describe_output(out, storage_options=options)["committed_steps"]
    except Exception:  # only a count for the summary line: whatever is wrong, write() itself will say
        return 0


def summary(info: dict[str, Any], before: int, seconds: float) -> str:
    """The line ``write`` prints on success: steps and bytes written, time, rates, bytes stored, compression.

    ``info`` is :func:`streamacc._inspect.describe_output` of the finished output, ``before``
    the steps it had committed before this run (resumed), ``seconds`` this run's wall time.
    """
    import numpy as np

    arrays = info["arrays"].values()
    step_bytes = sum(int(np.prod(a["shape"][1:], dtype=np.int64)) * np.dtype(a["dtype"]).itemsize for a in arrays)
    stored = sum(a["stored_bytes"] for a in arrays)
    committed = info["committed_steps"]
    ratio = f"{committed * step_bytes / stored:.2f}x" if stored else "n/a"
    kept = f"stored {si(stored)}B for {committed} steps (compression {ratio})"
    steps = committed - before
    if steps == 0:
        return f"{info['path']}: nothing to write, all {committed} steps were committed already; {kept}"
    rate = steps / max(seconds, 1e-9)
    resumed = f", resumed at step {before}," if before else ""
    return (
        f"{info['path']}: wrote {steps} steps ({si(steps * step_bytes)}B){resumed} in {seconds:.2f} s "
        f"({si(rate)} steps/s, {si(rate * step_bytes)}B/s); {kept}"
    )


def cmd_write(args: argparse.Namespace) -> int:
    from .recipes import get_recipe
    from .recipes._base import check_dtype

    recipe = get_recipe(args.recipe)
    options = storage_options(args.storage_option)
    size = None if args.size is None else parse_int(args.size, name=spell("length"), minimum=1)
    block = (
        DEFAULT_WRITE_BLOCK_SIZE
        if args.block_size is None
        else parse_int(args.block_size, name=spell("block_size"), minimum=1)
    )
    if args.codec not in CODECS:
        raise InputError(f"{spell('codec', repr(args.codec))} is unknown; choose one of: {', '.join(CODECS)}")
    params = _recipe_params(args, recipe)
    _check_no_overlap(args.out, params, recipe)
    job = recipe.make(size, args.dtype, params, options)  # an --input URL takes the same storage options
    attrs = {**job.attrs, "dtype": check_dtype(args.dtype)}  # the canonical name: 'f8' is recorded as float64
    array_attrs = {name: {"long_name": job.attrs["description"], "units": job.attrs["units"]} for name in job.names}
    _enable_x64()
    from ._cluster import cluster_client
    from ._inspect import describe_output
    from ._write import write

    workers = None if args.workers is None else parse_int(args.workers, name=spell("workers"), minimum=1)
    before = _committed_steps(args.out, options) if args.resume else 0
    start = time.perf_counter()
    gc.freeze()  # the CLI owns its process: spare the collector the objects that live for the whole run
    with warnings.catch_warnings(record=True) as caught, cluster_client(workers, args.scheduler) as client:
        warnings.simplefilter("always", StreamaccWarning)
        _write(args, write, job, block, attrs, array_attrs, options, client)
    for warning in caught:
        logging.getLogger("streamacc").info("%s", warning.message)
    _out(summary(describe_output(args.out, storage_options=options), before, time.perf_counter() - start))
    return 0


def _write(args: argparse.Namespace, write, job, block: int, attrs: dict, array_attrs: dict, options, client) -> None:
    write(
        args.out,
        job.f,
        job.init,
        job.xs,
        length=job.length,
        block_size=block,
        unroll=job.unroll,
        names=job.names,
        codec=args.codec,
        overwrite=args.overwrite,
        resume=args.resume,
        progress=not args.no_progress,
        attrs=attrs,
        array_attrs=array_attrs,
        storage_options=options,
        client=client,
    )


def cmd_info(args: argparse.Namespace) -> int:
    _enable_x64()
    from ._inspect import describe_output, format_description

    _out(format_description(describe_output(args.out, storage_options=storage_options(args.storage_option))))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    blocks = "all" if args.blocks == "all" else parse_int(args.blocks, name=spell("blocks"), minimum=1)
    _enable_x64()
    from ._inspect import verify_recipe_output

    report = verify_recipe_output(args.out, blocks=blocks, storage_options=storage_options(args.storage_option))
    _out(
        f"{args.out}: OK, {len(report.checked_blocks)} of {report.committed_blocks} committed blocks recomputed "
        f"bit for bit ({report.committed_steps} of {report.total_steps} steps committed"
        f"{', complete' if report.complete else ', incomplete: resume with ' + spell('resume')})"
    )
    return 0


def cmd_recipes(args: argparse.Namespace) -> int:
    from .recipes import RECIPES

    lines = []
    width = max(len(option(p.name)) for recipe in RECIPES.values() for p in recipe.params)
    for recipe in RECIPES.values():
        lines.append(f"{recipe.name}: {recipe.description}")
        for p in recipe.params:
            default = "required" if p.default is None else f"default {p.default!r}"
            lines.append(f"    {option(p.name):<{width}} {p.kind:<5} {default:<22} {p.help}")
    _out("\n".join(lines))
    return 0


COMMANDS = {"write": cmd_write, "info": cmd_info, "verify": cmd_verify, "recipes": cmd_recipes}


def _fail(message: str, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    print(f"streamacc: error: {' '.join(str(message).split())}", file=sys.stderr)
    return code


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (``kill``, systemd, a batch scheduler, a container runtime): stop as for Ctrl-C."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[None]:
    """Within this block SIGTERM interrupts like Ctrl-C (only the main thread can install a handler)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


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
    """Run the ``streamacc`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    with cli_spelling(), _sigterm_stops():
        return _main(argv)


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
    except UsageError as exc:
        return _fail(str(exc), 2, False)  # argparse's own traceback would say nothing
    except USAGE_ERRORS as exc:
        return _fail(str(exc), 2, debug)
    except StreamaccError as exc:
        return _fail(str(exc), 1, debug)
    except Terminated:
        return _fail("terminated; committed blocks are safe: rerun with --resume to continue", 143, debug)
    except KeyboardInterrupt:
        return _fail("interrupted; committed blocks are safe: rerun with --resume to continue", 130, debug)
    except Exception as exc:  # a bug or an unforeseen failure: still one line, traceback with --debug
        return _fail(f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1, debug)
