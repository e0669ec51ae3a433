"""The ``streamacc`` command line: write, info, verify, recipes.

A thin shell over the library: it parses options (numbers through the safe arithmetic
parser, never ``eval``), turns library errors into one line on stderr, and maps them to
exit codes: 0 success, 2 bad usage or input, 1 runtime failure, 130 interrupted.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from ._codecs import CODECS
from ._defaults import DEFAULT_CODEC, DEFAULT_WRITE_BLOCK_SIZE
from ._errors import InputError, OutputExistsError, ResumeError, StreamaccError, cli_spelling
from ._expr import parse_int, parse_number
from ._version import __version__
from .recipes._base import option, refusal

__all__ = ["main"]

USAGE_ERRORS = (InputError, OutputExistsError, ResumeError)


class UsageError(Exception):
    """A command-line mistake found by argparse."""


class _Exit(Exception):
    """argparse finished the command itself (``--help``, ``--version``) with this exit status."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


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


def _add_write(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser("write", allow_abbrev=False, help="run a recipe and stream its output to a Zarr store")
    w.add_argument("out", metavar="OUT", help="output path or fsspec URL (a Zarr v3 group)")
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
    parser.add_argument("--version", action="version", version=f"streamacc {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    _add_write(sub)
    info = sub.add_parser("info", help="describe an output: shape, dtype, codec, recipe, steps written")
    info.add_argument("out", metavar="OUT")
    verify = sub.add_parser("verify", help="recompute stored blocks from their carry-ins and compare bytes")
    verify.add_argument("out", metavar="OUT")
    verify.add_argument("--blocks", default="all", help="'all' (default) or N, the number of blocks to check")
    sub.add_parser("recipes", help="list recipes and their parameters")
    return parser


def _recipe_params(args: argparse.Namespace, recipe) -> dict:
    """The recipe options given on the command line, parsed by kind; others are refused."""
    kinds = {p.name: p.kind for p in recipe.params}
    given = {k[len("param_") :]: v for k, v in vars(args).items() if k.startswith("param_") and v is not None}
    params = {}
    for name, text in given.items():
        opt = option(name)
        if name not in kinds:
            refused = refusal(recipe.name, recipe.refused, name, text)
            if refused is not None:
                raise InputError(refused)
            valid = ", ".join(option(n) for n in kinds) or "none"
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


def _check_no_overlap(out: str, params: dict, recipe) -> None:
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
                f"{option(p.name)} {value!r} and the output {out!r} overlap, so writing the output would destroy "
                "its input; choose an output path outside the input"
            )


def cmd_write(args: argparse.Namespace) -> int:
    from ._write import write
    from .recipes import get_recipe
    from .recipes._base import check_dtype

    recipe = get_recipe(args.recipe)
    size = None if args.size is None else parse_int(args.size, name="--size", minimum=1)
    block = (
        DEFAULT_WRITE_BLOCK_SIZE
        if args.block_size is None
        else parse_int(args.block_size, name="--block-size", minimum=1)
    )
    if args.codec not in CODECS:
        raise InputError(f"--codec {args.codec!r} is unknown; choose one of: {', '.join(CODECS)}")
    params = _recipe_params(args, recipe)
    _check_no_overlap(args.out, params, recipe)
    job = recipe.build(size, args.dtype, **params)
    attrs = {**job.attrs, "dtype": check_dtype(args.dtype)}  # the canonical name: 'f8' is recorded as float64
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
    )
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from ._inspect import describe_output, format_description

    print(format_description(describe_output(args.out)))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from ._inspect import verify_recipe_output

    blocks = "all" if args.blocks == "all" else parse_int(args.blocks, name="--blocks", minimum=1)
    report = verify_recipe_output(args.out, blocks=blocks)
    print(
        f"{args.out}: OK, {len(report.checked_blocks)} of {report.committed_blocks} committed blocks recomputed "
        f"bit for bit ({report.committed_steps} of {report.total_steps} steps committed"
        f"{', complete' if report.complete else ', incomplete: resume with --resume'})"
    )
    return 0


def cmd_recipes(args: argparse.Namespace) -> int:
    from .recipes import RECIPES

    for recipe in RECIPES.values():
        print(f"{recipe.name}: {recipe.description}")
        for p in recipe.params:
            default = "required" if p.default is None else f"default {p.default!r}"
            print(f"    {option(p.name):<12} {p.kind:<5} {default:<22} {p.help}")
    return 0


COMMANDS = {"write": cmd_write, "info": cmd_info, "verify": cmd_verify, "recipes": cmd_recipes}


def _fail(message: str, code: int, debug: bool) -> int:
    if debug:
        traceback.print_exc()
    print(f"streamacc: error: {' '.join(str(message).split())}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``streamacc`` command with ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv
    with cli_spelling():
        return _main(argv, debug)


def _main(argv: list[str], debug: bool) -> int:
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(level=logging.INFO, format="streamacc: %(message)s", stream=sys.stderr)
        logging.getLogger("jax").setLevel(logging.WARNING)
        import jax

        jax.config.update("jax_enable_x64", True)  # the CLI owns its process: float64 must stay float64
        return COMMANDS[args.command](args)
    except _Exit as exc:
        return exc.status
    except UsageError as exc:
        return _fail(str(exc), 2, debug)
    except USAGE_ERRORS as exc:
        return _fail(str(exc), 2, debug)
    except StreamaccError as exc:
        return _fail(str(exc), 1, debug)
    except KeyboardInterrupt:
        return _fail("interrupted; committed blocks are safe: rerun with --resume to continue", 130, debug)
    except Exception as exc:  # a bug or an unforeseen failure: still one line, traceback with --debug
        return _fail(f"{type(exc).__name__}: {exc} (rerun with --debug for the traceback)", 1, debug)
