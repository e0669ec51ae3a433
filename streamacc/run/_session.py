"""``RunSession``: a run's life on its output, from the writer lock to the last commit, as every writer lives it.

:func:`streamacc.write`, :class:`streamacc.Stream` and :func:`streamacc.materialize` differ in how
their blocks arrive (an executor, a jitted program's callbacks, blocks recomputed from the carries a
virtual output keeps); everything around the blocks is this session's: the memory their blocks take,
the target resolved, its writer lock, the progress bar, the output opened, the warning that a run is
complete already, marking it complete, closing it before the lock is released, and the error a
failure is raised as. A Stream lives these steps at different times (entering its ``with`` block,
tracing, its program's callbacks, leaving the block), so they are methods, each called where the
writer reaches it, rather than one ``with`` block around them all. ``materialize`` takes the target,
the lock and the bar alone: it opens no :class:`~streamacc.run.output.Output` (its blocks are
committed already, and gain their data; see ``_materialize``) and checks no memory, as it never has
(its blocks are the sizes the write that began the output chose).

The progress bar on stderr: steps done of total, ETA, and rates of steps, output and stored bytes.

Every rate on the bar is measured over the same recent window (:class:`Rates`), so steps/s
and MB/s agree with each other; the text is fitted to the terminal so that the bar itself
keeps a useful width at 80 columns.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TextIO

from ..base import HostLeaf, Mode, warn
from ..engine import BlockFailed, Plan, check_memory
from ..errors import StoreError, StreamaccError, StreamaccWarning, arg
from ..store import Target, describe_store_failure, is_store_failure, open_target
from ._commit import BlockResult, Output
from ._extend import RowReader
from ._open import Continuation, open_output, prepare_output
from ._planning import OutputSpec, again, block_bytes_here

__all__ = ["Progress", "Rates", "RunSession", "clock", "si"]


WINDOW = 10.0
"""Seconds of recent progress that the rates and the ETA average over."""

MIN_BAR = 12
"""Columns the bar itself keeps; the text around it is shortened first."""


def si(value: float) -> str:
    """``value`` with three significant digits and an SI prefix: 999, 1.07k, 105M, 4.29G."""
    for prefix in ("", "k", "M", "G", "T", "P"):
        if abs(value) < 999.5:
            return f"{value:.3g}{prefix}" if prefix else f"{value:.3g}"
        value /= 1000
    return f"{value * 1000:.3g}E"


def clock(seconds: float) -> str:
    """``seconds`` as ``mm:ss`` or ``h:mm:ss``."""
    minutes, secs = divmod(int(max(seconds, 0)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _is_terminal(stream: TextIO | None) -> bool:
    """Whether ``stream`` is a terminal; False for None (no stderr at all), closed or odd streams."""
    try:
        return stream is not None and bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _columns(stream: Any) -> int:
    """The terminal's width: $COLUMNS if set, else the stream's terminal, else 80."""
    try:
        return max(int(os.environ["COLUMNS"]), 20)
    except (KeyError, ValueError):
        pass
    try:
        return max(os.get_terminal_size(stream.fileno()).columns, 20)
    except (AttributeError, ValueError, OSError):
        return 80


def shorten(label: str, width: int) -> str:
    """``label`` cut to ``width`` characters, keeping its end (a path's file name): '.../runs/out.zarr'."""
    return label if len(label) <= width else "..." + label[len(label) - width + 3 :]


def _literal(text: str) -> str:
    """``text`` escaped for a format string."""
    return text.replace("{", "{{").replace("}", "}}")


log = logging.getLogger("streamacc")

class Rates:
    """Steps, output bytes and stored bytes per second, all over the same last ``window`` seconds."""

    def __init__(self, now: float, steps: int, window: float = WINDOW) -> None:
        self.window = window
        self.samples: deque[tuple[float, int, int, int]] = deque([(now, steps, 0, 0)])

    def add(self, now: float, steps: int, nbytes: int, stored: int) -> None:
        """Record the totals so far (steps done, output bytes and stored bytes) at time ``now``."""
        self.samples.append((now, steps, nbytes, stored))
        while len(self.samples) > 2 and now - self.samples[1][0] >= self.window:
            self.samples.popleft()

    def per_second(self) -> tuple[float, float, float] | None:
        """``(steps/s, output bytes/s, stored bytes/s)`` over the window, None before any progress."""
        (t0, s0, b0, k0), (t1, s1, b1, k1) = self.samples[0], self.samples[-1]
        if t1 <= t0 or s1 == s0:
            return None
        span = t1 - t0
        return (s1 - s0) / span, (b1 - b0) / span, (k1 - k0) / span


class Progress:
    """A bar over steps that also shows output and stored throughput; silent when disabled.

    It shows only when asked for and stderr is a terminal, so logs and pipes stay clean.
    A bar made before the work starts shows once :meth:`begin` says where it starts (a
    resumed run, from the steps already committed); with ``initial`` it shows at once.
    """

    def __init__(self, total: int, *, initial: int | None = None, enabled: bool = True, label: str = "") -> None:
        self.enabled = enabled and _is_terminal(sys.stderr)
        self.total, self.label = total, label
        self.done = 0
        self._bytes = 0
        self._stored: int | None = None
        self._t0 = time.perf_counter()
        self._rates = Rates(self._t0, 0)
        self._bar: Any = None
        if initial is not None:
            self.begin(initial)

    def begin(self, initial: int) -> None:
        """Start counting at ``initial`` steps done (and show the bar, when enabled)."""
        self.done = initial
        self._t0 = time.perf_counter()
        self._rates = Rates(self._t0, initial)
        if self.enabled and self._bar is None:
            from tqdm.auto import tqdm

            width = _columns(sys.stderr)
            self._bar = tqdm(
                total=self.total, initial=initial, file=sys.stderr, leave=True, ncols=width,
                bar_format=self.text(width),
            )  # fmt: skip

    def update(self, steps: int, nbytes: int, stored: int | None = None) -> None:
        """Count ``steps`` more steps, ``nbytes`` more bytes of output and ``stored`` bytes stored for them."""
        self.done += steps
        self._bytes += nbytes
        if stored is not None:
            self._stored = (self._stored or 0) + stored
        self._rates.add(time.perf_counter(), self.done, self._bytes, self._stored or 0)
        if self._bar is not None:
            width = _columns(sys.stderr)
            self._bar.ncols = width
            self._bar.bar_format = self.text(width)
            self._bar.update(steps)

    def text(self, width: int) -> str:
        """The bar's line as a tqdm ``bar_format`` (only ``{bar}`` is left to tqdm), fitted to ``width``.

        The fullest of these that leaves the bar ``MIN_BAR`` columns is shown: all rates
        with elapsed time and ETA, then without the elapsed time, without the output rate
        (steps/s times the bytes per step), without the stored rate, and the ETA alone.
        """
        elapsed = clock(time.perf_counter() - self._t0)
        rates = self._rates.per_second()
        if rates is None:
            candidates = [[elapsed], []]
        else:
            steps, output, stored = rates
            eta = "<" + clock((self.total - self.done) / steps)
            speed, out = f"{si(steps)} steps/s", f"{si(output)}B/s"
            kept = [] if self._stored is None else [f"{si(stored)}B/s stored"]
            candidates = [
                [elapsed + eta, speed, out, *kept],
                [eta, speed, out, *kept],
                [elapsed + eta, speed, *kept],
                [eta, speed, *kept],
                [eta, speed],
                [eta],
            ]
        label = shorten(self.label, max(10, width // 5))
        percent = 100 * self.done / self.total if self.total else 100.0
        head = f"{label}: {percent:3.0f}%|" if label else f"{percent:3.0f}%|"
        counts = f"| {si(self.done)}/{si(self.total)} steps"
        for items in candidates:
            tail = f"{counts} [{', '.join(items)}]" if items else counts
            if len(head) + len(tail) + MIN_BAR <= width:
                break
        return _literal(head) + "{bar}" + _literal(tail)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RunSession:
    """One run's session on its output: entered, it holds the target's writer lock; left, it closes the output and
    the progress bar, then releases the lock.

    Parameters
    ----------
    store : str, os.PathLike or zarr store
        Where the output is, as the writer was given it.
    storage_options : dict or None
        fsspec options for a URL ``store``.
    progress : bool
        Show a progress bar on a terminal.
    mode : {"create", "overwrite", "resume", "extend"}, optional
        What the run does with an output already there, checked; None for a run that only continues what
        is stored (``materialize``), which opens no :class:`~streamacc.run.output.Output`.
    length : int, optional
        The run's steps: the progress bar's total, opened as the lock is taken, and what a failure
        counts the committed steps against. None where the bar's total is known only under the lock
        (see :meth:`progress`).
    command : str, optional
        What the refusal of a second writer names as the fix; by default from ``mode``.
    check : callable, optional
        Called with the target before its lock is taken: refuses a target the writer cannot write to.

    Attributes
    ----------
    target : Target
        The output's store, once entered.
    bar : Progress
        The progress bar, once opened.
    output : Output or None
        The output, once opened (:meth:`open_output`).
    """

    def __init__(
        self,
        store: Any,
        *,
        storage_options: dict[str, Any] | None,
        progress: bool,
        mode: Mode | None = None,
        length: int | None = None,
        command: str | None = None,
        check: Callable[[Target], None] | None = None,
    ) -> None:
        self.store, self.storage_options, self.mode, self.length = store, storage_options, mode, length
        if command is None:
            command = arg("mode", mode) if mode != "create" else "another output path"
        self.command = command
        self._progress = progress
        self._check = check
        self._target: Target | None = None
        self._bar: Progress | None = None
        self.output: Output | None = None
        self._stack = contextlib.ExitStack()

    @property
    def target(self) -> Target:
        if self._target is None:
            raise AssertionError("the session's target is resolved as it is entered")
        return self._target

    @property
    def bar(self) -> Progress:
        if self._bar is None:
            raise AssertionError("the session's progress bar is opened as it is entered, or by progress()")
        return self._bar

    # --- before the lock -------------------------------------------------------------------------

    @staticmethod
    def check_memory(plan: Plan, *, host: int, program: int = 0, asked: int | None, who: str) -> None:
        """Refuse blocks of which the run holds more at once than fit in memory, before anything is written.

        ``host`` blocks are held on the host (an executor's pool, a Stream's slots), ``program``
        more inside the caller's jitted program (a Stream's ys, and one to spare for XLA's own);
        ``asked`` is the block size the caller gave (None: sized by default, to the platform's bytes).
        """
        check_memory(plan, host + program, asked=asked, who=who, default_bytes=block_bytes_here())

    # --- the lock ---------------------------------------------------------------------------------

    def __enter__(self) -> RunSession:
        stack = self._stack
        try:
            target = self._target = open_target(self.store, storage_options=self.storage_options)
            if self._check is not None:
                self._check(target)
            stack.enter_context(target.lock(self.command))
            if self.length is not None:
                self.progress(self.length)
            stack.callback(self._close_output)  # no summary chunk may be written once the lock is released
        except BaseException as exc:
            stack.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stack.__exit__(kind, exc, tb)  # the lock is told what ended the run (a refused write leaves nothing)

    def progress(self, total: int, *, initial: int | None = None) -> Progress:
        """Open the progress bar over ``total`` steps (shown at once from ``initial``, else once begun); it closes
        with the session, before the lock is released."""
        label = self.target.label
        self._bar = self._stack.enter_context(Progress(total, initial=initial, enabled=self._progress, label=label))
        return self._bar

    # --- the output -------------------------------------------------------------------------------

    def open_output(
        self,
        spec: OutputSpec,
        *,
        init: list[HostLeaf],
        check_resumable: Callable[[Output], None],
        rows: RowReader | None = None,
    ) -> Output:
        """Open the output for a run of ``spec`` as the session's mode asks (new, overwritten, resumed, extended);
        each block it commits counts on the progress bar.

        What fails is raised as it is: :meth:`translated` (or :meth:`failed`) says it in the writer's terms.
        """
        assert self.mode is not None
        self.output = open_output(
            self.target, spec, mode=self.mode, init=init, check_resumable=check_resumable,
            on_commit=self._committed, rows=rows,
        )  # fmt: skip
        return self.output

    def prepare_output(
        self, spec: OutputSpec, *, init: list[HostLeaf], check_resumable: Callable[[Output], None]
    ) -> Continuation:
        """:meth:`open_output`'s checks of a run that continues a stored one, nothing written yet: applied by
        :meth:`apply` once the caller has checked what only it can (a Stream's program: its inputs, its blocks)."""
        assert self.mode is not None
        return prepare_output(self.target, spec, mode=self.mode, init=init, check_resumable=check_resumable,
                              on_commit=self._committed)  # fmt: skip

    def apply(self, continuation: Continuation, values: list[str] | None) -> Output:
        """The output opened from ``continuation`` (see :meth:`prepare_output`), its inputs' ``values`` recorded."""
        self.output = continuation.apply(values)
        return self.output

    def _committed(self, result: BlockResult) -> None:
        self.bar.update(len(result), result.nbytes, stored=result.stored)

    def already_complete(self) -> bool:
        """Whether the output opened is complete already, which a run continuing it warns of: nothing to do."""
        assert self.output is not None and self.length is not None
        if not self.output.complete:
            return False
        m = self.output.manifest
        held = f"{m.length} steps" if m.ended_at is None else f"it ended on its condition at step {m.ended_at}"
        warn(f"{self.target.label} is already complete ({held}); nothing to do", StreamaccWarning)
        return True

    def begin(self, *, extends: bool = False) -> None:
        """The run begins on the output opened: it says what it continues (an extension, with ``extends``, or the
        run it resumes), counts the steps committed already on the progress bar, and says once which non-finite
        values the run it continues found."""
        assert self.output is not None and self.length is not None
        output, label = self.output, self.target.label
        done = output.manifest.committed_steps
        if extends:
            log.info("extending %s to step %d (computing on from step %d)", label, self.length, done)
        elif output.first_block and not output.complete:
            log.info("resuming %s at step %d of %d", label, done, self.length)
        self.bar.begin(done)
        output.warn_nonfinite(before=True)

    def finish(self) -> None:
        """Mark the run complete (an output that was complete already is left as it is)."""
        assert self.output is not None
        if not self.output.complete:
            self.output.finish()

    def _close_output(self) -> None:
        if self.output is not None:
            self.output.close()

    # --- failures ---------------------------------------------------------------------------------

    def failed(self, exc: Exception) -> StreamaccError | None:
        """The error ``exc`` is raised as, in the writer's terms; None to raise ``exc`` as it is.

        Once the output is open, a store that failed says which steps are committed and how to
        continue (``Output.failure``); before, that preparing the output failed, and how to run again.
        """
        if self.output is not None:
            assert self.length is not None
            return self.output.failure(exc, self.length)
        if not is_store_failure(exc):
            return None
        assert self.mode is not None
        return StoreError(
            f"preparing {self.target.label} failed ({describe_store_failure(exc)}); fix the cause and "
            f"{again(self.target, self.mode)}"
        )

    @contextlib.contextmanager
    def translated(self) -> Iterator[None]:
        """Raise what fails inside as :meth:`failed` says it, caused by what failed."""
        try:
            yield
        except Exception as exc:
            error = self.failed(exc)
            if error is None:
                raise
            raise error from (exc.__cause__ or exc) if isinstance(exc, BlockFailed) else exc  # JAX's own error
