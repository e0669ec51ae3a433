"""Window summaries (min, max, mean, count) of an output: a wing of its own.

``_reduce`` the reductions of a batch of windows and ``_pyramid`` their arithmetic across
blocks and levels (numpy only), ``_store`` their Zarr arrays under ``_streamacc/summaries/``
and the commit's tail, ``_plain`` those arrays read without Zarr, ``_summaries`` the summaries
of a run being written or resumed and verify's check of them, ``_extension`` their cut for an
extension. The windows a write asks for are ``streamacc.base``'s. Knows numpy and the store,
never JAX.

These are the names the other wings use.
"""

from ._extension import extension_tail, rebuild_stale_arrays
from ._plain import plain_array, plain_group
from ._pyramid import BlockPieces, level_chunks
from ._reduce import Rows, reduce_steps
from ._store import LISTED_GROUP, SUMMARIES, listing
from ._summaries import Summaries, SummaryCheck, SummaryPlan, summarized_names

__all__ = [
    "LISTED_GROUP", "SUMMARIES", "BlockPieces", "Rows", "Summaries", "SummaryCheck", "SummaryPlan", "extension_tail",
    "level_chunks", "listing", "plain_array", "plain_group", "rebuild_stale_arrays", "reduce_steps", "summarized_names",
]
