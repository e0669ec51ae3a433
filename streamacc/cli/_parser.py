"""The command line's parser (options, recipe parameters, their checks), and the library's arguments as it names them.

Everything here is cheap to import (no JAX, no Zarr), so that ``--help`` and mistakes in
the arguments answer at once. Numbers go through the safe arithmetic parser, never ``eval``.

The library's arguments as the command line names them, so that every message reads in its terms.

An error names the arguments it concerns (see :mod:`streamacc.errors`); the command line
shows ``block_size=1000`` as ``--block-size 1000``, ``mode='resume'`` as ``--resume``,
``chunks={'step': 4096}`` as ``--chunks step=4096`` and ``summaries=[4096, 65536]`` as
``--summary-windows 4096,65536``: each in the syntax its parser reads back.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from typing import Any, NoReturn

from .._version import __version__
from ..base import (
    ACCELERATOR_WRITE_BLOCK_BYTES,
    CODEC_NAMES,
    DEFAULT_CODEC,
    DEFAULT_WRITE_BLOCK_BYTES,
    DEFAULT_WRITE_BLOCK_SIZE,
)
from ..errors import ABSENT, Arg, InputError, StreamaccError, StreamaccWarning, arg, one_line, render
from ..recipes import Recipe, option, refusal
from ._expr import parse_int, parse_number

__all__ = [
    "UsageError", "build_parser", "check_no_overlap", "chunks_option", "cli_message", "cli_terms", "option_of",
    "recipe_params", "step_range", "storage_options", "summary_windows", "time_options",
]


class UsageError(Exception):
    """A command-line mistake found by argparse."""


class _Exit(Exception):
    """argparse finished the command itself (``--help``, ``--version``) with this exit status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class _StdoutClosed(Exception):
    """The reader of stdout went away (``streamacc recipes | head -1``)."""


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
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
    from ..recipes import RECIPES

    kinds: dict[str, str] = {}
    helps: dict[str, dict[str, list[str]]] = {}  # name -> help text -> the recipes that give it
    for recipe in RECIPES.values():
        for p in recipe.params:
            kinds.setdefault(p.name, p.kind)
            helps.setdefault(p.name, {}).setdefault(p.help, []).append(recipe.name)
    return {
        name: (kinds[name], "; ".join(f"{text} [{', '.join(users)}]" for text, users in texts.items()))
        for name, texts in helps.items()
    }


def _add_storage(parser: argparse.ArgumentParser, *, reads_input: bool = False) -> None:
    where = "OUT (and an --input) given as a URL" if reads_input else "OUT given as a URL"
    parser.add_argument(
        "--storage-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"an fsspec storage option for {where}, repeatable; VALUE is read as JSON where it parses, e.g. "
        "--storage-option endpoint_url=http://127.0.0.1:9000; credentials come from the usual environment variables",
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


def _add_write(sub: argparse._SubParsersAction[_Parser]) -> None:
    w = sub.add_parser("write", allow_abbrev=False, help="run a recipe and stream its output to a Zarr store")
    _add_common(w, top=False)
    w.add_argument("out", metavar="OUT", help="output path or fsspec URL (a Zarr v3 group)")
    _add_storage(w, reads_input=True)
    w.add_argument("--size", help="number of steps, e.g. '2**32' (cumsum/cumprod default: the input's length)")
    w.add_argument(
        "--recipe", default=None,
        help="recipe name (default gp, or the output's own with --resume or --extend; see `streamacc recipes`)",
    )  # fmt: skip
    w.add_argument(
        "--dtype", default=None,
        help="float64 (default; emulated on a TPU, where float32 --compensated is exact) or float32",
    )  # fmt: skip
    w.add_argument(
        "--block-size",
        default=None,
        help=f"steps per block, e.g. '2**22' (default: about {DEFAULT_WRITE_BLOCK_BYTES // 2**20} MiB of output per "
        f"block whatever one step outputs, {DEFAULT_WRITE_BLOCK_SIZE} steps of a float64 series; "
        f"{ACCELERATOR_WRITE_BLOCK_BYTES // 2**20} MiB where JAX computes on a TPU or GPU)",
    )
    w.add_argument(
        "--unroll",
        default=None,
        metavar="U",
        help="lax.scan's unroll, e.g. 8 (default: the recipe's, measured on this platform; a continued run keeps "
        "the one its output records); part of the output's identity",
    )
    w.add_argument(
        "--chunks",
        default=None,
        metavar="SPEC",
        help="chunk shape of the output arrays: 'auto' (default: sized in bytes on every axis), N for every axis, "
        "N,M,... one per axis (-1 for a whole axis), or by dimension name, e.g. 'step=4096,path=-1'",
    )
    w.add_argument(
        "--save-every",
        default=None,
        metavar="K",
        help="keep every K-th step: the scan runs every step and stores steps K-1, 2K-1, ... (default 1, all)",
    )
    w.add_argument("--time-step", default=None, metavar="DT", help="the time one step takes, for a time coordinate")
    w.add_argument("--time-start", default=None, metavar="T0", help="the time of step 0 (default 0; needs --time-step)")
    w.add_argument(
        "--time-units",
        default=None,
        metavar="UNITS",
        help="units of --time-step and --time-start, e.g. s, or 'seconds since 2000-01-01' for dates (CF)",
    )
    w.add_argument("--codec", default=None, help=f"one of {', '.join(CODEC_NAMES)} (default {DEFAULT_CODEC})")
    mode = w.add_mutually_exclusive_group()
    mode.add_argument("--overwrite", action="store_true", help="replace an existing output")
    mode.add_argument(
        "--resume", action="store_true",
        help="continue an interrupted run: `streamacc write OUT --resume` alone takes the recipe, its options and "
        "every setting the output records (any given must be the recorded ones)",
    )  # fmt: skip
    mode.add_argument(
        "--extend",
        action="store_true",
        help="continue a finished run to a longer --size, as one run of that length would have written it (the "
        "recipe, its options and the other settings are the output's own)",
    )
    w.add_argument("--no-progress", action="store_true", help="no progress bar")
    w.add_argument(
        "--virtual",
        action="store_true",
        help="store no data: only the carry entering every block and the summaries; reading recomputes the data "
        "(streamacc.open), `streamacc materialize` stores them",
    )
    summaries = w.add_mutually_exclusive_group()
    summaries.add_argument(
        "--summary-windows",
        default=None,
        metavar="W1,W2,...",
        help="rows per window (steps, unless --save-every thins them) of each level of summaries (min, max, mean "
        "per window, for `streamacc plot`), finest first, each a multiple of the one before (default "
        "2**12,2**16,2**20; finer for shorter or thinned outputs, at least 1024 windows of at least 128 rows at the "
        "finest, or at most 2**20 values per statistic for a large state or, in windows of up to 2**16, a --virtual "
        "output; a state of more than 1024 values is summarised over all of them)",
    )
    summaries.add_argument("--no-summaries", action="store_true", help="write no window summaries")
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
    info.add_argument("out", metavar="OUT", help="path or fsspec URL of an output streamacc wrote")
    _add_storage(info)
    verify = sub.add_parser("verify", help="recompute stored blocks from their kept carries and compare bytes")
    _add_common(verify, top=False)
    verify.add_argument("out", metavar="OUT", help="path or fsspec URL of an output streamacc wrote")
    _add_storage(verify)
    verify.add_argument(
        "--blocks",
        default="all",
        help="'all' (default) or N, the number of blocks to recompute, spread evenly, first and last included "
        "(all of them where the output has N or fewer)",
    )
    verify.add_argument(
        "--repair",
        action="store_true",
        help="first rebuild damaged kept carries by recomputing the blocks before them (which must match their "
        "stored chunks), under the output's writer lock",
    )
    plot = sub.add_parser("plot", help="draw an output (or a range of steps) from its summaries into a PNG")
    _add_common(plot, top=False)
    plot.add_argument("out", metavar="OUT", help="path or fsspec URL of an output streamacc wrote")
    _add_storage(plot)
    plot.add_argument("--var", default=None, metavar="NAME", help="the output array to draw (default: the first)")
    plot.add_argument("-o", "--output", default=None, metavar="FILE.png", help="where to write (default OUT-NAME.png)")
    plot.add_argument("--steps", default=None, metavar="A:B", help="only steps A to B, e.g. 0:2**20 or 2**31:")
    plot.add_argument(
        "--watch",
        nargs="?",
        const=WATCH_SECONDS,
        default=None,
        metavar="SECONDS",
        help=f"draw the picture again as blocks commit, looking every SECONDS (default {WATCH_SECONDS}), until the "
        "run is complete (an output with no committed step yet is waited for)",
    )
    materialize = sub.add_parser(
        "materialize",
        help="store the data of a virtual output (or of a range of its steps), recomputed from its carries",
    )
    _add_common(materialize, top=False)
    materialize.add_argument("out", metavar="OUT", help="path or fsspec URL of a virtual output streamacc wrote")
    _add_storage(materialize)
    materialize.add_argument("--steps", default=None, metavar="A:B", help="only the blocks holding steps A to B")
    materialize.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_common(sub.add_parser("recipes", help="list recipes and their parameters"), top=False)
    return parser


WATCH_SECONDS = "5"
"""How often ``streamacc plot --watch`` reads the manifest when no SECONDS is given."""


def chunks_option(text: str | None) -> Any:
    """``--chunks SPEC`` as ``chunks=`` takes it: None/'auto', an int, a tuple, or a dict by dimension name."""
    if text is None or text.strip() == "auto":
        return None
    parts = [part.strip() for part in text.split(",")]

    def entry(value: str) -> Any:
        value = value.strip()
        if value == "auto":
            return "auto"
        try:
            return parse_int(value, name="--chunks", minimum=-1, example="4096")
        except InputError:
            raise InputError(
                f"--chunks {text!r}: {value!r} is not a chunk length; each entry is a whole number of rows or "
                "elements (2**12 works), -1 for the whole axis, or auto: pass e.g. --chunks 4096, --chunks 4096,-1 "
                "or --chunks step=4096,path=-1"
            ) from None

    if all("=" in part for part in parts):
        pairs = [part.partition("=") for part in parts]
        if any(not name.strip() for name, _, _ in pairs):
            raise InputError(f"--chunks {text!r} names no dimension; pass e.g. --chunks step=4096,path=-1")
        names = [name.strip() for name, _, _ in pairs]
        twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
        if twice is not None:
            raise InputError(f"--chunks {text!r} names dimension {twice!r} twice; give each dimension once")
        return {name.strip(): entry(value) for name, _, value in pairs}
    if any("=" in part for part in parts) or not all(parts):
        raise InputError(
            f"--chunks {text!r} mixes forms or has an empty entry; pass N, N,M,... or DIM=N,DIM=M, e.g. "
            "--chunks step=4096,path=-1"
        )
    values = [entry(part) for part in parts]
    return values[0] if len(values) == 1 else tuple(values)


def time_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--time-step``, ``--time-start`` and ``--time-units`` as ``time=`` takes them (None without --time-step)."""
    if args.time_step is None:
        if args.time_start is not None or args.time_units is not None:
            raise InputError("--time-start and --time-units need --time-step, the time one step takes; pass e.g. "
                             "--time-step 0.001")  # fmt: skip
        return None
    time: dict[str, Any] = {"step": parse_number(args.time_step, name="--time-step", example="0.001")}
    if args.time_start is not None:
        time["start"] = parse_number(args.time_start, name="--time-start", example="0")
    if args.time_units is not None:
        time["units"] = args.time_units
    return time


def summary_windows(args: argparse.Namespace) -> bool | list[int]:
    """``--summary-windows``/``--no-summaries`` as ``write``'s ``summaries=``."""
    if args.no_summaries:
        return False
    if args.summary_windows is None:
        return True
    return [parse_int(w, name="--summary-windows", minimum=1, example="4096") for w in args.summary_windows.split(",")]


def step_range(text: str | None) -> tuple[int | None, int | None] | None:
    """``--steps A:B`` as a pair (either end may be left out); numbers accept arithmetic."""
    if text is None:
        return None
    a, sep, b = text.partition(":")
    if not sep:
        raise InputError(f"--steps {text!r} is not A:B; pass e.g. --steps 0:2**20 (either end may be left out)")
    ends = [None if not p.strip() else parse_int(p, name="--steps", minimum=0, example="2**20") for p in (a, b)]
    if ends[0] is not None and ends[1] is not None and ends[0] >= ends[1]:
        raise InputError(f"--steps {text!r} is empty; pass A:B with A < B")
    return ends[0], ends[1]


def recipe_params(args: argparse.Namespace, recipe: Recipe) -> dict[str, Any]:
    """The recipe options given on the command line, parsed by kind; others are refused."""
    kinds = {p.name: p.kind for p in recipe.params}
    given = {k[len("param_") :]: v for k, v in vars(args).items() if k.startswith("param_") and v is not None}
    params: dict[str, Any] = {}
    for name, text in given.items():
        opt = arg(name)
        if name not in kinds:
            refused = refusal(recipe.name, recipe.refused, name, text)
            if refused is not None:
                raise InputError(refused)
            valid = ", ".join(arg(n) for n in kinds) or "none"
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
    """A local path resolved as the operating system resolves it, so that the recorded parameters name the
    file that was read, from any directory (``link/../in.zarr`` is the ``in.zarr`` beside the link's target,
    not the one beside the link, which a textual ``abspath`` would pick)."""
    if not path or _is_url(path):
        return path
    return os.path.realpath(path.removeprefix("file://"))


def check_no_overlap(out: str, params: dict[str, Any], recipe: Recipe) -> None:
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
                f"{arg(p.name, value)} and the output {out!r} overlap, so writing the output would destroy "
                "its input; choose an output path outside the input"
            )


OPTIONS = {
    "length": "--size",
    "storage_options": "--storage-option",
    "summaries": "--summary-windows",
    "time.step": "--time-step",
    "time.start": "--time-start",
    "time.units": "--time-units",
    "time.calendar": "--time-units",
}
"""Keyword arguments whose option is not ``'--' + name`` with dashes."""

NEGATED = {"summaries": "--no-summaries", "progress": "--no-progress"}
"""Options that turn a default on off: what ``name=False`` reads on the command line."""


def option_of(name: str) -> str:
    """The command-line option of keyword argument ``name``: ``block_size`` is ``--block-size``."""
    return OPTIONS.get(name, "--" + name.replace("_", "-").replace(".", "-"))


def _value(name: str, value: Any) -> str:
    """``value`` as the option ``name`` takes it on the command line."""
    if name == "steps" and isinstance(value, list) and len(value) == 2:
        return ":".join("" if v is None else str(v) for v in value)
    if isinstance(value, dict):
        return ",".join(f"{k}={_value(name, v)}" for k, v in value.items())
    if isinstance(value, list):
        return ",".join(_value(name, v) for v in value)
    if value is None:
        return "-1" if name == "chunks" else "none"
    return shlex.quote(value) if isinstance(value, str) else str(value)


def cli_arg(a: Arg) -> str:
    """One argument of a message as the command line writes it."""
    if a.name == "mode":
        return "--overwrite, --resume or --extend" if a.value is ABSENT else f"--{a.value}"
    if a.name == "time" and isinstance(a.value, dict):
        return " ".join(f"{option_of('time.' + k)} {_value('time', v)}" for k, v in a.value.items())
    flag = option_of(a.name)
    if a.value is ABSENT or a.value is True:
        return flag
    if a.value is False:
        return NEGATED.get(a.name, f"{flag} off")
    return f"{flag} {_value(a.name, a.value)}"


def cli_terms(text: str | StreamaccError | StreamaccWarning) -> str:
    """``text`` (a message, its arguments marked, or an error or warning) in the command line's terms."""
    if isinstance(text, (StreamaccError, StreamaccWarning)):
        return text.render(cli_arg)
    return render(text, cli_arg)


def cli_message(exc: BaseException) -> str:
    """The one line the command line prints for ``exc``, in its own terms."""
    return cli_terms(one_line(exc))
