"""``Stream``: a long scan streamed to a Zarr store from inside the caller's jitted program.

The Stream is opened on the host, around the program: ``__enter__`` opens its run session
(``session.RunSession``: the output's writer lock, the progress bar) and takes the signals.
``scan`` is traced into the program: there the scan is planned exactly as
:func:`streamacc.write` plans it (``output.plan_output``) on a thread of its own, outside the
trace, and a resumed or extended output is opened and checked there, before the program runs;
the blocks themselves are a loop of the program (``_program``) whose callbacks hand each
block to the host (``_host``). ``__exit__`` waits for the writers, releases the lock, and
raises what failed on the host, in the terms :func:`streamacc.write` would have raised it.
"""

from __future__ import annotations

import contextlib
import sys
from types import TracebackType
from typing import Any, TypeVar, Unpack

import jax
import jax.numpy as jnp
import numpy as np

from ..base import (
    DEFAULT_STREAM_INFLIGHT,
    Blocking,
    HostLeaf,
    Interrupted,
    Layout,
    Mode,
    SignalWatch,
    Site,
    check_request,
    check_written_length,
    outside,
    warn,
)
from ..engine import BlockFailed, Carry, Predicate, ScanSpec, Step, from_host, runtime_failure, to_host
from ..errors import InputError, ResumeError, StepFunctionError, StreamaccError, StreamaccWarning, arg
from ..run import Planned, RunSession, WriteKeywords, check_resumable, plan_output, resume_chain, split_keywords
from ._host import StreamHost
from ._program import Loop, host_call, streamed
from ._trace import (
    TRACED,
    Leaf,
    crossing_leaves,
    describe_leaves,
    leaf_type,
    outside_trace,
    placeholder,
    quiet_stops,
    recorded_init,
    refused_transform,
)

__all__ = ["Stream"]

T = TypeVar("T")

REFUSED = {
    "virtual": "a virtual output recomputes its blocks on reading from f alone, and a Stream's program holds "
    "what its blocks start from",
    "client": "a Stream's blocks are computed by its program, in this process, not as tasks on a cluster",
    "executor": "a Stream's blocks are computed by its program, in this process",
}
"""The keywords of :func:`streamacc.write` that cannot apply inside a jitted program, and why."""



def _partitioned(exc: BaseException) -> bool:
    """Whether ``exc`` is XLA refusing a Stream's callback in a program partitioned over several devices."""
    return isinstance(exc, jax.errors.JaxRuntimeError) and "Side-effect HLO must have sharding" in str(exc)

class Stream:
    """A scan streamed to a Zarr store from inside a jitted program: ``lax.scan``'s final carry, its ys stored.

    Opened on the host with ``with``, around the program; its :meth:`scan` is called inside
    the program (under ``jax.jit``) with an initial carry that may be traced, computed on
    the device by the code before it. The scan runs as a loop of blocks inside the
    compiled program, write's blocks, each handed to the host by a callback and
    written there on streamacc's writer threads, so the program holds one block of ys at a
    time and the host a few, whatever the length; a slow store slows the program. The
    output is a :func:`~streamacc.write` output in every byte (the same job written by
    ``write`` gives the same files), read by :func:`~streamacc.open`, :func:`~streamacc.info`
    and :func:`~streamacc.verify` (given ``f``), committed block by block as it is written
    and resumable after a crash: ``mode="resume"`` continues from the last committed block
    with its recorded carry, which the program receives from the host (its initial carry
    then only needs the stored one's structure, shapes and dtypes).

    A host failure (a full disk, the output removed, a lost lease) ends the program: its
    jitted call fails with XLA's error, and leaving the ``with`` block raises the
    streamacc error that says what happened and what is committed. Ctrl-C and SIGTERM end
    it at the next block with ``KeyboardInterrupt`` (``streamacc.run.Terminated`` for
    SIGTERM), the committed blocks safe. ``scan`` can be traced once per Stream, and its
    program run once. It cannot run under ``jax.vmap`` (batch inside the step instead) nor
    be differentiated; see the guide's page "Inside jit". A ``with`` block left without
    running the scan warns (``StreamaccWarning``) that nothing was written.

    Parameters
    ----------
    store : str, os.PathLike or zarr store
        Where the output goes, as for :func:`~streamacc.write`.
    f : callable
        The step, ``f(carry, x) -> (carry, y)``, as ``lax.scan`` takes it; hashable, and
        using no value traced in the program (pass those in the carry): its code and the
        values it uses are part of the run's identity. Each leaf of ``y`` becomes an array.
    length : int
        The number of steps, at least 1 (equal to the length of ``xs``, where given); with
        ``until``, the most the run takes.
    mode : {"create", "overwrite", "resume", "extend"}, default "create"
        What to do with an output that is already there, as for :func:`~streamacc.write`.
    layout : Layout, optional
        How the output is laid out (see :class:`~streamacc.Layout`; not ``virtual``), or
        its keywords alone.
    storage_options : dict, optional
        fsspec options for a URL ``store``.
    progress : bool, default True
        Show a progress bar on a terminal.
    until : callable, optional
        The run's condition, ``until(carry, y) -> bool``, tested after each step, as for
        :func:`~streamacc.write`: the run ends after the first step where it holds, and
        ``length`` is the most it runs. The program's loop of blocks stops after the block
        where it held (no block past it is computed), and :meth:`scan` returns the carry
        that step left.
    **keywords
        The keywords of :func:`~streamacc.write` that apply: the scan's (``block_size``,
        ``unroll``, ``reverse``, ``save_every``), the layout's (``names``, ``dims``,
        ``chunks``, ``codec``, ``attrs``, ``array_attrs``, ``time``, ``summaries``) and
        ``inflight`` (blocks held on the host at once, queued or being written: 3 by
        default). ``virtual``, ``client``
        and ``executor`` are refused: they cannot apply inside a jitted program.

    Attributes
    ----------
    store : str, os.PathLike or zarr store
        Where the output goes, as given.
    length : int
        The number of steps.
    mode : str
        The mode, checked.
    inflight : int
        Blocks being written at once.

    Raises
    ------
    streamacc.errors.InputError
        A bad or refused argument, here; from :meth:`scan`, a call outside the ``with``
        block, a second call, or a program under ``vmap`` or a derivative.
    streamacc.errors.OutputExistsError, ResumeError, LockedError, StoreError
        As for :func:`~streamacc.write`: entering takes the writer lock; the others are
        raised by :meth:`scan` (a resumed or extended output is checked as it is traced)
        or, where the program found them running, on leaving the ``with`` block.

    Examples
    --------
    >>> import jax, jax.numpy as jnp, streamacc
    >>> jax.config.update("jax_enable_x64", True)
    >>> def step(x, _):
    ...     x = x * (1 + 1e-8)
    ...     return x, x
    >>> with streamacc.Stream("inside.zarr", step, length=10_000, block_size=4096, names="x",
    ...                       progress=False) as stream:
    ...     @jax.jit
    ...     def program(a):
    ...         x0 = jnp.sqrt(a)          # computed in the program
    ...         return stream.scan(x0)
    ...     carry = program(4.0)
    >>> float(carry)
    2.0002000099...
    >>> streamacc.open("inside.zarr")["x"].shape
    (10000,)
    """

    def __init__(
        self,
        store: Any,
        f: Step,
        *,
        length: int,
        mode: Mode = "create",
        layout: Layout | None = None,
        storage_options: dict[str, Any] | None = None,
        progress: bool = True,
        until: Predicate | None = None,
        **keywords: Unpack[WriteKeywords],
    ) -> None:
        given: dict[str, Any] = dict(keywords)
        refused = [name for name in REFUSED if name in given]
        if isinstance(layout, Layout) and layout.virtual:
            refused.append("virtual")
        if refused:
            name = refused[0]
            raise InputError(f"Stream does not take {arg(name)}: {REFUSED[name]}; leave it out")
        if isinstance(f, ScanSpec):
            raise InputError(
                "Stream takes the step function f, not a ScanSpec: a ScanSpec holds an initial carry, and a Stream's "
                "comes from its program (pass the scan's keywords to the Stream)"
            )
        if not callable(f):
            raise StepFunctionError(
                f"Stream's {arg('f')} must be the step function, callable as f(carry, x) -> (carry, y), and got "
                f"{f!r:.40} ({type(f).__name__}); pass the function lax.scan would take"
            )
        scan_keywords, checked_layout, where = split_keywords(layout, None, given, who="Stream")
        check_written_length(length)  # before the scan's own check, which takes 0
        asked = Blocking.checked(**scan_keywords, length=length)
        self.store = store
        self.length = asked.length
        self._f = f
        self._until = until
        self._scan_keywords = scan_keywords
        self._request = check_request(mode=mode, layout=checked_layout, reverse=asked.reverse)
        self.mode: Mode = self._request.mode
        self.inflight: int = where.inflight or DEFAULT_STREAM_INFLIGHT
        self._storage_options = storage_options
        self._progress = progress
        self._state = "new"
        self._scanned = False
        self._refused = False  # a scan raised: its caller knows the block streamed nothing
        self._host: StreamHost | None = None
        self._stack = contextlib.ExitStack()
        self._site: Site | None = None
        self._session: RunSession | None = None
        self._watch = SignalWatch(busy=lambda: self._host is not None and self._host.running)

    def __repr__(self) -> str:
        return f"Stream({self.store!r}, length={self.length}, mode={self.mode!r}, {self._state})"

    # --- the with block ------------------------------------------------------------------------

    def __enter__(self) -> Stream:
        if self._state != "new":
            raise InputError("a Stream is entered once: open a new Stream for another run")
        self._site = outside(sys._getframe(1))
        stack = self._stack
        try:
            self._session = stack.enter_context(RunSession(
                self.store, storage_options=self._storage_options, progress=self._progress, mode=self.mode,
                length=self.length))  # fmt: skip
            stack.enter_context(self._watch)
            stack.enter_context(quiet_stops())
        except BaseException:
            stack.close()
            raise
        self._state = "open"
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            host = self._host
            if host is not None:
                if exc is None and host.running:
                    jax.effects_barrier()  # type: ignore[no-untyped-call]  # an asynchronous program runs to its end
                host.close()
            error = self._error(exc)
            if exc is None and error is None and not self._refused:
                self._warn_unstreamed()
        finally:
            self._state = "closed"
            self._stack.close()
        if error is not None:
            raise error

    def close(self) -> None:
        """End the Stream as leaving its ``with`` block does: wait for the writers, release the lock."""
        if self._state == "open":
            self.__exit__(None, None, None)
        self._state = "closed"

    def _warn_unstreamed(self) -> None:
        """A ``with`` block left without streaming anything says so: what it wrote (nothing) and what was expected."""
        host, label = self._host, self._session.target.label if self._session is not None else str(self.store)
        if host is None:
            warn(
                f"the Stream to {label} was left without a call of stream.scan: nothing was written; call "
                "stream.scan(init) inside the jitted program the with block runs, e.g. "
                "jax.jit(lambda c: stream.scan(c))(init)",
                StreamaccWarning,
            )
        elif not host.started:
            warn(
                f"the Stream to {label} was left with stream.scan traced but its program never run: nothing was "
                "written; call the jitted program (not only trace or lower it) inside the with block",
                StreamaccWarning,
            )

    def _error(self, exc: BaseException | None) -> BaseException | None:
        """What leaving the ``with`` block raises: what failed on the host, in write's terms; None for nothing
        more than ``exc`` (if anything) itself."""
        host = self._host
        failure = None if host is None else host.failure
        if self._watch.received or isinstance(failure, (Interrupted, KeyboardInterrupt)):
            return self._watch.interrupt()
        if host is None:
            return None
        if failure is None:
            if exc is not None and not host.started and _partitioned(exc):
                refused = InputError(
                    "the program was partitioned over several devices (its carry or inputs sharded), and a Stream "
                    f"hands its blocks to the host from one device: nothing was written to {host.target.label}; "
                    "pass the Stream an unsharded carry (jax.device_put(init, jax.devices()[0])), or write a sharded "
                    "ensemble with streamacc.write, which keeps its sharding"
                )
                refused.__cause__ = exc
                return refused
            failing = host.failing_block() if exc is not None and runtime_failure(exc) else None
            if failing is not None and exc is not None and host.output is not None:  # the step failed in the program
                mapped = host.session.failed(BlockFailed.of(*failing, exc))
                if mapped is not None:
                    mapped.__cause__ = exc
                    return mapped
            if exc is None and host.started and not host.finished:
                return StreamaccError(
                    f"the program's stream to {host.target.label} ended before its last block; its committed blocks "
                    f"are safe: continue it with {arg('mode', 'resume')}"
                )
            return None
        if isinstance(failure, Exception):
            mapped = host.session.failed(failure)  # once the output is open, what the store still holds
            if mapped is not None:
                mapped.__cause__ = failure
                return mapped
        if failure.__cause__ is None and exc is not None:
            failure.__cause__ = exc
        return failure

    # --- the scan ------------------------------------------------------------------------------

    def scan(self, init: Carry, xs: Any = None) -> Carry:
        """``lax.scan(f, init, xs, length=length)[0]``, with its ys streamed to the output; call it inside the program.

        Parameters
        ----------
        init : pytree of arrays
            The carry entering the first step; traced, as a rule, computed by the program.
            When the run continues a stored one (``mode="resume"`` or ``"extend"``), only
            its structure, shapes and dtypes matter: the program continues from the
            recorded carry.
        xs : pytree of arrays, optional
            Inputs sliced along their first axis, one row per step, as ``lax.scan`` takes
            them (traced arrays of the program, of ``length`` rows).

        Returns
        -------
        pytree of jax.Array
            The carry after the last step (with a condition, the step where it held), once
            every block is committed.

        Raises
        ------
        streamacc.errors.InputError
            Outside the ``with`` block, after it, a second time, under ``vmap`` or a
            derivative, or ``f`` using a value traced in the program.
        streamacc.errors.StepFunctionError
            ``f`` breaks the scan contract for this carry (an ``InputError`` too).
        streamacc.errors.ResumeError
            A resumed or extended output whose run differs (its step, its carry's
            structure) or whose committed part cannot be trusted.
        """
        if self._state == "new":
            raise InputError("Stream.scan runs inside `with streamacc.Stream(...) as stream:`; call it there")
        if self._state == "closed":
            raise InputError("this Stream is closed: open a new Stream (with mode='resume' or 'extend' to continue "
                             "its output)")  # fmt: skip
        if self._scanned:
            raise InputError(
                "Stream.scan was called on this Stream already: a Stream streams one scan; open another Stream for "
                "another output, or call the jitted program that holds the scan once"
            )
        self._scanned = True
        try:
            carry: Carry = jax.jit(self._program)(init, xs)
        except ValueError as exc:  # vmap and derivatives are applied to the traced program, past _program
            self._refused = True
            refused = refused_transform(exc)
            if refused is None:
                raise
            raise refused from None
        except BaseException:
            self._refused = True
            if self._host is None:
                self._scanned = False  # nothing was opened: the scan may be traced again
            raise
        return carry

    def _prepare(self, treedef: Any, leaves: list[Leaf], xs: Any) -> tuple[Planned, list[HostLeaf] | None]:
        """The scan planned as write plans it, outside the trace; the recorded initial carry of a stored run."""
        session = self._session
        assert session is not None
        target = session.target
        recorded = recorded_init(target, self.mode) if self.mode in ("resume", "extend") else None
        if recorded is not None:
            want = [(tuple(a.shape), a.dtype, impl) for a, impl in recorded]
            got = [(shape, np.dtype(dtype), impl) for shape, dtype, impl in leaves]
            if want != got:
                raise ResumeError(
                    f"cannot {self.mode} {target.label}: its run began with a carry of leaves "
                    f"{describe_leaves(want)}, and the program's initial carry has {describe_leaves(got)}; pass a "
                    "carry of the stored run's structure"
                )
            init = from_host(recorded, jax.tree_util.tree_unflatten(treedef, [0] * len(leaves)))
        else:
            init = jax.tree_util.tree_unflatten(treedef, [placeholder(leaf) for leaf in leaves])
        try:
            scan_spec = ScanSpec(self._f, init, xs, length=self.length, until=self._until, **self._scan_keywords)
            planned = plan_output(scan_spec, self._request, self.store, self._storage_options)
        except TRACED as exc:
            raise InputError(
                "f uses a value traced in the jitted program (a variable of the program that f closes over), which "
                "the run's identity cannot record; pass it in the carry instead, where every block records it "
                f"(JAX: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__})"
            ) from exc
        # the host's copies; in the program, its ys and a block to spare for XLA's own (and with a condition, the
        # ys of the block run again to find the step where it held)
        program = 2 if planned.plan.until is None else 3
        session.check_memory(planned.plan, host=self.inflight, program=program, asked=scan_spec.block_size,
                             who="this stream")  # fmt: skip
        return planned, recorded

    def _open_stored(self, planned: Planned, recorded: list[HostLeaf], xs_given: bool) -> StreamHost:
        """Check the stored run this one continues, outside the trace, changing nothing: the program's start applies
        it once it has judged the inputs' values, or once the blocks it recomputes are judged (with inputs, which
        only the program holds). The host that continues it."""
        session, host = self._session, self._host
        assert session is not None and host is not None
        plan = planned.plan
        with session.translated():
            pending = session.prepare_output(
                host.spec, init=recorded,
                check_resumable=lambda o: check_resumable(o, plan, last_block=not xs_given),
            )  # fmt: skip
        host.pending = pending
        kept = pending.checked
        if kept is not None and not kept.complete and xs_given and kept.first_block:
            chain = resume_chain(kept)
            bounds = plan.bounds(chain.start)
            host.check_chain = [(k, *next(bounds)) for k in chain]
        return host

    def _program(self, init: Carry, xs: Any) -> Carry:
        """The traced scan: planned outside the trace, then the blocks' loop with its callbacks."""
        leaves, treedef = jax.tree_util.tree_flatten(init)
        leaves = [jnp.asarray(leaf) for leaf in leaves]
        shapes = [leaf_type(leaf) for leaf in leaves]
        structs = None if xs is None else jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), xs)
        planned, recorded = outside_trace(lambda: self._prepare(treedef, shapes, structs))
        plan = planned.plan
        crossing = crossing_leaves(outside_trace(lambda: to_host(plan.init)))
        x64 = bool(jax.config.read("jax_enable_x64"))
        index_dtype = np.dtype(np.int64 if x64 else np.int32)
        if plan.block_count > np.iinfo(np.int64 if x64 else np.int32).max:
            raise InputError(f"{plan.block_count} blocks need 64-bit block indices: turn jax_enable_x64 on")
        assert self._session is not None
        self._host = host = StreamHost(
            session=self._session, spec=planned.spec, plan=plan, carry=crossing,
            index_dtype=index_dtype, inflight=self.inflight, site=self._site, stored=planned.stored,
        )  # fmt: skip
        init = jax.tree_util.tree_unflatten(treedef, [
            leaf if c.impl is not None else jnp.asarray(leaf, dtype=c.dtype) for leaf, c in zip(
                leaves, crossing, strict=True)])  # fmt: skip
        check: list[list[tuple[int, int, int]] | None] = [None]

        def begin(plain: list[Any], ordered: bool) -> tuple[Any, ...]:
            results = (jax.ShapeDtypeStruct((), index_dtype), *[c.struct for c in crossing] * 2)
            started = host_call(host.start, results, *plain, *jax.tree_util.tree_leaves(xs), ordered=ordered)
            if recorded is not None:
                outside_trace(lambda: self._open_stored(planned, recorded, xs is not None))
                check[0] = host.check_chain
            return tuple(started)

        loop = Loop(plan.f, plan.blocking, crossing, index_dtype, plan.until, plan.y_struct)
        final: Carry = streamed(loop, host, init, xs, begin=begin, check=lambda: check[0])
        return final
