"""streamacc: arbitrarily long JAX accumulations in bounded memory, streamed to Zarr."""

from __future__ import annotations

from ._codecs import CODECS
from ._defaults import DEFAULT_BLOCK_SIZE, DEFAULT_CODEC, DEFAULT_INFLIGHT, DEFAULT_WRITE_BLOCK_SIZE
from ._engine import Block, iter_blocks, scan
from ._errors import (
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
from ._reader import open
from ._verify import VerifyReport, verify
from ._version import __version__
from ._write import write

__all__ = [
    "CODECS",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_CODEC",
    "DEFAULT_INFLIGHT",
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
    "scan",
    "verify",
    "write",
]
