"""``info``: what an output holds, read from its manifest and metadata alone (no JAX, no data read)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..base import DEFAULT_INFLIGHT, pool_size
from ..record import RunIdentity, decode_leaves, describe_nonfinite, trusted_manifest
from ..store import BOOKKEEPING, ZarrSink, open_target
from ..summaries import SUMMARIES, summarized_names

__all__ = ["ArrayInfo", "MemoryEstimate", "OutputInfo", "SummaryInfo", "info", "memory_estimate"]


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """The memory a local :func:`streamacc.write` of an output takes beyond Python, JAX and zarr.

    ``OutputInfo.memory`` holds it for an output.

    The engine computes into a fixed pool of block buffers (the blocks being written plus
    the one being computed), each writer thread encodes into a buffer as large as one
    chunk and assembles a partial or split chunk in another, every block in flight holds
    the carry it ended with, and an unrolled, thinned block holds every step's y while it
    computes. All sizes are in bytes. What the step itself needs while XLA computes it
    (the temporaries of a stencil over a large field: three times the field for a
    five-point one) comes on top, which the output does not record; and the allocator
    may keep freed buffers of a large state's size for reuse.

    Attributes
    ----------
    block_bytes : int
        One block's ys: the size of each buffer of the pool (a short output's blocks hold
        its rows alone).
    pool_blocks : int
        Block buffers in the pool (on a CPU: the blocks in flight plus the one computing).
    blocks : int
        The pool's bytes, ``pool_blocks * block_bytes``.
    encoders : int
        The writer threads' encoding buffers, two chunks per thread.
    computing : int
        Every step's y of a block computing with ``unroll`` > 1 and ``save_every`` > 1
        (0 otherwise).
    carries : int
        The carries the blocks in flight and the one computing hold (the carry entering it
        and the one it makes).
    total : int
        The sum: ``blocks + encoders + computing + carries``.

    Examples
    --------
    >>> memory = streamacc.info("gp.zarr").memory
    >>> memory.pool_blocks, memory.total == memory.blocks + memory.encoders + memory.computing + memory.carries
    (4, True)
    """

    block_bytes: int
    pool_blocks: int
    blocks: int
    encoders: int
    computing: int
    carries: int
    total: int


def memory_estimate(
    block_bytes: int,
    chunk_bytes: int,
    inflight: int = DEFAULT_INFLIGHT,
    computing_bytes: int = 0,
    carry_bytes: int = 0,
) -> MemoryEstimate:
    """The memory a local write of blocks of ``block_bytes`` in chunks of ``chunk_bytes`` takes (see MemoryEstimate)."""
    pool = pool_size(inflight)
    blocks = pool * block_bytes
    encoders = inflight * 2 * chunk_bytes
    carries = (pool + 1) * carry_bytes
    total = blocks + encoders + computing_bytes + carries
    return MemoryEstimate(block_bytes, pool, blocks, encoders, computing_bytes, carries, total)


@dataclasses.dataclass(frozen=True)
class ArrayInfo:
    """One output array, as :func:`streamacc.info` describes it (``OutputInfo.arrays[name]``).

    Attributes
    ----------
    shape : tuple of int
        The array's shape, rows (steps, or kept steps) first.
    dtype : str
        Its dtype, e.g. ``"float64"``.
    dims : tuple of str
        Its dimension names, ``"step"`` first.
    chunks : tuple of int
        Its chunk shape.
    codec : str
        The compressor it was written with, e.g. ``"blosc-lz4"``.
    stored_bytes : int
        Bytes stored for the committed rows.
    compression_ratio : float or None
        Bytes of the committed rows over the bytes stored for them (None when nothing is
        stored).
    shards : tuple of int or None
        The shape of the shards its chunks are stored in (a block's rows as one object, each
        chunk readable alone), or None where each chunk is an object of its own (outputs
        whose blocks are one chunk, and those of streamacc 1.1 and earlier).

    Examples
    --------
    >>> x = streamacc.info("gp.zarr").arrays["y"]
    >>> x.shape, x.dims, x.codec
    ((2097152,), ('step',), 'blosc-lz4')
    """

    shape: tuple[int, ...]
    dtype: str
    dims: tuple[str | None, ...]
    chunks: tuple[int, ...]
    codec: str
    stored_bytes: int
    compression_ratio: float | None
    shards: tuple[int, ...] | None = None


@dataclasses.dataclass(frozen=True)
class SummaryInfo:
    """An output's window summaries, as :func:`streamacc.info` describes them (``OutputInfo.summaries``).

    Attributes
    ----------
    windows : tuple of int
        The window length of each level, in rows (steps, unless ``save_every`` thins
        them), finest first.
    arrays : tuple of str
        The output arrays summarised (those of ordered numbers).
    stored_bytes : int
        Bytes the summaries take in the store.
    percent_of_data : float or None
        ``stored_bytes`` as a percentage of the data's stored bytes (None when no data is
        stored).
    over_state : tuple of str
        The arrays summarised over their whole state (a state of more than 1024 values):
        each window's min, max, mean and count over every value of its steps, where the
        others have them value by value.

    Examples
    --------
    >>> streamacc.info("gp.zarr").summaries.windows
    (1024, 4096, 16384, 65536, 262144)
    """

    windows: tuple[int, ...]
    arrays: tuple[str, ...]
    stored_bytes: int
    percent_of_data: float | None
    over_state: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class OutputInfo:
    """What :func:`streamacc.info` returns; ``str()`` of it is what ``streamacc info`` prints.

    Attributes
    ----------
    path : str
        The output, as given (a path or URL).
    arrays : dict of str to ArrayInfo
        Each output array by name.
    committed_steps : int
        Steps committed so far (all of them once the run is complete).
    committed_rows : int
        Output rows the committed steps fill (``committed_steps // save_every``).
    total_steps : int
        Steps of the whole run: its ``length``, or, for a run that ended on its condition,
        those up to and including the step where it did (``ended_at + 1``), as the root's
        ``streamacc_total_steps`` and the manifest count them.
    complete : bool
        Whether the run finished (to its length, or ended on its condition).
    recipe : str or None
        The command line's recipe that wrote it (None for a Python step function).
    params : dict or None
        The recipe's parameters (None for a Python step function).
    function : str
        The step function, as the run's identity records it: a recipe's repr, or
        ``module.name code:<crc> values:<crc>``.
    block_size : int
        Steps per block.
    save_every : int
        Every how many steps a row is kept (1: every step).
    unroll : int or bool
        ``lax.scan``'s unroll the run used.
    unroll_chosen : bool
        Whether that unroll was chosen for the step (none was given; False for an output
        of a release before 1.1, whose default was 1).
    time : dict or None
        The time axis (``{"step": dt, "start": t0, "units": ...}``), if any.
    versions : dict of str to str
        The versions that wrote it: streamacc, jax, and JAX's backend.
    memory : MemoryEstimate
        The memory a local write of this output takes beyond Python, JAX and zarr.
    summaries : SummaryInfo or None
        The window summaries (None when the output has none).
    virtual : bool
        Written with ``virtual=True``: the data of some blocks may not be stored, and are
        recomputed when read.
    stored_blocks : int
        Committed blocks whose data are stored (all of them, unless ``virtual``).
    committed_blocks : int
        Blocks committed so far.
    nonfinite_step : int or None
        The first step, in scan order, found holding a NaN or an infinity, as each block
        was written: the step whose y holds one, or, where ``nonfinite_array`` is None
        (a virtual output without summaries, which computes no ys), the step after which
        the carry leaving a block first holds one. None when none was found, and for an
        output written before streamacc recorded it.
    nonfinite_array : str or None
        The output array whose y at ``nonfinite_step`` holds a NaN or an infinity (the
        first such array in ``arrays`` order); None for the carry, or when none was found.
    carries_every : int
        The run keeps the carry after every this many blocks (and after its last): 1 unless
        the carry is large beside a block's data (see the output format's carries).
    bookkeeping_bytes : int
        Bytes the kept carries, the block records and the manifest take in the store (the
        summaries' are in ``summaries``).
    until : str or None
        The run's condition (``until``), as its identity records it (``module.name
        code:<crc> values:<crc>``); None for a run without one.
    ended_at : int or None
        The step where the run's condition held, its last (``committed_steps`` is one
        more); None where it did not end on its condition.
    length : int
        The ``length`` the run was given: the most steps it runs (``total_steps`` but for
        a run that ended on its condition), which its layout of blocks and an extension
        count from.

    Examples
    --------
    >>> about = streamacc.info("gp.zarr")
    >>> about.complete, about.total_steps, about.block_size, list(about.arrays)
    (True, 2097152, 4194304, ['y'])
    >>> print(about)  # doctest: +NORMALIZE_WHITESPACE
    gp.zarr: 2097152 of 2097152 steps committed, complete
      recipe: __main__.step code:... values:...  params: None
    ...
      y: shape (2097152,) float64 dims ('step',) chunks (524288,) in shards of (4194304,) codec blosc-lz4 stored ...
      bytes (compression ...)
    ...
    """

    path: str
    arrays: dict[str, ArrayInfo]
    committed_steps: int
    committed_rows: int
    total_steps: int
    complete: bool
    recipe: str | None
    params: dict[str, Any] | None
    function: str
    block_size: int
    save_every: int
    unroll: int | bool
    time: dict[str, Any] | None
    versions: dict[str, str]
    memory: MemoryEstimate
    summaries: SummaryInfo | None
    virtual: bool = False
    stored_blocks: int = 0
    committed_blocks: int = 0
    nonfinite_step: int | None = None
    nonfinite_array: str | None = None
    carries_every: int = 1
    bookkeeping_bytes: int = 0
    unroll_chosen: bool = False
    until: str | None = None
    ended_at: int | None = None
    length: int = 0

    def __str__(self) -> str:
        return format_description(self)


def info(store: Any, *, storage_options: dict[str, Any] | None = None) -> OutputInfo:
    """Describe an output: its arrays, layout, codec, compression, committed steps, recipe and summaries.

    Reads the manifest and the arrays' metadata only, never the data, and imports no JAX;
    works on read-only stores and while a run is still writing.

    Parameters
    ----------
    store : str, os.PathLike or zarr store
        The output: a local path, an fsspec URL (with ``storage_options``) or a zarr store.
    storage_options : dict, optional
        fsspec options for a URL ``store``.

    Returns
    -------
    OutputInfo
        What the output holds; ``print(info)`` shows what ``streamacc info`` prints.

    Raises
    ------
    streamacc.errors.NoOutputError
        Nothing is there, or no streamacc output.
    streamacc.errors.VerifyError
        The output's structure cannot be trusted (see :func:`streamacc.verify`).

    Examples
    --------
    >>> about = streamacc.info("gp.zarr")
    >>> about.committed_steps, about.arrays["y"].dtype
    (2097152, 'float64')
    """
    from ..store import ArrayV3Metadata

    target = open_target(store, storage_options=storage_options, read_only=True)
    manifest = trusted_manifest(target)
    ident = manifest.identity
    blocking = ident.blocking
    every = blocking.save_every
    sink = ZarrSink.open(target, ident.names)
    first, last = manifest.rows()
    stored_bytes = sink.stored_bytes((first, last))
    block_rows = min(blocking.size, blocking.length) // every  # a short output's one block holds its rows
    arrays, block_bytes, chunk_bytes = {}, 0, 0
    for name, arr in sink.arrays.items():
        row_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
        block_bytes += block_rows * row_bytes
        shards = None if arr.shards is None else tuple(int(n) for n in arr.shards)
        stored_unit = arr.chunks if shards is None else shards  # what an encoder holds at once
        chunk_bytes = max(chunk_bytes, int(np.prod(stored_unit, dtype=np.int64)) * arr.dtype.itemsize)
        written = (last - first) * row_bytes
        stored = stored_bytes[name]
        meta = arr.metadata
        assert isinstance(meta, ArrayV3Metadata)  # the sink opens Zarr v3 arrays only
        arrays[name] = ArrayInfo(
            shape=tuple(int(n) for n in arr.shape),
            dtype=str(arr.dtype),
            dims=tuple(meta.dimension_names or ()),
            chunks=tuple(int(n) for n in arr.chunks),
            codec=ident.codec,
            stored_bytes=stored,
            compression_ratio=round(written / stored, 3) if stored else None,
            shards=shards,
        )
    unrolled = every > 1 and blocking.unroll is not True and blocking.unroll not in (False, 1, None)
    computing = block_bytes * every if unrolled else 0  # see engine/_kernels._thinned_scan
    return OutputInfo(
        path=target.label,
        arrays=arrays,
        committed_steps=manifest.committed_steps,
        committed_rows=last - first,
        total_steps=manifest.length,
        complete=manifest.complete,
        recipe=ident.recipe,
        params=ident.params,
        function=ident.function or "",
        block_size=blocking.size,
        save_every=every,
        unroll=blocking.unrolled_by,
        unroll_chosen=ident.unroll_chosen,
        time=ident.time,
        versions=ident.versions,
        memory=memory_estimate(block_bytes, chunk_bytes, computing_bytes=computing, carry_bytes=_carry_bytes(manifest)),
        summaries=_summaries(target, ident, sum(stored_bytes.values())),
        virtual=manifest.virtual,
        stored_blocks=manifest.stored_count(),
        committed_blocks=manifest.committed_blocks,
        nonfinite_step=None if manifest.nonfinite is None else manifest.nonfinite["step"],
        nonfinite_array=None if manifest.nonfinite is None else manifest.nonfinite["array"],
        carries_every=1 if manifest.carries is None else manifest.carries["every"],
        bookkeeping_bytes=sum(n for key, n in target.sizes(f"{BOOKKEEPING}/").items() if not key.startswith(SUMMARIES)),
        until=ident.to_json().get("until"),
        ended_at=manifest.ended_at,
        length=blocking.length,
    )


def _summaries(target: Any, ident: RunIdentity, data_bytes: int) -> SummaryInfo | None:
    """The summary levels, the outputs they cover and the bytes they take (None without summaries)."""
    windows = ident.summaries
    names = summarized_names(ident.arrays)
    if not windows or not names:
        return None
    stored = sum(target.sizes(f"{SUMMARIES}/").values())
    share = round(100 * stored / data_bytes, 3) if data_bytes else None
    over = tuple(n for n in names if n in ident.over_state)
    return SummaryInfo(tuple(windows), tuple(names), stored, share, over)


def _carry_bytes(manifest: Any) -> int:
    """The bytes of the run's carry, from its stored form (format 3) or the carry recorded in the manifest."""
    if manifest.carries is not None:
        return sum(leaf.nbytes for leaf in manifest.carry_leaves)
    return sum(a.nbytes for a, _ in decode_leaves(manifest.carry or []))


def _mib(nbytes: int) -> str:
    """A size in bytes a person reads: ``512 B``, ``12.5 KiB``, ``32.0 MiB``, ``1.50 GiB``."""
    if nbytes < 2**10:
        return f"{nbytes} B"
    if nbytes < 2**20:
        return f"{nbytes / 2**10:.1f} KiB"
    if nbytes < 2**30:
        return f"{nbytes / 2**20:.1f} MiB"
    return f"{nbytes / 2**30:.2f} GiB"


def _block(about: OutputInfo, output: str) -> str:
    """The steps a block holds (``output``: its bytes of output): a run shorter than its block size is one block."""
    if about.block_size < about.length:
        return f"{about.block_size} steps ({output} of output)"
    return (
        f"{about.length} steps, the whole run in one block ({output} of output; blocks of {about.block_size} "
        "steps if it is extended)"
    )


def format_description(about: OutputInfo) -> str:
    """``about`` as the lines ``streamacc info`` prints."""
    if about.complete:
        state = "complete"
        if about.ended_at is not None:
            state = f"complete, ended on its condition at step {about.ended_at} (of at most {about.length} steps)"
    elif about.recipe is None:  # only its step function continues it: the command line cannot
        state = 'incomplete (written from Python: continue it with streamacc.write(path, f, init, mode="resume"))'
    else:
        state = "incomplete (continue with --resume)"
    mem = about.memory
    every = about.save_every
    kept = "every step" if every == 1 else f"every {every}th step (steps {every - 1}, {2 * every - 1}, ...)"
    lines = [
        f"{about.path}: {about.committed_steps} of {about.total_steps} steps committed, {state}",
        f"  recipe: {about.recipe or about.function}  params: {about.params}",
        f"  block size: {_block(about, _mib(mem.block_bytes))}  keeps: {kept}  "
        f"unroll: {about.unroll} ({'chosen for the step' if about.unroll_chosen else 'given'})  "
        f"versions: {about.versions}",
        f"  memory to write it: {mem.pool_blocks} block buffers x {_mib(mem.block_bytes)} = "
        f"{_mib(mem.blocks)}, encoders {_mib(mem.encoders)}, carries {_mib(mem.carries)}"
        + (f", every step's y of a computing block {_mib(mem.computing)}" if mem.computing else "")
        + f": {_mib(mem.total)} beyond Python, JAX and zarr",
    ]
    if about.until is not None:
        lines.append(f"  until: {about.until}")
    if about.virtual:
        lines.append(
            f"  virtual: the data of {about.stored_blocks} of {about.committed_blocks} committed blocks are stored"
            + ("" if about.stored_blocks == about.committed_blocks else "; the others are recomputed when read "
               "(streamacc.open), or stored with `streamacc materialize`")
        )  # fmt: skip
    if about.nonfinite_step is not None:
        found = {"step": about.nonfinite_step, "array": about.nonfinite_array}
        lines.append(f"  non-finite: {describe_nonfinite(found)}")
    if about.time:
        t = about.time
        lines.append(f"  time: step s at {t['start']!r} + s * {t['step']!r} {t['units']}".rstrip())
    for name, a in about.arrays.items():
        ratio = "n/a" if a.compression_ratio is None else f"{a.compression_ratio}x"
        lines.append(
            f"  {name}: shape {a.shape} {a.dtype} dims {a.dims} chunks {a.chunks} "
            + ("" if a.shards is None else f"in shards of {a.shards} ")
            + f"codec {a.codec} stored {a.stored_bytes} bytes (compression {ratio})"
        )
    s = about.summaries
    if s:
        share = "" if s.percent_of_data is None else f" ({s.percent_of_data}% of the data)"
        over = f" ({', '.join(s.over_state)} over {'its' if len(s.over_state) == 1 else 'their'} whole state)"
        lines.append(
            f"  summaries: min, max, mean of {', '.join(s.arrays)}{over if s.over_state else ''} per "
            f"{', '.join(map(str, s.windows))} {'steps' if every == 1 else f'rows (every {every}th step)'}, "
            f"stored {s.stored_bytes} bytes{share}; see them with `streamacc plot` or streamacc.overview(path)"
        )
    else:
        lines.append("  summaries: none")
    data = sum(a.stored_bytes for a in about.arrays.values())
    share = f" ({round(100 * about.bookkeeping_bytes / data, 3)}% of the data)" if data else ""
    every_blocks = "every block" if about.carries_every == 1 else f"every {about.carries_every} blocks"
    lines.append(
        f"  bookkeeping: the carry kept after {every_blocks}; carries, block records and manifest stored "
        f"{about.bookkeeping_bytes} bytes{share}"
    )
    return "\n".join(lines)
