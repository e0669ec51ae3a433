"""Safe arithmetic for command-line numbers.

Options such as ``--size 2**32`` or ``--tol 1+1e-8`` are easier to read and harder to
mistype than long literals. This module evaluates such text without ``eval``: it parses
it with :func:`ast.parse` and walks a whitelist of int/float literals, unary ``+ -`` and
binary ``+ - * / **``, computing integers exactly and bounding every step, so that no
input can run code, exhaust memory or take long. Every failure is one :class:`InputError`
line that names the option, quotes the text, says what is wrong and how to fix it.
"""

from __future__ import annotations

import ast
import math
import operator
import warnings
from collections.abc import Callable

from ..errors import InputError

__all__ = ["parse_int", "parse_number"]

Number = int | float

_MAX_LEN = 200  # characters of text accepted at all
_MAX_EXP = 1024  # largest |exponent| of **
_MAX_POW_BITS = 2 * 64  # bit_length(base) * exponent bound, checked before computing int ** int
_INT_LIMIT = 2**64  # every integer, intermediate or final, must stay below this in absolute value
_EXACT_FLOAT = 2**53  # floats up to this size are exact integers
_ALLOWED = "only numbers and + - * / ** ( ) are allowed"
_TOO_BIG = "integers must stay below 2**64 in absolute value"
_NOT_FINITE = "the result is not a finite number; use smaller numbers"


class _Bad(Exception):
    """Internal: the expression parsed but cannot be evaluated; the message is the reason."""

    verb = "evaluate"


class _Forbidden(_Bad):
    """Internal: the expression uses syntax outside the whitelist."""

    verb = "parse"


class _TooBig(_Bad):
    """Internal: an integer reached 2**64 in absolute value (the hint depends on the caller)."""


def _checked(value: Number) -> Number:
    """Return ``value`` if it is a bounded int or a finite float, else raise ``_Bad``."""
    if isinstance(value, int):
        if abs(value) >= _INT_LIMIT:
            raise _TooBig(_TOO_BIG)
        return value
    if not math.isfinite(value):
        raise _Bad(_NOT_FINITE)
    return value


def _div(a: Number, b: Number) -> Number:
    """True division that stays an exact int when two ints divide evenly."""
    if b == 0:
        raise _Bad("division by zero")
    if isinstance(a, int) and isinstance(b, int) and a % b == 0:
        return a // b
    return a / b


def _pow(base: Number, exp: Number) -> Number:
    """Power with the exponent and the size of an int result bounded before computing."""
    if abs(exp) > _MAX_EXP:
        raise _Bad(f"the exponent {exp!r} is beyond {_MAX_EXP} in absolute value; use a smaller power")
    if base == 0 and exp < 0:
        raise _Bad("0 to a negative power is undefined")
    if isinstance(base, int) and isinstance(exp, int) and exp >= 0:
        # For |base| >= 2, bit_length * exp > 128 already implies a result >= 2**64: reject it uncomputed.
        if abs(base) > 1 and abs(base).bit_length() * exp > _MAX_POW_BITS:
            raise _TooBig(_TOO_BIG)
        power: int = base**exp  # an int: the exponent is not negative
        return power
    try:
        return math.pow(base, exp)
    except ValueError:
        raise _Bad("a negative number to a fractional power is not a real number") from None


_BINOPS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: _div,
    ast.Pow: _pow,
}


def _eval(node: ast.AST) -> Number:
    """Evaluate a whitelisted AST node; anything else raises ``_Forbidden``."""
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return _checked(node.value)  # not bool, str, complex...
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        value = _eval(node.operand)
        return value if isinstance(node.op, ast.UAdd) else -value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        left, right = _eval(node.left), _eval(node.right)
        try:
            return _checked(_BINOPS[type(node.op)](left, right))
        except OverflowError:
            raise _Bad(_NOT_FINITE) from None
    raise _Forbidden(_ALLOWED)


def _quote(text: str) -> str:
    """``repr`` of ``text`` (so newlines stay escaped and the message one line), cut if long."""
    return repr(text) if len(text) <= 60 else repr(text[:57]) + "..."


def _evaluate(text: str, name: str, hint: str, example: str) -> Number:
    """Parse and evaluate ``text``, turning every failure into one ``InputError`` line (``example``: a value the
    option takes, for the fix)."""
    if not isinstance(text, str):
        raise InputError(f"{name} must be given as text, got {type(text).__name__}; pass e.g. '{example}'")
    quoted = _quote(text)
    if len(text) > _MAX_LEN:
        raise InputError(f"{name}: {quoted} is {len(text)} characters, over the limit of {_MAX_LEN}; shorten it")
    try:
        with warnings.catch_warnings():  # e.g. SyntaxWarning 'invalid decimal literal' on '1_a'
            warnings.simplefilter("ignore")
            tree = ast.parse(text.strip(), mode="eval")  # builds a tree only; nothing is compiled or run
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise InputError(f"{name}: {quoted} is not a valid arithmetic expression; write e.g. '{example}'") from None
    try:
        return _eval(tree)
    except _TooBig as exc:
        raise InputError(f"{name}: cannot evaluate {quoted}: {exc}; {hint}") from None
    except _Forbidden as exc:
        raise InputError(f"{name}: cannot {exc.verb} {quoted}: {exc}, e.g. '{example}'") from None
    except _Bad as exc:
        raise InputError(f"{name}: cannot {exc.verb} {quoted}: {exc}") from None
    except RecursionError:
        raise InputError(f"{name}: {quoted} is nested too deeply; simplify it") from None


def parse_number(text: str, *, name: str, example: str = "1+1e-8") -> float:
    """Return the value of the arithmetic ``text`` (e.g. ``'1+1e-8'``) as a finite float.

    ``name`` is the option shown in error messages, e.g. ``'--tol'``, and ``example`` a value it takes, shown as
    the fix.
    """
    return float(_evaluate(text, name, "write a float such as 2.0**70 for a larger value", example))


def parse_int(text: str, *, name: str, minimum: int | None = None, example: str = "2**32") -> int:
    """Return the value of the arithmetic ``text`` (e.g. ``'2**32'``) as an exact int.

    A float result is accepted only if it is whole and at most 2**53, where floats are
    exact (so ``'1e6'`` works); ``minimum``, if given, is the smallest value allowed, and
    ``example`` a value the option takes, shown as the fix.
    """
    value = _evaluate(text, name, "use a smaller value (intermediate results count too)", example)
    quoted = _quote(text)
    if isinstance(value, float):
        if not value.is_integer():
            raise InputError(f"{name} must be a whole number, got {quoted} = {value!r}; write e.g. '{example}'")
        if abs(value) > _EXACT_FLOAT:
            raise InputError(
                f"{name}: {quoted} = {value!r} is beyond 2**53, where floats are not exact; "
                "write it with integers, e.g. '10**18' instead of '1e18'"
            )
        value = int(value)
    if minimum is not None and value < minimum:
        source = "" if text.strip() == str(value) else f" (from {quoted})"
        raise InputError(f"{name} must be >= {minimum}, got {value}{source}; pass {name} {minimum} or more")
    return value
