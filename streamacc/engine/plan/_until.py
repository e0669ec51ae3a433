"""A scan's condition, ``until(carry, y) -> bool``: the run ends after the first step where it holds.

:class:`Until` is the condition as a plan holds it (the predicate, and the first step it is
tested on), and :func:`check_until` refuses, before anything runs and in one line that names
``until``, a predicate the engine cannot test after each step: one that is not a function of
``(carry, y)``, that JAX cannot trace, or that returns anything but one boolean.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ...errors import InputError, StepFunctionError, arg
from ._checks import UNTRACEABLE, describe, untraceable

__all__ = ["Predicate", "Until", "check_until"]

Predicate = Callable[[Any, Any], Any]
"""A scan's condition, ``until(carry, y) -> bool``: the carry after a step and that step's y, as JAX arrays."""


@dataclasses.dataclass(frozen=True)
class Until:
    """A scan's condition as its plan holds it: ``predicate``, tested after each step from step ``armed`` on.

    ``armed`` is 0 but for an output extended past the step where its condition held: the
    condition given then is tested from the step after that one.
    """

    predicate: Predicate
    armed: int = 0


def _takes_two(until: Any) -> bool:
    """Whether ``until`` can be called as ``until(carry, y)`` (True where Python cannot tell)."""
    try:
        signature = inspect.signature(until)
    except (TypeError, ValueError):  # a builtin or an object without a signature: tracing tells
        return True
    try:
        signature.bind(None, None)
    except TypeError:
        return False
    return True


def check_until(until: Any, carry: Any, y: Any, *, reverse: bool) -> None:
    """Refuse a condition that cannot be tested after each step of a scan whose carry and y are ``carry`` and ``y``
    (shape structs), in one line that names ``until``."""
    if not callable(until):
        raise InputError(
            f"{arg('until')} must be a function until(carry, y) -> bool, tested after each step, got "
            f"{type(until).__name__}; pass e.g. until=lambda carry, y: y < 1e-6"
        )
    try:
        hash(until)
    except TypeError:
        raise InputError(
            f"{arg('until')} must be hashable, as f must (a function, or a frozen dataclass), but "
            f"{type(until).__name__} is not; make it a frozen dataclass or give it a __hash__"
        ) from None
    if not _takes_two(until):
        raise InputError(
            f"{arg('until')} must take two arguments, the carry after a step and that step's y: until(carry, y) -> "
            f"bool, got until{inspect.signature(until)}"
        )
    if reverse:
        raise InputError(
            f"{arg('until')} ends a scan after the first step in scan order where it holds, and a reverse scan's "
            f"output could then not begin at step 0; pass {arg('reverse', False)}, or leave {arg('until')} out"
        )
    try:
        out = jax.eval_shape(until, carry, y)
    except UNTRACEABLE as exc:
        raise untraceable(until, exc, name="until") from exc
    except (TypeError, KeyError, IndexError, AttributeError, ValueError) as exc:
        raise StepFunctionError(
            f"{arg('until')} failed on a step's carry {describe(carry)} and y {describe(y)} "
            f"({type(exc).__name__}: {' '.join(str(exc).split())}); it is called as until(carry, y) after each step"
        ) from exc
    if not isinstance(out, jax.ShapeDtypeStruct) or out.shape != () or out.dtype != jnp.bool_:
        got = describe(out)
        fix = (
            "reduce it to one, e.g. jnp.all(...) or jnp.any(...)"
            if isinstance(out, jax.ShapeDtypeStruct) and out.dtype == jnp.bool_
            else "return a comparison, e.g. until=lambda carry, y: y < 1e-6"
        )
        raise StepFunctionError(f"{arg('until')} must return one boolean after each step, got {got}; {fix}")
