"""An output opened for writing: what a write asks of it (``_options``: how it is laid out, :class:`Layout`;
the mode; what it keeps of its blocks, :class:`Storage`), its layout (``_layout``: dimensions and chunks;
``_time``: the time axis), the output it must produce (``_spec``), a run's plan and output as every
writer derives them (``_planning``), opening it new, overwritten, resumed or extended (``_open``,
``_extend``, ``_debris``), and its in-order commits (``_output``; ``_batch``: blocks that commit
together).

These are the names the other rooms and wings use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ._batch import Batch as Batch
    from ._debris import remove_partial_writes as remove_partial_writes
    from ._extend import RowReader as RowReader
    from ._layout import (
        STEP as STEP,
        chunk_rows as chunk_rows,
        default_chunks as default_chunks,
        divisor_at_most as divisor_at_most,
        resolve_chunks as resolve_chunks,
        stored_chunks as stored_chunks,
    )
    from ._open import open_output as open_output
    from ._options import (
        LAYOUT_FIELDS as LAYOUT_FIELDS,
        STORED as STORED,
        VIRTUAL as VIRTUAL,
        Layout as Layout,
        Mode as Mode,
        Request as Request,
        Storage as Storage,
        check_request as check_request,
        check_written_length as check_written_length,
        storage_for as storage_for,
    )
    from ._output import BlockResult as BlockResult, Output as Output
    from ._planning import (
        Planned as Planned,
        again as again,
        block_bytes_here as block_bytes_here,
        plan_output as plan_output,
    )
    from ._spec import OutputSpec as OutputSpec, output_spec as output_spec, stored_identity as stored_identity
    from ._time import is_calendar as is_calendar, times as times

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
