"""What a write asks of its output, checked where it is made, with nothing heavier than numpy.

How it is laid out (:class:`Layout`); what the write does with an output already there and
the summaries' windows a scan in its direction keeps (:class:`Request`); and what the
output keeps of its blocks, their data (:data:`STORED`) or only their carries
(:data:`VIRTUAL`). That choice is made once, from ``Layout.virtual``, when the output is
specified (``output_spec``); everything that differs between the two is asked of the
chosen :class:`Storage` rather than decided again where it is needed: where a block's
data go, how often blocks commit, how many are summarised at once, the default summary
levels, and whether a run computes blocks at all.

The summary windows a write asks for, checked: arithmetic only, so the command line checks
them before it imports JAX, Zarr or numpy (numpy registers its integers as ``numbers.Integral``).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import numbers
from collections.abc import Mapping, Sequence, Set as AbstractSet
from typing import Any, Literal, TypeVar

from ..errors import InputError, arg, one_line
from ._axes import check_time, chunk_rows
from ._blocking import check_length
from ._defaults import (
    CODEC_NAMES,
    DEFAULT_CODEC,
    DEFAULT_INFLIGHT,
    DEFAULT_SUMMARY_WINDOWS,
    DEFAULT_VIRTUAL_INFLIGHT,
    SHORT_SUMMARY_WINDOW_AT_LEAST,
    SMALL_OUTPUT_VALUES,
    SUMMARY_STATE_AT_MOST,
    SUMMARY_VALUES_AT_MOST,
    SUMMARY_WINDOW_AT_LEAST,
    SUMMARY_WINDOWS_AT_LEAST,
    VIRTUAL_SUMMARY_WINDOW_AT_MOST,
)
from ._values import as_choice, as_count

__all__ = [
    "MODES",
    "STORED",
    "VIRTUAL",
    "Layout",
    "Mode",
    "Request",
    "Storage",
    "check_json",
    "check_request",
    "check_windows",
    "check_written_length",
    "default_windows",
    "over_state",
    "storage_for",
    "too_long",
]


LEVEL_FACTOR = DEFAULT_SUMMARY_WINDOWS[1] // DEFAULT_SUMMARY_WINDOWS[0]


def default_windows(rows: int, state_size: int = 1, virtual: bool = False) -> list[int]:
    """The default levels of an output of ``rows`` rows whose largest state holds ``state_size`` values.

    A long output gets ``DEFAULT_SUMMARY_WINDOWS``; a shorter one a finest window that
    gives at least 1024 windows, of at least ``_defaults.SUMMARY_WINDOW_AT_LEAST`` rows (of
    ``SHORT_SUMMARY_WINDOW_AT_LEAST`` for an output of fewer than 2**16 values), or fewer
    where its states are large (``_defaults.SUMMARY_VALUES_AT_MOST``), and coarser levels by
    ``LEVEL_FACTOR`` (4) no longer than the output. A ``virtual`` output, whose summaries are most of what it
    stores, keeps to ``SUMMARY_VALUES_AT_MOST`` values per statistic at the finest level with
    windows of up to ``VIRTUAL_SUMMARY_WINDOW_AT_MOST`` rows: longer ones would leave a run stopped long
    before its length (one of 2**63 steps) with no complete window to draw.
    """
    finest = SUMMARY_WINDOW_AT_LEAST if rows * state_size >= 2**16 else SHORT_SUMMARY_WINDOW_AT_LEAST
    while finest * 2 <= DEFAULT_SUMMARY_WINDOWS[0] and rows // (finest * 2) >= SUMMARY_WINDOWS_AT_LEAST:
        finest *= 2
    longest = VIRTUAL_SUMMARY_WINDOW_AT_MOST if virtual else DEFAULT_SUMMARY_WINDOWS[0]
    while (finest * 2 <= DEFAULT_SUMMARY_WINDOWS[0] or (finest * 2 <= longest and finest < rows)) and (
        -(-rows // finest) * state_size > SUMMARY_VALUES_AT_MOST
    ):
        finest *= 2
    windows = [finest * LEVEL_FACTOR**i for i in range(len(DEFAULT_SUMMARY_WINDOWS))]
    return [w for w in windows if w == finest or w <= rows]


def over_state(sizes: dict[str, int]) -> list[str]:
    """The outputs (``sizes``: the values of each one's state) whose summaries are taken over their whole state:
    those of a state larger than ``SUMMARY_STATE_AT_MOST``. Their length decides nothing, so that an extended
    output is summarised as one run of its new length would be."""
    return [name for name, size in sizes.items() if size > SUMMARY_STATE_AT_MOST]


def too_long(windows: Sequence[int], rows: int) -> InputError | None:
    """The error for summary windows longer than an output of ``rows`` rows (None when they fit)."""
    if not windows or windows[-1] <= rows:
        return None
    fitting = [w for w in windows if w <= rows]
    return InputError(
        f"{arg('summaries', list(windows))} asks for windows of {windows[-1]} rows, longer than the output's {rows} "
        f"rows, which no window of it fills; pass windows of at most {rows} rows"
        + (f", e.g. {arg('summaries', fitting)}" if fitting else "")
        + f", or leave {arg('summaries')} out for levels chosen from its length"
    )


def check_windows(summaries: bool | Sequence[int] | None, reverse: bool) -> list[int]:
    """The summary windows of a write: ``summaries=True`` (the default levels), False/None, or window lengths.

    For ``True`` the levels of a long output: the write chooses them from the output's
    length (:func:`default_windows`) once it is known. A reverse scan gets none: its
    blocks commit from the end, and its summaries are not written (``overview`` and
    ``plot`` say so); windows asked for explicitly are refused.
    """
    if summaries is None or summaries is False:
        return []
    windows: Any = list(DEFAULT_SUMMARY_WINDOWS) if summaries is True else summaries
    try:
        windows = list(windows)
    except TypeError:
        windows = None
    good = windows is not None and all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in windows)
    if good and windows:
        good = windows[0] >= 1 and all(b > a and b % a == 0 for a, b in itertools.pairwise(windows))
    if not good:
        raise InputError(
            f"{arg('summaries', summaries)} does not give increasing window lengths in steps, each a multiple of the "
            f"one before; pass e.g. {arg('summaries', list(DEFAULT_SUMMARY_WINDOWS))}"
        )
    if reverse and windows and summaries is not True:
        raise InputError(
            f"a reverse scan writes no summaries (its blocks commit from its last step), so "
            f"{arg('summaries', summaries)} cannot be kept; leave {arg('summaries')} out or pass "
            f"{arg('summaries', False)}"
        )
    return [] if reverse else [int(w) for w in windows]


_Sink = TypeVar("_Sink")


def check_json(name: str, value: Any) -> None:
    """Refuse a value that cannot be stored as JSON attributes."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(
            f"{arg(name)} must be JSON-serialisable ({one_line(exc)}); pass plain numbers, strings, lists and dicts"
        ) from None


def _attrs(attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    if attrs is not None and not isinstance(attrs, Mapping):
        raise InputError(f"{arg('attrs')} must be a dict of attributes, got {attrs!r}; pass e.g. "
                         f"{arg('attrs', {'title': 'my run'})}")  # fmt: skip
    checked = dict(attrs or {})
    check_json("attrs", checked)
    reserved = sorted(str(k) for k in checked if str(k).startswith("streamacc_"))
    if reserved:
        raise InputError(f"{arg('attrs')} must not set {', '.join(reserved)}: streamacc keeps those up to date")
    return checked


def _names(names: Sequence[str] | Mapping[str, str] | str | None) -> str | tuple[str, ...] | dict[str, str] | None:
    if names is None or isinstance(names, str):
        return names
    if isinstance(names, Mapping):
        return dict(names)  # applied by key, once f's outputs are known
    if isinstance(names, AbstractSet):
        raise InputError(f"{arg('names')} must be a list of names in the order of f's outputs, or a dict from each "
                         f"output's key to its name, not a set, which has no order; pass e.g. "
                         f"{arg('names', {'a': 'x', 'b': 'v'})}")  # fmt: skip
    try:
        return tuple(names)
    except TypeError:
        raise InputError(f"{arg('names')} must be a name or a list of names, got {names!r}; pass e.g. "
                         f"{arg('names', ['x', 'v'])}") from None  # fmt: skip


def _array_attrs(array_attrs: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    if array_attrs is None:
        return {}
    if not isinstance(array_attrs, Mapping) or not all(isinstance(v, Mapping) for v in array_attrs.values()):
        raise InputError(f"{arg('array_attrs')} must map output names to dicts of attributes, got {array_attrs!r}; "
                         f"pass e.g. {arg('array_attrs', {'u': {'units': 'm'}})}")  # fmt: skip
    check_json("array_attrs", array_attrs)
    checked = {str(name): dict(value) for name, value in array_attrs.items()}
    for name, attrs in checked.items():
        _check_numeric_decoding(name, attrs)
    return checked


TEXT_ATTRIBUTES = ("_Encoding",)
"""Attributes with which xarray decodes an array's values as text (objects), which no array of numbers holds: a reader
through dask then cannot even size its chunks."""


def _check_numeric_decoding(name: str, attrs: Mapping[str, Any]) -> None:
    """Refuse attributes that make readers decode the numbers of array ``name`` as text, before anything is written
    (checked here, without xarray, whatever else ``array_attrs`` holds)."""
    text = [key for key in TEXT_ATTRIBUTES if key in attrs]
    if text:
        raise InputError(
            f"{arg('array_attrs')} of {name!r} hold {', '.join(f'{k}={attrs[k]!r}' for k in text)}, with which "
            "xarray decodes an array's values as text, and streamacc's arrays hold numbers (streamacc.open could "
            f"not read it); leave out {', '.join(text)}"
        )


def _summaries(summaries: bool | Sequence[int]) -> bool | tuple[int, ...]:
    if summaries is True or summaries is False:
        return summaries
    if summaries is None:
        return False
    windows = check_windows(summaries, reverse=False)
    return tuple(windows) if windows else False


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a write lays its output out: array names and dimensions, chunks, codec, attributes, time, summaries.

    ``write(path, f, init, length=n, layout=Layout(names="x", chunks=4096))`` is
    ``write(path, f, init, length=n, names="x", chunks=4096)``: :func:`~streamacc.write`
    takes these keywords alone too, for a short call, and builds the layout from them.
    Every field is checked when the layout is made, before JAX is imported; what needs
    the step function (one name per leaf of its ``y``, dimensions per axis) is checked
    when the write traces it, before anything is written.

    Parameters
    ----------
    names : str, sequence of str or dict, optional
        The arrays' names: one per leaf of ``y``, in the order of its leaves (a dict's
        sorted keys), or a dict from each leaf's key to its name (``{"u": "velocity"}``),
        applied by key. By default the dict keys of ``y`` (nested keys joined by ``_``), or
        ``y``. A name is at most 64 ASCII letters, digits and ``_``, beginning with a letter.
    dims : dict, optional
        Names of each array's axes after ``step``, e.g. ``{"u": ["x"]}``; by default
        ``{name}_dim_1``, ...
    chunks : int, tuple, dict or "auto", optional
        Chunk shape, as dask takes it: an int for every axis, a tuple per axis, a dict by
        dimension name (``{"step": 4096, "x": 512}``), -1 or None for a whole axis. Rows per
        chunk must divide a block's rows. By default chunks are sized in bytes on every axis.
    codec : str, default "blosc-lz4"
        The compressor: ``"blosc-lz4"``, ``"blosc-zstd"``, their bit-shuffling
        ``"blosc-lz4-bitshuffle"`` and ``"blosc-zstd-bitshuffle"``, ``"zstd"`` or ``"none"``.
    attrs : dict, optional
        Attributes of the output group (JSON-serialisable; ``streamacc_*`` are reserved).
    array_attrs : dict, optional
        Attributes per output array, e.g. ``{"u": {"units": "m"}}``.
    time : dict, optional
        What a step means in time, ``{"step": dt, "start": t0, "units": "s"}``, for the
        ``time`` coordinate of :func:`streamacc.open`; units ``"<unit> since <date>"`` give dates.
    summaries : bool or sequence of int, default True
        Window summaries (min, max, mean per window) written with the data, for
        :func:`streamacc.overview` and ``streamacc plot``: True for the default levels
        (chosen from the output's rows: at least 1024 windows at the finest, or at most
        2**20 values per statistic for a large state, and windows of at most 2**12, 2**16
        and 2**20 rows, or 2**16, 2**20 and 2**24 for a virtual output), a list of window
        lengths in rows (each a multiple of the one before, none longer than the output),
        or False. A reverse scan writes none; a resumed or extended output keeps the levels
        it was begun with.
    virtual : bool, default False
        Store no data chunks: only the carry entering every block, the manifest and the
        summaries. :func:`streamacc.open` recomputes each chunk a reader touches from its
        block's carry, bit for bit what a stored write holds; :func:`streamacc.materialize`
        stores some or all of them later. Part of the run's identity.

    Attributes
    ----------
    names : str, tuple of str, dict or None
        The array names, as given.
    dims : dict or None
        The dimension names by array.
    chunks : int, tuple, dict, str or None
        The chunk shape, as given.
    codec : str
        The compressor.
    attrs, array_attrs : dict
        The attributes of the group, and of each array.
    time : dict or None
        The time axis, completed (``start`` 0, ``units`` '' where not given).
    summaries : bool or tuple of int
        True for the default levels, False for none, or the window lengths.
    virtual : bool
        Whether the data chunks are left to be recomputed.

    Raises
    ------
    streamacc.errors.InputError
        A malformed field, named as the keyword it was given by.

    Examples
    --------
    >>> import streamacc
    >>> layout = streamacc.Layout(names="x", chunks=4096, time={"step": 0.01, "units": "s"})
    >>> layout.codec, layout.time
    ('blosc-lz4', {'start': 0.0, 'step': 0.01, 'units': 's'})
    >>> streamacc.Layout(virtual="yes")
    Traceback (most recent call last):
    ...
    streamacc.errors.InputError: virtual must be True or False, got 'yes'
    """

    names: str | tuple[str, ...] | dict[str, str] | None = None
    dims: Mapping[str, Sequence[str]] | None = None
    chunks: Any = None
    codec: str = DEFAULT_CODEC
    attrs: dict[str, Any] = dataclasses.field(default_factory=dict)
    array_attrs: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    time: dict[str, Any] | None = None
    summaries: bool | Sequence[int] = True
    virtual: bool = False

    def __post_init__(self) -> None:
        chunk_rows(self.chunks)  # the form of chunks= (its entries per dimension are checked against the output later)
        if not isinstance(self.codec, str) or self.codec not in CODEC_NAMES:
            raise InputError(f"{arg('codec', self.codec)} is unknown; choose one of: {', '.join(CODEC_NAMES)}")
        if not isinstance(self.virtual, bool):
            raise InputError(f"{arg('virtual')} must be True or False, got {self.virtual!r}")
        checked = {
            "names": _names(self.names),
            "dims": dict(self.dims) if isinstance(self.dims, Mapping) else self.dims,  # checked against f's y
            "attrs": _attrs(self.attrs),
            "array_attrs": _array_attrs(self.array_attrs),
            "time": check_time(self.time),
            "summaries": _summaries(self.summaries),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)


LAYOUT_FIELDS: tuple[str, ...] = tuple(field.name for field in dataclasses.fields(Layout))
"""The keywords a :class:`Layout` takes, which :func:`streamacc.write` also takes alone."""


@dataclasses.dataclass(frozen=True)
class Storage:
    """How a run keeps its blocks: one of :data:`STORED` and :data:`VIRTUAL`."""

    virtual: bool
    """Whether the data chunks are left to be recomputed from the recorded carries (what the identity records)."""
    inflight: int
    """Blocks written (or, virtual, summarised) at once by default in this process."""
    batched: bool
    """Whether computed blocks wait and commit together: a virtual block costs milliseconds, a commit two
    durable writes."""

    @property
    def stores_data(self) -> bool:
        return not self.virtual

    def data_sink(self, sink: _Sink) -> _Sink | None:
        """Where a block's data go: ``sink``, or None where they are not stored."""
        return None if self.virtual else sink

    def stored_blocks(self) -> list[list[int]] | None:
        """The manifest's spans of blocks whose data are stored: none yet (virtual), or None for every block."""
        return [] if self.virtual else None

    def windows(self, rows: int, state_size: int, values: int | None = None) -> list[int]:
        """The default summary levels of ``rows`` rows of states of ``state_size`` values: none for a stored output
        of at most ``SMALL_OUTPUT_VALUES`` ``values`` (all its summarised arrays'), whose overview reads its data."""
        if values is not None and values <= SMALL_OUTPUT_VALUES and not self.virtual:
            return []
        return default_windows(rows, state_size, virtual=self.virtual)

    def computes_blocks(self, summarised: bool) -> bool:
        """Whether a run computes whole blocks, or only the carry from block to block (virtual, nothing summarised)."""
        return summarised or not self.virtual


STORED = Storage(virtual=False, inflight=DEFAULT_INFLIGHT, batched=False)
"""Every block's data encoded and written with the block."""

VIRTUAL = Storage(virtual=True, inflight=DEFAULT_VIRTUAL_INFLIGHT, batched=True)
"""Only the carry entering every block, the manifest and the summaries; the data recomputed on reading."""


def storage_for(virtual: bool) -> Storage:
    """:data:`VIRTUAL` or :data:`STORED`."""
    return VIRTUAL if virtual else STORED


Mode = Literal["create", "overwrite", "resume", "extend"]
MODES: tuple[Mode, ...] = ("create", "overwrite", "resume", "extend")
"""What a write does with an output that is already there (see :func:`streamacc.write`)."""


@dataclasses.dataclass(frozen=True)
class Request:
    """A write's mode and layout, and the summary windows they give a scan in this direction."""

    mode: Mode
    layout: Layout
    summaries: list[int]
    summaries_default: bool  # summaries=True: an output continued keeps the windows it was begun with
    storage: Storage  # chosen once, from the layout
    over_state: list[str] | None = None
    """The outputs summarised over their whole state: the stored run's for a continued run, else None (the
    default's choice, from the states' sizes: ``summaries.over_state``)."""


def check_request(*, mode: object = "create", layout: Layout | None = None, reverse: bool = False) -> Request:
    """The request of a write in ``mode`` with ``layout`` (by default ``Layout()``) of a scan run forwards or not.

    The layout was checked when it was made; what is left is the mode, and the summaries
    a reverse scan cannot keep.
    """
    checked: Mode = as_choice("mode", mode, MODES)  # type: ignore[assignment]
    layout = Layout() if layout is None else layout
    summaries = layout.summaries
    return Request(
        mode=checked,
        layout=layout,
        summaries=check_windows(list(summaries) if isinstance(summaries, tuple) else summaries, reverse),
        summaries_default=summaries is True,
        storage=storage_for(layout.virtual),
    )


def check_written_length(length: object, *, from_xs: bool = False) -> None:
    """Refuse a write of fewer than one step (as the command line refuses ``--size 0``), or more than readers index.

    ``scan`` and ``iter_blocks`` take a length of 0, as ``lax.scan`` does; an output holds
    at least one step, so a write says so of any length below 1 (or not a whole number)
    before the scan's own check, which would take 0.
    """
    if from_xs and length == 0:
        raise InputError(
            f"xs has no rows, which makes {arg('length', 0)}, but an output holds at least one step "
            f"({arg('length')} must be >= 1); pass xs of at least one row"
        )
    check_length(as_count("length", length, minimum=1, example=2**20))
