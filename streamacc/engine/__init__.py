"""The blocked scan: a long ``lax.scan`` as a chain of cached, jitted block scans.

Knows JAX and numpy, and nothing of Zarr, files, writer threads or progress: it yields
finished blocks and lets the caller decide where they go. ``_checks`` checks a step, its
arguments and its condition (``Until``), ``_unroll`` chooses the unroll of a step that names
none, ``_plan`` is a scan's description (``ScanSpec``) made into a ``Plan``, ``_config`` where
and how JAX computes (the platform, 64-bit types, a thread's configuration carried to another),
``_kernels`` the compiled block functions (``lax.scan`` itself), ``_memory`` a block's memory
(the pooled output buffers, its rows of the inputs, the check against the machine's memory),
``_run`` runs a plan block by block (the ``Block`` it yields, the carry pass, carries as host
data), and ``_scan`` holds the in-memory entry points ``iter_blocks`` and ``scan``. A scan's
settings and the arithmetic of its blocks are ``streamacc.base``'s (``Blocking``).

These are the names the other wings use.
"""

from ._checks import Carry, Predicate, Step, Until
from ._config import caller_scopes, compute_platform, jax_option, x64_scope
from ._kernels import PROBED, block_function, until_block_functions
from ._memory import POOL_MIN_BYTES, BlockPool, PoolStats, check_memory
from ._plan import Plan, ScanSpec, as_spec, make_plan, resize, step_of, until_of
from ._run import (
    Block,
    BlockFailed,
    carry_pass,
    compute_block,
    computes_ahead,
    from_host,
    run_plan,
    runtime_failure,
    same_leaves,
    to_host,
)
from ._scan import iter_blocks, scan
from ._unroll import choose_unroll, step_program

__all__ = [
    "POOL_MIN_BYTES", "PROBED", "Block", "BlockFailed", "BlockPool", "Carry", "Plan", "PoolStats", "Predicate",
    "ScanSpec", "Step", "Until", "as_spec", "block_function", "caller_scopes", "carry_pass", "check_memory",
    "choose_unroll", "compute_block", "compute_platform", "computes_ahead", "from_host", "iter_blocks", "jax_option",
    "make_plan", "resize", "run_plan", "runtime_failure", "same_leaves", "scan", "step_of", "step_program", "to_host",
    "until_block_functions", "until_of", "x64_scope",
]
