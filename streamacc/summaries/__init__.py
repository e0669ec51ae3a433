"""Window summaries (min, max, mean, count) of an output: a wing of its own.

``_pyramid`` is the arithmetic (numpy only), ``_store`` their Zarr arrays under
``_streamacc/summaries/`` and the commit's tail, ``_summaries`` the summaries of a run
being written or resumed, ``_check`` verify's check of them, ``_extension`` their cut for an
extension, ``_windows`` the windows a write asks for.
Knows numpy and the store, never JAX.

These are the names the other rooms and wings use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._check import SummaryCheck as SummaryCheck
    from ._extension import extension_tail as extension_tail, rebuild_stale_arrays as rebuild_stale_arrays
    from ._pyramid import BlockPieces as BlockPieces, Rows as Rows
    from ._store import SUMMARIES as SUMMARIES, SummaryStore as SummaryStore
    from ._summaries import (
        Summaries as Summaries,
        SummaryPlan as SummaryPlan,
        output_rows as output_rows,
        summarized_names as summarized_names,
    )
    from ._windows import (
        check_windows as check_windows,
        default_windows as default_windows,
        too_long as too_long,
    )

_EXPORTS = {
    "._check": ["SummaryCheck"],
    "._extension": ["extension_tail", "rebuild_stale_arrays"],
    "._pyramid": ["BlockPieces", "Rows"],
    "._store": ["SUMMARIES", "SummaryStore"],
    "._summaries": ["Summaries", "SummaryPlan", "output_rows", "summarized_names"],
    "._windows": ["check_windows", "default_windows", "too_long"],
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
