"""The blocked scan: a long ``lax.scan`` as a chain of cached, jitted block scans.

Knows JAX and numpy, and nothing of Zarr, files, writer threads or progress: it yields
finished blocks and lets the caller decide where they go. ``_scan`` plans and runs
blocks, ``_layout`` cuts a length into blocks (pure arithmetic), ``_pool`` recycles the
blocks' output buffers, ``_carry`` turns carries into host data and back, ``_checks``
validates arguments, ``_scopes`` carries a thread's JAX configuration to another.

These are the names the other wings use; each is imported on first use, so importing
the wing costs nothing until then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._carry import HostLeaf as HostLeaf, from_host as from_host, same_leaves as same_leaves, to_host as to_host
    from ._checks import Carry as Carry, Step as Step, x64_scope as x64_scope
    from ._layout import (
        MAX_LENGTH as MAX_LENGTH,
        block_bounds as block_bounds,
        block_count as block_count,
        block_steps as block_steps,
        check_grouping as check_grouping,
        check_length as check_length,
        check_save_every as check_save_every,
        committed_span as committed_span,
        pool_size as pool_size,
        row_step as row_step,
        rows_in as rows_in,
    )
    from ._pool import BlockPool as BlockPool, PoolStats as PoolStats
    from ._scan import (
        Block as Block,
        Plan as Plan,
        carry_pass as carry_pass,
        compute_block as compute_block,
        computes_ahead as computes_ahead,
        iter_blocks as iter_blocks,
        make_plan as make_plan,
        run_plan as run_plan,
        scan as scan,
    )
    from ._scopes import caller_scopes as caller_scopes, jax_option as jax_option

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
