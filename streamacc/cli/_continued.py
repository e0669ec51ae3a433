"""What a continued write takes from its output (``--resume``, ``--extend``): the recipe run it records, whose
recipe, options and settings fill those the command leaves out, its unroll, the steps it had; and the whole command
that continues a write that was interrupted."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..recipes import Job
    from ..record import RunIdentity

__all__ = ["committed_steps", "continued_unroll", "dtype_name_of", "recorded_run", "resume_command"]


def committed_steps(out: str, options: dict[str, Any] | None) -> tuple[int, int]:
    """How many steps ``out`` has committed already, and the step its extension computes on from (the start of its
    last block, which an extension writes again), from its manifest alone; 0 where it holds no readable run."""
    from ..record import load_manifest
    from ..store import open_target

    try:
        manifest = load_manifest(open_target(out, storage_options=options, read_only=True))
        kept = manifest.identity.blocking.span(max(manifest.committed_blocks - 1, 0))
        return manifest.committed_steps, kept[1] - kept[0]
    except Exception:  # only a count for the summary line: whatever is wrong, write() itself will say
        return 0, 0


def recorded_run(out: str, options: dict[str, Any] | None) -> RunIdentity | None:
    """The identity of the recipe run ``out`` holds, which a continued run takes what it is not given from; None
    where ``out`` holds no readable run, or one written from Python (then write() itself says what is wrong)."""
    from ..record import load_manifest
    from ..store import open_target

    try:
        identity = load_manifest(open_target(out, storage_options=options, read_only=True)).identity
        return identity if isinstance(identity.recipe, str) else None
    except Exception:
        return None


def dtype_name_of(stored: str) -> str:
    """A dtype as the output records it (``<f4``) by the name ``--dtype`` takes (``float32``)."""
    import numpy as np

    return np.dtype(stored).name


def continued_unroll(job: Job, recorded: RunIdentity | None, given: int | None) -> int:
    """The unroll given with ``--unroll``, else that of ``job`` here, or of the run it continues (``recorded``, of
    the same recipe).

    A recipe's unroll depends on the platform (``_defaults.recipe_unroll``): an output begun on a TPU is
    resumed on a CPU with the TPU's unroll, as its identity records it.
    """
    if given is not None:
        return given
    try:
        unroll = None if recorded is None else recorded.blocking.unroll
    except (KeyError, TypeError):  # none recorded: write() itself will say what is wrong
        unroll = None
    if not isinstance(unroll, int) or isinstance(unroll, bool):
        return job.unroll
    return unroll


def resume_command(argv: Sequence[str]) -> str:
    """The whole command that continues the ``streamacc`` command ``argv``, a write: the same, ``--resume`` in place
    of its mode, quoted for a shell."""
    kept = [a for a in argv if a not in ("--overwrite", "--resume", "--extend")]
    return shlex.join(["streamacc", *kept, "--resume"])
