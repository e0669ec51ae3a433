"""Seams for testing streamacc and code built on it: faults injected where no store wrapper reaches.

Most failures are best injected through the store a run writes to (a zarr store whose
``set`` raises at one key, passed to :func:`streamacc.write`). A few happen where no store
wrapper reaches: a local folder's files, which streamacc writes itself, a machine's memory, a
lease's clock, how often a run commits. Those a test may replace are its *seams*, listed here
in one table, each by the wing that holds it, ``WING.NAME``; this module replaces them by name:

========================================  ===================================================
``store.write_new``                       a data chunk written to a local folder
``store.write_all``                       a local file's bytes written to its descriptor
``store.atomic_write``                    a key a local folder's target writes (a manifest)
``store.remove_tree_contents``            an overwritten local output's old files deleted
``store.icechunk_commit_seconds``         the most seconds between two commits to Icechunk
``store.lease_time``                      the clock and sleep of the writer lease
``engine.platform``                       the platform JAX computes on, whose defaults a run takes
``engine.physical_memory``                the machine's memory, as the block checks ask it
``summaries.SLICE_BYTES``                 the slice a block's windows are reduced in
``run.PUBLISH_SECONDS``                   how often the root's progress is refreshed
``run.SLOW_BLOCK_SECONDS``                the seconds a block takes past which a run says so
``run.COMMIT_SECONDS``                    how often blocks that commit together commit (virtual, materialize)
``run.BlockPool``                         the pool of block buffers a local run makes
``run.shard_shape``                       the shards a new output stores its arrays' chunks in
``stream.handover``                       how a Stream's blocks cross to the host (in place on the CPU)
``stream.piece_bytes``                    the bytes of ys a Stream's block callback takes as one operand
========================================  ===================================================

:func:`seams` lists them with what each is called with. A replacement is in place for
the whole process (every thread), until it is undone: use :func:`patched` as a context
manager, or :func:`replace` and :func:`restore` where no ``with`` block spans the run (a
dask worker, a process that is killed). Nothing here is needed to use streamacc, and the
seams are streamacc's internals: they change when its internals do.

:func:`listed_exports` reads the names a package's ``__init__`` exports lazily, as ``streamacc``
lists them, for tests of how a package is laid out.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Iterator
from typing import Any

from ._lazy import listed_exports

__all__ = ["current", "listed_exports", "original", "patched", "replace", "restore", "seams"]


class _Seam:
    """One replaceable value: what it is, and the ``(module, attribute)`` pairs that hold it.

    Parameters
    ----------
    about : str
        What the value is and how it is called, for a test's author.
    *sites : tuple of (object, str)
        Every module (or class) attribute that holds the value; the first holds it as its wing
        defines it, and all hold the same object.
    """

    def __init__(self, about: str, *sites: tuple[object, str]) -> None:
        if not sites:
            raise ValueError("a seam is held somewhere")
        self.about = about
        self.sites = sites
        self.original: Any = getattr(*sites[0])
        """The wing's own value, whatever a test has put in its place since."""
        for owner, attribute in sites[1:]:
            if getattr(owner, attribute) is not self.original:
                raise ValueError(f"{owner!r}.{attribute} does not hold the seam's value")

    def current(self) -> Any:
        """The value in place now."""
        return getattr(*self.sites[0])

    def replace(self, value: object) -> Any:
        """Put ``value`` in place at every site; returns the value it replaces."""
        previous = self.current()
        for owner, attribute in self.sites:
            setattr(owner, attribute, value)
        return previous


_SEAMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "store.write_new": (
        "write_new(path, data): a data chunk written to a local folder, into a temp file renamed over it",
        ("streamacc.store._chunks.write_new",),
    ),
    "store.write_all": (
        "write_all(fd, view): the bytes of a local file written to its descriptor, by write_new and atomic_write",
        ("streamacc.store._files._write_all",),
    ),
    "store.atomic_write": (
        "atomic_write(path, data): each key a local folder's target writes itself (metadata, manifests), durably",
        ("streamacc.store._localtarget.atomic_write",),
    ),
    "store.remove_tree_contents": (
        "remove_tree_contents(root, keep): an overwritten local output's old files deleted, walking the folder",
        ("streamacc.store._localtarget.remove_tree_contents",),
    ),
    "store.icechunk_commit_seconds": (
        "COMMIT_SECONDS: the most seconds an Icechunk writer goes between two commits (0: a commit every block)",
        ("streamacc.store._icechunk.COMMIT_SECONDS",),
    ),
    "store.lease_time": (
        "time: the module the lease reads its clock from (time.monotonic) and waits with (time.sleep)",
        ("streamacc.store._lease.time",),
    ),
    "engine.platform": (
        "platform(): the platform JAX computes on ('cpu', 'tpu', 'gpu', ...), whose defaults a run takes (the "
        "unroll chosen for a step, the recipes' unroll, the write's block bytes, a Stream's hand-over) and which "
        "computes a block ahead off the CPU",
        ("streamacc.engine._config._platform",),
    ),
    "engine.physical_memory": (
        "physical_memory(): this machine's memory in bytes (None when unknown), which the block checks compare with",
        ("streamacc.engine._memory.physical_memory", "streamacc.engine._scan.physical_memory"),
    ),
    "summaries.SLICE_BYTES": (
        "SLICE_BYTES: the bytes of rows a block's windows are reduced in at a time",
        ("streamacc.summaries._reduce.SLICE_BYTES",),
    ),
    "run.PUBLISH_SECONDS": (
        "PUBLISH_SECONDS: the least time between two refreshes of the root's progress attributes",
        ("streamacc.run._commit.PUBLISH_SECONDS",),
    ),
    "run.SLOW_BLOCK_SECONDS": (
        "SLOW_BLOCK_SECONDS: the seconds a block takes to compute and commit, past which the run says so once",
        ("streamacc.run._commit.SLOW_BLOCK_SECONDS",),
    ),
    "run.COMMIT_SECONDS": (
        "COMMIT_SECONDS: about how long the blocks that commit together (a virtual run's, a materialize's) wait",
        ("streamacc.run._commit.COMMIT_SECONDS",),
    ),
    "run.BlockPool": (
        "BlockPool(size): the class of the pool of block buffers a local run makes",
        ("streamacc.run._execute.BlockPool",),
    ),
    "run.shard_shape": (
        "shard_shape(chunk, shape, itemsize, block_rows): the shard shape a new output's array of shape ``shape`` "
        "stores its chunks of ``chunk`` in, blocks of ``block_rows`` rows, or None for a chunk per object (as "
        "streamacc 1.1 stored every output)",
        ("streamacc.run._planning.shard_shape",),
    ),
    "stream.handover": (
        "handover(): how a block crosses to the host: 'in_place' (a buffer_callback reads the program's buffers, "
        "on the CPU), 'ordered' (an ordered io_callback, other platforms), 'chained' (an io_callback ordered by a "
        "token it passes on) or 'pinned' (as 'chained', the ys first moved to pinned host memory)",
        ("streamacc.stream._program._handover",),
    ),
    "stream.piece_bytes": (
        "piece_bytes(): the bytes of ys a block's callback takes as one operand at most, where a block crosses by "
        "io_callback ('ordered', 'chained', 'pinned'): each ys leaf crosses as pieces of consecutive rows",
        ("streamacc.stream._program._piece_bytes",),
    ),
}
"""The seams by name: what each is, and every module attribute that holds its value (the first as the wing
defines it; a function imported into the module that calls it is held there too, and replaced there). The one
place that names streamacc's private modules: a seam is the very attribute a wing's module holds."""


_RENAMED = {
    "run.output.PUBLISH_SECONDS": "run.PUBLISH_SECONDS",
    "run.output.SLOW_BLOCK_SECONDS": "run.SLOW_BLOCK_SECONDS",
    "run.output.VIRTUAL_COMMIT_SECONDS": "run.COMMIT_SECONDS",
    "run.execute.BlockPool": "run.BlockPool",
    "run.stream.handover": "stream.handover",
    "run.stream.piece_bytes": "stream.piece_bytes",
    "store.lease.time": "store.lease_time",
}
"""The seams' names before 1.1.0's wings, and their names now."""


@functools.cache
def _seam(name: str) -> _Seam:
    """Seam ``name``, made on first use (importing its wing, JAX among them): its original is what is in place then."""
    if name in _RENAMED:
        raise KeyError(f"streamacc's seam {name!r} is named {_RENAMED[name]!r} since 1.1.0; use that name")
    if name not in _SEAMS:
        raise KeyError(f"streamacc has no seam {name!r}; its seams are {', '.join(_SEAMS)}")
    about, sites = _SEAMS[name]
    held = []
    for site in sites:
        module, attribute = site.rsplit(".", 1)
        held.append((importlib.import_module(module), attribute))
    return _Seam(about, *held)


def seams() -> dict[str, str]:
    """Every seam's name (``WING.NAME``), mapped to what it is and how it is called.

    Returns
    -------
    dict of str to str
        The seams, by name.
    """
    return {name: about for name, (about, _) in _SEAMS.items()}


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
