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

from typing import TYPE_CHECKING

from .._lazy import lazy_face

if TYPE_CHECKING:
    from ._axes import (
        RESERVED as RESERVED,
        array_dims as array_dims,
        check_span as check_span,
        chunk_rows as chunk_rows,
        default_chunks as default_chunks,
        divisor_at_most as divisor_at_most,
        is_calendar as is_calendar,
        resolve_chunks as resolve_chunks,
        shard_shape as shard_shape,
        stored_chunks as stored_chunks,
        time_attrs as time_attrs,
        times as times,
    )
    from ._blocking import (
        BLOCK_KEYWORDS as BLOCK_KEYWORDS,
        MAX_LENGTH as MAX_LENGTH,
        SCAN_DEFAULTS as SCAN_DEFAULTS,
        Blocking as Blocking,
        BlockKeywords as BlockKeywords,
        ScanKeywords as ScanKeywords,
        block_bounds as block_bounds,
        block_count as block_count,
        block_size_near as block_size_near,
        block_steps as block_steps,
        check_block_size as check_block_size,
        committed_span as committed_span,
        pool_size as pool_size,
        row_step as row_step,
        rows_in as rows_in,
        unrolled as unrolled,
    )
    from ._callsite import Site as Site, origin as origin, outside as outside, run_from as run_from, warn as warn
    from ._defaults import (
        ACCELERATOR_COMPENSATED_UNROLL as ACCELERATOR_COMPENSATED_UNROLL,
        ACCELERATOR_UNROLL as ACCELERATOR_UNROLL,
        ACCELERATOR_WRITE_BLOCK_BYTES as ACCELERATOR_WRITE_BLOCK_BYTES,
        ACCELERATORS as ACCELERATORS,
        CARRIES_EVERY_AT_MOST as CARRIES_EVERY_AT_MOST,
        CARRY_ALWAYS_KEPT_BELOW as CARRY_ALWAYS_KEPT_BELOW,
        CARRY_SHARE_AT_MOST as CARRY_SHARE_AT_MOST,
        CODEC_NAMES as CODEC_NAMES,
        COMPILE_SECONDS_PER_OP as COMPILE_SECONDS_PER_OP,
        DEFAULT_BLOCK_BYTES as DEFAULT_BLOCK_BYTES,
        DEFAULT_BLOCK_SIZE as DEFAULT_BLOCK_SIZE,
        DEFAULT_CODEC as DEFAULT_CODEC,
        DEFAULT_INFLIGHT as DEFAULT_INFLIGHT,
        DEFAULT_STREAM_INFLIGHT as DEFAULT_STREAM_INFLIGHT,
        DEFAULT_SUMMARY_WINDOWS as DEFAULT_SUMMARY_WINDOWS,
        DEFAULT_WRITE_BLOCK_BYTES as DEFAULT_WRITE_BLOCK_BYTES,
        DEFAULT_WRITE_BLOCK_SIZE as DEFAULT_WRITE_BLOCK_SIZE,
        LOOP_TRIP_SECONDS as LOOP_TRIP_SECONDS,
        OVERVIEW_DATA_VALUES_AT_MOST as OVERVIEW_DATA_VALUES_AT_MOST,
        SHORT_VECTOR as SHORT_VECTOR,
        SHORT_VECTOR_UNROLL_AT_MOST as SHORT_VECTOR_UNROLL_AT_MOST,
        THINNED_UNROLL_ROW_BYTES_AT_MOST as THINNED_UNROLL_ROW_BYTES_AT_MOST,
        UNROLL_AT_MOST as UNROLL_AT_MOST,
        UNROLLED_OPS_AT_MOST as UNROLLED_OPS_AT_MOST,
        recipe_unroll as recipe_unroll,
        stream_handover as stream_handover,
        stream_piece_bytes as stream_piece_bytes,
        write_block_bytes as write_block_bytes,
    )
    from ._layout import (
        LAYOUT_FIELDS as LAYOUT_FIELDS,
        STORED as STORED,
        Layout as Layout,
        Mode as Mode,
        Request as Request,
        Storage as Storage,
        check_request as check_request,
        check_written_length as check_written_length,
        default_windows as default_windows,
        over_state as over_state,
        too_long as too_long,
    )
    from ._threads import (
        STOP as STOP,
        Interrupted as Interrupted,
        SignalWatch as SignalWatch,
        Terminated as Terminated,
        check_stop as check_stop,
        interruptible as interruptible,
        on_own_thread as on_own_thread,
        run_interruptibly as run_interruptibly,
        run_ordered as run_ordered,
    )
    from ._values import (
        HostLeaf as HostLeaf,
        as_count as as_count,
        counted as counted,
        dtype_from_name as dtype_from_name,
        dtype_name as dtype_name,
        is_bfloat16 as is_bfloat16,
        is_float as is_float,
        numpy_float as numpy_float,
    )
else:  # type checkers read the imports above, and would take any name for one __getattr__ gives
    __getattr__, __dir__, __all__ = lazy_face(__name__, __file__)
