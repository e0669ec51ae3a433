"""Window summaries (min, max, mean, count) of an output: a wing of its own.

``_reduce`` the reductions of a batch of windows and ``_pyramid`` their arithmetic across
blocks and levels (numpy only), ``_store`` their Zarr arrays under ``_streamacc/summaries/``
and the commit's tail, ``_plain`` those arrays read without Zarr, ``_summaries`` the summaries
of a run being written or resumed, ``_check`` verify's check of them, ``_extension`` their cut
for an extension. The windows a write asks for are ``streamacc.base``'s. Knows numpy and the store,
never JAX.

These are the names the other wings use.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_face

if TYPE_CHECKING:
    from ._check import SummaryCheck as SummaryCheck
    from ._extension import extension_tail as extension_tail, rebuild_stale_arrays as rebuild_stale_arrays
    from ._plain import plain_array as plain_array, plain_group as plain_group
    from ._pyramid import BlockPieces as BlockPieces, level_chunks as level_chunks
    from ._reduce import Rows as Rows, reduce_steps as reduce_steps
    from ._store import LISTED_GROUP as LISTED_GROUP, SUMMARIES as SUMMARIES, listing as listing
    from ._summaries import (
        Summaries as Summaries,
        SummaryPlan as SummaryPlan,
        summarized_names as summarized_names,
    )
else:  # type checkers read the imports above, and would take any name for one __getattr__ gives
    __getattr__, __dir__, __all__ = lazy_face(__name__, __file__)
