"""Signals noticed while the main thread is inside XLA, where Python's handlers cannot run.

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

import contextlib
import os
import select
import signal
import threading
from collections.abc import Callable
from types import FrameType, TracebackType

from ._interrupt import STOP, Terminated, _is_default

__all__ = ["SignalWatch"]

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
