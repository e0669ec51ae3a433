"""The library's arguments as the command line names them, so that every message reads in its terms.

An error names the arguments it concerns (see :mod:`streamacc.errors`); the command line
shows ``block_size=1000`` as ``--block-size 1000``, ``mode='resume'`` as ``--resume``,
``chunks={'step': 4096}`` as ``--chunks step=4096`` and ``summaries=[4096, 65536]`` as
``--summary-windows 4096,65536``: each in the syntax its parser reads back.
"""

from __future__ import annotations

import shlex
from typing import Any

from ..errors import ABSENT, Arg, StreamaccError, StreamaccWarning, one_line, render

__all__ = ["cli_message", "cli_terms", "option_of"]

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
