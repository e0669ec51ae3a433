"""Defaults chosen by measurement on a 2-core machine with a slow disk.

The figures behind each choice, and the commands that produced them, are in
benchmarks/RESULTS.md. Kept free of heavy imports so the command line starts fast.
"""

DEFAULT_BLOCK_SIZE = 2**20
"""Steps per block for compute (iter_blocks, scan): 2**18..2**20 ran fastest; beyond
about 8 MiB of ys per block, fresh output buffers page-fault and throughput drops."""

DEFAULT_WRITE_BLOCK_SIZE = 2**22
"""Steps per block (and per chunk) when writing: each block pays fixed costs (chunk
file, fsync, commit, checksum) that 2**22 steps amortise; 32 MiB float64 chunks suit
dask."""

DEFAULT_INFLIGHT = 3
"""Blocks being encoded and written at once: enough to keep both cores busy, few
enough that peak memory stays a few blocks."""

DEFAULT_CODEC = "blosc-lz4"
"""Blosc LZ4 with byte shuffle compressed the geometric progression 3.4x and encoded
faster than the disk writes; zarr's default (zstd level 0) was about 3x slower."""

DEFAULT_SUMMARY_WINDOWS = (2**12, 2**16, 2**20)
"""Steps per window of the summaries' levels (min, max, mean), finest first. A factor of 16
between levels keeps a picture of any length within 16x of the windows it needs; the
finest, 2**12, keeps the summaries of a float64 output under 1% of its compressed bytes
(3 float64 and one int64 per 2**12 steps); the coarsest, 2**20, gives the 4096 windows
of a 2**32-step output's picture from four chunks per statistic."""
