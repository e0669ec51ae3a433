"""A run's life, from a plan to a committed output: ``write``, ``materialize`` and ``verify``, and what they share.

Its modules, from the top (a module imports only from those listed below it, or beside it):

- ``_write`` (:func:`write`: request, plan, session, executor) and ``_materialize``
  (:func:`materialize`: a virtual output's data stored);
- ``_session``: a run's session on its output (``RunSession``: the target, its writer lock,
  the progress bar, the output opened and committed, the error a failure is raised as), which
  ``write``, ``materialize`` and the Stream share;
- where blocks run: ``_dask`` (block tasks on a cluster, written as ``_execute`` writes them),
  ``_execute`` (``Local``, ``Dask`` as the caller says it, the keywords ``write`` takes alone,
  this process's executors, a block written) and ``_cluster`` (a dask cluster: a local one, or
  a running one reached at its address; its workers' sessions);
- recomputing committed blocks: ``_verify`` (``verify``, a recipe's output, the check a resume
  makes first), ``_checker`` (an output's checks, kept carries rebuilt) and ``_virtual``
  (``RecomputingStore``: a virtual output read through zarr);
- the output opened for writing: ``_planning`` (a run's plan and output spec), ``_open``
  (the table of openers), ``_extend``, ``_commit`` (``Output``: in-order commits, batches);
- ``_identity``: a run's identity made from its plan, its step function's fingerprint.

These are the names the other wings and the public face use.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_face

if TYPE_CHECKING:
    from ..base import (  # what a run raises for SIGTERM, as the guide names it (``streamacc.run.Terminated``)
        Terminated as Terminated,
    )
    from ._cluster import cluster_client as cluster_client
    from ._commit import BlockResult as BlockResult, Output as Output
    from ._dask import (
        BLOCKS_PER_TASK as BLOCKS_PER_TASK,
        BlockTask as BlockTask,
        SinkSpec as SinkSpec,
        run_block_tasks as run_block_tasks,
    )
    from ._execute import (
        Dask as Dask,
        Local as Local,
        WriteKeywords as WriteKeywords,
        split_keywords as split_keywords,
        write_block as write_block,
    )
    from ._identity import (
        carry_digest as carry_digest,
        describe_function as describe_function,
        digest_kind as digest_kind,
        input_values as input_values,
    )
    from ._materialize import materialize as materialize
    from ._open import Continuation as Continuation, open_output as open_output
    from ._planning import (
        OutputSpec as OutputSpec,
        Planned as Planned,
        output_spec as output_spec,
        plan_output as plan_output,
    )
    from ._session import (
        MIN_BAR as MIN_BAR,
        Progress as Progress,
        Rates as Rates,
        RunSession as RunSession,
        clock as clock,
        si as si,
    )
    from ._verify import (
        VerifyReport as VerifyReport,
        check_function as check_function,
        check_recomputed as check_recomputed,
        check_resumable as check_resumable,
        resume_chain as resume_chain,
        select_blocks as select_blocks,
        verify as verify,
        verify_recipe_output as verify_recipe_output,
    )
    from ._virtual import (
        RECYCLED_BLOCKS as RECYCLED_BLOCKS,
        RecomputingStore as RecomputingStore,
        recompute_plan as recompute_plan,
        recomputing_store as recomputing_store,
    )
    from ._write import write as write
else:  # type checkers read the imports above, and would take any name for one __getattr__ gives
    __getattr__, __dir__, __all__ = lazy_face(__name__, __file__)
