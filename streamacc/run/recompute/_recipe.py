"""Outputs of the command line's recipes, recomputed from what they record.

An output written by ``streamacc write`` records its recipe, parameters and dtype, so its
step function can be rebuilt, and its blocks recomputed, without any code from the user.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...engine import Plan
from ...errors import InputError
from ...recipes import Job, get_recipe
from ...store import open_target
from ..bookkeeping import Manifest, trusted_manifest
from ._verify import VerifyReport, plan_for, verify_plan, verify_repairing

__all__ = ["recorded_job", "verify_recipe_output"]


def recorded_job(manifest: Manifest, label: str, storage_options: dict[str, Any] | None = None) -> Job:
    """The recipe job that wrote the output of ``manifest`` (at ``label``), rebuilt from its record."""
    ident = manifest.identity
    if not ident.recipe:  # not a failed check (exit 1): the command line cannot check this output
        raise InputError(
            f"{label} was written from Python, not by a recipe; verify it with streamacc.verify(path, f, init)"
        )
    dtype = np.dtype(next(iter(ident.arrays.values()))[0]).name
    return get_recipe(ident.recipe).make(ident.blocking.length, dtype, ident.params or {}, storage_options)


def verify_recipe_output(
    store: Any, *, blocks: str | int = "all", storage_options: dict[str, Any] | None = None, repair: bool = False
) -> VerifyReport:
    """Verify an output written by ``streamacc write``, rebuilding its recipe from the manifest (and first its
    damaged kept carries, with ``repair``: see ``streamacc.verify``)."""
    if repair:

        def plan_of(manifest: Manifest, label: str) -> Plan:
            job = recorded_job(manifest, label, storage_options)
            return plan_for(manifest, job.f, job.init, job.xs)

        return verify_repairing(store, storage_options, blocks, plan_of)
    target = open_target(store, storage_options=storage_options, read_only=True)
    manifest = trusted_manifest(target)
    job = recorded_job(manifest, target.label, storage_options)
    plan = plan_for(manifest, job.f, job.init, job.xs)
    return verify_plan(target, plan, manifest, blocks=blocks)
