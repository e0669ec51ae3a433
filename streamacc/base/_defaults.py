"""Defaults chosen by benchmark, each with the reason it holds.

The figures behind each choice, and the commands that produce them, are on the
documentation's benchmark pages (and benchmarks/RESULTS.md). Kept free of heavy imports so
the command line starts fast.
"""

DEFAULT_BLOCK_BYTES = 8 * 2**20
"""Bytes of ys per block for compute (iter_blocks, scan), whatever one step outputs: large
enough to amortise a block's dispatch, small enough that its output buffers are reused
rather than mapped afresh, which page-faults."""

DEFAULT_WRITE_BLOCK_BYTES = 32 * 2**20
"""Bytes of ys per block when writing, whatever one step outputs: each block pays fixed
costs (chunk files, fsync, commit, checksum) that 32 MiB amortise, and memory holds a
few blocks (see ``info``)."""

ACCELERATORS = frozenset({"tpu", "gpu", "cuda", "rocm"})
"""The platforms (JAX's names) whose defaults are the accelerator's below; every other is treated as a CPU."""

ACCELERATOR_WRITE_BLOCK_BYTES = 32 * 2**20
"""Bytes of ys per block when writing from a TPU or GPU: on a TPU v5e the float32 headline and a
2**20-member ensemble wrote faster in blocks of 32 to 64 MiB than in blocks of 256 MiB, the
former close to the compute's own speed: the engine computes the next block while the host
copies one, and a copy of a smaller block overlaps the compute better (the Accelerators
benchmark page, its ``write`` scenarios). The same as a CPU's."""


def write_block_bytes(platform: str) -> int:
    """Bytes of ys per block when writing where JAX computes on ``platform`` (``jax.default_backend()``'s names)."""
    return ACCELERATOR_WRITE_BLOCK_BYTES if platform in ACCELERATORS else DEFAULT_WRITE_BLOCK_BYTES


ACCELERATOR_UNROLL = 64
"""The ``lax.scan`` unroll of a built-in recipe of a few operations a step on a TPU or GPU: a
loop trip costs far more there than such a step's arithmetic (on a TPU v5e the float32 gp
recipe ran an order of magnitude faster at unroll 8 than at 1, and as much again at 64: the
Accelerators benchmark page, its ``compute`` scenario), where on a CPU each recipe keeps the
unroll it runs fastest at (1, 2 or 8)."""

ACCELERATOR_COMPENSATED_UNROLL = 64
"""The unroll on a TPU or GPU of a compensated recipe (a step of error-free transformations,
a dozen operations): on a TPU v5e each compensated recipe ran faster at 64 than at 8 (the
running sum and product, whose input's reading takes most of a step, by little) and compiled
there in seconds (on a CPU far longer: a CPU keeps 2). Lorenz-63's RK4 step keeps its CPU
unroll, 1, on an accelerator, where 8 ran it no faster (the Accelerators benchmark page)."""


def recipe_unroll(cpu: int, platform: str, accelerator: int = ACCELERATOR_UNROLL) -> int:
    """The unroll of a built-in recipe whose unroll is ``cpu`` on a CPU and ``accelerator`` on a TPU or GPU,
    where JAX computes on ``platform``."""
    return accelerator if platform in ACCELERATORS else cpu


UNROLL_AT_MOST = 64
"""The largest unroll chosen on a TPU or GPU for a step that names none (the engine's rule,
``engine/_unroll.py``; a CPU runs such a step at 1). On a chip a loop trip costs far more than a cheap step, and
64 was the cheapest step's fastest unroll there (128 slower): the Accelerators benchmark page's ``user-steps``
scenario."""

LOOP_TRIP_SECONDS = 1.4e-6
"""What one trip of a scan's loop costs on a TPU or GPU beyond its step, which an unroll of u saves on all but one
step in u: the median of what the fastest unroll saved the user steps of the accelerator benchmark over unroll 1
on a TPU v5e (a GPU is taken to be as dear, unmeasured)."""

COMPILE_SECONDS_PER_OP = 1e-3
"""What one operation of a step's program adds to a block's compile per unrolled copy, about: the compile grows
with the unrolled body (the median over the accelerator benchmark's user steps, and a CPU's is of the same order).
An unroll is chosen only where the loop trips it saves over the run's length outweigh this."""

UNROLLED_OPS_AT_MOST = 4096
"""Operations of a step's program times the unroll chosen for it at most: a step drawing random numbers is
hundreds of operations, and its compile grew long past this while its speed did not."""

SHORT_VECTOR_UNROLL_AT_MOST = {"values": 8, "moved": 4}
"""The unroll chosen on a TPU or GPU for a step whose values include vectors shorter than ``SHORT_VECTOR`` (of 2
values or more), and for one that slices or stacks such vectors (a state built with ``jnp.stack``). On a TPU v5e a
3-vector multiply-add ran fastest at 8 (slower at 64), and a 3-vector Euler step built with ``jnp.stack`` ran as
fast at 2 or 4 as at any unroll but compiled far longer at 8 (the Accelerators benchmark page, ``user-steps``).
A state of a few scalars kept as a tuple of them unrolls as a scalar step does."""

SHORT_VECTOR = 128
"""Values of a vector a TPU pads to a row of its registers (one row's lanes): see ``SHORT_VECTOR_UNROLL_AT_MOST``."""

THINNED_UNROLL_ROW_BYTES_AT_MOST = 64 * 2**10
"""Bytes of the ys of ``save_every`` steps at most for an unroll to be chosen for a thinned scan: unrolled, a
thinned block stores every step's y before it keeps every ``save_every``-th (see ``_thinned_scan``)."""

ACCELERATOR_STREAM_HANDOVER = "ordered"
"""How a Stream's block crosses to the host on a TPU or GPU, where ``buffer_callback`` does
not lower (TPU) or reads device memory: an ordered ``io_callback`` (see
``stream/_program.py`` for the others). On a TPU v5e, in pieces of ``STREAM_PIECE_BYTES``, a
Stream of the float32 progression came closer to the write's time this way than by
token-chained callbacks (the Accelerators benchmark page, its ``stream-*`` scenarios)."""


def stream_handover(platform: str) -> str:
    """How a Stream's block crosses to the host where JAX computes on ``platform``: ``in_place`` on a CPU (a
    ``buffer_callback`` reads the program's buffers), :data:`ACCELERATOR_STREAM_HANDOVER` on any other."""
    return "in_place" if platform == "cpu" else ACCELERATOR_STREAM_HANDOVER


STREAM_PIECE_BYTES = 4 * 2**20
"""Bytes of ys a Stream hands over as one operand of a block's callback at most, where the
block crosses by ``io_callback`` (a TPU or GPU): each ys leaf crosses as consecutive rows in
pieces of this size (a row at least). On a TPU v5e the float32 progression's loop handed a
block of 32 MiB over about twice as fast as eight operands of 4 MiB as in one, close to
handing over a single value (the Accelerators benchmark page, its ``loops`` scenario): the
chip copies several operands at once, as it copies four quarters of an array faster than the
whole."""


def stream_piece_bytes(platform: str) -> int:
    """Bytes of ys a Stream's block callback takes as one operand at most where JAX computes on ``platform``
    (where a block crosses in place, on a CPU, it is one operand whatever its size)."""
    del platform  # measured on a TPU alone; a CPU's in-place crossing takes no pieces
    return STREAM_PIECE_BYTES


DEFAULT_BLOCK_SIZE = DEFAULT_BLOCK_BYTES // 8
"""Steps per block for compute of a float64 scalar series (2**20): the block of
``DEFAULT_BLOCK_BYTES``; blocks of other steps hold the same bytes."""

DEFAULT_WRITE_BLOCK_SIZE = DEFAULT_WRITE_BLOCK_BYTES // 8
"""Steps per block (and per chunk) when writing a float64 scalar series (2**22)."""

CARRY_SHARE_AT_MOST = 0.05
"""The carries a run keeps, as a share of the bytes its data hold at most: a block's carry is kept
after every block, or after every few where the carry is large beside a block's output (a
2**20-member float32 ensemble in blocks of 32 MiB keeps one every 3 blocks). A resume, an
extension or ``verify`` recomputes the blocks since the last kept carry, so this costs them up to
that many blocks of compute (see ``CARRIES_EVERY_AT_MOST``)."""

CARRY_ALWAYS_KEPT_BELOW = 1024
"""A carry that stores in fewer bytes is kept after every block, whatever the block's data: each block's
record takes a few hundred bytes anyway, and a block's chunks and a small carry both store mostly their
codec's fixed bytes (blosc's 16-byte header and the 4-byte CRC-32C for a scalar's 8)."""

CARRIES_EVERY_AT_MOST = 8
"""Blocks between two kept carries at most, whatever the carry's size: a thin output of a wide
state (a scalar diagnostic of a large field) has blocks of many steps, and a resume recomputes
up to this many of them."""

DEFAULT_INFLIGHT = 3
"""Blocks being encoded and written at once: enough to keep both cores busy, few
enough that peak memory stays a few blocks."""

DEFAULT_STREAM_INFLIGHT = DEFAULT_INFLIGHT
"""Blocks a Stream holds on the host at once, queued or being written (``streamacc.Stream``'s
``inflight``): as many as a write's, since each is a copy of the program's block in a
buffer the host reuses, as a write's block is a buffer of its pool; fewer would leave the
program waiting for a free one while a block is encoded."""

DEFAULT_VIRTUAL_INFLIGHT = 2
"""Blocks being summarised at once in a virtual write, which encodes and writes nothing:
two threads keep up with the computation, and a third would only hold another block's
memory."""

CODEC_NAMES = ("none", "zstd", "blosc-lz4", "blosc-lz4-bitshuffle", "blosc-zstd", "blosc-zstd-bitshuffle")
"""The codecs an output's arrays may be compressed with, by the names ``write(codec=...)`` and the command line
take (each made into zarr's compressors by ``store.compressors_for``)."""

MAX_CHUNK_BYTES = 2**31 - 1 - 16
"""The largest chunk (uncompressed) c-blosc compresses (its BLOSC_MAX_BUFFERSIZE: INT_MAX
less its 16-byte header); larger chunks fail with "blosc compression failed". No chunk
may be larger, whatever the codec, so that changing the codec never breaks a layout."""

DEFAULT_CODEC = "blosc-lz4"
"""Blosc LZ4 with byte shuffle: it compresses smooth series well and encodes faster than
a disk writes, where zarr's default (zstd) costs more CPU than the write it saves."""

DEFAULT_SUMMARY_WINDOWS = (2**12, 2**14, 2**16, 2**18, 2**20)
"""Rows per window of the summaries' levels (min, max, mean) of a long output, finest first.
A factor of 4 between levels gives a picture of ``points`` windows from a level of fewer than
4 times as many (of 1 or 2 times for a length of a power of two: ``overview(points=4096)`` of
2**30 steps reads 4096 windows, where levels 16 apart read 16,384); the finest, 2**12, keeps
the summaries of a float64 output under 1% of its compressed bytes (3 float64 and one int64
per 2**12 rows, the levels above it a third as much again); the coarsest, 2**20, gives the
4096 windows of a 2**32-step output's picture from four chunks per statistic. A shorter
output (or one thinned by ``save_every``) gets finer windows: see ``SUMMARY_WINDOWS_AT_LEAST``.
Outputs written before 1.1 keep their levels, 16 apart."""

VIRTUAL_SUMMARY_WINDOW_AT_MOST = 2**16
"""Rows the finest default window of a virtual output holds at most (see ``SUMMARY_VALUES_AT_MOST``)."""

SUMMARY_WINDOWS_AT_LEAST = 1024
"""Windows the finest default level gives at least (fewer for an output shorter than 1024
windows of ``SUMMARY_WINDOW_AT_LEAST`` rows): its window is the largest power of two that
many windows of which fit the output, at least ``SUMMARY_WINDOW_AT_LEAST`` and at most the
finest of ``DEFAULT_SUMMARY_WINDOWS``; the levels above it follow by 16, up to the output's
length. A picture then has detail however short or thinned the output.

Unless a state is large: the finest level then holds at most ``SUMMARY_VALUES_AT_MOST``
values per statistic (windows times the state's values), with windows still no longer than
the finest of ``DEFAULT_SUMMARY_WINDOWS``."""

SUMMARY_WINDOW_AT_LEAST = 128
"""Rows the finest default window holds at least, in an output of 2**16 values or more. A
window's summary stores four numbers per value of the state (min, max, mean and count, 32
bytes for float64) where the data store one per row, so summaries are about 4/W of the data
for windows of W rows, before compression: 3% at 128 (windows of one row made a 1000-step
output's summaries three times its data). A smaller output, whose summaries' metadata
outweighs their rows anyway, gets windows of ``SHORT_SUMMARY_WINDOW_AT_LEAST`` rows or more:
a picture of 3000 steps then has 188 windows."""

SHORT_SUMMARY_WINDOW_AT_LEAST = 16
"""Rows the finest default window holds at least in an output of fewer than 2**16 values (a virtual one: a
stored output that small has no summaries, see ``SMALL_OUTPUT_VALUES``)."""

SMALL_OUTPUT_VALUES = 2**18
"""Values (rows times each row's values, every summarised array together) a stored output holds at most to get
no window summaries by default: ``overview`` and ``streamacc plot`` read its data instead (2 MiB of float64 at
most), which draws every row (a 4096-row output: 4096 windows of one row, where summaries gave 256 of 16). Their
metadata documents and small files weigh on a short output: about a quarter of a 2**16-step output's bytes, and
less and less of longer ones (``streamacc info`` shows them). A virtual output, whose data are recomputed, keeps
its summaries."""

OVERVIEW_DATA_VALUES_AT_MOST = 2**22
"""Values of an output without summaries that ``overview`` reads to draw it, at most (32 MiB of float64, a
fraction of a second): a small output, or one written with ``summaries=False`` or grown by extension from a
small one. A larger one without summaries is refused, with the way to get them."""

SUMMARY_STATE_AT_MOST = 1024
"""Values of one step's output that the summaries keep apart at most: an output whose step
holds more (a 128x128 field, a 2**20-member ensemble) is summarised over its whole state per
window (the min, max, mean and count of every value of every step in the window), which is
what its picture draws and costs four numbers a window. Kept apart, each value's statistics
cost 4/W of the data for windows of W rows, but 4/rows for an output shorter than one
window: at this size an output of 2**16 values has 64 rows, and its summaries stay under
10% of its data (a 4096-value state of 16 rows would have them at a quarter)."""

SUMMARY_VALUES_AT_MOST = 2**20
"""Values per statistic the finest default level of a short output holds at most (8 MiB of
float64): each window of a 4096-point state is a row of 4096 values, and a level of many
such rows is many summary files, each written and fsynced on its own, which slows a short
write of a large state more than its picture gains (a 2**17-step heat equation gets 256
windows, not 1024).

A virtual output's finest default level holds at most this many, its windows growing past
the finest of ``DEFAULT_SUMMARY_WINDOWS`` up to ``VIRTUAL_SUMMARY_WINDOW_AT_MOST`` (2**16): its summaries are most of
what it stores, so fewer, longer windows keep a virtual output a small fraction of the
stored one. Windows of up to 2**16 steps, not longer, so that a run of 2**63 steps stopped
after a few billion still has windows to draw."""
