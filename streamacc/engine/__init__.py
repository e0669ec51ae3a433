"""The blocked scan: a long ``lax.scan`` as a chain of cached, jitted block scans.

Knows JAX and numpy, and nothing of Zarr, files, writer threads or progress: it yields
finished blocks and lets the caller decide where they go. ``_plan`` validates and plans a
blocked scan, ``_kernels`` holds the compiled block functions (``lax.scan`` itself),
``_rows`` reads a block's rows of the inputs, ``_run`` runs a plan block by block (and
the carry pass), ``_block`` is the block it yields, ``_api`` the in-memory entry points
``iter_blocks`` and ``scan``; ``_blocking`` holds a scan's settings (``Blocking``: its
length, blocks, unroll, direction and thinning, with their checks and arithmetic, no
JAX), ``_layout`` cuts a length into blocks (pure arithmetic), ``_pool`` recycles the
blocks' output buffers, ``_carry`` turns carries into host data and back, ``_checks``
validates arguments, ``_scopes`` carries a thread's JAX configuration to another.

These are the names the other wings use; each is imported on first use, so importing
the wing costs nothing until then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from .._defaults import DEFAULT_BLOCK_SIZE as DEFAULT_BLOCK_SIZE
    from ._api import iter_blocks as iter_blocks, scan as scan
    from ._block import Block as Block
    from ._blocking import (
        BLOCK_KEYWORDS as BLOCK_KEYWORDS,
        SCAN_DEFAULTS as SCAN_DEFAULTS,
        Blocking as Blocking,
        BlockKeywords as BlockKeywords,
        ScanKeywords as ScanKeywords,
        check_length as check_length,
    )
    from ._carry import HostLeaf as HostLeaf, from_host as from_host, same_leaves as same_leaves, to_host as to_host
    from ._checks import Carry as Carry, Step as Step, x64_scope as x64_scope
    from ._kernels import block_function as block_function
    from ._layout import (
        MAX_LENGTH as MAX_LENGTH,
        block_bounds as block_bounds,
        block_count as block_count,
        block_steps as block_steps,
        committed_span as committed_span,
        pool_size as pool_size,
        row_step as row_step,
        rows_in as rows_in,
    )
    from ._memory import check_memory as check_memory
    from ._plan import Plan as Plan, make_plan as make_plan, resize as resize
    from ._pool import POOL_MIN_BYTES as POOL_MIN_BYTES, BlockPool as BlockPool, PoolStats as PoolStats
    from ._run import (
        carry_pass as carry_pass,
        compute_block as compute_block,
        compute_platform as compute_platform,
        computes_ahead as computes_ahead,
        run_plan as run_plan,
    )
    from ._scopes import caller_scopes as caller_scopes, jax_option as jax_option
    from ._seams import SEAMS as SEAMS
    from ._spec import ScanSpec as ScanSpec, as_spec as as_spec, step_of as step_of

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
