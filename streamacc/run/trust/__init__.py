"""What every reader checks before it trusts an output: names of the ``bookkeeping`` room, kept importable from here.

Each is imported from ``bookkeeping`` on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from ..bookkeeping import (
        CheckedStore as CheckedStore,
        arrays_problem as arrays_problem,
        bookkeeping_listing as bookkeeping_listing,
        check_settled_root as check_settled_root,
        check_structure as check_structure,
        contradicts_itself as contradicts_itself,
        root_problem as root_problem,
        trailer_problem as trailer_problem,
        trusted_manifest as trusted_manifest,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
