"""A time axis: what a step means in time, for the ``time`` coordinate of ``streamacc.open``.

``time=dict(step=dt, start=t0, units="s")`` says that step ``s`` happens at
``t0 + s * dt``. Units follow CF: free text (``"s"``, ``"days"``) gives float times; the
form ``"<unit> since <date>"`` (``"seconds since 2000-01-01"``) gives dates, decoded as
xarray decodes CF times. Nothing is stored per step: the axis is three numbers in the
run's identity and the root attributes, and readers compute the times they show.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ...errors import InputError, arg, one_line

if TYPE_CHECKING:
    import numpy as np

__all__ = ["TIME_ATTRS", "check_span", "check_time", "is_calendar", "time_attrs", "times", "units_problem"]

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
