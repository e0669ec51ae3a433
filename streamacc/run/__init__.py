"""A run's life, from a plan to a committed output: ``write``, ``materialize`` and ``verify``, and what they share.

Its modules, from the top (a module imports only from those listed below it, or beside it):

- ``_write`` (:func:`write`: request, plan, session, executor) and ``_materialize``
  (:func:`materialize`: a virtual output's data stored);
- ``_session``: a run's session on its output (``RunSession``: the target, its writer lock,
  the progress bar, the output opened and committed, the error a failure is raised as), which
  ``write``, ``materialize`` and the Stream share;
- where blocks run: ``_execute`` (``Local``, ``Dask`` as the caller says it, the keywords
  ``write`` takes alone, this process's executors) and ``_dask`` (block tasks on a cluster);
- recomputing committed blocks: ``_verify`` (``verify``, a recipe's output, the check a resume
  makes first), ``_checker`` (an output's checks, kept carries rebuilt) and ``_virtual``
  (``RecomputingStore``: a virtual output read through zarr);
- the output opened for writing: ``_planning`` (a run's plan and output spec), ``_open``
  (the table of openers), ``_extend``, ``_commit`` (``Output``: in-order commits, batches);
- ``_identity``: a run's identity made from its plan, its step function's fingerprint.

These are the names the other wings and the public face use.
"""

from ..base import Terminated  # what a run raises for SIGTERM, as the guide names it (``streamacc.run.Terminated``)
from ._commit import BlockResult, Output
from ._dask import BLOCKS_PER_TASK, SCATTER_TIMEOUT, BlockTask, SinkSpec, cluster_client, run_block_tasks
from ._execute import Dask, Local, WriteKeywords, split_keywords, write_block
from ._identity import carry_digest, describe_function, digest_kind, input_values
from ._materialize import materialize
from ._open import Continuation, open_output
from ._planning import OutputSpec, Planned, output_spec, plan_output
from ._session import MIN_BAR, Progress, Rates, RunSession, clock, si
from ._verify import (
    VerifyReport,
    check_function,
    check_recomputed,
    check_resumable,
    resume_chain,
    select_blocks,
    verify,
    verify_recipe_output,
)
from ._virtual import RECYCLED_BLOCKS, RecomputingStore, recompute_plan, recomputing_store
from ._write import write

__all__ = [
    "BLOCKS_PER_TASK",
    "MIN_BAR",
    "RECYCLED_BLOCKS",
    "SCATTER_TIMEOUT",
    "BlockResult",
    "BlockTask",
    "Continuation",
    "Dask",
    "Local",
    "Output",
    "OutputSpec",
    "Planned",
    "Progress",
    "Rates",
    "RecomputingStore",
    "RunSession",
    "SinkSpec",
    "Terminated",
    "VerifyReport",
    "WriteKeywords",
    "carry_digest",
    "check_function",
    "check_recomputed",
    "check_resumable",
    "clock",
    "cluster_client",
    "describe_function",
    "digest_kind",
    "input_values",
    "materialize",
    "open_output",
    "output_spec",
    "plan_output",
    "recompute_plan",
    "recomputing_store",
    "resume_chain",
    "run_block_tasks",
    "select_blocks",
    "si",
    "split_keywords",
    "verify",
    "verify_recipe_output",
    "write",
    "write_block",
]
