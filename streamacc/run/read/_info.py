"""``info``: what an output holds, read from its manifest and metadata alone (no JAX, no data read)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._defaults import DEFAULT_INFLIGHT
from ...engine import pool_size  # arithmetic only: describing an output imports no JAX
from ...store import ZarrSink, open_target
from ...summaries import SUMMARIES, summarized_names
from ..record import load_manifest
from ..trust import check_structure

__all__ = ["describe_output", "format_description", "memory_estimate"]


def memory_estimate(
    block_bytes: int, chunk_bytes: int, inflight: int = DEFAULT_INFLIGHT, computing_bytes: int = 0
) -> dict[str, int]:
    """The memory a local ``write`` of blocks of ``block_bytes`` takes beyond the interpreter and JAX.

    The engine computes into a fixed pool of block buffers (``inflight`` blocks being written
    plus the one the engine computes; on an accelerator, where it computes a block ahead,
    one more), and each of the ``inflight`` writer threads encodes into a
    buffer as large as one chunk and assembles a partial or split chunk in another. An
    unrolled, thinned block also holds every step's y while it computes (``computing_bytes``).
    """
    blocks = pool_size(inflight) * block_bytes
    encoders = inflight * 2 * chunk_bytes
    return {
        "block_bytes": block_bytes,
        "pool_blocks": pool_size(inflight),
        "blocks": blocks,
        "encoders": encoders,
        "computing": computing_bytes,
        "total": blocks + encoders + computing_bytes,
    }


def describe_output(store: Any, *, storage_options: dict | None = None) -> dict[str, Any]:
    """A summary of an output: arrays, layout, codec, compression, memory, recipe, committed steps (read-only)."""
    target = open_target(store, storage_options=storage_options, read_only=True)
    manifest = load_manifest(target)
    check_structure(target, manifest)
    ident = manifest.identity
    every = ident.get("save_every", 1)
    sink = ZarrSink.open(target, list(ident["arrays"]))
    first, last = manifest.rows()
    stored_bytes = sink.stored_bytes((first, last))
    block_rows = ident["block_size"] // every
    arrays, block_bytes, chunk_bytes = {}, 0, 0
    for name, arr in sink.arrays.items():
        row_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
        block_bytes += block_rows * row_bytes
        chunk_bytes = max(chunk_bytes, int(np.prod(arr.chunks, dtype=np.int64)) * arr.dtype.itemsize)
        written = (last - first) * row_bytes
        stored = stored_bytes[name]
        arrays[name] = {
            "shape": list(arr.shape),
            "dtype": str(arr.dtype),
            "dims": list(arr.metadata.dimension_names or ()),
            "chunks": list(arr.chunks),
            "codec": ident["codec"],
            "stored_bytes": stored,
            "compression_ratio": round(written / stored, 3) if stored else None,
        }
    unrolled = every > 1 and ident["unroll"] is not True and ident["unroll"] not in (False, 1)
    computing = block_bytes * every if unrolled else 0  # see engine/_scan._thinned_scan
    return {
        "path": target.label,
        "arrays": arrays,
        "recipe": ident.get("recipe"),
        "params": ident.get("params"),
        "function": ident["function"],
        "block_size": ident["block_size"],
        "save_every": every,
        "time": ident.get("time"),
        "unroll": ident["unroll"],
        "memory": memory_estimate(block_bytes, chunk_bytes, computing_bytes=computing),
        "committed_steps": manifest.committed_steps,
        "committed_rows": last - first,
        "total_steps": ident["length"],
        "complete": manifest.complete,
        "versions": ident["versions"],
        "summaries": _summaries(target, ident, sum(stored_bytes.values())),
    }


def _summaries(target: Any, ident: dict, data_bytes: int) -> dict[str, Any] | None:
    """The summary levels, the outputs they cover and the bytes they take (None without summaries)."""
    windows = ident.get("summaries") or []
    names = summarized_names(ident["arrays"])
    if not windows or not names:
        return None
    stored = sum(target.sizes(f"{SUMMARIES}/").values())
    share = round(100 * stored / data_bytes, 3) if data_bytes else None
    return {"windows": windows, "arrays": names, "stored_bytes": stored, "percent_of_data": share}


def _mib(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MiB"


def format_description(info: dict[str, Any]) -> str:
    """``describe_output`` as the lines ``streamacc info`` prints."""
    state = "complete" if info["complete"] else "incomplete (continue with --resume)"
    mem = info["memory"]
    every = info["save_every"]
    kept = "every step" if every == 1 else f"every {every}th step (steps {every - 1}, {2 * every - 1}, ...)"
    lines = [
        f"{info['path']}: {info['committed_steps']} of {info['total_steps']} steps committed, {state}",
        f"  recipe: {info['recipe'] or info['function']}  params: {info['params']}",
        f"  block size: {info['block_size']} steps ({_mib(mem['block_bytes'])} of output)  keeps: {kept}  "
        f"unroll: {info['unroll']}  versions: {info['versions']}",
        f"  memory to write it: {mem['pool_blocks']} block buffers x {_mib(mem['block_bytes'])} = "
        f"{_mib(mem['blocks'])}, encoders {_mib(mem['encoders'])}"
        + (f", every step's y of a computing block {_mib(mem['computing'])}" if mem["computing"] else "")
        + f": {_mib(mem['total'])} beyond Python, JAX and zarr",
    ]
    if info["time"]:
        t = info["time"]
        lines.append(f"  time: step s at {t['start']!r} + s * {t['step']!r} {t['units']}".rstrip())
    for name, a in info["arrays"].items():
        ratio = "n/a" if a["compression_ratio"] is None else f"{a['compression_ratio']}x"
        lines.append(
            f"  {name}: shape {tuple(a['shape'])} {a['dtype']} dims {tuple(a['dims'])} chunks {tuple(a['chunks'])} "
            f"codec {a['codec']} stored {a['stored_bytes']} bytes (compression {ratio})"
        )
    s = info.get("summaries")
    if s:
        share = "" if s["percent_of_data"] is None else f" ({s['percent_of_data']}% of the data)"
        lines.append(
            f"  summaries: min, max, mean of {', '.join(s['arrays'])} per {', '.join(map(str, s['windows']))} "
            f"{'steps' if every == 1 else f'rows (every {every}th step)'}, "
            f"stored {s['stored_bytes']} bytes{share}; see them with `streamacc plot` or streamacc.overview(path)"
        )
    else:
        lines.append("  summaries: none")
    return "\n".join(lines)
