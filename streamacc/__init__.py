"""streamacc: arbitrarily long JAX accumulations in bounded memory, streamed to Zarr."""

from __future__ import annotations

from ._engine import DEFAULT_BLOCK_SIZE, Block, iter_blocks, scan
from ._errors import (
    InputError,
    LockedError,
    OutputExistsError,
    ResumeError,
    StepFunctionError,
    StoreError,
    StreamaccError,
    VerifyError,
    X64Error,
)

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "Block",
    "InputError",
    "LockedError",
    "OutputExistsError",
    "ResumeError",
    "StepFunctionError",
    "StoreError",
    "StreamaccError",
    "VerifyError",
    "X64Error",
    "__version__",
    "iter_blocks",
    "scan",
]
