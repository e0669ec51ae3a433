"""streamacc: arbitrarily long JAX accumulations in bounded memory, streamed to Zarr.

The public names that need JAX or Zarr are imported on first use (PEP 562), so that
``import streamacc`` and the command line start without them; ``from streamacc import
write`` and type checkers (through the ``TYPE_CHECKING`` imports) see them as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._defaults import (
    DEFAULT_BLOCK_BYTES,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_CODEC,
    DEFAULT_INFLIGHT,
    DEFAULT_SUMMARY_WINDOWS,
    DEFAULT_WRITE_BLOCK_BYTES,
    DEFAULT_WRITE_BLOCK_SIZE,
)
from ._lazy import lazy_exports
from ._version import __version__
from .errors import (
    CarryMismatchError,
    InputError,
    LockedError,
    NoOutputError,
    OutputExistsError,
    ResumeError,
    StepFunctionError,
    StoreError,
    StreamaccError,
    StreamaccWarning,
    VerifyError,
    X64Error,
)
from .store import CODECS

if TYPE_CHECKING:
    from .engine import Block, iter_blocks, scan
    from .run import VerifyReport, open, overview, verify, write

__all__ = [
    "CODECS",
    "DEFAULT_BLOCK_BYTES",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_CODEC",
    "DEFAULT_INFLIGHT",
    "DEFAULT_SUMMARY_WINDOWS",
    "DEFAULT_WRITE_BLOCK_BYTES",
    "DEFAULT_WRITE_BLOCK_SIZE",
    "Block",
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
    "VerifyReport",
    "X64Error",
    "__version__",
    "iter_blocks",
    "open",
    "overview",
    "scan",
    "verify",
    "write",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {".engine": ["Block", "iter_blocks", "scan"], ".run": ["VerifyReport", "open", "overview", "verify", "write"]},
)
