"""Where blocks run: as the caller says it (``_where``: ``Local``, ``Dask``; ``_keywords``: the
keywords ``write`` takes alone, routed to the scan, the layout and these), in this process
(``_local``), on a dask cluster (``_dask``, ``_cluster``), and the progress bar (``_progress``).

These are the names the other rooms and wings use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ._carry import CarryExecutor as CarryExecutor
    from ._cluster import cluster_client as cluster_client
    from ._dask import (
        BLOCKS_PER_TASK as BLOCKS_PER_TASK,
        SCATTER_TIMEOUT as SCATTER_TIMEOUT,
        BlockTask as BlockTask,
        DaskExecutor as DaskExecutor,
        SinkSpec as SinkSpec,
        run_block_tasks as run_block_tasks,
    )
    from ._keywords import WriteKeywords as WriteKeywords, split_keywords as split_keywords
    from ._local import Executor as Executor, LocalExecutor as LocalExecutor, write_block as write_block
    from ._progress import MIN_BAR as MIN_BAR, Progress as Progress, Rates as Rates, clock as clock, si as si
    from ._where import EXECUTOR_FIELDS as EXECUTOR_FIELDS, Dask as Dask, Local as Local, executor_for as executor_for

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
