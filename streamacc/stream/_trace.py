"""What a Stream needs of its program's trace and of the stored run, kept apart from the Stream itself.

Planning outside the trace (``outside_trace``), a traced carry's leaves as the host plans
with them, the initial carry a stored run began with, and the errors JAX's transformations
of an ordered callback become.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from ..base import HostLeaf
from ..engine import caller_scopes
from ..errors import InputError, ResumeError, VerifyError, one_line
from ..record import Ledger, decode_leaves
from ..store import Target
from ._host import CALLBACK_LOGGER, Stopped
from ._program import CrossingLeaf

__all__ = [
    "TRACED",
    "Leaf",
    "crossing_leaves",
    "describe_leaves",
    "leaf_type",
    "outside_trace",
    "placeholder",
    "quiet_stops",
    "recorded_init",
    "refused_transform",
]

T = TypeVar("T")


def outside_trace(fn: Callable[[], T]) -> T:
    """``fn()`` on a thread of its own, in this thread's JAX scopes but outside any trace of it.

    A jitted program's trace belongs to the thread tracing it: what runs on another thread
    computes eagerly (a block recomputed for a resume's check, a carry made concrete) and
    adds nothing to the program.
    """
    scopes = caller_scopes()
    box: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            with scopes():
                box.append((True, fn()))
        except BaseException as exc:
            box.append((False, exc))

    thread = threading.Thread(target=run, name="streamacc-stream-plan")
    thread.start()
    thread.join()
    ok, value = box[0]
    if not ok:
        raise value
    result: T = value
    return result


class _QuietStops(logging.Filter):
    """JAX logs each failed callback with its traceback; a Stream's own stops it reports itself."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, Stopped)


@contextlib.contextmanager
def quiet_stops() -> Iterator[None]:
    logger, quiet = logging.getLogger(CALLBACK_LOGGER), _QuietStops()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def recorded_init(target: Target, mode: str) -> list[HostLeaf] | None:
    """The initial carry the stored run began with (the carry kept at boundary 0); None where there is none to read.

    One that is damaged or missing is refused as :func:`streamacc.write` refuses it (``mode``: what
    the run asked), naming it and its repair.
    """
    try:
        ledger = Ledger(target)
        manifest = ledger.load()
        if manifest is None:
            return None
        if manifest.v2:
            encoded = ledger.block(0, manifest).carry_in if manifest.committed_blocks else manifest.carry
            return None if encoded is None else decode_leaves(encoded)
    except Exception:  # what is wrong with the output, opening it says
        return None
    try:
        return ledger.carry(manifest, 0)
    except VerifyError as exc:  # the carry itself: named as a resume names it, with the repair that rebuilds it
        if not manifest.committed_blocks:
            return None  # nothing committed: the run starts afresh, and never reads it
        left = "; the output is left as it was" if mode == "extend" else ""
        raise ResumeError(f"cannot {mode}: {one_line(exc)}{left}") from None
    except Exception:
        return None


Leaf = tuple[tuple[int, ...], Any, str | None]
"""A traced carry leaf as the host plans with it: its shape and dtype (a key's data's), its key implementation."""


def leaf_type(leaf: Any) -> Leaf:
    """What of a traced carry leaf the planning needs, read from the trace without adding to it."""
    if jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        data = jax.eval_shape(jax.random.key_data, leaf)
        return tuple(data.shape), data.dtype, str(jax.random.key_impl(leaf))
    return tuple(leaf.shape), leaf.dtype, None


def placeholder(leaf: Leaf) -> Any:
    """A concrete leaf standing in for a traced one where only its type matters (made outside the trace)."""
    shape, dtype, impl = leaf
    if impl is not None:
        return jax.random.wrap_key_data(jnp.zeros(shape, dtype), impl=impl)
    return np.zeros(shape, dtype)


def crossing_leaves(leaves: list[HostLeaf]) -> tuple[CrossingLeaf, ...]:
    return tuple(CrossingLeaf(tuple(a.shape), a.dtype, impl) for a, impl in leaves)


TRACED = (
    jax.errors.UnexpectedTracerError,
    jax.errors.TracerArrayConversionError,
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerBoolConversionError,
    jax.errors.TracerIntegerConversionError,
)


def refused_transform(exc: ValueError) -> InputError | None:
    """The error for JAX's refusal of an ordered callback under ``vmap`` or a derivative; None for another."""
    text = str(exc)
    if "vmap" in text:
        return InputError(
            "Stream.scan cannot run under jax.vmap: its blocks go to one output in scan order, and vmap would "
            "need one stream per member. Batch inside the step instead: give the carry a leading member axis and "
            "map the member's step in f, e.g. f = lambda c, x: jax.vmap(member_step)(c, x); the output then has a "
            "member dimension"
        )
    if "JVP" in text or "transpose" in text:
        return InputError(
            "Stream.scan cannot be differentiated (jax.grad, jax.jvp, jax.vjp): its steps are handed to the host "
            "as they run, and a derivative would need them kept or run backwards; differentiate a plain lax.scan, "
            "or pass the initial carry through jax.lax.stop_gradient where the stream is a side product"
        )
    return None


def describe_leaves(leaves: list[tuple[tuple[int, ...], Any, str | None]]) -> str:
    return "[" + ", ".join(f"{impl or np.dtype(dtype).name}{list(shape)}" for shape, dtype, impl in leaves) + "]"
