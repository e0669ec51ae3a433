"""The output arrays' axes: their dimension names, their chunk shapes, and the time axis.

Pure arithmetic on shapes and bytes, checked with one-line errors in the caller's terms.
Every array's first axis is ``step`` (one row per kept step); the names of the others
come from ``dims=``, or are made from the array's name so that two outputs never claim
one dimension with two sizes. Chunks hold whole rows of a block along ``step`` (a block
then writes whole chunks) and are sized in bytes on every axis: see :func:`default_chunks`.

A time axis: what a step means in time, for the ``time`` coordinate of ``streamacc.open``.

``time=dict(step=dt, start=t0, units="s")`` says that step ``s`` happens at
``t0 + s * dt``. Units follow CF: free text (``"s"``, ``"days"``) gives float times; the
form ``"<unit> since <date>"`` (``"seconds since 2000-01-01"``) gives dates, decoded as
xarray decodes CF times. Nothing is stored per step: the axis is three numbers in the
run's identity and the root attributes, and readers compute the times they show.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..errors import InputError, arg, one_line
from ._defaults import MAX_CHUNK_BYTES
from ._values import counted

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "CHUNK_BYTES", "MAX_DEFAULT_CHUNK_BYTES", "SERIES_CHUNK_BYTES", "SHARD_BYTES_AT_MOST", "STEP", "TIME_ATTRS",
    "array_dims", "check_chunk_bytes", "check_span", "check_time", "chunk_rows", "default_chunks", "divisor_at_most",
    "is_calendar", "resolve_chunks", "shard_shape", "stored_chunks", "time_attrs", "times", "units_problem",
]


STEP = "step"
"""The first dimension of every output array."""

RESERVED = frozenset({STEP, "time"})
"""Dimension names streamacc gives its own coordinates."""

CHUNK_BYTES = 2 * 2**20
"""Uncompressed bytes per chunk the default aims at where rows hold many values (see
:func:`default_chunks`; chosen by benchmark, benchmarks/RESULTS.md)."""

MAX_DEFAULT_CHUNK_BYTES = 64 * 2**20
"""The chunk a refusal of one too large for a compressor suggests (before outputs were sharded, the largest chunk the
default made: a whole block of rows with few values)."""

SERIES_CHUNK_BYTES = 4 * 2**20
"""Uncompressed bytes per chunk the default aims at where rows hold few values (a scalar series: 2**19 float64
steps), each an inner chunk of its block's shard (see :func:`shard_shape`): a small read decodes one, and a whole
read through zarr's sharding path stays as fast as one chunk a block. Chosen by benchmark (the Benchmarks page's
reading section)."""

SHARD_BYTES_AT_MOST = 64 * 2**20
"""Uncompressed bytes of one shard at most, where a block is larger (a ``block_size`` given far above the
default): a shard is encoded whole in memory before it is stored, so a larger block stores several. A shard always
holds at least one inner chunk's rows of the whole state."""

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def array_dims(
    shapes: Mapping[str, tuple[int, ...]], dims: Mapping[str, Sequence[str]] | None
) -> dict[str, tuple[str, ...]]:
    """Each array's dimension names, ``("step", *trailing)``, from ``dims`` or made from its name.

    ``shapes`` maps each array to its trailing shape (one step's y). A default trailing
    name is ``{array}_dim_{i}``, so outputs of different shapes never share one.
    """
    given = _check_dims_arg(dims, shapes)
    out: dict[str, tuple[str, ...]] = {}
    sizes: dict[str, tuple[int, str]] = {}
    for name, shape in shapes.items():
        trailing = given.get(name) or tuple(f"{name}_dim_{i}" for i in range(1, len(shape) + 1))
        if len(trailing) != len(shape):
            raise InputError(
                f"{arg('dims')} names {counted(len(trailing), 'axis', 'axes')} for output {name!r}, whose y has "
                f"{len(shape)} "
                f"(shape {tuple(shape)}); give one name per axis after {STEP!r}"
            )
        for dim, size in zip(trailing, shape, strict=True):
            if dim in sizes and sizes[dim][0] != size:
                other_size, other = sizes[dim]
                raise InputError(
                    f"{arg('dims')} gives dimension {dim!r} {other_size} values in output {other!r} and {size} in "
                    f"{name!r}; one dimension has one length: give them different names"
                )
            sizes[dim] = (size, name)
        out[name] = (STEP, *trailing)
    return out


def _check_dims_arg(dims: Any, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[str, ...]]:
    if dims is None:
        return {}
    example = arg("dims", {next(iter(shapes), "y"): ["x"]})
    if not isinstance(dims, Mapping):
        raise InputError(f"{arg('dims')} must map output names to lists of dimension names, got {dims!r}; "
                         f"pass e.g. {example}")  # fmt: skip
    unknown = sorted(str(k) for k in dims if k not in shapes)
    if unknown:
        raise InputError(
            f"{arg('dims')} names outputs {unknown} that f does not return; the outputs are "
            f"{', '.join(shapes)}; pass e.g. {example}"
        )
    checked: dict[str, tuple[str, ...]] = {}
    for name, given in dims.items():
        names = (given,) if isinstance(given, str) else tuple(given) if isinstance(given, Sequence) else None
        if names is None or any(not isinstance(d, str) or not _NAME.fullmatch(d) for d in names) or (
            len(set(names)) != len(names)
        ):
            raise InputError(
                f"{arg('dims')} for output {name!r} must be a list of distinct names (ASCII letters, digits and '_', "
                f"not beginning with a digit), got {dims[name]!r}; pass e.g. {example}"
            )
        clash = sorted(RESERVED & set(names))
        if clash:
            raise InputError(f"{arg('dims')} uses {clash[0]!r}, which streamacc names its own coordinate; "
                             "choose another name")  # fmt: skip
        checked[name] = names
    return checked


def _split(shape: tuple[int, ...], elements: int) -> tuple[int, ...]:
    """A tile of ``shape`` with at most ``elements`` elements (at least 1), halving its longest side first."""
    tile = list(shape)
    while math.prod(tile) > max(1, elements):
        longest = max(range(len(tile)), key=lambda i: (tile[i], -i))
        tile[longest] = -(-tile[longest] // 2)
    return tuple(tile)


def divisor_at_most(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit`` (1 if none larger), from n's factors below 2**16."""
    if n <= limit:
        return n
    factors, rest, p = [], n, 2
    while p < 2**16 and p * p <= rest:
        while rest % p == 0:
            factors.append(p)
            rest //= p
        p += 1
    if rest > 1:
        factors.append(rest)
    divisors = {1}
    for f in factors:
        divisors |= {d * f for d in divisors if d * f <= limit}
    return max(divisors)


def _divisors_near(block_rows: int, rows: int) -> str:
    """The divisors of ``block_rows`` next to ``rows`` (one each side), as ``chunks=`` arguments."""
    below = divisor_at_most(block_rows, rows)
    above = block_rows // divisor_at_most(block_rows, block_rows // rows) if rows < block_rows else block_rows
    near = sorted({above, below}, key=lambda d: (abs(d - rows), -d))
    return " or ".join(arg("chunks", {STEP: d}) for d in near)


def default_chunks(
    trailing: tuple[int, ...], itemsize: int, block_rows: int, target: int = CHUNK_BYTES
) -> tuple[int, ...]:
    """The default chunk shape of an array whose rows have shape ``trailing``, in blocks of ``block_rows`` rows.

    Where a row has few values (at most ``sqrt(target / itemsize)``, 512 for float64), a
    chunk is ``SERIES_CHUNK_BYTES`` of rows (2**19 steps of a float64 series), or a whole
    block where that is smaller (a block writes one shard of them: :func:`shard_shape`).
    Otherwise a chunk of about ``target`` bytes is balanced between the two ways
    simulations are read: a snapshot (all of one step, which reads every tile's rows) and a
    time series (one value over many steps, which reads whole tiles): as many rows per
    chunk as values per tile, as far as a block's rows allow. Rows per chunk always divide
    a block's rows.
    """
    values = math.prod(trailing)
    side = math.isqrt(max(1, target // itemsize))
    if values <= side:
        return (divisor_at_most(block_rows, max(1, SERIES_CHUNK_BYTES // (values * itemsize))), *trailing)
    rows = divisor_at_most(block_rows, side)
    return (rows, *_split(trailing, target // (itemsize * rows)))


def _requested(chunks: Any, dims: tuple[str, ...]) -> list[Any]:
    """Per axis: what ``chunks`` asks (an int, -1 or None for the whole axis, 'auto'), before checks."""
    example = arg("chunks", {STEP: 4096})
    if chunks is None or (isinstance(chunks, str) and chunks == "auto"):
        return ["auto"] * len(dims)
    if isinstance(chunks, Mapping):
        unknown = [d for d in chunks if not isinstance(d, str)]
        if unknown:
            raise InputError(f"{arg('chunks')} keys must be dimension names, got {unknown[0]!r}; pass e.g. {example}")
        return [chunks.get(d, "auto") for d in dims]
    if isinstance(chunks, numbers.Integral) and not isinstance(chunks, bool):
        return [int(chunks)] * len(dims)
    if isinstance(chunks, (tuple, list)):
        if len(chunks) != len(dims):
            raise InputError(
                f"{arg('chunks', tuple(chunks))} has {counted(len(chunks), 'entry', 'entries')} for an output with "
                f"{counted(len(dims), 'axis', 'axes')} "
                f"{dims}; give one per axis, or a dict by dimension name such as {example}"
            )
        return list(chunks)
    raise InputError(
        f"{arg('chunks')} must be 'auto', an int, a tuple (one entry per axis) or a dict by dimension name, got "
        f"{chunks!r}; pass e.g. {example}"
    )


def _entry(value: Any, dim: str) -> int | Literal["auto"] | None:
    if value is None or (isinstance(value, numbers.Integral) and not isinstance(value, bool) and value == -1):
        return None
    if isinstance(value, str) and value == "auto":
        return "auto"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise InputError(
            f"{arg('chunks')} gives dimension {dim!r} {value!r}; each entry must be a positive int, -1 or None "
            f"(the whole axis) or 'auto', e.g. {arg('chunks', {dim: 1024})}"
        )
    return int(value)


def chunk_rows(chunks: Any) -> int:
    """The rows along ``step`` that ``chunks`` asks of every array (1 where it leaves them to the default).

    A block sized by bytes holds a whole number of them.
    """
    if isinstance(chunks, Stored):
        return math.lcm(*(shape[0] for shape in chunks.values())) if chunks else 1
    first = (chunks[0] if chunks else "auto") if isinstance(chunks, (tuple, list)) else _requested(chunks, (STEP,))[0]
    asked = _entry(first, STEP)
    return asked if isinstance(asked, int) else 1


class Stored(dict[str, tuple[int, ...]]):
    """Chunk shapes by array name, as a stored run recorded them (a resumed run keeps them)."""


def stored_chunks(recorded: Mapping[str, tuple[int, ...]] | None, plan_rows: int) -> Stored | None:
    """The chunk shapes a stored run ``recorded`` (None: none readable), if they still fit blocks of ``plan_rows``
    rows (else None)."""
    if recorded is None:
        return None
    chunks = Stored(recorded)
    return chunks if all(shape and plan_rows % shape[0] == 0 for shape in chunks.values()) else None


def resolve_chunks(
    shapes: Mapping[str, tuple[int, ...]],
    itemsizes: Mapping[str, int],
    dims: Mapping[str, tuple[str, ...]],
    chunks: Any,
    block_rows: int,
) -> dict[str, tuple[int, ...]]:
    """Each array's chunk shape (rows along ``step`` first), from ``chunks`` and the default.

    ``shapes`` are the trailing shapes (one row), ``block_rows`` the rows of a full block,
    which rows per chunk must divide. Chunk shapes do not depend on the output's length.
    """
    if isinstance(chunks, Mapping) and not isinstance(chunks, Stored):
        known = {d for names in dims.values() for d in names}
        unknown = sorted(str(d) for d in chunks if d not in known)
        if unknown:
            raise InputError(
                f"{arg('chunks')} names dimension {unknown[0]!r}, which no output has; the dimensions are "
                f"{', '.join(sorted(known))}"
            )
    out = {}
    for name, trailing in shapes.items():
        default = default_chunks(trailing, itemsizes[name], block_rows)
        if isinstance(chunks, Stored) and len(chunks.get(name, ())) == len(trailing) + 1:
            out[name] = chunks[name]
            continue
        asked = [_entry(v, d) for v, d in zip(_requested(chunks, dims[name]), dims[name], strict=True)]
        first = asked[0]
        rows = block_rows if first is None else default[0] if first == "auto" else first
        if block_rows % rows:
            raise InputError(
                f"{arg('chunks')} puts {rows} rows along {STEP!r} in a chunk of {name!r}, which does not divide a "
                f"block's {block_rows} rows, and every block must write whole chunks: pass a divisor such as "
                f"{_divisors_near(block_rows, rows)}, or a {arg('block_size')} holding a whole number of chunks"
            )
        tile = [n if a is None else d if a == "auto" else min(a, n)
                for a, d, n in zip(asked[1:], default[1:], trailing, strict=True)]  # fmt: skip
        out[name] = (rows, *tile)
        check_chunk_bytes(name, out[name], itemsizes[name], dims[name])
    return out


def shard_shape(
    chunk: tuple[int, ...], shape: tuple[int, ...], itemsize: int, block_rows: int
) -> tuple[int, ...] | None:
    """The shard shape of an array of ``shape`` chunked by ``chunk``, in blocks of ``block_rows`` rows; None where a
    shard would be one chunk (the array is then stored unsharded, a chunk per block or less).

    A shard holds a block's rows of the whole state (the trailing axes rounded up to whole
    chunks, as Zarr's sharding requires), so a block writes one object however finely it is
    chunked; a block of more than ``SHARD_BYTES_AT_MOST`` writes several. ``chunk`` is
    capped at the shape, as the array's chunks are.
    """
    capped = tuple(max(1, min(c, n)) for c, n in zip(chunk, shape, strict=True))
    if block_rows % capped[0] or all(c >= n for c, n in zip(chunk, shape, strict=True)):
        return None  # an array no larger than one chunk: one chunk holds it
    trailing = tuple(-(-n // c) * c for c, n in zip(capped[1:], shape[1:], strict=True))
    row_chunk_bytes = capped[0] * math.prod(trailing) * itemsize
    rows = capped[0] * divisor_at_most(block_rows // capped[0], max(1, SHARD_BYTES_AT_MOST // row_chunk_bytes))
    shard = (rows, *trailing)
    return None if shard == capped else shard


def check_chunk_bytes(name: str, chunk: tuple[int, ...], itemsize: int, dims: tuple[str, ...]) -> None:
    """Refuse a chunk too large for blosc (2 GiB), before anything is written, suggesting one of 64 MiB."""
    nbytes = math.prod(chunk) * itemsize
    if nbytes <= MAX_CHUNK_BYTES:
        return
    rows = max(1, chunk[0] * MAX_DEFAULT_CHUNK_BYTES // nbytes)
    tile = chunk[1:] if rows > 1 else _split(chunk[1:], MAX_DEFAULT_CHUNK_BYTES // itemsize)
    smaller = dict(zip(dims, (rows, *tile), strict=True))
    raise InputError(
        f"the chunks of {name!r}, {tuple(chunk)}, would hold {nbytes} bytes each, more than the 2 GiB a "
        f"compressor can take; pass smaller chunks, e.g. {arg('chunks', smaller)}, or a smaller "
        f"{arg('block_size')}"
    )


TIME_ATTRS = {"start": "streamacc_time_start", "step": "streamacc_time_step", "units": "streamacc_time_units"}
"""Where the root group records the time axis, for readers without streamacc."""

_KEYS = ("step", "start", "units", "calendar")


def _named(key: str) -> str:
    """One entry of ``time``, named in the caller's terms: ``time['step']``, or ``--time-step``."""
    return arg(f"time.{key}")


def _example() -> str:
    return arg("time", {"step": 0.001, "start": 0.0, "units": "s"})


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise InputError(f"{_named(key)} must be a finite number, got {value!r}; pass e.g. {_example()}")
    return float(value)


def check_time(time: Any) -> dict[str, Any] | None:
    """``time`` checked and completed (``start`` 0, ``units`` ''), or None when no time axis is asked."""
    if time is None:
        return None
    example = _example()
    if not isinstance(time, Mapping) or "step" not in time or set(time) - set(_KEYS):
        raise InputError(
            f"{arg('time')} must be a dict with 'step' (the time one step takes) and optionally 'start', 'units' "
            f"and 'calendar', got {time!r}; pass e.g. {example}"
        )
    step = _number(time["step"], "step")
    if step == 0:
        raise InputError(f"{_named('step')} must not be 0; pass the time one step takes, e.g. {example}")
    units, calendar = time.get("units", ""), time.get("calendar", "standard")
    if not isinstance(units, str) or not isinstance(calendar, str):
        raise InputError(f"{_named('units')} and {_named('calendar')} must be text, got {units!r}, {calendar!r}")
    checked: dict[str, Any] = {"start": _number(time.get("start", 0.0), "start"), "step": step, "units": units.strip()}
    if is_calendar(checked["units"]):
        checked["calendar"] = calendar
        times([0, 1], checked)  # a date that cannot be read fails here, before anything is written
    return checked


def is_calendar(units: str) -> bool:
    """Whether ``units`` name dates (``"<unit> since <date>"``) rather than plain times."""
    return " since " in f" {units.strip()} "


def times(steps: np.ndarray | list[int], time: Mapping[str, Any]) -> np.ndarray:
    """The times of the steps ``steps`` (integer labels): floats, or dates for calendar units."""
    import numpy as np  # not at import: the command line checks a time axis before it imports numpy

    offsets: np.ndarray = time["start"] + np.asarray(steps, dtype=np.float64) * time["step"]
    if not is_calendar(time["units"]):
        return offsets
    from xarray.coding.times import decode_cf_datetime

    problem = units_problem(time["units"])
    if problem is not None:
        raise InputError(f"{_named('units')} {time['units']!r} {problem}")
    try:
        return np.asarray(decode_cf_datetime(offsets, time["units"], time.get("calendar", "standard")))
    except Exception as exc:
        if time.get("calendar", "standard") not in _NUMPY_CALENDARS:  # other calendars need cftime: say so
            raise InputError(
                f"{_named('units')} {time['units']!r} with calendar {time['calendar']!r} cannot be read as CF dates "
                f"({one_line(exc)}); install cftime for that calendar, or use the standard one"
            ) from None
        try:
            decode_cf_datetime(np.zeros(1), time["units"], time.get("calendar", "standard"))
        except Exception:  # the reference date itself (xarray blames a missing cftime for anything)
            reference = time["units"].partition(" since ")[2].strip()
            raise InputError(
                f"{_named('units')} {time['units']!r} counts from {reference!r}, which is not a date xarray reads "
                "(cannot be read as CF dates); write it as YYYY-MM-DD, e.g. 'seconds since 2000-01-01'"
            ) from None
        if np.isfinite(offsets).all() and "cftime" not in str(exc) and "out of bounds" not in str(exc).lower():
            raise InputError(
                f"{_named('units')} {time['units']!r} cannot be read as CF dates ({one_line(exc)}); "
                "pass e.g. 'seconds since 2000-01-01'"
            ) from None
        raise InputError(_out_of_range(time, steps, offsets)) from None


_NUMPY_CALENDARS = ("standard", "gregorian", "proleptic_gregorian")
"""Calendars whose dates numpy's datetime64 holds; the others need cftime."""
_UNITS = {"nanosecond", "microsecond", "millisecond", "second", "minute", "hour", "day"}
_VARYING = {"month", "year", "common_year", "week"}
FIRST_DATE, LAST_DATE = "1677-09-21", "2262-04-11"
"""The dates numpy's datetime64[ns] holds, which readers label dates with (no cftime)."""


def units_problem(units: str) -> str | None:
    """What is wrong with calendar ``units`` (``"<unit> since <date>"``), as the end of a sentence; None if nothing.

    Said here rather than left to xarray, which blames anything it cannot decode on a missing cftime.
    """
    import pandas as pd

    unit, _, reference = units.strip().partition(" since ")
    name = unit.strip().lower().removesuffix("s")
    example = f"e.g. '{'days' if name in _VARYING else 'seconds'} since 2000-01-01'"
    if name in _VARYING:
        return (
            f"counts in {unit.strip()}, which have no fixed length (a month or a year varies), so no time axis can "
            f"step by them; count in days or seconds, {example}"
        )
    if name not in _UNITS:
        return (
            f"counts in {unit.strip()!r}, which is no unit of time dates count in; use nanoseconds, microseconds, "
            f"milliseconds, seconds, minutes, hours or days, {example}"
        )
    try:
        date = pd.Timestamp(reference.strip())
    except (ValueError, TypeError, OverflowError):
        return f"counts from {reference.strip()!r}, which is not a date; write it as YYYY-MM-DD, {example}"
    if pd.isna(date):
        return f"counts from {reference.strip()!r}, which is not a date; write it as YYYY-MM-DD, {example}"
    if not FIRST_DATE <= date.strftime("%Y-%m-%d") <= LAST_DATE:
        return (
            f"counts from {reference.strip()}, outside the dates a reader can label ({FIRST_DATE} to {LAST_DATE}, "
            f"numpy's datetime64[ns]); count from a date within them, or use plain units such as 'days'"
        )
    return None


def _out_of_range(time: Mapping[str, Any], steps: Any, offsets: np.ndarray) -> str:
    """The error for times (``offsets`` in the units, of ``steps``) beyond the dates readers can label."""
    import numpy as np

    far = int(np.argmax(np.abs(offsets)))
    step = np.asarray(steps).reshape(-1)[far]
    return (
        f"the time axis puts step {step} at {offsets[far]} {time['units']}, beyond the dates a reader can label "
        f"({FIRST_DATE} to {LAST_DATE}, numpy's datetime64[ns]); pass a smaller {_named('step')} or "
        f"{_named('start')}, or plain units such as 'days' (times without dates)"
    )


def check_span(time: Mapping[str, Any] | None, last_step: int) -> None:
    """Refuse a time axis whose times at steps 0 and ``last_step`` are not finite, or not dates a reader can label."""
    import numpy as np

    if time is None:
        return
    with np.errstate(over="ignore", invalid="ignore"):
        ends = time["start"] + np.asarray([0, last_step], dtype=np.float64) * time["step"]
    if not np.isfinite(ends).all():
        raise InputError(
            f"the time axis puts step {last_step} at {ends[-1]} ({_named('start')} {time['start']} + {last_step} x "
            f"{_named('step')} {time['step']}), beyond float64; pass a smaller {_named('step')} or "
            f"{_named('start')}, or count in a larger unit"
        )
    times([0, last_step], time)


def time_attrs(time: Mapping[str, Any] | None) -> dict[str, Any]:
    """The root attributes that record the time axis (none without one)."""
    if time is None:
        return {}
    return {attr: time[key] for key, attr in TIME_ATTRS.items()}
