"""The keywords :func:`streamacc.write` takes alone, each routed to the object it belongs to.

``write(path, f, init, length=n, names="x", client=c)`` is ``write(path, f, init,
length=n, layout=Layout(names="x"), executor=Dask(c))``: the scan's keywords go to its
:class:`~streamacc.ScanSpec`, the layout's to a :class:`Layout`, ``client`` and
``inflight`` to where the blocks run. Which keyword goes where is read from those
objects' fields, so a new option is declared once, where it belongs. Every writer that takes
``write``'s keywords (``write`` itself, :class:`~streamacc.Stream`) routes them here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from ...base import BLOCK_KEYWORDS, BlockKeywords
from ...errors import InputError, arg
from ..output import LAYOUT_FIELDS, Layout
from ._where import EXECUTOR_FIELDS, Dask, Local

__all__ = ["WriteKeywords", "split_keywords"]


class WriteKeywords(BlockKeywords, total=False):
    """The keywords ``write`` takes alone: those of ``ScanSpec``, ``Layout``, ``Local`` and ``Dask``."""

    names: Sequence[str] | Mapping[str, str] | str | None
    dims: Mapping[str, Sequence[str]] | None
    chunks: Any
    codec: str
    attrs: Mapping[str, Any] | None
    array_attrs: Mapping[str, Mapping[str, Any]] | None
    time: Mapping[str, Any] | None
    summaries: bool | Sequence[int]
    virtual: bool
    client: Any
    inflight: int | None


def _given_twice(names: list[str], option: str, kind: str) -> InputError:
    given = ", ".join(arg(name) for name in names)
    return InputError(f"{given} and {arg(option)} both say {kind}: pass {given} inside {arg(option)}, or leave "
                      f"{arg(option)} out")  # fmt: skip


def split_keywords(
    layout: Layout | None, executor: Local | Dask | None, keywords: Mapping[str, Any], *, who: str = "write"
) -> tuple[BlockKeywords, Layout, Local | Dask]:
    """The scan's keywords, the layout and where the blocks run, from ``write``'s keywords.

    Raises a ``TypeError`` for a keyword no object takes, as Python does, and an
    :class:`InputError` for one given both alone and in its object.
    """
    unknown = sorted(set(keywords) - {*BLOCK_KEYWORDS, *LAYOUT_FIELDS, *EXECUTOR_FIELDS})
    if unknown:
        raise TypeError(
            f"{who}() got an unexpected keyword argument {unknown[0]!r}; it takes the keywords of ScanSpec "
            f"({', '.join(BLOCK_KEYWORDS)}), Layout ({', '.join(LAYOUT_FIELDS)}) and {', '.join(EXECUTOR_FIELDS)}"
        )
    scan = cast(BlockKeywords, {name: keywords[name] for name in BLOCK_KEYWORDS if name in keywords})
    laid = {name: keywords[name] for name in LAYOUT_FIELDS if name in keywords}
    where = {name: keywords[name] for name in EXECUTOR_FIELDS if name in keywords}
    if layout is not None and laid:
        raise _given_twice(list(laid), "layout", "how the output is laid out")
    if executor is not None and where:
        raise _given_twice(list(where), "executor", "where the blocks run")
    if layout is not None and not isinstance(layout, Layout):
        raise InputError(f"{arg('layout')} must be a streamacc.Layout, got {type(layout).__name__}; pass e.g. "
                         "layout=streamacc.Layout(names='x')")  # fmt: skip
    if executor is not None and not isinstance(executor, (Local, Dask)):
        raise InputError(f"{arg('executor')} must be streamacc.Local(...) or streamacc.Dask(client), got "
                         f"{type(executor).__name__}")  # fmt: skip
    if layout is None:
        layout = Layout(**laid)
    if executor is None:
        client = where.get("client")
        executor = Local(where.get("inflight")) if client is None else Dask(client, where.get("inflight"))
    return scan, layout, executor
