"""Reading an output: ``open`` (``_dataset``, through ``run`` for a virtual output, and xarray's side in
``streamacc/_xarray.py``), ``follow`` (``_follow``: a growing output read as its blocks commit), ``info``
(``_info``), ``overview`` from the summaries (``_overview``) and ``to_arviz``, a sampler's chains as ArviZ reads
them (``_arviz``). Reading a stored output imports no JAX.

These are the names the public face and the command line use.
"""

from ._arviz import to_arviz
from ._dataset import open
from ._follow import Committed, committed, follow
from ._info import ArrayInfo, MemoryEstimate, OutputInfo, SummaryInfo, info
from ._overview import overview, overview_table

__all__ = [
    "ArrayInfo", "Committed", "MemoryEstimate", "OutputInfo", "SummaryInfo", "committed", "follow", "info", "open",
    "overview", "overview_table", "to_arviz",
]
