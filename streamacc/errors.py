"""The exception hierarchy.

Every error streamacc raises on purpose derives from :class:`StreamaccError`, and its
message is one sentence that names the problem and shows the fix, so that the CLI can
print it on one line and a caller can catch the whole family at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = [
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
    "cli_spelling",
    "spell",
]

_CLI_OPTIONS = {"length": "--size", "storage_options": "--storage-option", "summaries": "--summary-windows"}
"""Keyword arguments whose command-line option is not ``'--' + name.replace('_', '-')``."""

_spelling = {"cli": False}


@contextlib.contextmanager
def cli_spelling() -> Iterator[None]:
    """Within this block, :func:`spell` names command-line options (the CLI owns its process)."""
    before = _spelling["cli"]
    _spelling["cli"] = True
    try:
        yield
    finally:
        _spelling["cli"] = before


_NOTHING = object()


def spell(name: str, value: object = _NOTHING) -> str:
    """Argument ``name`` (set to ``value``) as the caller writes it, for the fix an error shows.

    From Python that is the keyword argument, ``block_size=1000`` or ``overwrite=True``; from
    the command line the option, ``--block-size 1000`` or ``--overwrite``, so that every
    message speaks the caller's own terms.
    """
    if not _spelling["cli"]:
        return name if value is _NOTHING else f"{name}={value!r}" if isinstance(value, str) else f"{name}={value}"
    opt = _CLI_OPTIONS.get(name, "--" + name.replace("_", "-"))
    return opt if value is _NOTHING or value is True else f"{opt} {value}"


class StreamaccError(Exception):
    """Base class of every error streamacc raises on purpose."""


class StreamaccWarning(UserWarning):
    """Something worth knowing that is not an error, e.g. resuming an output that is already complete."""


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
    """The output already exists and neither overwrite nor resume was asked for."""


class ResumeError(StoreError):
    """An interrupted run cannot be resumed as asked."""


class LockedError(StoreError):
    """Another live process is writing the same output."""


class CarryMismatchError(StreamaccError):
    """A block recomputed elsewhere ended with another carry than the driver's carry pass."""


class VerifyError(StoreError):
    """Stored data does not match what its manifest promises."""
