"""Running a blocked scan: the compiled block functions, the rows in, the blocks out and their buffers.

``_kernels`` holds the compiled block functions (``lax.scan`` itself), ``_rows`` reads a
block's rows of the inputs, ``_run`` runs a plan block by block (and the carry pass),
``_block`` is the block it yields, ``_api`` the in-memory entry points ``iter_blocks`` and
``scan``, ``_memory`` checks a block against the machine's memory, ``_pool`` recycles the
blocks' output buffers, ``_carry`` turns carries into host data and back, ``_scopes``
carries a thread's JAX configuration to another.

These are the names the engine uses; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ._api import iter_blocks as iter_blocks, scan as scan
    from ._block import Block as Block
    from ._carry import HostLeaf as HostLeaf, from_host as from_host, same_leaves as same_leaves, to_host as to_host
    from ._kernels import (
        PROBED as PROBED,
        block_function as block_function,
        until_block_functions as until_block_functions,
    )
    from ._memory import check_memory as check_memory
    from ._pool import POOL_MIN_BYTES as POOL_MIN_BYTES, BlockPool as BlockPool, PoolStats as PoolStats
    from ._run import (
        BlockFailed as BlockFailed,
        carry_pass as carry_pass,
        compute_block as compute_block,
        computes_ahead as computes_ahead,
        run_plan as run_plan,
    )
    from ._scopes import caller_scopes as caller_scopes, jax_option as jax_option

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
