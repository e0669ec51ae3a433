"""A run's life, from a plan to a committed output, and what reads and checks it afterwards.

``write`` reads as three steps: a plan and the output it must produce (``_write``), the
output opened under its lock and committed in scan order (``_output``, with the manifest
and block records of ``_manifest`` and the identity of ``_identity``), and an executor
that computes and writes the blocks: in this process (``_executor`` over the pipeline of
``_pipeline``) or on a dask cluster (``_dask``, ``_cluster``). ``_verify`` recomputes
committed blocks, ``_reader`` opens the committed steps with xarray (``_steps`` is their
step coordinate), ``_inspect`` serves ``info`` and the recipes' ``verify``, ``_progress``
draws the bar.

These are the names the other wings and the public face use; each is imported on first
use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._cluster import cluster_client as cluster_client
    from ._inspect import (
        describe_output as describe_output,
        format_description as format_description,
        verify_recipe_output as verify_recipe_output,
    )
    from ._interrupt import (
        Terminated as Terminated,
        run_interruptibly as run_interruptibly,
        still_running as still_running,
    )
    from ._manifest import load_manifest as load_manifest
    from ._overview import overview as overview
    from ._progress import si as si
    from ._reader import open as open
    from ._verify import VerifyReport as VerifyReport, verify as verify
    from ._windows import check_windows as check_windows
    from ._write import write as write

_EXPORTS = {
    "._cluster": ["cluster_client"],
    "._interrupt": ["Terminated", "run_interruptibly", "still_running"],
    "._inspect": ["describe_output", "format_description", "verify_recipe_output"],
    "._overview": ["overview"],
    "._progress": ["si"],
    "._reader": ["open"],
    "._manifest": ["load_manifest"],
    "._verify": ["VerifyReport", "verify"],
    "._windows": ["check_windows"],
    "._write": ["write"],
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
