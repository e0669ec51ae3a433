"""streamacc: arbitrarily long JAX accumulations in bounded memory, streamed to Zarr.

Write a recurrence as ``f(carry, x) -> (carry, y)``, as for ``jax.lax.scan``, and
:func:`write` runs it for any length in bounded memory, streaming every ``y`` to a Zarr
store on disk or object storage, resumably (:class:`Stream` does the same from inside a
jitted program); :func:`open` reads it back as an xarray Dataset, :func:`overview` at a
glance, :func:`verify` recomputes it bit for bit, :func:`info` describes it, and
:func:`to_arviz` gives a sampler's chains as ArviZ reads them. :func:`iter_blocks` and
:func:`scan` run the same blocked scan in memory. Errors are in :mod:`streamacc.errors`.

The names that need JAX or Zarr are imported on first use (PEP 562), so that
``import streamacc`` and the command line start without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import errors as errors
from ._version import __version__ as __version__
from .base import lazy_exports
from .errors import StreamaccError as StreamaccError

if TYPE_CHECKING:
    from .engine import Block as Block, ScanSpec as ScanSpec, iter_blocks as iter_blocks, scan as scan
    from .run import materialize as materialize, write as write
    from .run.execute import Dask as Dask, Local as Local
    from .run.output import Layout as Layout
    from .run.read import (
        ArrayInfo as ArrayInfo,
        OutputInfo as OutputInfo,
        SummaryInfo as SummaryInfo,
        info as info,
        open as open,
        overview as overview,
        to_arviz as to_arviz,
    )
    from .run.recompute import VerifyReport as VerifyReport, verify as verify
    from .run.stream import Stream as Stream
    from .store import register_data_types as register_data_types

__getattr__, _, _lazy = lazy_exports(__name__, __file__)
__all__ = sorted(["StreamaccError", "__version__", "errors", *_lazy])


def __dir__() -> list[str]:
    """What a user may import: ``__all__`` (not the names this file uses to list it)."""
    return list(__all__)


del TYPE_CHECKING, annotations, lazy_exports
