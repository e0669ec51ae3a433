"""Reading an output: ``open`` (``_dataset``, through ``run`` for a virtual output, and xarray's side in
``streamacc/_xarray.py``), ``follow`` (``_follow``: a growing output read as its blocks commit), ``info``
(``_info``), ``overview`` from the summaries (``_overview``) and ``to_arviz``, a sampler's chains as ArviZ reads
them (``_arviz``). Reading a stored output imports no JAX.

These are the names the public face and the command line use.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_face

if TYPE_CHECKING:
    from ._arviz import to_arviz as to_arviz
    from ._dataset import open as open
    from ._follow import Committed as Committed, committed as committed, follow as follow
    from ._info import (
        ArrayInfo as ArrayInfo,
        MemoryEstimate as MemoryEstimate,
        OutputInfo as OutputInfo,
        SummaryInfo as SummaryInfo,
        info as info,
    )
    from ._overview import overview as overview, overview_table as overview_table
else:  # type checkers read the imports above, and would take any name for one __getattr__ gives
    __getattr__, __dir__, __all__ = lazy_face(__name__, __file__)
