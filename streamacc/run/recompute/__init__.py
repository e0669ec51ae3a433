"""Recomputing committed blocks from their recorded carries: ``verify``, and the check a resume makes first.

These are the names the other rooms and wings use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ._arrays import recomputed_variables as recomputed_variables
    from ._recipe import verify_recipe_output as verify_recipe_output
    from ._verify import (
        VerifyReport as VerifyReport,
        check_function as check_function,
        check_recomputed as check_recomputed,
        check_resumable as check_resumable,
        resume_chain as resume_chain,
        select_blocks as select_blocks,
        verify as verify,
    )
    from ._virtual import (
        RECYCLED_BLOCKS as RECYCLED_BLOCKS,
        RecomputingStore as RecomputingStore,
        recompute_plan as recompute_plan,
        recomputed_rows as recomputed_rows,
        recomputing_store as recomputing_store,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
