"""Reading an output: ``open`` (``_dataset``, with the ``step``/``time`` index of ``_index``),
``overview`` from the summaries (``_overview``), ``info`` (``_info``), ``to_arviz``, a sampler's
chains as ArviZ reads them (``_arviz``), and ``open`` as xarray's backend ``"streamacc"`` (``_backend``).

These are the names the other rooms and wings use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ._arviz import to_arviz as to_arviz
    from ._backend import StreamaccBackend as StreamaccBackend
    from ._dataset import open as open
    from ._index import StepIndex as StepIndex
    from ._info import (
        ArrayInfo as ArrayInfo,
        MemoryEstimate as MemoryEstimate,
        OutputInfo as OutputInfo,
        SummaryInfo as SummaryInfo,
        info as info,
    )
    from ._overview import overview as overview, overview_table as overview_table

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
