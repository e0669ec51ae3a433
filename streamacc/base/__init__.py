"""The foundations every wing stands on: plain Python and numpy, no JAX, no Zarr.

- ``_defaults``: the defaults chosen by benchmark, each with the reason it holds;
- ``_values``: values as a caller gives them, checked with nothing but Python (shared by the
  library and the command line), and dtypes by name, ``bfloat16`` included;
- ``_blocking``: a scan's steps and how they run in blocks (:class:`Blocking`), and the
  arithmetic of blocks, rows and spans;
- ``_callsite``: where a warning points (the caller's line, even from streamacc's threads);
- ``_lazy``: the lazy re-exports each wing's ``__init__`` is made of.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_exports as lazy_exports

if TYPE_CHECKING:
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
        check_length as check_length,
        committed_span as committed_span,
        pool_size as pool_size,
        row_step as row_step,
        rows_in as rows_in,
        unrolled as unrolled,
    )
    from ._callsite import Site as Site, origin as origin, outside as outside, run_from as run_from, warn as warn
    from ._defaults import (
        ACCELERATOR_COMPENSATED_UNROLL as ACCELERATOR_COMPENSATED_UNROLL,
        ACCELERATOR_STREAM_HANDOVER as ACCELERATOR_STREAM_HANDOVER,
        ACCELERATOR_UNROLL as ACCELERATOR_UNROLL,
        ACCELERATOR_WRITE_BLOCK_BYTES as ACCELERATOR_WRITE_BLOCK_BYTES,
        ACCELERATORS as ACCELERATORS,
        CARRIES_EVERY_AT_MOST as CARRIES_EVERY_AT_MOST,
        CARRY_ALWAYS_KEPT_BELOW as CARRY_ALWAYS_KEPT_BELOW,
        CARRY_SHARE_AT_MOST as CARRY_SHARE_AT_MOST,
        CODEC_NAMES as CODEC_NAMES,
        COMPILE_SECONDS_PER_OP as COMPILE_SECONDS_PER_OP,
        CPU_UNROLLED_STEP_AT_MOST as CPU_UNROLLED_STEP_AT_MOST,
        DEFAULT_BLOCK_BYTES as DEFAULT_BLOCK_BYTES,
        DEFAULT_BLOCK_SIZE as DEFAULT_BLOCK_SIZE,
        DEFAULT_CODEC as DEFAULT_CODEC,
        DEFAULT_INFLIGHT as DEFAULT_INFLIGHT,
        DEFAULT_STREAM_INFLIGHT as DEFAULT_STREAM_INFLIGHT,
        DEFAULT_SUMMARY_WINDOWS as DEFAULT_SUMMARY_WINDOWS,
        DEFAULT_VIRTUAL_INFLIGHT as DEFAULT_VIRTUAL_INFLIGHT,
        DEFAULT_WRITE_BLOCK_BYTES as DEFAULT_WRITE_BLOCK_BYTES,
        DEFAULT_WRITE_BLOCK_SIZE as DEFAULT_WRITE_BLOCK_SIZE,
        LOOP_TRIP_SECONDS as LOOP_TRIP_SECONDS,
        MAX_CHUNK_BYTES as MAX_CHUNK_BYTES,
        OVERVIEW_DATA_VALUES_AT_MOST as OVERVIEW_DATA_VALUES_AT_MOST,
        SHORT_SUMMARY_WINDOW_AT_LEAST as SHORT_SUMMARY_WINDOW_AT_LEAST,
        SHORT_VECTOR as SHORT_VECTOR,
        SHORT_VECTOR_UNROLL_AT_MOST as SHORT_VECTOR_UNROLL_AT_MOST,
        SMALL_OUTPUT_VALUES as SMALL_OUTPUT_VALUES,
        STREAM_PIECE_BYTES as STREAM_PIECE_BYTES,
        SUMMARY_STATE_AT_MOST as SUMMARY_STATE_AT_MOST,
        SUMMARY_VALUES_AT_MOST as SUMMARY_VALUES_AT_MOST,
        SUMMARY_WINDOW_AT_LEAST as SUMMARY_WINDOW_AT_LEAST,
        SUMMARY_WINDOWS_AT_LEAST as SUMMARY_WINDOWS_AT_LEAST,
        THINNED_UNROLL_ROW_BYTES_AT_MOST as THINNED_UNROLL_ROW_BYTES_AT_MOST,
        UNROLL_AT_MOST as UNROLL_AT_MOST,
        UNROLLED_OPS_AT_MOST as UNROLLED_OPS_AT_MOST,
        VIRTUAL_SUMMARY_WINDOW_AT_MOST as VIRTUAL_SUMMARY_WINDOW_AT_MOST,
        recipe_unroll as recipe_unroll,
        stream_handover as stream_handover,
        stream_piece_bytes as stream_piece_bytes,
        write_block_bytes as write_block_bytes,
    )
    from ._lazy import lazy_exports as lazy_exports, listed_exports as listed_exports
    from ._values import (
        as_choice as as_choice,
        as_count as as_count,
        as_unroll as as_unroll,
        dtype_from_name as dtype_from_name,
        dtype_name as dtype_name,
        is_bfloat16 as is_bfloat16,
        is_float as is_float,
        numpy_float as numpy_float,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
