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
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any

from ...base import warn
from ...engine import BlockFailed, HostLeaf, Plan, check_memory
from ...errors import StoreError, StreamaccError, StreamaccWarning, arg
from ...store import Target, describe_store_failure, is_store_failure, open_target
from ..execute import Progress
from ..output import BlockResult, Mode, Output, OutputSpec, RowReader, again, block_bytes_here, open_output

__all__ = ["RunSession"]


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
