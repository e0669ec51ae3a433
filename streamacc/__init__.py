"""streamacc: arbitrarily long JAX accumulations in bounded memory, streamed to Zarr.

Write a recurrence as ``f(carry, x) -> (carry, y)``, as for ``jax.lax.scan``, and
:func:`write` runs it for any length in bounded memory, streaming every ``y`` to a Zarr
store on disk or object storage, resumably (:class:`Stream` does the same from inside a
jitted program); :func:`open` reads it back as an xarray Dataset, :func:`follow` as it
grows, :func:`overview` at a glance, :func:`verify` recomputes it bit for bit,
:func:`info` describes it, and :func:`to_arviz` gives a sampler's chains as ArviZ reads
them. :func:`iter_blocks` and
:func:`scan` run the same blocked scan in memory. Errors are in :mod:`streamacc.errors`.

The public names are imported on first use (PEP 562), so that ``import streamacc`` and the
command line start without JAX or Zarr: each is listed once, as an import of the ``if
TYPE_CHECKING:`` block below, which type checkers read and ``streamacc._lazy`` reads too
(``errors``, ``StreamaccError`` and ``__version__`` are imported as they are named). Every
wing's face is lazy the same way, through ``streamacc._lazy``: a reader that names
``streamacc.store.open_target`` imports the modules behind that name, not the whole wing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import errors as errors
from ._lazy import lazy_face
from ._version import __version__ as __version__
from .errors import StreamaccError as StreamaccError

if TYPE_CHECKING:
    from .base import Layout as Layout
    from .engine import Block as Block, ScanSpec as ScanSpec, iter_blocks as iter_blocks, scan as scan
    from .read import (
        ArrayInfo as ArrayInfo,
        OutputInfo as OutputInfo,
        SummaryInfo as SummaryInfo,
        follow as follow,
        info as info,
        open as open,
        overview as overview,
        to_arviz as to_arviz,
    )
    from .run import (
        Dask as Dask,
        Local as Local,
        VerifyReport as VerifyReport,
        materialize as materialize,
        verify as verify,
        write as write,
    )
    from .store import register_data_types as register_data_types
    from .stream import Stream as Stream
else:  # type checkers read the imports above, and would take any name for one __getattr__ gives
    __getattr__, __dir__, __all__ = lazy_face(__name__, __file__, "StreamaccError", "__version__", "errors")


del TYPE_CHECKING, annotations, lazy_face
