"""Looking at an output: what ``streamacc info`` shows and what ``streamacc verify`` checks.

Outputs written by the CLI record their recipe, parameters and dtype, so they can be
rebuilt and verified without any Python code from the user.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import VerifyError
from ..store import SUMMARIES, ZarrSink, open_target
from ._manifest import load_manifest
from ._summaries import summarized_names
from ._trust import check_structure

if TYPE_CHECKING:
    from ._verify import VerifyReport

__all__ = ["describe_output", "format_description", "verify_recipe_output"]


def describe_output(store: Any, *, storage_options: dict | None = None) -> dict[str, Any]:
    """A summary of an output: arrays, codec, compression, recipe, committed steps (read-only)."""
    target = open_target(store, storage_options=storage_options, read_only=True)
    manifest = load_manifest(target)
    check_structure(target, manifest)
    ident = manifest.identity
    sink = ZarrSink.open(target, list(ident["arrays"]), ident["chunk"])
    stored_bytes = sink.stored_bytes(manifest.span())
    arrays = {}
    for name, arr in sink.arrays.items():
        row_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
        written = manifest.committed_steps * row_bytes
        stored = stored_bytes[name]
        arrays[name] = {
            "shape": list(arr.shape),
            "dtype": str(arr.dtype),
            "chunks": list(arr.chunks),
            "codec": ident["codec"],
            "stored_bytes": stored,
            "compression_ratio": round(written / stored, 3) if stored else None,
        }
    return {
        "path": target.label,
        "arrays": arrays,
        "recipe": ident.get("recipe"),
        "params": ident.get("params"),
        "function": ident["function"],
        "block_size": ident["block_size"],
        "unroll": ident["unroll"],
        "committed_steps": manifest.committed_steps,
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


def format_description(info: dict[str, Any]) -> str:
    """``describe_output`` as the lines ``streamacc info`` prints."""
    state = "complete" if info["complete"] else "incomplete (continue with --resume)"
    lines = [
        f"{info['path']}: {info['committed_steps']} of {info['total_steps']} steps committed, {state}",
        f"  recipe: {info['recipe'] or info['function']}  params: {info['params']}",
        f"  block size: {info['block_size']}  unroll: {info['unroll']}  versions: {info['versions']}",
    ]
    for name, a in info["arrays"].items():
        ratio = "n/a" if a["compression_ratio"] is None else f"{a['compression_ratio']}x"
        lines.append(
            f"  {name}: shape {tuple(a['shape'])} {a['dtype']} chunks {tuple(a['chunks'])} codec {a['codec']} "
            f"stored {a['stored_bytes']} bytes (compression {ratio})"
        )
    s = info.get("summaries")
    if s:
        share = "" if s["percent_of_data"] is None else f" ({s['percent_of_data']}% of the data)"
        lines.append(
            f"  summaries: min, max, mean of {', '.join(s['arrays'])} per {', '.join(map(str, s['windows']))} steps, "
            f"stored {s['stored_bytes']} bytes{share}; see them with `streamacc plot` or streamacc.overview(path)"
        )
    else:
        lines.append("  summaries: none")
    return "\n".join(lines)


def verify_recipe_output(store: Any, *, blocks: str | int = "all", storage_options: dict | None = None) -> VerifyReport:
    """Verify an output written by ``streamacc write``, rebuilding its recipe from the manifest."""
    from ..recipes import get_recipe
    from ._verify import plan_for, verify_plan  # recomputing blocks needs JAX; describing an output does not

    target = open_target(store, storage_options=storage_options, read_only=True)
    manifest = load_manifest(target)
    ident = manifest.identity
    if not ident.get("recipe"):
        raise VerifyError(
            f"{target.label} was written from Python, not by a recipe; verify it with streamacc.verify(path, f, init)"
        )
    dtype = ident["arrays"][next(iter(ident["arrays"]))][0]
    job = get_recipe(ident["recipe"]).make(ident["length"], np.dtype(dtype).name, ident["params"], storage_options)
    plan = plan_for(manifest, job.f, job.init, job.xs)
    return verify_plan(target, plan, manifest, blocks=blocks)
