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
