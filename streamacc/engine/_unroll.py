"""The unroll chosen for a step that names none: on a CPU 1, on a TPU or GPU a rule over the step's program and the
run's length.

``lax.scan(unroll=u)`` runs u steps per trip of its loop. A trip costs little on a CPU
and far more than a cheap step on a TPU or GPU, where unrolling is the lever that gives
a step the chip's speed; but the compile grows with the unrolled body, and an unroll can
change a step's last bits: XLA compiles the unrolled steps together, folding a constant
multiply across them or contracting a multiply and an add otherwise (the seed's
progression ``c * (1 + 1e-8)`` at unroll 2 differed from ``lax.scan`` in all but 7 of 2**20
steps). On a CPU, where unrolling gained at most about 1.4x and only on the cheapest
steps, a step that names no unroll runs at 1: its output is plain ``lax.scan(f, init, xs)``'s,
bit for bit. On a chip the rule, deterministic (the same job on the same platform and
versions gets the same unroll, whatever the machine is doing):

1. The step's program, lowered for the platform it will run on, is read: its operations
   (a called function's counted at each call), whether it loops, its largest value, and
   the largest value it slices, stacks or rolls.
2. The unrolls allowed: powers of two from 2 up to ``UNROLL_AT_MOST``, with the unrolled
   body at most ``UNROLLED_OPS_AT_MOST`` operations; for a step with a loop of its own at
   most 2, and for one of vectors shorter than a register row at most 8 (4 where it slices
   or stacks them: ``SHORT_VECTOR_UNROLL_AT_MOST``). Two unrolled groups fit in the smallest
   default block, and a thinned scan unrolls only where a block's every-step ys stay small.
3. Of those, the unroll whose saving over the run's length (``LOOP_TRIP_SECONDS`` a trip,
   on all but one step in u) most outweighs its compile (``COMPILE_SECONDS_PER_OP`` per
   operation per unrolled copy); ties go to the smaller.
4. Halved until it lines up with the blocks asked for (and, reversed, with the length).

The output is then ``lax.scan(f, init, xs, unroll=u)``'s bit for bit, which can differ from
unroll 1's in the last bits; ``unroll=1`` gives plain ``lax.scan``'s on a chip too.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import jax

from ..base import (
    ACCELERATORS,
    COMPILE_SECONDS_PER_OP,
    DEFAULT_BLOCK_BYTES,
    LOOP_TRIP_SECONDS,
    SHORT_VECTOR,
    SHORT_VECTOR_UNROLL_AT_MOST,
    THINNED_UNROLL_ROW_BYTES_AT_MOST,
    UNROLL_AT_MOST,
    UNROLLED_OPS_AT_MOST,
)
from ._checks import Step, struct_bytes

__all__ = ["StepProgram", "choose_unroll", "step_program"]

_LOWERED_FOR = {"tpu": "tpu", "gpu": "cuda", "cuda": "cuda", "rocm": "rocm"}
"""The platform a step is lowered for where JAX computes on each (JAX's names); any other is lowered for a CPU."""

_MOVES = frozenset({"slice", "dynamic_slice", "dynamic_update_slice", "concatenate", "gather", "scatter", "pad",
                    "transpose", "reverse", "sort"})  # fmt: skip
"""Operations that move values between positions rather than compute on them."""

_FUNCTION = re.compile(r"^\s*func\.func\s+(?:public\s+|private\s+)?@([\w.$-]+)")
_CALL = re.compile(r"\bcall\s+@([\w.$-]+)")
_OPERATION = re.compile(r'^\s*(?:%[^=]*=\s*)?"?(?:stablehlo|chlo)\.([a-z_]+)')
_TENSOR = re.compile(r"tensor<((?:\d+x)*)[a-z!]")
_NOT_COUNTED = frozenset({"constant", "return"})


@dataclasses.dataclass(frozen=True)
class StepProgram:
    """What the rule reads of a step's program as lowered for its platform."""

    operations: int
    """Operations of the program, each called function's counted at every call (constants not counted)."""
    loops: bool
    """Whether the step runs a loop of its own (a ``while``: ``lax.fori_loop``, ``lax.scan``, ``lax.while_loop``)."""
    largest: int
    """Elements of the largest value any operation takes or makes."""
    moved: int
    """Elements of the largest value that an operation slices, stacks, rolls, gathers or transposes (0: none)."""
    short: int
    """Elements of the largest value shorter than ``SHORT_VECTOR`` and of 2 elements or more (0: none)."""
    short_moved: bool
    """Whether an operation slices, stacks, rolls, gathers or transposes such a short vector."""


@dataclasses.dataclass
class _Function:
    operations: int = 0
    loops: bool = False
    largest: int = 1
    moved: int = 0
    short: int = 0
    short_moved: bool = False
    calls: list[str] = dataclasses.field(default_factory=list)


def _sizes(line: str) -> list[int]:
    """Elements of each tensor named on one line of a lowered program (1 for a scalar)."""
    return [math.prod(int(d) for d in dims.split("x") if d) for dims in _TENSOR.findall(line)]


def _short(sizes: list[int]) -> int:
    return max((n for n in sizes if 2 <= n < SHORT_VECTOR), default=0)


def _read(text: str) -> StepProgram:
    """A lowered program's :class:`StepProgram`, from its StableHLO text."""
    functions: dict[str, _Function] = {}
    current: _Function | None = None
    for line in text.splitlines():
        if (named := _FUNCTION.match(line)) is not None:
            current = functions.setdefault(named.group(1), _Function())
            continue
        if current is None:
            continue
        if (called := _CALL.search(line)) is not None:
            current.calls.append(called.group(1))
            continue
        op = _OPERATION.match(line)
        if op is None or op.group(1) in _NOT_COUNTED:
            continue
        sizes = _sizes(line)
        size, short = max(sizes, default=1), _short(sizes)
        current.operations += 1
        current.loops |= op.group(1) == "while"
        current.largest = max(current.largest, size)
        current.short = max(current.short, short)
        if op.group(1) in _MOVES:
            current.moved = max(current.moved, size)
            current.short_moved |= short > 0

    def total(name: str, seen: frozenset[str]) -> StepProgram:
        own = functions.get(name, _Function())
        parts = [total(c, seen | {c}) for c in own.calls if c not in seen]
        return StepProgram(
            own.operations + sum(p.operations for p in parts),
            own.loops or any(p.loops for p in parts),
            max([own.largest, *(p.largest for p in parts)]),
            max([own.moved, *(p.moved for p in parts)]),
            max([own.short, *(p.short for p in parts)]),
            own.short_moved or any(p.short_moved for p in parts),
        )

    return total("main", frozenset({"main"}))


def step_program(f: Step, carry: Any, x: Any, platform: str) -> StepProgram:
    """The program of one step ``f(carry, x)`` (shape structs) as lowered for ``platform`` (JAX's names).

    Lowered for a CPU where JAX cannot lower for the platform here; read as a program too
    large to unroll where it cannot be lowered at all.
    """
    traced = jax.jit(f).trace(carry, x)
    for target in dict.fromkeys((_LOWERED_FOR.get(platform, "cpu"), "cpu")):
        try:
            return _read(traced.lower(lowering_platforms=(target,)).as_text())
        except Exception:
            continue
    return StepProgram(UNROLLED_OPS_AT_MOST + 1, True, 1, 0, 0, False)


def _powers(least: int, most: int) -> list[int]:
    return [2**k for k in range(least.bit_length() - 1, most.bit_length())]


def _at_most(n: int) -> int:
    """The largest power of two at most ``n`` (1 for less)."""
    return 1 << (max(n, 1).bit_length() - 1)


def _gain(u: int, length: int, trip: float, operations: int) -> float:
    """Seconds an unroll of ``u`` saves over ``length`` steps, less what it adds to the compile."""
    return length * trip * (1 - 1 / u) - COMPILE_SECONDS_PER_OP * operations * (u - 1)


def choose_unroll(
    f: Step,
    carry: Any,
    x: Any,
    y: Any,
    *,
    length: int,
    platform: str,
    block_size: int | None = None,
    reverse: bool = False,
    save_every: int = 1,
) -> int:
    """The unroll of a scan of ``length`` steps of ``f`` that names none, where JAX computes on ``platform``: 1 on a
    CPU.

    ``carry``, ``x`` and ``y`` are one step's shape structs (``x`` None without inputs);
    ``block_size`` the blocks asked for (None: sized by bytes). See the module's docstring.
    """
    if platform not in ACCELERATORS:
        return 1
    least = 2
    row = max(struct_bytes(y) * save_every, save_every * struct_bytes(x))
    most = min(UNROLL_AT_MOST, _at_most(DEFAULT_BLOCK_BYTES // max(row, 1) // 2))
    if save_every > 1 and struct_bytes(y) * save_every > THINNED_UNROLL_ROW_BYTES_AT_MOST:
        most = 1
    trip = LOOP_TRIP_SECONDS
    chosen = least
    if most > least and _gain(2 * least, length, trip, 1) > _gain(least, length, trip, 1):
        program = step_program(f, carry, x, platform)
        if program.loops:
            most = min(most, 2)
        if program.short:
            most = min(most, SHORT_VECTOR_UNROLL_AT_MOST["moved" if program.short_moved else "values"])
        most = max(least, min(most, _at_most(UNROLLED_OPS_AT_MOST // max(program.operations, 1))))
        chosen = max(_powers(least, most), key=lambda u: (_gain(u, length, trip, program.operations), -u))
    chosen = min(chosen, max(most, 1))
    while chosen > 1 and not _lines_up(chosen, length, block_size, reverse):
        chosen //= 2
    return chosen


def _lines_up(u: int, length: int, block_size: int | None, reverse: bool) -> bool:
    """Whether blocks of ``block_size`` steps (None: sized to suit) and a reversed ``length`` suit an unroll of ``u``
    (see ``_blocking.check_grouping``)."""
    if reverse and length % u:
        return False
    return block_size is None or length <= block_size or (block_size % u == 0 and block_size >= 2 * u)
