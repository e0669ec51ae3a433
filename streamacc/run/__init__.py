"""A run's life, from a plan to a committed output, and what reads and checks it afterwards.

The wing is in rooms, each knowing one thing, listed from the bottom up (a room imports
only from the rooms below it):

- ``threads``: work on threads, signals that end a run promptly, the ordered pipeline;
- ``bookkeeping``: the bookkeeping format: what an output records about its run (manifest,
  block records, identity, kept carries) and what every reader checks before it trusts an output;
- ``output``: an output opened for writing, its layout and its in-order commits;
- ``recompute`` and ``read``: recomputing committed blocks; ``open``, ``overview``, ``info``, ``to_arviz``;
- ``execute``: where blocks run (this process, a dask cluster) and the progress bar;
- ``session``: a run's session on its output (the writer lock, the progress bar, the output opened,
  what a failure is raised as), which ``_write``, ``_materialize`` and ``stream`` share;

and ``_write``, which puts them together, and ``stream``, which puts them together around a
program jitted by its caller (:class:`Stream`). These are the names the other wings and the
public face use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import lazy_exports

if TYPE_CHECKING:
    from ..base import (
        DEFAULT_WRITE_BLOCK_SIZE as DEFAULT_WRITE_BLOCK_SIZE,
        stream_handover as stream_handover,
        stream_piece_bytes as stream_piece_bytes,
        write_block_bytes as write_block_bytes,
    )
    from ._materialize import materialize as materialize
    from ._write import write as write
    from .bookkeeping import load_manifest as load_manifest
    from .execute import Dask as Dask, Local as Local, cluster_client as cluster_client, si as si
    from .output import Layout as Layout, Mode as Mode, check_written_length as check_written_length
    from .read import (
        ArrayInfo as ArrayInfo,
        MemoryEstimate as MemoryEstimate,
        OutputInfo as OutputInfo,
        SummaryInfo as SummaryInfo,
        info as info,
        open as open,
        overview as overview,
        overview_table as overview_table,
        to_arviz as to_arviz,
    )
    from .recompute import VerifyReport as VerifyReport, verify as verify, verify_recipe_output as verify_recipe_output
    from .stream import Stream as Stream
    from .threads import Terminated as Terminated, run_interruptibly as run_interruptibly

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
