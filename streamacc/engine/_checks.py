"""A step function, its arguments and its condition checked before any work starts.

Each check turns a bad argument into one :class:`InputError` sentence that names the
argument and the fix, instead of a deep JAX traceback later. A scan's condition,
``until(carry, y) -> bool``, ends the run after the first step where it holds:
:func:`check_until` refuses, in one line that names ``until``, a predicate the engine cannot
test after each step: one that is not a function of ``(carry, y)``, that JAX cannot trace, or
that returns anything but one boolean.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import math
from collections.abc import Callable
from types import CodeType, TracebackType
from typing import Any, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from ..base import as_count, warn
from ..errors import InputError, StepFunctionError, StreamaccWarning, X64Error, arg

__all__ = [
    "UNTRACEABLE",
    "Carry",
    "Predicate",
    "Step",
    "check_until",
    "check_x64",
    "describe",
    "resolve_length",
    "step_shapes",
    "struct_bytes",
    "untraceable",
    "x_struct",
]


Step = Callable[[Any, Any], tuple[Any, Any]]
"""A step function ``f(carry, x) -> (carry, y)``, as ``lax.scan`` takes it (carry, x and y are pytrees)."""

Carry = TypeVar("Carry")
"""The carry's type, as ``jax.lax.scan`` types it: what a scan returns is the carry after the last step."""

_WIDE = frozenset("fui")  # float, unsigned and signed integer kinds that have a 64-bit form
_COMPLEX_WIDE = np.dtype(np.complex128)


def resolve_length(xs: Any, length: Any) -> int:
    """The number of steps: ``length`` if given, else the common leading axis of ``xs``."""
    leaves = jax.tree_util.tree_leaves(xs)
    count = None if length is None else as_count("length", length, minimum=0)
    if not leaves:
        if count is None:
            raise InputError(
                f"{arg('length')} is required when xs is None; pass the number of steps, e.g. {arg('length', 1000)}"
            )
        return count
    sizes = []
    for leaf in leaves:
        shape = getattr(leaf, "shape", None)
        if shape is None or len(shape) == 0:
            raise InputError(
                f"every xs leaf must be an array with a leading step axis, got {type(leaf).__name__} "
                f"with shape {shape}; pass arrays of shape (length, ...)"
            )
        sizes.append(int(shape[0]))
    if len(set(sizes)) > 1:
        raise InputError(
            f"xs leaves have different lengths along axis 0 ({sorted(set(sizes))}); "
            "give every xs leaf the same number of steps"
        )
    if count is not None and count != sizes[0]:
        raise InputError(
            f"{arg('length', count)} disagrees with xs, whose leaves have {sizes[0]} steps; "
            f"drop {arg('length')} or slice xs to match"
        )
    return sizes[0]


def _dtype_of(leaf: Any) -> np.dtype[Any] | None:
    if isinstance(leaf, (bool, int, float, complex)) and not isinstance(leaf, np.generic):
        return None  # Python scalars are weakly typed (np.float64 subclasses float, but is not)
    dtype = getattr(leaf, "dtype", None)
    try:
        return None if dtype is None else np.dtype(dtype)
    except TypeError:
        return None  # e.g. a PRNG key dtype, which has no 64-bit question


def check_x64(**trees: Any) -> None:
    """Refuse 64-bit inputs while ``jax_enable_x64`` is off, since JAX would halve them silently."""
    if jax.config.read("jax_enable_x64"):
        return
    for name, tree in trees.items():
        for leaf in jax.tree_util.tree_leaves(tree):
            dtype = _dtype_of(leaf)
            if dtype is not None and dtype.itemsize >= 8 and (dtype.kind in _WIDE or dtype == _COMPLEX_WIDE):
                raise X64Error(
                    f"{name} holds {dtype} data but jax_enable_x64 is off, so JAX would compute in 32 bits; "
                    'call jax.config.update("jax_enable_x64", True) (or set JAX_ENABLE_X64=1) first, '
                    "or cast the inputs to a 32-bit dtype"
                )
    _warn_weak(trees.get("init"))


_NARROW = {float: "float32", int: "int32", complex: "complex64"}


def _warn_weak(init: Any) -> None:
    """Warn (once per calling line) that Python numbers in ``init`` make a 32-bit run while x64 is off.

    ``init=1.0`` is weakly typed: JAX computes it as float32 then, so ``1 + 1e-8`` rounds to 1.0
    and nothing says so; an explicit ``np.float32`` says that 32 bits are meant.
    """
    for path, leaf in jax.tree_util.tree_leaves_with_path(init):
        if type(leaf) in _NARROW:
            where = f"init{jax.tree_util.keystr(path)}"
            narrow = _NARROW[type(leaf)]
            warn(
                f"{where} is a Python {type(leaf).__name__}, which JAX computes as {narrow} while jax_enable_x64 "
                f"is off, so this run is {narrow}; call jax.config.update(\"jax_enable_x64\", True) (or set "
                f"JAX_ENABLE_X64=1) first for 64 bits, or pass np.{narrow}(...) to say 32 bits are meant",
                StreamaccWarning,
            )
            return



def x_struct(xs: Any) -> Any:
    """The shape structs of one step's x of ``xs`` (None without inputs)."""

    def one(leaf: Any) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(tuple(leaf.shape[1:]), leaf.dtype)

    return None if xs is None else jax.tree_util.tree_map(one, xs)


def struct_bytes(tree: Any, skip: int = 0) -> int:
    """Bytes of one element of every leaf of ``tree`` (its shape past the first ``skip`` axes), PRNG keys left out."""
    return sum(
        np.dtype(leaf.dtype).itemsize * math.prod(leaf.shape[skip:])
        for leaf in jax.tree_util.tree_leaves(tree)
        if not jnp.issubdtype(leaf.dtype, jax.dtypes.extended)
    )


def describe(struct: Any) -> str:
    """A pytree of shape structs in words: ``float64[]``, ``{'x': float32[4]}``."""
    return str(jax.tree_util.tree_map(lambda s: f"{s.dtype}{list(s.shape)}", struct))



def _identity(tree: Any) -> Any:
    return tree


def _carry_struct(init: Any) -> Any:
    """The shape structs of ``init``, or an :class:`InputError` naming a leaf that is not an array."""
    try:
        return jax.eval_shape(_identity, init)
    except TypeError:
        for path, leaf in jax.tree_util.tree_leaves_with_path(init):
            try:
                jax.eval_shape(_identity, leaf)
            except TypeError:
                raise InputError(
                    f"init{jax.tree_util.keystr(path)} is a {type(leaf).__name__}, not an array or number; "
                    "make init a pytree of arrays, e.g. init=np.float64(0.0)"
                ) from None
        raise


_UNTRACEABLE: dict[type[Exception], tuple[str, str]] = {
    jax.errors.TracerBoolConversionError: (
        "it uses a traced value as a Python bool (an if, a while, and, or)",
        "branch with jnp.where, lax.cond or lax.while_loop instead",
    ),
    jax.errors.TracerIntegerConversionError: (
        "it uses a traced value as a Python int (int(), an index, range())",
        "index with lax.dynamic_slice or jnp.take instead",
    ),
    jax.errors.TracerArrayConversionError: (
        "it hands a traced value to numpy (np.asarray, a numpy function)",
        "compute with jax.numpy instead",
    ),
    jax.errors.NonConcreteBooleanIndexError: (
        "it indexes with a boolean mask of traced values, whose size depends on the values",
        "select with jnp.where instead",
    ),
    jax.errors.ConcretizationTypeError: (
        "it needs the concrete value of a traced one (a Python bool, int or shape from the carry or x)",
        "use jax.numpy and lax control flow (jnp.where, lax.cond) on traced values instead",
    ),
}
"""What each of JAX's errors for a step that cannot be traced means, and the fix (the most specific first)."""

UNTRACEABLE = tuple(_UNTRACEABLE)
"""JAX's errors for a function that cannot be traced."""


def _code_of(f: Any) -> CodeType | None:
    """The code object of a step function: a function's, a partial's, or a callable object's ``__call__``."""
    while isinstance(f, functools.partial):
        f = f.func
    f = inspect.unwrap(f) if inspect.isfunction(f) else f
    code = getattr(f, "__code__", None)
    if code is None:
        call = next((vars(k)["__call__"] for k in type(f).__mro__ if "__call__" in vars(k)), None)
        code = getattr(call, "__code__", None)
    return code if isinstance(code, CodeType) else None


def _failed_in(f: Step, tb: TracebackType | None) -> TracebackType | None:
    """The frame of JAX's traceback where ``f``'s own code failed: the deepest in the file that defines ``f``."""
    code = _code_of(f)
    found = None
    while tb is not None:
        if code is not None and tb.tb_frame.f_code.co_filename == code.co_filename:
            found = tb
        tb = tb.tb_next
    return found


def _describe_step(f: Any) -> str:
    """``f``, and the step's own name where it has another: ``f (heat_step)``, ``f (Lorenz)``."""
    name = getattr(f, "__qualname__", None)
    name = name if isinstance(name, str) else type(f).__qualname__
    return "f" if name == "f" else f"f ({name})"


def untraceable(f: Step, exc: Exception, name: str | None = None) -> StepFunctionError:
    """The one-line error for a step that JAX cannot trace, naming the line of ``f`` where it failed.

    ``name`` names the function (``until``) where it is not the step ``f``."""
    what, fix = next(v for k, v in _UNTRACEABLE.items() if isinstance(exc, k))
    where = _failed_in(f, exc.__traceback__)
    code = _code_of(f)
    at, defined = "", ""
    if where is not None:
        filename, lineno = where.tb_frame.f_code.co_filename, where.tb_lineno
        source = " ".join(linecache.getline(filename, lineno).split())
        at = f" at {filename}:{lineno}" + (f" (`{source}`)" if source else "")
        exc.with_traceback(where)  # its chained traceback starts in f: JAX's own frames say nothing more
    elif code is not None:
        defined = f", in {name or 'f'} defined at {code.co_filename}:{code.co_firstlineno}"
    jax_says = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StepFunctionError(
        f"{name or _describe_step(f)} must be traceable by JAX, but{at} {what}{defined}; {fix} (JAX: {jax_says})"
    )


def _trace_step(f: Step, carry: Any, x: Any) -> tuple[Any, Any]:
    try:
        out = jax.eval_shape(f, carry, x)
    except tuple(_UNTRACEABLE) as exc:
        raise untraceable(f, exc) from exc
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise StepFunctionError(
            f"f must return a (carry, y) pair, got {describe(out)}; end f with `return new_carry, y`"
        )
    return out[0], out[1]


def _check_carry(carry_in: Any, carry_out: Any) -> None:
    tree_in, tree_out = (jax.tree_util.tree_structure(t) for t in (carry_in, carry_out))
    same = tree_in == tree_out and all(  # type: ignore[operator]  # PyTreeDefs compare
        a.shape == b.shape and (a.dtype == b.dtype or a.weak_type)
        for a, b in zip(jax.tree_util.tree_leaves(carry_in), jax.tree_util.tree_leaves(carry_out), strict=True)
    )
    if not same:
        raise StepFunctionError(
            f"f changes the carry from {describe(carry_in)} to {describe(carry_out)}; the carry must keep "
            "its structure, shapes and dtypes across a step: cast the new carry (e.g. .astype) or fix init"
        )


def _number_list(tree: Any, where: str) -> str | None:
    """Where in ``tree`` a Python list of scalars is (``init``, ``init['a']``), which f may have taken for an array."""
    if isinstance(tree, list):
        leaves = jax.tree_util.tree_leaves(tree)
        return where if leaves and all(len(getattr(leaf, "shape", ())) == 0 for leaf in leaves) else None
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, tuple) else ()
    return next((found for key, value in items if (found := _number_list(value, f"{where}[{key!r}]"))), None)


def step_shapes(f: Step, init: Any, xs: Any) -> tuple[Any, Any]:
    """Trace one step abstractly; return the (carry, y) shape structs or explain the breach.

    The structs describe the step as the engine runs it: a weakly typed init leaf (a
    Python scalar) takes the dtype that f gives it, as in ``lax.scan``, and y is traced
    again from that promoted carry.
    """
    if not callable(f):
        raise StepFunctionError(f"f must be callable as f(carry, x) -> (carry, y), got {type(f).__name__}")
    try:
        hash(f)
    except TypeError:
        raise StepFunctionError(
            f"f must be hashable, as lax.scan requires, but {type(f).__name__} is not (it defines __eq__ without "
            "__hash__, as a dataclass does unless frozen); make it a frozen dataclass "
            "(@dataclasses.dataclass(frozen=True)) or give it a __hash__"
        ) from None
    carry_in = _carry_struct(init)
    x = x_struct(xs)
    try:
        carry_out, y = _trace_step(f, init, x)
    except (TypeError, AttributeError) as exc:
        listed = _number_list(init, "init")
        if listed is None:
            raise
        raise StepFunctionError(
            f"f failed on its carry ({type(exc).__name__}: {' '.join(str(exc).split())}), and {listed} is a Python "
            "list: a list is a pytree of scalars, each number a carry leaf of its own, not an array; if f takes an "
            f"array, pass one: {listed}=np.asarray([...])"
        ) from exc
    _check_carry(carry_in, carry_out)
    leaves_in, leaves_out = jax.tree_util.tree_leaves(carry_in), jax.tree_util.tree_leaves(carry_out)
    if any(a.dtype != b.dtype for a, b in zip(leaves_in, leaves_out, strict=True)):
        promoted = jax.tree_util.tree_map(lambda s: jax.ShapeDtypeStruct(s.shape, s.dtype), carry_out)
        carry_out, y = _trace_step(f, promoted, x)
        _check_carry(promoted, carry_out)
    for path, leaf in jax.tree_util.tree_leaves_with_path(y):
        if jnp.issubdtype(leaf.dtype, jax.dtypes.extended):
            raise StepFunctionError(
                f"f's y{jax.tree_util.keystr(path)} has dtype {leaf.dtype}, which cannot be copied to host memory; "
                "emit plain arrays as y, e.g. jax.random.key_data(key) instead of a PRNG key"
            )
    return carry_out, y


Predicate = Callable[[Any, Any], Any]
"""A scan's condition, ``until(carry, y) -> bool``: the carry after a step and that step's y, as JAX arrays."""


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
