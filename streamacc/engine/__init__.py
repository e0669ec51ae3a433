"""The blocked scan: a long ``lax.scan`` as a chain of cached, jitted block scans.

Knows JAX and numpy, and nothing of Zarr, files, writer threads or progress: it yields
finished blocks and lets the caller decide where they go. ``_checks`` checks a step, its
arguments and its condition, ``_condition`` says how the condition is tested (``Until``),
``_unroll`` chooses the unroll of a step that names none, ``_plan`` is a scan's description
(``ScanSpec``) made into a ``Plan``, ``_config`` where and how JAX computes (the platform,
64-bit types, a thread's configuration carried to another), ``_kernels`` the compiled block
functions (``lax.scan`` itself), ``_memory`` a block's memory (the pooled output buffers, its
rows of the inputs, the check against the machine's memory), ``_run`` runs a plan block by
block (the ``Block`` it yields, the carry pass, carries as host data), ``_until`` a block with
a condition, and ``_scan`` holds the in-memory entry points ``iter_blocks`` and ``scan``. A
scan's settings and the arithmetic of its blocks are ``streamacc.base``'s (``Blocking``).

These are the names the other wings use.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_face

if TYPE_CHECKING:
    from ._checks import Carry as Carry, Predicate as Predicate, Step as Step
    from ._condition import (
        INSIDE as INSIDE,
        OUTSIDE as OUTSIDE,
        PROBED_WAY as PROBED_WAY,
        WAYS as WAYS,
        Until as Until,
        recorded_way as recorded_way,
    )
    from ._config import (
        caller_scopes as caller_scopes,
        compute_platform as compute_platform,
        jax_option as jax_option,
        x64_scope as x64_scope,
    )
    from ._kernels import block_function as block_function
    from ._memory import (
        POOL_MIN_BYTES as POOL_MIN_BYTES,
        BlockPool as BlockPool,
        PoolStats as PoolStats,
        check_memory as check_memory,
    )
    from ._plan import (
        Plan as Plan,
        ScanSpec as ScanSpec,
        as_spec as as_spec,
        make_plan as make_plan,
        resize as resize,
        step_of as step_of,
        until_of as until_of,
    )
    from ._run import (
        Block as Block,
        BlockFailed as BlockFailed,
        carry_pass as carry_pass,
        compute_block as compute_block,
        computes_ahead as computes_ahead,
        from_host as from_host,
        run_plan as run_plan,
        runtime_failure as runtime_failure,
        same_leaves as same_leaves,
        to_host as to_host,
    )
    from ._scan import iter_blocks as iter_blocks, scan as scan
    from ._unroll import choose_unroll as choose_unroll, step_program as step_program
    from ._until import until_block as until_block
else:  # type checkers read the imports above, and would take any name for one __getattr__ gives
    __getattr__, __dir__, __all__ = lazy_face(__name__, __file__)
