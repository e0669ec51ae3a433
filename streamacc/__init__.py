"""streamacc: arbitrarily long JAX accumulations in bounded memory, streamed to Zarr.

The public names that need JAX or Zarr are imported on first use (PEP 562), so that
``import streamacc`` and the command line start without them; ``from streamacc import
write`` and type checkers (through the ``TYPE_CHECKING`` imports) see them as usual.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._codecs import CODECS
from ._defaults import DEFAULT_BLOCK_SIZE, DEFAULT_CODEC, DEFAULT_INFLIGHT, DEFAULT_WRITE_BLOCK_SIZE
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
from ._version import __version__

if TYPE_CHECKING:
    from ._engine import Block, iter_blocks, scan
    from ._reader import open
    from ._verify import VerifyReport, verify
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

_LAZY = {
    "Block": "._engine",
    "iter_blocks": "._engine",
    "scan": "._engine",
    "open": "._reader",
    "VerifyReport": "._verify",
    "verify": "._verify",
    "write": "._write",
}
"""The public names that need JAX or Zarr -> the private module that defines each."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'streamacc' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
