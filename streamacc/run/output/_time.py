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

__all__ = ["TIME_ATTRS", "check_time", "is_calendar", "time_attrs", "times"]

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

    try:
        return np.asarray(decode_cf_datetime(offsets, time["units"], time.get("calendar", "standard")))
    except Exception as exc:
        raise InputError(
            f"{_named('units')} {time['units']!r} cannot be read as CF dates ({one_line(exc)}); "
            "pass e.g. 'seconds since 2000-01-01'"
        ) from None


def time_attrs(time: Mapping[str, Any] | None) -> dict[str, Any]:
    """The root attributes that record the time axis (none without one)."""
    if time is None:
        return {}
    return {attr: time[key] for key, attr in TIME_ATTRS.items()}
