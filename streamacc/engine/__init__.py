"""The blocked scan: a long ``lax.scan`` as a chain of cached, jitted block scans.

Knows JAX and numpy, and nothing of Zarr, files, writer threads or progress: it yields
finished blocks and lets the caller decide where they go. Its rooms: ``plan`` what a
blocked scan will do (its settings, its layout arithmetic, its checks, its plan and spec,
no compiled code), and ``compute`` running it (the compiled block functions, a block's
rows in, the blocks out and their pooled buffers, the memory check, carries as host data,
a thread's JAX configuration, the entry points ``iter_blocks`` and ``scan``).

These are the names the other wings use; each is imported on first use, so importing
the wing costs nothing until then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import lazy_exports

if TYPE_CHECKING:
    from ..base import (
        BLOCK_KEYWORDS as BLOCK_KEYWORDS,
        DEFAULT_BLOCK_SIZE as DEFAULT_BLOCK_SIZE,
        MAX_LENGTH as MAX_LENGTH,
        SCAN_DEFAULTS as SCAN_DEFAULTS,
        Blocking as Blocking,
        BlockKeywords as BlockKeywords,
        ScanKeywords as ScanKeywords,
        block_bounds as block_bounds,
        block_count as block_count,
        block_size_near as block_size_near,
        block_steps as block_steps,
        check_length as check_length,
        committed_span as committed_span,
        pool_size as pool_size,
        row_step as row_step,
        rows_in as rows_in,
    )
    from .compute import (
        POOL_MIN_BYTES as POOL_MIN_BYTES,
        PROBED as PROBED,
        Block as Block,
        BlockFailed as BlockFailed,
        BlockPool as BlockPool,
        HostLeaf as HostLeaf,
        PoolStats as PoolStats,
        block_function as block_function,
        caller_scopes as caller_scopes,
        carry_pass as carry_pass,
        check_memory as check_memory,
        compute_block as compute_block,
        computes_ahead as computes_ahead,
        from_host as from_host,
        iter_blocks as iter_blocks,
        jax_option as jax_option,
        run_plan as run_plan,
        same_leaves as same_leaves,
        scan as scan,
        to_host as to_host,
        until_block_functions as until_block_functions,
    )
    from .plan import (
        Carry as Carry,
        Plan as Plan,
        Predicate as Predicate,
        ScanSpec as ScanSpec,
        Step as Step,
        Until as Until,
        as_spec as as_spec,
        choose_unroll as choose_unroll,
        compute_platform as compute_platform,
        make_plan as make_plan,
        resize as resize,
        step_of as step_of,
        step_program as step_program,
        until_of as until_of,
        x64_scope as x64_scope,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
