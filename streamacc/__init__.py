"""streamacc: arbitrarily long JAX accumulations in bounded memory, streamed to Zarr.

Write a recurrence as ``f(carry, x) -> (carry, y)``, as for ``jax.lax.scan``, and
:func:`write` runs it for any length in bounded memory, streaming every ``y`` to a Zarr
store on disk or object storage, resumably (:class:`Stream` does the same from inside a
jitted program); :func:`open` reads it back as an xarray Dataset, :func:`follow` as it
grows, :func:`overview` at a glance, :func:`verify` recomputes it bit for bit,
:func:`info` describes it, and :func:`to_arviz` gives a sampler's chains as ArviZ reads
them. :func:`iter_blocks` and
:func:`scan` run the same blocked scan in memory. Errors are in :mod:`streamacc.errors`.

The names that need JAX or Zarr are imported on first use (PEP 562), so that
``import streamacc`` and the command line start without them: each is listed once, as an
import of the ``if TYPE_CHECKING:`` block below, which type checkers read and
:func:`_listed_exports` reads too. Everything else is imported as it is named.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
from typing import TYPE_CHECKING, Any

from . import errors as errors
from ._version import __version__ as __version__
from .errors import StreamaccError as StreamaccError

if TYPE_CHECKING:
    from .base import Layout as Layout
    from .engine import Block as Block, ScanSpec as ScanSpec, iter_blocks as iter_blocks, scan as scan
    from .read import (
        ArrayInfo as ArrayInfo,
        OutputInfo as OutputInfo,
        SummaryInfo as SummaryInfo,
        follow as follow,
        info as info,
        open as open,
        overview as overview,
        to_arviz as to_arviz,
    )
    from .run import (
        Dask as Dask,
        Local as Local,
        VerifyReport as VerifyReport,
        materialize as materialize,
        verify as verify,
        write as write,
    )
    from .store import register_data_types as register_data_types
    from .stream import Stream as Stream



def _listed_exports(init_file: str) -> dict[str, str]:
    """The names the ``if TYPE_CHECKING:`` block of ``init_file`` imports, each mapped to its relative module."""
    tree = ast.parse(pathlib.Path(init_file).read_text(encoding="utf-8"), init_file)
    where: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                if not isinstance(statement, ast.ImportFrom) or statement.level == 0:
                    raise ImportError(f"{init_file}:{statement.lineno}: a lazy export is `from .module import N as N`")
                module = "." * statement.level + (statement.module or "")
                for alias in statement.names:
                    where[alias.asname or alias.name] = module
    return where


_LAZY = _listed_exports(__file__)
__all__ = sorted(["StreamaccError", "__version__", "errors", *_LAZY])


def __getattr__(name: str) -> Any:
    """A public name, imported on first use (PEP 562) and kept, so that later lookups skip this function."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """What a user may import: ``__all__`` (not the names this file uses to list it)."""
    return list(__all__)


del TYPE_CHECKING, annotations
