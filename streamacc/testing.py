"""Seams for testing streamacc and code built on it: faults injected where no store wrapper reaches.

Most failures are best injected through the store a run writes to (a zarr store whose
``set`` raises at one key, passed to :func:`streamacc.write`). A few happen where no store
wrapper reaches: a local folder's files, which streamacc writes itself, a machine's memory, a
lease's clock, how often a run commits. Each wing names those it lets a test replace, its
*seams*, and this module replaces them by name, ``WING.NAME``:

========================================  ===================================================
``store.write_new``                       a data chunk written to a local folder
``store.write_all``                       a local file's bytes written to its descriptor
``store.atomic_write``                    a key a local folder's target writes (a manifest)
``store.remove_tree_contents``            an overwritten local output's old files deleted
``store.icechunk_commit_seconds``         the most seconds between two commits to Icechunk
``store.lease.time``                      the clock and sleep of the writer lease
``engine.platform``                       the platform JAX computes on, whose defaults a run takes
``engine.physical_memory``                the machine's memory, as the block checks ask it
``summaries.SLICE_BYTES``                 the slice a block's windows are reduced in
``run.output.PUBLISH_SECONDS``            how often the root's progress is refreshed
``run.output.SLOW_BLOCK_SECONDS``         the seconds a block takes past which a run says so
``run.output.VIRTUAL_COMMIT_SECONDS``     how often a virtual run commits
``run.execute.BlockPool``                 the pool of block buffers a local run makes
``run.stream.handover``                   how a Stream's blocks cross to the host (in place on the CPU)
``run.stream.piece_bytes``                the bytes of ys a Stream's block callback takes as one operand
========================================  ===================================================

:func:`seams` lists them with what each is called with. A replacement is in place for
the whole process (every thread), until it is undone: use :func:`patched` as a context
manager, or :func:`replace` and :func:`restore` where no ``with`` block spans the run (a
dask worker, a process that is killed). Nothing here is needed to use streamacc, and the
seams are streamacc's internals: they change when its internals do.

:func:`listed_exports` reads the names a package's ``__init__`` exports lazily, as each of
streamacc's wings lists them, for tests of how a package is laid out.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .base import listed_exports

if TYPE_CHECKING:
    from .base import Seam

__all__ = ["current", "listed_exports", "original", "patched", "replace", "restore", "seams"]


def _wings() -> dict[str, dict[str, Seam]]:
    """Each wing's (or room's) seams by its dotted name under ``streamacc``: imports the wings, JAX among them."""
    from . import engine, store, summaries
    from .run import execute, output, stream
    from .store import lease

    return {
        "store": store.SEAMS,
        "store.lease": lease.SEAMS,
        "engine": engine.SEAMS,
        "summaries": summaries.SEAMS,
        "run.output": output.SEAMS,
        "run.execute": execute.SEAMS,
        "run.stream": stream.SEAMS,
    }


def _seam(name: str) -> Seam:
    wing, _, short = name.rpartition(".")
    found = _wings().get(wing, {}).get(short)
    if found is None:
        raise KeyError(f"streamacc has no seam {name!r}; its seams are {', '.join(seams())}")
    return found


def seams() -> dict[str, str]:
    """Every seam's name (``WING.NAME``), mapped to what it is and how it is called.

    Returns
    -------
    dict of str to str
        The seams, by name.
    """
    return {f"{wing}.{name}": seam.about for wing, found in _wings().items() for name, seam in found.items()}


def current(name: str) -> Any:
    """The value seam ``name`` holds now: what a replacement that wraps it calls.

    Parameters
    ----------
    name : str
        The seam, as ``WING.NAME`` (``"store.write_new"``).

    Returns
    -------
    object
        The function or value in place.

    Raises
    ------
    KeyError
        There is no seam ``name``.
    """
    return _seam(name).current()


def original(name: str) -> Any:
    """The wing's own value of seam ``name``, whatever replaces it now.

    Parameters
    ----------
    name : str
        The seam, as ``WING.NAME``.

    Returns
    -------
    object
        The function or value the wing defines.

    Raises
    ------
    KeyError
        There is no seam ``name``.
    """
    return _seam(name).original


def replace(name: str, value: object) -> Any:
    """Put ``value`` in place of seam ``name``, wherever the wing calls or reads it, until it is replaced again.

    Parameters
    ----------
    name : str
        The seam, as ``WING.NAME``.
    value : object
        What the wing calls or reads instead, with the seam's own signature.

    Returns
    -------
    object
        The value it replaces.

    Raises
    ------
    KeyError
        There is no seam ``name``.
    """
    return _seam(name).replace(value)


def restore(name: str) -> None:
    """Put the wing's own value of seam ``name`` back.

    Parameters
    ----------
    name : str
        The seam, as ``WING.NAME``.

    Raises
    ------
    KeyError
        There is no seam ``name``.
    """
    seam = _seam(name)
    seam.replace(seam.original)


@contextlib.contextmanager
def patched(name: str, value: object) -> Iterator[Any]:
    """Within this block, ``value`` replaces seam ``name``; the value it replaced is back afterwards.

    Parameters
    ----------
    name : str
        The seam, as ``WING.NAME``.
    value : object
        What the wing calls or reads instead, with the seam's own signature.

    Yields
    ------
    object
        The value it replaces.

    Raises
    ------
    KeyError
        There is no seam ``name``.
    """
    seam = _seam(name)
    previous = seam.replace(value)
    try:
        yield previous
    finally:
        seam.replace(previous)
