"""The exceptions streamacc raises, and how their messages name the caller's arguments.

Every error streamacc raises on purpose derives from :class:`StreamaccError`, and its
message is one sentence that names the problem and shows the fix, so that the command line
can print it on one line and a caller can catch the whole family at once::

    try:
        streamacc.write("out.zarr", f, init, length=2**32)
    except streamacc.errors.OutputExistsError:
        ...  # the output is there already: pass mode="overwrite", "resume" or "extend"

A message names the arguments it concerns, and each caller reads them in its own terms:
the same mistake reads ``block_size=1000`` from Python and ``--block-size 1000`` on the
command line. An error carries these arguments (:attr:`StreamaccError.arguments`);
``str(error)`` shows them as keyword arguments, and :func:`render` as any other caller
spells them. No setting of the process decides it.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "Arg",
    "CarryMismatchError",
    "InputError",
    "LockedError",
    "NoOutputError",
    "OutputExistsError",
    "ResumeError",
    "StepFunctionError",
    "StoreError",
    "StreamaccError",
    "StreamaccWarning",
    "VerifyError",
    "X64Error",
    "arg",
    "one_line",
    "render",
]

_MARK = re.compile("\x02([^\x03]*)\x03")  # STX ... ETX: characters no message text holds


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()
"""The value of an :class:`Arg` that names an argument without a value."""


@dataclasses.dataclass(frozen=True)
class Arg:
    """An argument named in a message: ``name`` (``"time.step"`` for an entry of a dict argument), and a value.

    ``value`` is plain data (numbers, strings, booleans, lists, dicts) or :data:`ABSENT`;
    ``python`` is how a Python caller writes it.
    """

    name: str
    value: Any = ABSENT
    python: str = ""


def _python(name: str, value: Any) -> str:
    head, _, key = name.partition(".")
    written = f"{head}[{key!r}]" if key else name
    if value is ABSENT:
        return written
    return f"{written}={value!r}" if isinstance(value, str) else f"{written}={value}"


def _plain(value: Any) -> Any:
    """``value`` as JSON data (tuples become lists, numpy scalars numbers); its repr where it is none."""
    if isinstance(value, (str, bool, type(None))):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)


def arg(name: str, value: Any = ABSENT) -> str:
    """Argument ``name`` (set to ``value``) inside a message, to be shown in its reader's terms.

    ``f"{arg('block_size', 1000)} must be a multiple of 8"`` reads ``block_size=1000 must
    be ...`` from Python and ``--block-size 1000 must be ...`` on the command line.
    """
    doc: dict[str, Any] = {"name": name, "python": _python(name, value)}
    if value is not ABSENT:
        doc["value"] = _plain(value)
    return "\x02" + json.dumps(doc) + "\x03"


def _arg(doc: str) -> Arg:
    parsed = json.loads(doc)
    return Arg(parsed["name"], parsed.get("value", ABSENT), parsed["python"])


def render(text: str, spell: Callable[[Arg], str] | None = None) -> str:
    """``text`` with each argument it names spelt by ``spell`` (default: as a Python keyword argument)."""
    spell = spell or (lambda a: a.python)
    return _MARK.sub(lambda m: spell(_arg(m.group(1))), text)


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line, its arguments still marked (to be part of another message)."""
    text = exc.args[0] if isinstance(exc, StreamaccError) and exc.args else str(exc)
    return " ".join(str(text).split())


class StreamaccError(Exception):
    """Base class of every error streamacc raises on purpose."""

    def __str__(self) -> str:
        return render(super().__str__())

    @property
    def arguments(self) -> list[Arg]:
        """The arguments the message names, in order."""
        return [_arg(m.group(1)) for m in _MARK.finditer(str(self.args[0]) if self.args else "")]


class StreamaccWarning(UserWarning):
    """Something worth knowing that is not an error, e.g. resuming an output that is already complete."""

    def __str__(self) -> str:
        return render(super().__str__())


class InputError(StreamaccError, ValueError):
    """An argument is missing, malformed or inconsistent with another."""


class StepFunctionError(InputError):
    """The step function ``f(carry, x) -> (carry, y)`` breaks the scan contract."""


class X64Error(InputError):
    """64-bit inputs were given while JAX would silently compute in 32 bits."""


class StoreError(StreamaccError):
    """The output store cannot be created, opened or written."""


class NoOutputError(StoreError):
    """The path does not exist or holds no output this version of streamacc can read."""


class OutputExistsError(StoreError):
    """The output already exists and ``mode`` asked to create it."""


class ResumeError(StoreError):
    """An interrupted or finished run cannot be resumed or extended as asked."""


class LockedError(StoreError):
    """Another live process is writing the same output."""


class CarryMismatchError(StreamaccError):
    """A block recomputed elsewhere ended with another carry than the driver's carry pass."""


class VerifyError(StoreError):
    """Stored data does not match what its manifest promises."""
