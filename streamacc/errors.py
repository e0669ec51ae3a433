"""The exceptions streamacc raises, and how their messages name the caller's arguments.

Every error streamacc raises on purpose derives from :class:`StreamaccError`, and its
message is one sentence that names the problem and shows the fix, so that the command line
can print it on one line and a caller can catch the whole family at once::

    try:
        streamacc.write("out.zarr", f, init, length=2**32)
    except streamacc.errors.OutputExistsError:
        ...  # the output is there already: pass mode="overwrite", "resume" or "extend"

A message names the arguments it concerns, and each caller reads them in its own terms:
the same mistake reads ``block_size=1000`` from Python and ``--block-size 1000`` on the
command line. An error keeps its message as parts, text and the arguments it names
(:attr:`StreamaccError.parts`); ``str(error)`` shows them as keyword arguments, and
:meth:`StreamaccError.render` as any other caller spells them. No setting of the process decides it.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "Arg", "CarryMismatchError", "InputError", "LockedError", "NoOutputError", "OutputExistsError", "Part",
    "ResumeError", "StepError", "StepFunctionError", "StoreError", "StreamaccError", "StreamaccWarning", "VerifyError",
    "X64Error", "arg", "one_line", "render",
]

_MARK = re.compile("\x02([^\x03]*)\x03")  # STX ... ETX: characters no message text holds


class _Absent:
    def __repr__(self) -> str:
        return "<absent>"

    def __reduce__(self) -> str:  # the one instance, also once unpickled (an error sent back by a dask worker)
        return "ABSENT"


ABSENT: Any = _Absent()
"""The value of an :class:`Arg` that names an argument without a value."""


@dataclasses.dataclass(frozen=True)
class Arg:
    """An argument named in a message, as :attr:`StreamaccError.arguments` lists them.

    Attributes
    ----------
    name : str
        The argument's name, ``"time.step"`` for an entry of a dict argument.
    value : object
        Its value as plain data (numbers, strings, booleans, lists, dicts), or ``ABSENT``
        when the message names the argument without a value.
    python : str
        How a Python caller writes it: ``"block_size=1000"``, ``"time['step']"``.

    Examples
    --------
    >>> import streamacc
    >>> error = streamacc.errors.InputError(f"{streamacc.errors.arg('block_size', 1000)} is too small")
    >>> error.arguments
    [Arg(name='block_size', value=1000, python='block_size=1000')]
    """

    name: str
    value: Any = ABSENT
    python: str = ""


def _python(name: str, value: Any) -> str:
    head, _, key = name.partition(".")
    written = f"{head}[{key!r}]" if key else name
    if value is ABSENT:
        return written
    return f"{written}={value!r}" if isinstance(value, str) else f"{written}={value}"


def _plain(value: Any) -> Any:
    """``value`` as JSON data (tuples become lists, numpy scalars numbers); its repr where it is none."""
    if isinstance(value, (str, bool, type(None))):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)


def arg(name: str, value: Any = ABSENT) -> str:
    """Argument ``name`` (set to ``value``) inside a message, to be shown in its reader's terms.

    A message names the arguments it concerns with ``arg``; ``str(error)`` shows them as
    Python keyword arguments, and the command line as its options.

    Parameters
    ----------
    name : str
        The argument's name as the Python API spells it (``"block_size"``), or
        ``"dict_argument.key"`` for an entry of a dict argument (``"time.step"``).
    value : object, optional
        Its value; left out, the message names the argument alone.

    Returns
    -------
    str
        A marker to put inside the message text: an error or warning made from it keeps the argument
        apart (:attr:`StreamaccError.parts`); :func:`render` spells out the markers of any text.

    Examples
    --------
    >>> from streamacc.errors import InputError, arg
    >>> error = InputError(f"{arg('block_size', 1000)} must be a multiple of 8")
    >>> print(error)
    block_size=1000 must be a multiple of 8
    >>> from streamacc.cli import cli_message
    >>> cli_message(error)
    '--block-size 1000 must be a multiple of 8'
    """
    return _mark(Arg(name, _plain(value) if value is not ABSENT else ABSENT, _python(name, value)))


def _mark(a: Arg) -> str:
    value = {} if a.value is ABSENT else {"value": a.value}
    return "\x02" + json.dumps({"name": a.name, "python": a.python, **value}) + "\x03"


def _arg(doc: str) -> Arg:
    parsed = json.loads(doc)
    return Arg(parsed["name"], parsed.get("value", ABSENT), parsed["python"])


Part = str | Arg
"""A piece of a message: its text, or an argument it names."""


def _parts(text: str) -> tuple[Part, ...]:
    """``text``, its arguments marked with :func:`arg`, as its pieces of text and its arguments, in order."""
    parts: list[Part] = []
    at = 0
    for m in _MARK.finditer(text):
        parts += [text[at : m.start()], _arg(m.group(1))]
        at = m.end()
    parts.append(text[at:])
    return tuple(p for p in parts if p != "")


def _spelt(parts: tuple[Part, ...], spell: Callable[[Arg], str] | None = None) -> str:
    spell = spell or (lambda a: a.python)
    return "".join(p if isinstance(p, str) else spell(p) for p in parts)


def _split(args: tuple[object, ...]) -> tuple[tuple[Part, ...], tuple[object, ...]]:
    """A message's parts, and the exception's arguments with its text spelt out in Python's terms."""
    if len(args) == 1 and isinstance(args[0], str):
        parts = _parts(args[0])
        return parts, (_spelt(parts),)
    return (), args


def render(text: str, spell: Callable[[Arg], str] | None = None) -> str:
    """``text`` with each argument it names spelt by ``spell``.

    Parameters
    ----------
    text : str
        A message holding arguments marked with :func:`arg`.
    spell : callable, optional
        How to write each :class:`Arg`; by default as a Python keyword argument (``Arg.python``).

    Returns
    -------
    str
        The message as its reader reads it.

    Examples
    --------
    >>> from streamacc.errors import arg, render
    >>> render(f"{arg('save_every', 0)} keeps no step", lambda a: f"<{a.name}>")
    '<save_every> keeps no step'
    """
    return _spelt(_parts(text), spell)


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line, its arguments still marked, to be part of another message.

    Parameters
    ----------
    exc : BaseException
        Any exception; a :class:`StreamaccError`'s arguments stay marked, for its new reader's terms.

    Returns
    -------
    str
        The message, its whitespace (newlines included) collapsed to single spaces.

    Examples
    --------
    >>> from streamacc.errors import one_line
    >>> one_line(OSError("the disk" + chr(10) + "  is full"))
    'the disk is full'
    """
    parts = exc.parts if isinstance(exc, StreamaccError) else ()
    text = "".join(p if isinstance(p, str) else _mark(p) for p in parts) if parts else str(exc)
    return " ".join(text.split())


class StreamaccError(Exception):
    """Base class of every error streamacc raises on purpose; also ``streamacc.StreamaccError``.

    Its message is one sentence naming the problem and the fix, in the caller's terms: ``str(error)`` names
    arguments as Python keywords (``block_size=1000``), the command line as its options (``--block-size 1000``).

    Examples
    --------
    >>> import numpy as np, streamacc
    >>> def step(x, _):
    ...     return x + 1, x
    >>> try:
    ...     streamacc.scan(step, np.int32(0), length=100, block_size=10, unroll=8)
    ... except streamacc.StreamaccError as error:
    ...     print(type(error).__name__, error)
    InputError block_size=10 must be a multiple of the scan's unroll (8) and at least 16, so that blocks line up
    with lax.scan's unrolled groups; pass e.g. block_size=16
    """

    parts: tuple[Part, ...]
    """The message as its pieces of text and the arguments it names (:class:`Arg`), in order."""

    def __init__(self, *args: object) -> None:
        self.parts, args = _split(args)
        super().__init__(*args)

    def render(self, spell: Callable[[Arg], str] | None = None) -> str:
        """The message with each argument it names spelt by ``spell``.

        Parameters
        ----------
        spell : callable, optional
            How to write each :class:`Arg`; by default as a Python keyword argument (``Arg.python``).

        Returns
        -------
        str
            The message as its reader reads it.

        Examples
        --------
        >>> from streamacc.errors import InputError, arg
        >>> InputError(f"{arg('save_every', 0)} keeps no step").render(lambda a: f"<{a.name}>")
        '<save_every> keeps no step'
        """
        return _spelt(self.parts, spell) if self.parts else str(self)

    @property
    def arguments(self) -> list[Arg]:
        """The arguments the message names, in order (see :class:`Arg`)."""
        return [p for p in self.parts if isinstance(p, Arg)]


class StreamaccWarning(UserWarning):
    """Something worth knowing that is not an error: resuming an output that is already complete, resuming where
    nothing is stored (the run starts afresh), a value a step function uses that cannot be fingerprinted.

    Examples
    --------
    >>> import warnings, numpy as np, streamacc
    >>> def step(x, _):
    ...     return x + 1, x
    >>> _ = streamacc.write("once.zarr", step, np.int32(0), length=8, progress=False)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _ = streamacc.write("once.zarr", step, np.int32(0), length=8, mode="resume", progress=False)
    >>> print(caught[0].category.__name__, caught[0].message)
    StreamaccWarning once.zarr is already complete (8 steps); nothing to do
    """

    parts: tuple[Part, ...]
    """The message as its pieces of text and the arguments it names (:class:`Arg`), in order."""

    def __init__(self, *args: object) -> None:
        self.parts, args = _split(args)
        super().__init__(*args)

    def render(self, spell: Callable[[Arg], str] | None = None) -> str:
        """The message with each argument it names spelt by ``spell`` (see :meth:`StreamaccError.render`)."""
        return _spelt(self.parts, spell) if self.parts else str(self)


class InputError(StreamaccError, ValueError):
    """An argument is missing, malformed or inconsistent with another; raised before anything is written. Also a
    ``ValueError``.

    Examples
    --------
    >>> import numpy as np, streamacc
    >>> def step(x, _):
    ...     return x + 1, x
    >>> streamacc.scan(step, np.int32(0), length=-1)
    Traceback (most recent call last):
    ...
    streamacc.errors.InputError: length must be >= 0, got -1; pass e.g. length=1024
    """


class StepFunctionError(InputError):
    """The step function ``f(carry, x) -> (carry, y)`` breaks the scan contract (its carry changes structure, shape
    or dtype, or it is not hashable).

    Examples
    --------
    >>> import numpy as np, streamacc
    >>> def step(x, _):
    ...     return x.astype(np.float32), x
    >>> streamacc.scan(step, np.int32(0), length=4)
    Traceback (most recent call last):
    ...
    streamacc.errors.StepFunctionError: f changes the carry from int32[] to float32[]; the carry must keep its
    structure, shapes and dtypes across a step: cast the new carry (e.g. .astype) or fix init
    """


class X64Error(InputError):
    """64-bit inputs were given while JAX would silently compute in 32 bits (``jax_enable_x64`` is off).

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> def step(x, _):
    ...     return x * 2, x
    >>> with jax.enable_x64(False):
    ...     streamacc.scan(step, np.float64(1.0), length=4)
    Traceback (most recent call last):
    ...
    streamacc.errors.X64Error: init holds float64 data but jax_enable_x64 is off, so JAX would compute in 32 bits;
    call jax.config.update("jax_enable_x64", True) (or set JAX_ENABLE_X64=1) first, or cast the inputs to a 32-bit
    dtype
    """


class StoreError(StreamaccError):
    """The output store cannot be created, opened or written; one that fails in the middle of a run (a full disk, a
    dead network) raises it with how many steps are committed, as the store itself confirms, and how to continue.

    Examples
    --------
    >>> import numpy as np, streamacc
    >>> def step(x, _):
    ...     return x + 1, x
    >>> _ = open("a-file", "w").write("not a folder")
    >>> streamacc.write("a-file/out.zarr", step, np.int32(0), length=8, progress=False)
    Traceback (most recent call last):
    ...
    streamacc.errors.StoreError: cannot create a-file/out.zarr (Not a directory); check the path
    """


class NoOutputError(StoreError):
    """The path does not exist or holds no output this version of streamacc can read.

    Examples
    --------
    >>> import streamacc
    >>> streamacc.info("nowhere.zarr")
    Traceback (most recent call last):
    ...
    streamacc.errors.NoOutputError: nowhere.zarr does not exist; check the path
    """


class OutputExistsError(StoreError):
    """The output already exists and ``mode`` asked to create it (or it is not a streamacc output).

    Examples
    --------
    >>> import numpy as np, streamacc
    >>> def step(x, _):
    ...     return x + 1, x
    >>> _ = streamacc.write("twice.zarr", step, np.int32(0), length=8, progress=False)
    >>> streamacc.write("twice.zarr", step, np.int32(0), length=8, progress=False)
    Traceback (most recent call last):
    ...
    streamacc.errors.OutputExistsError: twice.zarr already exists and holds a finished run of 8 steps; lengthen it
    with mode='extend' and a longer length, or pass mode='overwrite' to replace it
    """


class ResumeError(StoreError):
    """An interrupted or finished run cannot be resumed or extended as asked; raised before anything is written: the
    settings differ from the stored run's (each difference is named), or what is stored cannot be trusted.

    Examples
    --------
    >>> import numpy as np, streamacc
    >>> def step(x, _):
    ...     return x + 1, x
    >>> _ = streamacc.write("run.zarr", step, np.int32(0), length=64, block_size=16, progress=False)
    >>> streamacc.write("run.zarr", step, np.int32(0), length=64, block_size=32, mode="resume", progress=False)
    Traceback (most recent call last):
    ...
    streamacc.errors.ResumeError: cannot resume run.zarr: it was written by a different run (block_size: stored 16,
    now 32; ...); rerun with the original settings, or use mode='overwrite' to start afresh
    """


class LockedError(StoreError):
    """Another live process is writing the same output, or this writer lost its lease: a local output is locked with
    ``flock`` on its folder, an object store's with a lease object (see the user guide). Here the lock is taken by
    hand, as another writer would:

    Examples
    --------
    >>> import fcntl, os, numpy as np, streamacc
    >>> def step(x, _):
    ...     return x + 1, x
    >>> _ = streamacc.write("busy.zarr", step, np.int32(0), length=8, progress=False)
    >>> fd = os.open("busy.zarr", os.O_RDONLY)
    >>> fcntl.flock(fd, fcntl.LOCK_EX)
    >>> streamacc.write("busy.zarr", step, np.int32(0), length=8, mode="overwrite", progress=False)
    Traceback (most recent call last):
    ...
    streamacc.errors.LockedError: busy.zarr is being written by pid ...; wait for it to finish or stop it, then
    rerun with mode='overwrite'
    >>> os.close(fd)
    """


class StepError(StreamaccError, RuntimeError):
    """The step function failed at run time, while a block was computed: an exception in a host callback, a
    runtime check (equinox's ``error_if``, diffrax's ``max_steps``), or the device itself.

    Its message names the block and its steps, the steps committed before it, and how to continue; JAX's error is
    its ``__cause__``. Also a ``RuntimeError`` (and a ``JaxRuntimeError`` from ``iter_blocks`` and ``scan``).

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> def check(x):
    ...     if x > 40:
    ...         raise ValueError(f"diverged at {x}")
    >>> def step(x, _):
    ...     jax.debug.callback(check, x)
    ...     return x + 1, x
    >>> streamacc.write("fails.zarr", step, np.int32(0), length=64, block_size=16, progress=False)
    Traceback (most recent call last):
    ...
    streamacc.errors.StepError: the step failed at run time in block 2 (steps 32 to 48) of fails.zarr (ValueError:
    diverged at 41); the 32 steps before it are committed: with a cause outside the step fixed (memory, a file it
    reads), rerun with mode='resume' to continue from there; a step changed to fix it is another run, which
    mode='overwrite' writes afresh
    """


class CarryMismatchError(StreamaccError):
    """A block recomputed on a cluster worker ended with another carry than the driver computed.

    The driver then recomputes the block as the workers do: where it gets the worker's carry, XLA merely
    compiled the carry-only scan differently and the run goes on; where not, the step is nondeterministic or
    the hardware differs, and the run stops with this error, naming the block, nothing past it committed.

    Examples
    --------
    Not run here: it needs a step function that computes differently on a cluster's
    workers than on the driver.

    >>> streamacc.write("out.zarr", step, init, length=2**30, client=client)  # doctest: +SKIP
    Traceback (most recent call last):
    ...
    streamacc.errors.CarryMismatchError: block 17 (steps ...) ...
    """


class VerifyError(StoreError):
    """Stored data does not match what its manifest promises, or an output's structure cannot be trusted.

    Examples
    --------
    >>> import numpy as np, streamacc
    >>> def step(x, _):
    ...     return x + 1, x
    >>> _ = streamacc.write("damaged.zarr", step, np.int32(0), length=8, progress=False)
    >>> chunk = bytearray(open("damaged.zarr/y/c/0", "rb").read())
    >>> chunk[20] ^= 1  # one bit flipped
    >>> _ = open("damaged.zarr/y/c/0", "wb").write(bytes(chunk))
    >>> streamacc.verify("damaged.zarr", step, np.int32(0))
    Traceback (most recent call last):
    ...
    streamacc.errors.VerifyError: block 0 (steps 0-8) of damaged.zarr is bad: the stored bytes of chunk y/c/0 do not
    match their checksum (damaged in place); rewrite the output with mode='overwrite'
    """
