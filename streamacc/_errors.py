"""The exception hierarchy.

Every error streamacc raises on purpose derives from :class:`StreamaccError`, and its
message is one sentence that names the problem and shows the fix, so that the CLI can
print it on one line and a caller can catch the whole family at once.
"""

from __future__ import annotations

__all__ = [
    "InputError",
    "LockedError",
    "OutputExistsError",
    "ResumeError",
    "StepFunctionError",
    "StoreError",
    "StreamaccError",
    "VerifyError",
    "X64Error",
]


class StreamaccError(Exception):
    """Base class of every error streamacc raises on purpose."""


class InputError(StreamaccError, ValueError):
    """An argument is missing, malformed or inconsistent with another."""


class StepFunctionError(InputError):
    """The step function ``f(carry, x) -> (carry, y)`` breaks the scan contract."""


class X64Error(InputError):
    """64-bit inputs were given while JAX would silently compute in 32 bits."""


class StoreError(StreamaccError):
    """The output store cannot be created, opened or written."""


class OutputExistsError(StoreError):
    """The output already exists and neither overwrite nor resume was asked for."""


class ResumeError(StoreError):
    """An interrupted run cannot be resumed as asked."""


class LockedError(StoreError):
    """Another live process is writing the same output."""


class VerifyError(StoreError):
    """Stored data does not match what its manifest promises."""
