"""Work on threads: signals always end a run promptly, blocks commit in production order, signals are noticed
inside XLA.

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
cannot be interrupted; its result is dropped). A thread started here computes in the JAX
configuration scopes of the thread that started it (``jax.enable_x64()`` and the like are per
thread) where its caller passes them (``scopes``: what reads them, ``engine.caller_scopes``);
nothing here imports JAX.

A bounded producer/consumer pipeline with in-order commits off the producer's thread.

The caller's thread produces items (computed blocks) and does nothing else; worker
threads do the slow part (encode, write, fsync) and then commit, each waiting for the
commit of the item before it, so commits happen strictly in production order without
ever stalling production. At most ``depth`` items are in flight, so memory stays at a
few blocks whatever the length.

Signals noticed while the main thread is inside XLA, where Python's handlers cannot run.

A program jitted by its caller runs on the caller's thread, inside one XLA call that may last
the whole run: Python's handler for a signal runs on the main thread only, between bytecodes,
so it waits for that call to return. The C-level handler Python installs with any Python
handler writes the signal's number to the wakeup file descriptor at once, though: a
:class:`SignalWatch` takes SIGINT and SIGTERM (where their handlers are Python's defaults),
sets the wakeup descriptor to a pipe of its own and reads it on a thread, which sets
:data:`STOP` as the signal arrives. The work that runs meanwhile (a Stream's callbacks and
writers) honours :data:`STOP` at its next seam and fails; the XLA call then returns, and the
caller raises ``KeyboardInterrupt`` (:class:`Terminated` for SIGTERM) itself.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import select
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from queue import Empty, SimpleQueue
from types import FrameType, TracebackType
from typing import Any, ParamSpec, TypeVar

from ._callsite import outside, run_from

__all__ = [
    "GRACE_SECONDS",
    "STOP",
    "Interrupted",
    "SignalWatch",
    "Terminated",
    "check_stop",
    "interruptible",
    "on_own_thread",
    "run_interruptibly",
    "run_ordered",
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


Scopes = Callable[[], Callable[[], AbstractContextManager[Any]]]
"""What reads the calling thread's configuration and gives the context manager that enters it on another thread
(``engine.caller_scopes``: JAX's per-thread scopes); none, where the work computes nothing of JAX."""


def _entered(scopes: Scopes | None) -> Callable[[], AbstractContextManager[Any]]:
    return nullcontext if scopes is None else scopes()


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

    def __init__(self, source: Iterator[Any], name: str, ahead: int = 0, scopes: Scopes | None = None) -> None:
        self._requests: SimpleQueue[bool] = SimpleQueue()
        self._replies: SimpleQueue[tuple[int, Any]] = SimpleQueue()
        self._closed = threading.Event()  # no item is begun once set, whatever was asked for ahead
        for _ in range(ahead):
            self._requests.put(True)
        thread = threading.Thread(target=self._produce, args=(source, _entered(scopes)), name=name, daemon=True)
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


def on_own_thread(
    source: Iterator[T], name: str = "streamacc-compute", *, ahead: int = 0, scopes: Scopes | None = None
) -> Generator[T, None, None]:
    """``source`` advanced on a thread of its own, exactly when and as often as the caller asks.

    With ``ahead``, the thread also computes up to that many items before the caller asks for
    them, so that it goes on while the caller does something else with the items before (a
    commit waiting for the disk); they are held until taken. The caller waits interruptibly:
    once :data:`STOP` is set, ``next()`` raises :class:`Interrupted` and the thread, after
    the item in hand, ends; closed, it begins no other, whatever it was ahead by. The thread computes in
    the caller's configuration that ``scopes`` reads (JAX's per-thread scopes, ``engine.caller_scopes``).
    """
    producer = _OwnThread(iter(source), name, ahead, scopes)
    try:
        yield from producer
    finally:
        producer.close()


def interruptible(scopes: Scopes | None = None) -> Callable[[Callable[P, T]], Callable[P, T]]:
    """A decorator: the function run by :func:`run_interruptibly` in the caller's ``scopes`` (Ctrl-C ends it
    promptly when called from the main thread)."""

    def decorate(fn: Callable[P, T]) -> Callable[P, T]:
        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
            return run_interruptibly(functools.partial(fn, *args, **kwargs), scopes=scopes)

        return wrapper

    return decorate


def _is_default(signum: int, handler: object) -> bool:
    if signum == signal.SIGINT:
        return handler is signal.default_int_handler
    return handler == signal.SIG_DFL


def run_interruptibly(
    fn: Callable[..., T],
    *args: Any,
    signals: tuple[int, ...] = (signal.SIGINT,),
    grace: float = GRACE_SECONDS,
    scopes: Scopes | None = None,
) -> T:
    """``fn(*args)`` on a thread of its own while the main thread waits and takes ``signals``.

    Called from any thread but the main one, this is just ``fn(*args)``. A signal whose
    handler is Python's default is taken over for the call (one that is ignored, or
    handled by the caller, is left alone): it sets :data:`STOP`, waits up to ``grace``
    seconds for ``fn`` to wind down (a second signal stops the wait) and raises
    ``KeyboardInterrupt`` (:class:`Terminated` for SIGTERM). With ``scopes``, ``fn``
    computes in the configuration they read on this thread (JAX's scopes, ``engine.caller_scopes``);
    without, in the process's configuration (a command line that sets it globally as it goes).
    """
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    received: list[int] = []
    done = threading.Event()
    returned: list[T] = []
    raised: list[BaseException] = []
    enter = _entered(scopes)
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


R = TypeVar("R")


def run_ordered(
    items: Iterable[T],
    work: Callable[[T], R],
    commit: Callable[[T, R], None],
    *,
    depth: int,
    workers: int,
) -> None:
    """Run ``work(item)`` on ``workers`` threads and ``commit(item, result)`` in item order.

    Production blocks while ``depth`` items are unfinished. If any work or commit fails,
    nothing after the failed item is committed, the rest is cancelled, and the first
    error is raised here. If producing an item fails (an ``Exception`` from ``items``),
    the items produced before it are still worked and committed, then that error is raised.
    """

    def run(item: T, before: Future[None] | None) -> None:
        result = work(item)
        if before is not None:
            before.result()  # raises if an earlier item failed: then this one must not commit
        commit(item, result)

    inflight: deque[Future[None]] = deque()
    with ThreadPoolExecutor(max_workers=max(workers, 1), thread_name_prefix="streamacc-write") as pool:
        try:
            produced = iter(items)
            while True:
                try:
                    item = next(produced)
                except StopIteration:
                    break
                except Exception:
                    with contextlib.suppress(Exception):  # the production's error is the one to raise
                        while inflight:
                            inflight.popleft().result()
                    raise
                while len(inflight) >= depth:
                    inflight.popleft().result()
                inflight.append(pool.submit(run, item, inflight[-1] if inflight else None))
            while inflight:
                inflight.popleft().result()
        finally:
            for future in inflight:
                future.cancel()


TAKEN = (signal.SIGINT, signal.SIGTERM)


class SignalWatch:
    """SIGINT and SIGTERM taken for a block of code on the main thread, and noticed even inside XLA.

    ``busy()`` says whether work is under way that stops at its seams on :data:`STOP`; while it
    is not, a signal raises at once where the main thread is, as Python's default does. On
    any thread but the main one, or where the wakeup descriptor is someone else's that
    cannot be shared, nothing is taken.

    Attributes
    ----------
    received : list of int
        The signals taken, in order.
    """

    def __init__(self, busy: Callable[[], bool]) -> None:
        self.busy = busy
        self.received: list[int] = []
        self._lock = threading.Lock()
        self._saved: dict[int, object] = {}
        self._pipe: tuple[int, int] | None = None
        self._previous = -1
        self._thread: threading.Thread | None = None

    def interrupt(self) -> KeyboardInterrupt:
        """The exception the signals taken end the run with: ``KeyboardInterrupt``, or :class:`Terminated`."""
        return Terminated() if self.received and self.received[0] == signal.SIGTERM else KeyboardInterrupt()

    def _note(self, signum: int) -> None:
        with self._lock:
            self.received.append(signum)
        STOP.set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # the watcher notes each signal as it arrives; this runs later, once the main thread runs Python
        STOP.set()
        if not self.busy():
            if not self.received:
                self._note(signum)
            raise self.interrupt()

    def _watch(self, read: int) -> None:
        while True:
            select.select([read], [], [])
            try:
                data = os.read(read, 512)
            except BlockingIOError:
                continue
            except OSError:
                return
            if not data:
                return  # the write end closed: the watch is over
            for signum in data:
                if signum in self._saved:
                    self._note(signum)
            if self._previous >= 0:  # the descriptor's owner (an event loop) hears of it as before
                with contextlib.suppress(OSError):
                    os.write(self._previous, data)

    def __enter__(self) -> SignalWatch:
        if threading.current_thread() is not threading.main_thread():
            return self
        STOP.clear()
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        try:
            self._previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        except ValueError:
            os.close(read)
            os.close(write)
            return self
        self._pipe = (read, write)
        for signum in TAKEN:
            handler = signal.getsignal(signum)
            if _is_default(signum, handler):
                self._saved[signum] = handler
                signal.signal(signum, self._handle)
        self._thread = threading.Thread(target=self._watch, args=(read,), name="streamacc-signals", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._pipe is None:
            return
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]  # what getsignal returned
        self._saved = {}
        signal.set_wakeup_fd(self._previous, warn_on_full_buffer=False)
        read, write = self._pipe
        os.close(write)
        if self._thread is not None:
            self._thread.join()
        os.close(read)
        self._pipe = None
