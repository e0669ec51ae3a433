"""Defaults chosen by measurement on a 2-core machine with a slow disk.

The figures behind each choice, and the commands that produced them, are in
benchmarks/RESULTS.md. Kept free of heavy imports so the command line starts fast.
"""

DEFAULT_BLOCK_BYTES = 8 * 2**20
"""Bytes of ys per block for compute (iter_blocks, scan), whatever one step outputs:
2**18..2**20 float64 steps ran fastest; beyond about 8 MiB of ys per block, fresh output
buffers page-fault and throughput drops."""

DEFAULT_WRITE_BLOCK_BYTES = 32 * 2**20
"""Bytes of ys per block when writing, whatever one step outputs: each block pays fixed
costs (chunk files, fsync, commit, checksum) that 32 MiB amortise, and memory holds a
few blocks (see ``info``)."""

DEFAULT_BLOCK_SIZE = DEFAULT_BLOCK_BYTES // 8
"""Steps per block for compute of a float64 scalar series (2**20): the block of
``DEFAULT_BLOCK_BYTES``; blocks of other steps hold the same bytes."""

DEFAULT_WRITE_BLOCK_SIZE = DEFAULT_WRITE_BLOCK_BYTES // 8
"""Steps per block (and per chunk) when writing a float64 scalar series (2**22)."""

DEFAULT_INFLIGHT = 3
"""Blocks being encoded and written at once: enough to keep both cores busy, few
enough that peak memory stays a few blocks."""

DEFAULT_VIRTUAL_INFLIGHT = 2
"""Blocks being summarised at once in a virtual write, which encodes and writes nothing:
two threads keep up with the computation. A virtual write of 2**32 steps with summaries
peaked at 477-479 MB with two against 584-610 MB with three, in the same time (two runs
each, alternated, on the 2-core machine)."""

DEFAULT_CODEC = "blosc-lz4"
"""Blosc LZ4 with byte shuffle compressed the geometric progression 3.4x and encoded
faster than the disk writes; zarr's default (zstd level 0) was about 3x slower."""

DEFAULT_SUMMARY_WINDOWS = (2**12, 2**16, 2**20)
"""Rows per window of the summaries' levels (min, max, mean) of a long output, finest first.
A factor of 16 between levels keeps a picture of any length within 16x of the windows it
needs; the finest, 2**12, keeps the summaries of a float64 output under 1% of its
compressed bytes (3 float64 and one int64 per 2**12 rows); the coarsest, 2**20, gives the
4096 windows of a 2**32-step output's picture from four chunks per statistic. A shorter
output (or one thinned by ``save_every``) gets finer windows: see ``SUMMARY_WINDOWS_AT_LEAST``."""

SUMMARY_WINDOWS_AT_LEAST = 1024
"""Windows the finest default level gives at least (or one per row, for an output of fewer
rows): its window is the largest power of two that many windows of which fit the output,
at most the finest of ``DEFAULT_SUMMARY_WINDOWS``; the levels above it follow by 16, up to
the output's length. A picture then has detail however short or thinned the output.

Unless a state is large: the finest level then holds at most ``SUMMARY_VALUES_AT_MOST``
values per statistic (windows times the state's values), with windows still no longer than
the finest of ``DEFAULT_SUMMARY_WINDOWS``."""

SUMMARY_VALUES_AT_MOST = 2**20
"""Values per statistic the finest default level of a short output holds at most (8 MiB of
float64): each window of a 4096-point state is a row of 4096 values, and the 1024 windows
of ``SUMMARY_WINDOWS_AT_LEAST`` made 4096 summary files for a 2**17-step heat equation,
written and fsynced one by one, which slowed its write by half: it gets 256 windows.

A virtual output's finest default level holds at most this many, its windows growing past
the finest of ``DEFAULT_SUMMARY_WINDOWS`` up to the next (2**16): its summaries are most of
what it stores, and 2**22 windows of 4096 steps made a 2**34-step virtual write store 0.75%
of the bytes of the stored 2**32-step write, where the carries alone take 0.007%. Windows
of up to 2**16 steps, not longer, so that a run of 2**63 steps stopped after a few billion
still has windows to draw."""
