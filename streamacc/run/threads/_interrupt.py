"""Signals always end a run promptly: the work runs on threads, the main thread waits and listens.

Python runs signal handlers on the main thread only, between bytecodes. A main thread
blocked in XLA (a long block, a compile) cannot run them until XLA returns, and an
exception a handler raises lands wherever the main thread happens to be, a garbage
collector callback included, where Python prints "Exception ignored" and drops it. So
:func:`run_interruptibly` runs the work on a thread of its own and keeps the main thread
waiting: its handlers only record the signal and set :data:`STOP`; the main thread then
gives the work a few seconds to wind down (no commit starts after a stop: committed
blocks stay committed, the lock is released) and raises ``KeyboardInterrupt``
(:class:`Terminated` for SIGTERM) itself.

Work that may run long checks :data:`STOP` at its seams and raises :class:`Interrupted`:
the executors between blocks and before each commit, and :func:`on_own_thread` while it
waits for a computation, which it leaves running on a daemon thread of its own (XLA
cannot be interrupted; its result is dropped). Every thread started here computes in the
JAX configuration scopes of the thread that started it (``jax.enable_x64()`` and the like
are per thread).
"""

from __future__ import annotations

import atexit
import functools
import signal
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, nullcontext
from queue import Empty, SimpleQueue
from typing import Any, ParamSpec, TypeVar

from ...base import outside, run_from

__all__ = [
    "GRACE_SECONDS",
    "STOP",
    "Interrupted",
    "Terminated",
    "check_stop",
    "interruptible",
    "on_own_thread",
    "run_interruptibly",
]

T = TypeVar("T")
P = ParamSpec("P")

STOP = threading.Event()
"""Set once SIGINT or SIGTERM asked this process to stop; cleared when a new supervised run starts."""

GRACE_SECONDS = 10.0
"""How long the main thread lets interrupted work wind down (writers finish their chunk, the lock
is released) before it raises anyway; a block XLA is still computing is never waited for."""

POLL_SECONDS = 0.1

EXIT_WAIT_SECONDS = 5.0
"""How long the interpreter's exit waits for blocks still computing (see :class:`_Computing`); a
longer block is left to the exit, which then most likely ends the process while it computes."""


class Interrupted(BaseException):
    """Raised in the work's threads once :data:`STOP` is set (a BaseException, as KeyboardInterrupt is)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (``kill``, systemd, a batch scheduler, a container runtime): stop as for Ctrl-C."""


def check_stop() -> None:
    """Raise :class:`Interrupted` if a stop was asked for."""
    if STOP.is_set():
        raise Interrupted


def _scopes() -> Callable[[], AbstractContextManager[Any]]:
    """This thread's JAX scopes to enter on another thread (none before JAX is imported)."""
    if "jax" not in sys.modules:
        return nullcontext
    from ...engine import caller_scopes

    return caller_scopes()


def _wait(replies: SimpleQueue[T]) -> T:
    """The next reply, raising :class:`Interrupted` instead of waiting on once a stop is asked for."""
    while True:
        check_stop()
        try:
            return replies.get(timeout=POLL_SECONDS)
        except Empty:
            continue


_ITEM, _END, _ERROR = range(3)


class _Computing:
    """The threads of :class:`_OwnThread` advancing their source (inside XLA, for a block), for the exit to wait on.

    The interpreter ends a daemon thread that is still inside XLA when it exits, and XLA
    then aborts the process (SIGABRT, after the output was printed): a script whose write
    failed or was stopped while a block computed would end that way. So the exit, before
    JAX's own clean-up, lets the blocks being computed finish (up to ``EXIT_WAIT_SECONDS``),
    and no thread begins another.
    """

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.threads: set[threading.Thread] = set()
        self.exiting = False
        self.registered = False

    def register(self) -> None:
        """Wait at the exit, before JAX's clean-up: registered after JAX's, so run before it."""
        with self.changed:
            if not self.registered:
                atexit.register(self.wait)
                self.registered = True

    def begin(self) -> bool:
        """Count this thread in; False once the interpreter is exiting."""
        with self.changed:
            if not self.exiting:
                self.threads.add(threading.current_thread())
            return not self.exiting

    def end(self) -> None:
        with self.changed:
            self.threads.discard(threading.current_thread())
            self.changed.notify_all()

    def wait(self, timeout: float = EXIT_WAIT_SECONDS) -> None:
        with self.changed:
            self.exiting = True
            self.changed.wait_for(lambda: not self.threads, timeout)


_computing = _Computing()


class _OwnThread:
    """An iterator advanced on a daemon thread of its own, one item per ``next()``, on demand (and ``ahead`` more)."""

    def __init__(self, source: Iterator[Any], name: str, ahead: int = 0) -> None:
        self._requests: SimpleQueue[bool] = SimpleQueue()
        self._replies: SimpleQueue[tuple[int, Any]] = SimpleQueue()
        self._closed = threading.Event()  # no item is begun once set, whatever was asked for ahead
        for _ in range(ahead):
            self._requests.put(True)
        thread = threading.Thread(target=self._produce, args=(source, _scopes()), name=name, daemon=True)
        _computing.register()
        thread.start()

    def _produce(self, source: Iterator[Any], scopes: Callable[[], AbstractContextManager[Any]]) -> None:
        with scopes():
            while self._requests.get() and not self._closed.is_set():
                if not _computing.begin():  # the interpreter is exiting: the consumer stops as if asked to
                    self._replies.put((_ERROR, Interrupted()))
                    return
                try:
                    item = next(source)
                except StopIteration:
                    self._replies.put((_END, None))
                    return
                except BaseException as exc:
                    self._replies.put((_ERROR, exc))
                    return
                finally:
                    _computing.end()
                self._replies.put((_ITEM, item))
                del item  # hold nothing while waiting: a block's buffer returns to its pool once released

    def __iter__(self) -> _OwnThread:
        return self

    def __next__(self) -> Any:
        self._requests.put(True)
        kind, value = _wait(self._replies)
        if kind == _END:
            raise StopIteration
        if kind == _ERROR:
            raise value
        return value

    def close(self) -> None:
        self._closed.set()
        self._requests.put(False)


def on_own_thread(source: Iterator[T], name: str = "streamacc-compute", *, ahead: int = 0) -> Generator[T, None, None]:
    """``source`` advanced on a thread of its own, exactly when and as often as the caller asks.

    With ``ahead``, the thread also computes up to that many items before the caller asks for
    them, so that it goes on while the caller does something else with the items before (a
    commit waiting for the disk); they are held until taken. The caller waits interruptibly:
    once :data:`STOP` is set, ``next()`` raises :class:`Interrupted` and the thread, after
    the item in hand, ends; closed, it begins no other, whatever it was ahead by.
    """
    producer = _OwnThread(iter(source), name, ahead)
    try:
        yield from producer
    finally:
        producer.close()


def interruptible(fn: Callable[P, T]) -> Callable[P, T]:
    """``fn`` run by :func:`run_interruptibly` (Ctrl-C ends it promptly when called from the main thread)."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_interruptibly(functools.partial(fn, *args, **kwargs))

    return wrapper


def _is_default(signum: int, handler: object) -> bool:
    if signum == signal.SIGINT:
        return handler is signal.default_int_handler
    return handler == signal.SIG_DFL


def run_interruptibly(
    fn: Callable[..., T],
    *args: Any,
    signals: tuple[int, ...] = (signal.SIGINT,),
    grace: float = GRACE_SECONDS,
    scopes: bool = True,
) -> T:
    """``fn(*args)`` on a thread of its own while the main thread waits and takes ``signals``.

    Called from any thread but the main one, this is just ``fn(*args)``. A signal whose
    handler is Python's default is taken over for the call (one that is ignored, or
    handled by the caller, is left alone): it sets :data:`STOP`, waits up to ``grace``
    seconds for ``fn`` to wind down (a second signal stops the wait) and raises
    ``KeyboardInterrupt`` (:class:`Terminated` for SIGTERM). With ``scopes``, ``fn``
    computes in this thread's JAX scopes; without, in the process's configuration (a
    command line that sets it globally as it goes).
    """
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    received: list[int] = []
    done = threading.Event()
    returned: list[T] = []
    raised: list[BaseException] = []
    enter = _scopes() if scopes else nullcontext
    site = outside(sys._getframe(1))  # the caller's line, where warnings from the work point

    def work() -> None:
        try:
            with enter(), run_from(site):
                returned.append(fn(*args))
        except BaseException as exc:
            raised.append(exc)
        finally:
            done.set()

    def record(signum: int, frame: object) -> None:
        received.append(signum)  # nothing raised here: see the module's docstring
        STOP.set()

    STOP.clear()
    thread = threading.Thread(target=work, name="streamacc-run", daemon=True)
    saved = {s: signal.getsignal(s) for s in signals}
    for signum, handler in saved.items():
        if _is_default(signum, handler):
            signal.signal(signum, record)
    try:
        thread.start()
        while not done.wait(POLL_SECONDS) and not received:
            pass
    except BaseException:  # a handler the caller installed raised here: wind down the same way
        received.append(signal.SIGINT)
        STOP.set()
    try:
        if received:
            end = time.monotonic() + grace
            while not done.wait(POLL_SECONDS) and len(received) < 2 and time.monotonic() < end:
                pass
            raise Terminated() if received[0] == signal.SIGTERM else KeyboardInterrupt()
    finally:
        for signum, handler in saved.items():
            if _is_default(signum, handler):
                signal.signal(signum, handler)
    if raised:
        raise raised[0]
    return returned[0]
