"""What a write asks for, checked before anything runs, with nothing heavier than numpy.

:func:`streamacc.write` checks its arguments here first; the command line calls the same
function on its parsed options before it imports JAX or Zarr, so that a mistake answers
at once and every check is written once. What needs the step function (the shape of its
output, the length of ``xs``) is checked later, by the plan and the output's layout.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any, Literal

from ..._checks import as_choice, as_count, as_unroll
from ..._defaults import DEFAULT_CODEC
from ...engine import check_grouping, check_length, check_save_every
from ...errors import InputError, arg, one_line
from ...store import CODECS
from ...summaries import check_windows
from ._layout import chunk_rows
from ._time import check_time

__all__ = ["MODES", "Mode", "Request", "check_json", "check_request"]

Mode = Literal["create", "overwrite", "resume", "extend"]
MODES: tuple[Mode, ...] = ("create", "overwrite", "resume", "extend")
"""What a write does with an output that is already there (see :func:`streamacc.write`)."""


@dataclasses.dataclass(frozen=True)
class Request:
    """A write's arguments that need no step function, checked and normalised."""

    mode: Mode
    length: int | None
    block_size: int | None
    unroll: int | bool
    reverse: bool
    save_every: int
    chunks: Any
    codec: str
    time: dict[str, Any] | None
    summaries: list[int]
    summaries_default: bool  # summaries=True: an output continued keeps the windows it was begun with
    attrs: dict[str, Any]
    inflight: int | None
    virtual: bool = False


def check_json(name: str, value: Any) -> None:
    """Refuse a value that cannot be stored as JSON attributes."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"{arg(name)} must be JSON-serialisable ({one_line(exc)}); pass plain numbers, strings, lists and dicts"
        ) from None


def _check_attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    if attrs is not None and not isinstance(attrs, Mapping):
        raise InputError(f"{arg('attrs')} must be a dict of attributes, got {attrs!r}; pass e.g. "
                         f"{arg('attrs', {'title': 'my run'})}")  # fmt: skip
    checked = dict(attrs or {})
    check_json("attrs", checked)
    reserved = sorted(str(k) for k in checked if str(k).startswith("streamacc_"))
    if reserved:
        raise InputError(f"{arg('attrs')} must not set {', '.join(reserved)}: streamacc keeps those up to date")
    return checked


def check_request(
    *,
    mode: Any = "create",
    length: Any = None,
    block_size: Any = None,
    unroll: Any = 1,
    reverse: Any = False,
    save_every: Any = 1,
    chunks: Any = None,
    codec: Any = DEFAULT_CODEC,
    time: Any = None,
    summaries: Any = True,
    attrs: Mapping[str, Any] | None = None,
    inflight: Any = None,
    virtual: Any = False,
) -> Request:
    """Check the arguments of a write that need no step function; raise :class:`InputError` on the first bad one.

    ``length`` may be None (it then comes from ``xs``), or at least 1: unlike ``lax.scan``
    (and ``scan``), a write of no step is refused, as the command line refuses ``--size 0``.
    The grouping of blocks under ``unroll`` is checked here where the length and the
    block size are both given.
    """
    mode = as_choice("mode", mode, MODES)
    if length is not None:
        length = as_count("length", length, minimum=1, example=2**20)  # an output holds at least one step
        check_length(length)
    if block_size is not None:
        block_size = as_count("block_size", block_size, minimum=1, example=2**20)
    unroll = as_unroll(unroll)
    numpy_bool = getattr(reverse, "shape", None) == () and getattr(getattr(reverse, "dtype", None), "kind", "") == "b"
    if not (isinstance(reverse, bool) or numpy_bool):
        raise InputError(f"{arg('reverse')} must be True or False, got {reverse!r}")
    reverse = bool(reverse)
    save_every = as_count("save_every", save_every, minimum=1, example=100)
    if length is not None:
        check_save_every(save_every, length)
        if block_size is not None:
            check_grouping(length, block_size, unroll, reverse, save_every)
    chunk_rows(chunks)  # the form of chunks= (its entries per dimension are checked against the output later)
    if not isinstance(codec, str) or codec not in CODECS:
        raise InputError(f"{arg('codec', codec)} is unknown; choose one of: {', '.join(CODECS)}")
    windows = check_windows(summaries, reverse)
    if not isinstance(virtual, bool):
        raise InputError(f"{arg('virtual')} must be True or False, got {virtual!r}")
    return Request(
        mode=mode,
        length=length,
        block_size=block_size,
        unroll=unroll,
        reverse=reverse,
        save_every=save_every,
        chunks=chunks,
        codec=codec,
        time=check_time(time),
        summaries=windows,
        summaries_default=summaries is True,
        attrs=_check_attrs(attrs),
        inflight=None if inflight is None else as_count("inflight", inflight, minimum=1, example=3),
        virtual=virtual,
    )
