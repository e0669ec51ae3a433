"""streamacc: arbitrarily long JAX accumulations in bounded memory, streamed to Zarr.

Write a recurrence as ``f(carry, x) -> (carry, y)``, as for ``jax.lax.scan``, and
:func:`write` runs it for any length in bounded memory, streaming every ``y`` to a Zarr
store on disk or object storage, resumably; :func:`open` reads it back as an xarray
Dataset, :func:`overview` at a glance, :func:`verify` recomputes it bit for bit, and
:func:`info` describes it. :func:`iter_blocks` and :func:`scan` run the same blocked scan
in memory. Errors are in :mod:`streamacc.errors`.

The names that need JAX or Zarr are imported on first use (PEP 562), so that
``import streamacc`` and the command line start without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import errors
from ._lazy import lazy_exports
from ._version import __version__
from .errors import StreamaccError

if TYPE_CHECKING:
    from .engine import Block, iter_blocks, scan
    from .run import (
        ArrayInfo,
        OutputInfo,
        SummaryInfo,
        VerifyReport,
        info,
        materialize,
        open,
        overview,
        verify,
        write,
    )

__all__ = [
    "ArrayInfo",
    "Block",
    "OutputInfo",
    "StreamaccError",
    "SummaryInfo",
    "VerifyReport",
    "__version__",
    "errors",
    "info",
    "iter_blocks",
    "materialize",
    "open",
    "overview",
    "scan",
    "verify",
    "write",
]

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".engine": ["Block", "iter_blocks", "scan"],
        ".run": [
            "ArrayInfo",
            "OutputInfo",
            "SummaryInfo",
            "VerifyReport",
            "info",
            "materialize",
            "open",
            "overview",
            "verify",
            "write",
        ],
    },
)
