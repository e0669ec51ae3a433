"""A run's identity made from its plan: everything that must match for a resumed run to give the same bytes.

A step function's fingerprint: its code and the values it uses, for the run's identity.

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
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import google_crc32c
import jax
import numpy as np

from .._version import __version__
from ..base import warn
from ..engine import PROBED_WAY, Plan, to_host
from ..errors import StreamaccWarning
from ..record import RunIdentity
from ..store import fingerprint_of

__all__ = ["carry_digest", "describe_function", "digest_kind", "fingerprint", "input_values", "run_identity"]


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


VALUES_PIECE_BYTES = 64 * 2**20
"""Bytes of an input read and checksummed at a time for its values' digest: its memory stays this, whatever the
input's size (a memmap or a Zarr array is read piece by piece)."""


def carry_digest(leaves: list[tuple[np.ndarray, Any]]) -> str:
    """The identity's digest of an initial carry, from its host leaves (see ``engine.to_host``)."""
    crc = 0
    for array, impl in leaves:
        crc = zlib.crc32(f"{array.dtype.str}{array.shape}{impl}".encode() + array.tobytes(), crc)
    return f"{crc:08x}"


def _describe_xs(xs: Any) -> list[str]:
    """Each input leaf by its shape and dtype alone (``array[N]:<f4``), whatever kind of array holds it (numpy, a
    memmap, JAX, Zarr, traced in a Stream's program) and wherever it lives: its values are ``xs_values``."""

    def one(leaf: Any) -> str:
        whole = getattr(leaf, "whole", None)  # a view of all of a stored array's rows is described as the array
        leaf = leaf if whole is None else whole
        return f"array{list(leaf.shape)}:{np.dtype(leaf.dtype).str}"

    return [one(leaf) for leaf in jax.tree_util.tree_leaves(xs)]


def _digestible(leaf: Any) -> bool:
    """Whether the values of input ``leaf`` are digested: an array (numpy's, a memmap, JAX's, Zarr's), not a reader of
    a stored input's rows (a recipe's ``--input``, known by its store's fingerprint, ``input``)."""
    if isinstance(leaf, (np.ndarray, jax.Array)):
        return not jax.numpy.issubdtype(leaf.dtype, jax.dtypes.prng_key)
    return type(leaf).__module__.split(".")[0] == "zarr" and type(leaf).__name__ == "Array"


def digest_kind(stored: RunIdentity | None) -> str:
    """The checksum a run digests its inputs' values with: CRC-32C, or zlib's CRC-32 where ``stored`` (the run it
    continues) recorded its digests so (outputs of 1.1.0's first builds), so that the digests compare."""
    values = None if stored is None else stored.to_json().get("xs_values")
    return "crc32" if values and all(str(v).startswith("crc32:") for v in values) else "crc32c"


def input_values(leaves: Sequence[Any], marks: Sequence[int], kind: str = "crc32c") -> dict[int, list[str]] | None:
    """The digest of each input leaf's values (``crc32c:`` and 8 hex digits, the CRC-32C of its rows' little-endian
    bytes in C order; with ``kind="crc32"``, ``crc32:`` and zlib's CRC-32, as 1.1.0's first builds recorded) over its
    first ``mark`` rows, for each of ``marks`` (a longer run's digest and the prefix it extends come from one read).
    None when a leaf is not an array whose values are digested (see :func:`_digestible`).

    Read ``VALUES_PIECE_BYTES`` at a time. The CRC-32C is google-crc32c's (the checksum of every stored chunk),
    computed with the CPU's own instruction where it has one: several times as fast as zlib's CRC-32.
    """
    if not all(_digestible(leaf) for leaf in leaves):
        return None
    ends = sorted(set(marks))
    digests: dict[int, list[str]] = {end: [] for end in ends}
    for leaf in leaves:
        dtype = np.dtype(leaf.dtype)
        dtype = dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
        row_bytes = max(1, int(np.prod(leaf.shape[1:], dtype=np.int64)) * dtype.itemsize)
        step = max(1, VALUES_PIECE_BYTES // row_bytes)
        crc, done = 0, 0
        for end in ends:
            while done < end:
                upto = min(end, done + step)
                piece = np.ascontiguousarray(np.asarray(leaf[done:upto]), dtype=dtype).reshape(-1).view(np.uint8)
                crc = zlib.crc32(piece.data, crc) if kind == "crc32" else int(google_crc32c.extend(crc, piece))
                done = upto
            digests[end].append(f"{kind}:{crc:08x}")
    return digests


def _input_contents(xs: Any) -> dict[str, list[str]]:
    """``{"input": [...]}``: a fingerprint of each stored Zarr array read as input (none: no field).

    A resume then refuses an input edited since the run started, whose new rows would
    join blocks committed from the old ones.
    """
    prints = [p for p in map(fingerprint_of, jax.tree_util.tree_leaves(xs)) if p is not None]
    return {"input": prints} if prints else {}


def _unchanged(
    stored: RunIdentity, contents: dict[str, list[str]], leaves: list[Any], length: int
) -> dict[int, list[str]] | None:
    """The digests of the stored run's inputs where this run's are the same Zarr arrays, their chunks unchanged
    (``contents``: their fingerprints): a resume need not read them again. None where any input is another kind,
    or the stored run recorded no digests, or its length differs."""
    doc = stored.to_json()
    if not leaves or "xs_values" not in doc or doc.get("length") != length or doc.get("input") != contents.get("input"):
        return None
    if any(fingerprint_of(leaf) is None for leaf in leaves):
        return None
    return {length: list(doc["xs_values"])}


def run_identity(
    plan: Plan,
    *,
    arrays: dict[str, Any],
    codec: str,
    chunks: dict[str, tuple[int, ...]],
    attrs: dict[str, Any],
    dims: Mapping[str, Sequence[str]] | None = None,
    time: Mapping[str, Any] | None = None,
    summaries: list[int] | None = None,
    over_state: list[str] | None = None,
    virtual: bool = False,
    prefixes: Sequence[int] = (),
    stored: RunIdentity | None = None,
) -> RunIdentity:
    """The identity of a write: function, inputs, layout, codec and versions.

    ``chunks`` are the arrays' chunk shapes before they are capped at a short output's
    length (so that they do not depend on it); ``chunk`` repeats the first one's rows
    along ``step``, as streamacc 0.2.0 recorded it. ``dims`` and ``time`` are as asked;
    ``summaries`` the window lengths (in rows) of the window summaries, ``over_state`` the
    outputs summarised over their whole state (recorded where there are any). A virtual run
    (its data recomputed on reading, not stored) says so; a stored one records nothing of it.
    The inputs are recorded by shape and dtype (``xs``) and by their values (``xs_values``,
    see :func:`input_values`); ``prefixes`` are shorter lengths whose inputs' digests the
    identity keeps beside it, unrecorded (``RunIdentity.prefixes``: what an extension compares).
    ``stored`` is the identity of the run this one resumes, whose digests a Zarr input whose
    chunks are unchanged keeps, unread. An unroll chosen for the step (none given) says so.
    A run with a condition records it as its step (``until``, ``until_values``), how it is
    tested (``until_tested``: on the plain scan's outputs, or inside its steps; 1.1.0's runs
    recorded none) and, where it is tested from a later step than the first (an extension),
    that step (``until_from``); one without records nothing of it.
    """
    function, values = fingerprint(plan.f)
    leaves = jax.tree_util.tree_leaves(plan.xs)
    contents = _input_contents(plan.xs)
    digests = _unchanged(stored, contents, leaves, plan.length) if stored is not None and not prefixes else None
    if digests is None and leaves:
        digests = input_values(leaves, [plan.length, *prefixes], digest_kind(stored))
    xs_values = {} if digests is None else {"xs_values": digests[plan.length]}
    return RunIdentity(
        {
            **contents,
            "function": function,
            **({"function_values": values} if values else {}),
            "recipe": attrs.get("recipe"),
            "params": attrs.get("params"),
            "init": carry_digest(to_host(plan.init)),
            "xs": _describe_xs(plan.xs),
            **xs_values,
            "length": plan.length,
            "block_size": plan.block_size,
            "chunk": next(iter(chunks.values()))[0] if chunks else plan.block_rows,
            "chunks": {name: list(shape) for name, shape in chunks.items()},
            "save_every": plan.save_every,
            "dims": None if dims is None else {name: list(names) for name, names in dims.items()},
            "time": time,
            "unroll": plan.unroll,
            **({"unroll_chosen": True} if plan.unroll_chosen else {}),
            "reverse": plan.reverse,
            "codec": codec,
            "arrays": arrays,
            "summaries": list(summaries or []),
            **({"summaries_over_state": list(over_state)} if over_state else {}),
            "versions": {"streamacc": __version__, "jax": jax.__version__, "backend": jax.default_backend()},
            **({"virtual": True} if virtual else {}),
            **_condition(plan),
        },
        {n: digests[n] for n in prefixes} if digests is not None else {},
    )


def _condition(plan: Plan) -> dict[str, Any]:
    """The identity's fields of a run's condition (none without one)."""
    if plan.until is None:
        return {}
    description, values = fingerprint(plan.until.predicate)
    armed, way = plan.until.armed, plan.until.way
    return {"until": description, **({"until_values": values} if values else {}),
            **({"until_from": armed} if armed else {}),
            **({"until_tested": way} if way != PROBED_WAY else {})}  # fmt: skip
