"""The foundations every wing stands on, and what a run is asked, checked before anything heavy is imported.

Plain Python, numpy where a dtype or a time is computed (imported then), no JAX, no Zarr:
the command line checks its arguments with this wing alone.

- ``_defaults``: the defaults chosen by benchmark, each with the reason it holds (the codec
  names among them);
- ``_values``: values as a caller gives them, checked (shared by the library and the command
  line), dtypes by name (``bfloat16`` included), a carry leaf as host data;
- ``_blocking``: a scan's steps and how they run in blocks (:class:`Blocking`, the keywords
  that spell them), and the arithmetic of blocks, rows and spans;
- ``_layout``: what a write asks of its output (:class:`Layout`, the mode, what it keeps of
  its blocks) and the summary windows it asks for;
- ``_axes``: the output arrays' dimensions and chunk shapes, and the time axis;
- ``_threads``: work on threads (signals end a run promptly, blocks commit in production order,
  signals noticed inside XLA);
- ``_callsite``: where a warning points (the caller's line, even from streamacc's threads).
"""

from ._axes import (
    RESERVED,
    array_dims,
    check_span,
    chunk_rows,
    default_chunks,
    divisor_at_most,
    is_calendar,
    resolve_chunks,
    shard_shape,
    stored_chunks,
    time_attrs,
    times,
)
from ._blocking import (
    BLOCK_KEYWORDS,
    MAX_LENGTH,
    SCAN_DEFAULTS,
    Blocking,
    BlockKeywords,
    ScanKeywords,
    block_bounds,
    block_count,
    block_size_near,
    block_steps,
    check_block_size,
    committed_span,
    pool_size,
    row_step,
    rows_in,
    unrolled,
)
from ._callsite import Site, origin, outside, run_from, warn
from ._defaults import (
    ACCELERATOR_COMPENSATED_UNROLL,
    ACCELERATOR_UNROLL,
    ACCELERATOR_WRITE_BLOCK_BYTES,
    ACCELERATORS,
    CARRIES_EVERY_AT_MOST,
    CARRY_ALWAYS_KEPT_BELOW,
    CARRY_SHARE_AT_MOST,
    CODEC_NAMES,
    COMPILE_SECONDS_PER_OP,
    CPU_UNROLLED_STEP_AT_MOST,
    DEFAULT_BLOCK_BYTES,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_CODEC,
    DEFAULT_INFLIGHT,
    DEFAULT_STREAM_INFLIGHT,
    DEFAULT_SUMMARY_WINDOWS,
    DEFAULT_WRITE_BLOCK_BYTES,
    DEFAULT_WRITE_BLOCK_SIZE,
    LOOP_TRIP_SECONDS,
    OVERVIEW_DATA_VALUES_AT_MOST,
    SHORT_VECTOR,
    SHORT_VECTOR_UNROLL_AT_MOST,
    THINNED_UNROLL_ROW_BYTES_AT_MOST,
    UNROLL_AT_MOST,
    UNROLLED_OPS_AT_MOST,
    recipe_unroll,
    stream_handover,
    stream_piece_bytes,
    write_block_bytes,
)
from ._layout import (
    LAYOUT_FIELDS,
    STORED,
    Layout,
    Mode,
    Request,
    Storage,
    check_request,
    check_written_length,
    default_windows,
    over_state,
    too_long,
)
from ._threads import (
    STOP,
    Interrupted,
    SignalWatch,
    Terminated,
    check_stop,
    interruptible,
    on_own_thread,
    run_interruptibly,
    run_ordered,
)
from ._values import HostLeaf, as_count, dtype_from_name, dtype_name, is_bfloat16, is_float, numpy_float

__all__ = [
    "ACCELERATORS", "ACCELERATOR_COMPENSATED_UNROLL", "ACCELERATOR_UNROLL", "ACCELERATOR_WRITE_BLOCK_BYTES",
    "BLOCK_KEYWORDS", "CARRIES_EVERY_AT_MOST", "CARRY_ALWAYS_KEPT_BELOW", "CARRY_SHARE_AT_MOST", "CODEC_NAMES",
    "COMPILE_SECONDS_PER_OP", "CPU_UNROLLED_STEP_AT_MOST", "DEFAULT_BLOCK_BYTES", "DEFAULT_BLOCK_SIZE", "DEFAULT_CODEC",
    "DEFAULT_INFLIGHT", "DEFAULT_STREAM_INFLIGHT", "DEFAULT_SUMMARY_WINDOWS", "DEFAULT_WRITE_BLOCK_BYTES",
    "DEFAULT_WRITE_BLOCK_SIZE", "LAYOUT_FIELDS", "LOOP_TRIP_SECONDS", "MAX_LENGTH", "OVERVIEW_DATA_VALUES_AT_MOST",
    "RESERVED", "SCAN_DEFAULTS", "SHORT_VECTOR", "SHORT_VECTOR_UNROLL_AT_MOST", "STOP", "STORED",
    "THINNED_UNROLL_ROW_BYTES_AT_MOST", "UNROLLED_OPS_AT_MOST", "UNROLL_AT_MOST", "BlockKeywords", "Blocking",
    "HostLeaf", "Interrupted", "Layout", "Mode", "Request", "ScanKeywords", "SignalWatch", "Site", "Storage",
    "Terminated", "array_dims", "as_count", "block_bounds", "block_count", "block_size_near", "block_steps",
    "check_block_size", "check_request", "check_span", "check_stop", "check_written_length", "chunk_rows",
    "committed_span", "default_chunks", "default_windows", "divisor_at_most", "dtype_from_name", "dtype_name",
    "interruptible", "is_bfloat16", "is_calendar", "is_float", "numpy_float", "on_own_thread", "origin", "outside",
    "over_state", "pool_size", "recipe_unroll", "resolve_chunks", "row_step", "rows_in", "run_from",
    "run_interruptibly", "run_ordered", "shard_shape", "stored_chunks", "stream_handover", "stream_piece_bytes",
    "time_attrs", "times", "too_long", "unrolled", "warn", "write_block_bytes",
]
