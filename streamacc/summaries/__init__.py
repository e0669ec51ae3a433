"""Window summaries (min, max, mean, count) of an output: a wing of its own.

``_reduce`` the reductions of a batch of windows and ``_pyramid`` their arithmetic across
blocks and levels (numpy only), ``_store`` their Zarr arrays under ``_streamacc/summaries/``
and the commit's tail, ``_summaries`` the summaries of a run
being written or resumed, ``_check`` verify's check of them, ``_extension`` their cut for an
extension, ``_windows`` the windows a write asks for.
Knows numpy and the store, never JAX.

These are the names the other rooms and wings use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import lazy_exports

if TYPE_CHECKING:
    from ._check import SummaryCheck as SummaryCheck
    from ._extension import extension_tail as extension_tail, rebuild_stale_arrays as rebuild_stale_arrays
    from ._plain import plain_array as plain_array, plain_group as plain_group
    from ._pyramid import BlockPieces as BlockPieces, level_chunks as level_chunks
    from ._reduce import Rows as Rows, reduce_steps as reduce_steps
    from ._store import (
        LISTED_GROUP as LISTED_GROUP,
        SUMMARIES as SUMMARIES,
        SummaryStore as SummaryStore,
        listing as listing,
    )
    from ._summaries import Summaries as Summaries, SummaryPlan as SummaryPlan, summarized_names as summarized_names
    from ._windows import (
        check_windows as check_windows,
        default_windows as default_windows,
        over_state as over_state,
        too_long as too_long,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
