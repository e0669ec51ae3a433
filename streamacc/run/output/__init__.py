"""An output opened for writing: the layout a write asks for (``_layout``: dimensions and
chunks; ``_time``: the time axis), opening it new, overwritten or resumed and its in-order
commits (``_output``), and extending a finished run (``_extend``).

These are the names the other rooms and wings use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from ._layout import (
        STEP as STEP,
        array_dims as array_dims,
        chunk_rows as chunk_rows,
        resolve_chunks as resolve_chunks,
        stored_chunks as stored_chunks,
    )
    from ._output import (
        BlockResult as BlockResult,
        Output as Output,
        OutputSpec as OutputSpec,
        open_output as open_output,
    )
    from ._time import check_time as check_time, is_calendar as is_calendar, time_attrs as time_attrs, times as times

_EXPORTS = {
    "._layout": ["STEP", "array_dims", "chunk_rows", "resolve_chunks", "stored_chunks"],
    "._output": ["BlockResult", "Output", "OutputSpec", "open_output"],
    "._time": ["check_time", "is_calendar", "time_attrs", "times"],
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
