"""What every reader checks before it trusts an output: its structure (``_trust``), the root
metadata against the manifest (``_root``), chunk trailers against the block records
(``_trailers``), and each chunk ``open`` reads (``_checked``). Imports no JAX.

These are the names the other rooms and wings use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from ._checked import CheckedStore as CheckedStore
    from ._root import bookkeeping_listing as bookkeeping_listing, root_problem as root_problem
    from ._trailers import trailer_problem as trailer_problem
    from ._trust import (
        arrays_problem as arrays_problem,
        check_settled_root as check_settled_root,
        check_structure as check_structure,
        contradicts_itself as contradicts_itself,
        trusted_manifest as trusted_manifest,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
