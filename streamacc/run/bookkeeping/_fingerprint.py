"""A step function's fingerprint: its code and the values it uses, for the run's identity.

A plain function is named and fingerprinted by its bytecode (``code:``, as streamacc 0.2.0
recorded it) and by the values that decide what it computes (``values:``): the constants
in its code, the numbers and arrays it closes over, its default arguments, the module
globals it reads that hold data, and, recursively, the helper functions it calls from its
own module and the arguments of a ``functools.partial``. Changing a closed-over parameter
then changes the run's identity, and a resume is refused up front naming the function.

A value that cannot be fingerprinted (an object of an unknown class) is named in one
:class:`~streamacc.StreamaccWarning` per function and variable, rather than pretended
about: changes to it are then caught only by the resume's recomputation of a block.
"""

from __future__ import annotations

import contextlib
import dataclasses
import dis
import functools
import types
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from ...base import warn
from ...errors import StreamaccWarning

__all__ = ["describe_function", "fingerprint"]

_WARNED: set[tuple[str, str]] = set()
_DEPTH = 8
_SCALARS = (bool, int, float, complex, str, bytes, type(None), type(Ellipsis))


def _name(f: Any) -> str:
    return f"{getattr(f, '__module__', '?')}.{getattr(f, '__qualname__', type(f).__qualname__)}"


def describe_function(f: Any) -> str:
    """A stable description of a step function: its name, code digest and values digest.

    Recipes are frozen dataclasses, whose repr holds every parameter. Other callables:
    ``module.qualname code:XXXXXXXX values:XXXXXXXX``.
    """
    return fingerprint(f)[0]


def fingerprint(f: Any) -> tuple[str, dict[str, str]]:
    """:func:`describe_function`'s description, and a digest of each value the function uses, by name.

    The names say where a value is: ``closed-over rate``, ``global RATE``, ``default
    arguments``, ``constants``, ``self``, ``partial keyword arguments``; a value a helper function
    uses is named inside the helper's (``global helper / global B``). A recipe has none.
    """
    if dataclasses.is_dataclass(f) and not isinstance(f, type):
        return repr(f), {}
    target = f.func if isinstance(f, functools.partial) else f
    name = _name(target)
    code = getattr(target, "__code__", None)
    digest = _Digest(name, getattr(target, "__module__", None))
    digest.add(f, 0, full=True)
    values = {label: f"{crc:08x}" for label, crc in digest.values.items()}
    if code is None:
        return f"{name} values:{digest.crc:08x}", values
    return f"{name} code:{zlib.crc32(code.co_code):08x} values:{digest.crc:08x}", values


class _Digest:
    """A running CRC-32 over the values a function uses.

    Functions and objects of the step's own module are followed into; those of other
    modules (libraries: ``jnp.roll``, ``np.sin``, a jitted function) count by name.
    """

    def __init__(self, owner: str, module: str | None) -> None:
        self.owner = owner
        self.module = module
        self.crc = 0
        self.values: dict[str, int] = {}
        self._label: str | None = None
        self._seen: set[int] = set()

    def _feed(self, *parts: Any) -> None:
        for part in parts:
            data = part if isinstance(part, bytes) else repr(part).encode()
            self.crc = zlib.crc32(data, self.crc)
            if self._label is not None:
                self.values[self._label] = zlib.crc32(data, self.values.get(self._label, 0))

    @contextlib.contextmanager
    def _value(self, label: str) -> Iterator[None]:
        """What is fed within this block is the value ``label``, inside the value being fed already, if any."""
        outer = self._label
        self._label = label if outer is None else f"{outer} / {label}"
        try:
            yield
        finally:
            self._label = outer

    def _unknown(self, where: str, value: Any) -> None:
        self._feed("?", type(value).__qualname__)
        key = (self.owner, where)
        if key not in _WARNED:
            _WARNED.add(key)
            warn(
                f"{self.owner} uses {where}, a {type(value).__qualname__} that streamacc cannot fingerprint: a resume "
                "after changing it is not refused up front, only caught if it changes the recomputed last block; "
                "pass such values as numbers or arrays, or in a frozen dataclass",
                StreamaccWarning,
            )

    def _ours(self, value: Any) -> bool:
        return getattr(value, "__module__", None) == self.module

    def _named(self, value: Any) -> str:
        """``value``'s name as the digest sees it: without the module when it is the step's own.

        So that a function run as a script (``__main__``) and imported (``heat``) digest alike.
        """
        return _name(value).removeprefix(f"{self.module}.") if self._ours(value) else _name(value)

    def add(self, value: Any, depth: int, where: str = "a value", *, full: bool = False) -> None:
        if isinstance(value, _SCALARS):
            self._feed(type(value).__name__, value.hex() if isinstance(value, float) else value)
            return
        if depth > _DEPTH or id(value) in self._seen:
            self._feed("...")
            return
        self._seen.add(id(value))
        if isinstance(value, (types.ModuleType, type)):
            self._feed("name", getattr(value, "__name__", "?"))
        elif _is_array(value):
            self._array(value)
        elif isinstance(value, (tuple, list, frozenset, set)):
            items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
            self._feed(type(value).__name__, len(value))
            for i, item in enumerate(items):
                self.add(item, depth + 1, f"{where}[{i}]")
        elif isinstance(value, dict):
            self._feed("dict", len(value))
            for key in sorted(value, key=repr):
                self.add(key, depth + 1, where)
                self.add(value[key], depth + 1, f"{where}[{key!r}]")
        elif dataclasses.is_dataclass(value):
            self._feed("dataclass", self._named(type(value)))
            for field in dataclasses.fields(value):
                self.add(getattr(value, field.name), depth + 1, f"{where}.{field.name}")
        elif isinstance(value, (functools.partial, types.MethodType, types.CodeType)):
            self._callable(value, depth)
        elif isinstance(value, types.FunctionType):
            if full or self._ours(value):
                self._callable(value, depth)
            else:
                self._feed("function", _name(value))
        elif hasattr(value, "__wrapped__"):
            self.add(value.__wrapped__, depth + 1, where)
        elif callable(value) and not (hasattr(value, "__dict__") and self._ours(type(value))):
            self._feed("callable", _name(value))  # a builtin, a ufunc, a library's callable object
        elif hasattr(value, "__dict__"):
            self._feed("object", self._named(type(value)))
            self.add(vars(value), depth + 1, where)
        else:
            self._unknown(where, value)

    def _array(self, value: Any) -> None:
        import jax
        import jax.numpy as jnp

        if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jax.dtypes.extended):
            self._feed("key", str(jax.random.key_impl(value)))
            value = jax.random.key_data(value)
        array = np.asarray(value)
        self._feed("array", array.dtype.str, array.shape, np.ascontiguousarray(array).tobytes())

    def _callable(self, f: Any, depth: int) -> None:
        if isinstance(f, functools.partial):
            self._feed("partial")
            self.add(f.func, depth + 1, "its function", full=True)
            with self._value("partial arguments"):
                self.add(f.args, depth + 1, "its arguments")
            with self._value("partial keyword arguments"):
                self.add(f.keywords, depth + 1, "its keyword arguments")
            return
        if isinstance(f, types.MethodType):
            self._feed("method", self._named(f))
            with self._value("self"):
                self.add(f.__self__, depth + 1, f"{_name(f)}'s object")
            self.add(f.__func__, depth + 1, full=True)
            return
        if isinstance(f, types.CodeType):
            self._code(f, None, depth)
            return
        self._feed("function", self._named(f))
        self._code(f.__code__, f, depth)
        with self._value("default arguments"):
            self.add(f.__defaults__, depth + 1, "its default arguments")
            self.add(f.__kwdefaults__, depth + 1, "its default arguments")
        for var, cell in zip(f.__code__.co_freevars, f.__closure__ or (), strict=False):
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned later)
                content = None
            with self._value(f"closed-over {var}"):
                self.add(content, depth + 1, f"{var!r} (closed over)")

    def _code(self, code: types.CodeType, f: Any, depth: int) -> None:
        self._feed("code", code.co_code)
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self._code(const, f, depth + 1)
            else:
                with self._value("constants"):
                    self.add(const, depth + 1, "a constant")
        if f is None:
            return
        for name in _globals_read(code):
            if name in f.__globals__:
                self._feed("global", name)
                with self._value(f"global {name}"):
                    self.add(f.__globals__[name], depth + 1, f"the global {name!r}")


@functools.lru_cache(maxsize=1024)
def _globals_read(code: types.CodeType) -> tuple[str, ...]:
    """The global names ``code`` and the code nested in it load."""
    names = [ins.argval for ins in dis.get_instructions(code) if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME")]
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names.extend(_globals_read(const))
    return tuple(dict.fromkeys(str(n) for n in names))


def _is_array(value: Any) -> bool:
    import jax

    return isinstance(value, (np.ndarray, np.generic, jax.Array))
