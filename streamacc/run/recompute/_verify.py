"""``verify``: check an output against its manifest, recomputing blocks from the carries kept before them.

The manifest must agree with itself and with the layout, the run's arrays must still have
the metadata they were created with, and every checked block must pass: its chunks exist,
their stored bytes match the CRC-32Cs recorded at commit, recomputing it from the last
carry kept before it reproduces those bytes exactly, and the carry it ends with is the
carry kept after it, where one is.
Only the run's own arrays are judged, so variables a user added later change nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import jax
import numpy as np

from ...base import DEFAULT_INFLIGHT, as_count
from ...engine import (
    Block,
    BlockPool,
    HostLeaf,
    Plan,
    ScanSpec,
    Step,
    compute_block,
    from_host,
    make_plan,
    pool_size,
    rows_in,
    same_leaves,
    step_of,
    to_host,
)
from ...errors import InputError, ResumeError, VerifyError, arg, one_line
from ...store import Target, ZarrSink, compare_chunks, open_target
from ...summaries import BlockPieces, Summaries, SummaryCheck, SummaryPlan
from ..bookkeeping import (
    BlockRecord,
    Ledger,
    Manifest,
    arrays_problem,
    changed_values,
    check_settled_root,
    contradicts_itself,
    fingerprint,
    load_manifest,
    same_function,
    trailer_problem,
    trusted_manifest,
)
from ..output import Output
from ..threads import interruptible, on_own_thread, run_ordered

__all__ = [
    "Checker",
    "VerifyReport",
    "check_recomputed",
    "check_resumable",
    "plan_for",
    "resume_chain",
    "verify",
    "verify_plan",
]


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What a successful :func:`streamacc.verify` checked (a failed check raises instead).

    Attributes
    ----------
    checked_blocks : tuple of int
        The blocks recomputed and compared byte for byte, by index in scan order: those
        asked for, and the blocks each is recomputed through from the last carry kept
        before it (a large carry is kept every few blocks); the other committed blocks had
        their chunks' CRC-32C trailers checked against their records.
    committed_blocks : int
        Blocks the manifest commits.
    total_blocks : int
        Blocks of the whole run.
    committed_steps : int
        Steps the committed blocks hold.
    total_steps : int
        Steps of the whole run (its ``length``).
    complete : bool
        Whether the run finished.
    summary_windows : int
        Summary rows compared with the data or with the rows below them (0 without summaries).

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> jax.config.update("jax_enable_x64", True)
    >>> def step(x, _):
    ...     x = x * (1 + 1e-8)
    ...     return x, x
    >>> _ = streamacc.write("small.zarr", step, np.float64(1.0), length=10_000, block_size=1024, progress=False)
    >>> report = streamacc.verify("small.zarr", step, np.float64(1.0), blocks=3)
    >>> report.checked_blocks, report.committed_blocks, report.complete
    ((0, 5, 9), 10, True)
    """

    checked_blocks: tuple[int, ...]
    committed_blocks: int
    total_blocks: int
    committed_steps: int
    total_steps: int
    complete: bool
    summary_windows: int = 0  # summary rows compared with the data or with the rows below them


def select_blocks(committed: int, blocks: str | int) -> list[int]:
    """All committed blocks, or ``blocks`` of them spread evenly, first and last included."""
    if blocks == "all":
        return list(range(committed))
    blocks = as_count("blocks", blocks, minimum=1, example=16)
    count = min(blocks, committed)
    if count <= 1:
        return list(range(count))
    # i * (committed - 1) / (count - 1) rounded half up, in integers: exact at any number of blocks
    return sorted({(2 * i * (committed - 1) + count - 1) // (2 * (count - 1)) for i in range(count)})


class Checker:
    """The checks of one output against its manifest and a plan that recomputes its blocks."""

    def __init__(self, target: Target, manifest: Manifest, plan: Plan, sink: ZarrSink | None = None) -> None:
        self.target = target
        self.manifest = manifest
        self.plan = plan
        self.ledger = Ledger(target)
        self._sink = sink
        self.summary: SummaryPlan | None = None  # cut each checked block's summary pieces, for ``seen``
        # each checked block's pieces, in scan order
        self.seen: Callable[[int, dict[str, BlockPieces]], None] | None = None
        self.ended: dict[int, list[HostLeaf]] = {}  # the carry each block checked ended with

    def fail(self, what: str) -> VerifyError:
        return VerifyError(f"{self.target.label}: {what}; rewrite the output with {arg('mode', 'overwrite')}")

    def bad_block(self, k: int, start: int, stop: int, what: str) -> VerifyError:
        return VerifyError(
            f"block {k} (steps {start}-{stop}) of {self.target.label} is bad: {what}; rewrite the output with "
            f"{arg('mode', 'overwrite')}"
        )

    def not_recomputed(self, k: int, start: int, stop: int, what: str) -> VerifyError:
        """A block whose recomputation from the carry kept before it does not give what is stored.

        Either the step function (or a value it uses) is not the one that wrote the output,
        or the stored block is damaged; the data may well be fine, so nothing here says to
        delete it.
        """
        return VerifyError(
            f"block {k} (steps {start}-{stop}) of {self.target.label} does not recompute to what is stored ({what}): "
            "either f, or a value it uses, is not that of the run that wrote it, or the block is damaged; run with "
            "the original f and its values, and check the output with streamacc.verify (`streamacc verify` for a "
            "recipe) to tell which"
        )

    def manifest_agrees(self) -> None:
        """The manifest's counts agree with each other and with the plan's layout."""
        problem = self.manifest.inconsistency()
        if problem is None and self.manifest.total_blocks != self.plan.block_count:
            problem = f"it counts {self.manifest.total_blocks} blocks where the layout has {self.plan.block_count}"
        if problem is not None:
            raise VerifyError(contradicts_itself(self.target.label, problem))

    def arrays_unchanged(self) -> None:
        """Each of the run's arrays has exactly the metadata it was created with (see ``array_document``)."""
        problem = arrays_problem(self.target, self.manifest)
        if problem is not None:
            raise self.fail(problem)

    @property
    def sink(self) -> ZarrSink:
        if self._sink is None:
            names = self.manifest.identity.names
            self._sink = ZarrSink.open(self.target, names)
        return self._sink

    def stored_blocks(self, blocks: Iterable[int]) -> list[int]:
        """Those of ``blocks`` whose data chunks are stored (all but a virtual output's unmaterialized ones)."""
        return [k for k in blocks if self.manifest.stores(k)]

    def chunks_present(self) -> None:
        """Every chunk of every committed block that stores its data is there (one listing per array)."""
        stored = {name: set(self.target.list_keys(f"{name}/")) for name in self.sink.arrays}
        bounds = self.plan.bounds()
        for k in range(self.manifest.committed_blocks):
            start, stop = next(bounds)
            if not self.manifest.stores(k):
                continue
            rows = rows_in(start, stop, self.plan.save_every)
            for name in self.sink.arrays:
                missing = [key for key in self.sink.chunk_keys(name, *rows) if key not in stored[name]]
                if missing:
                    raise self.bad_block(k, start, stop, f"chunk {missing[0]} is missing")

    def trailers_match(self, blocks: Iterable[int], *, whole: bool = False) -> None:
        """Every chunk of ``blocks`` (those storing data) ends with the CRC-32C its block record names; with
        ``whole``, read whole, its bytes give that checksum too."""
        blocks = self.stored_blocks(blocks)
        problem = trailer_problem(
            self.target, self.ledger, self.sink, blocks, self.plan.save_every, self.manifest, whole=whole
        )
        if problem is not None:
            raise self.bad_block(*problem)

    def _record(self, k: int) -> BlockRecord:
        """Block ``k``'s record, checked against the layout."""
        rec = self.ledger.block(k, self.manifest)
        bounds = next(self.plan.bounds(k))
        if (rec.start, rec.stop) != bounds:
            raise self.bad_block(
                k, rec.start, rec.stop, f"its record says steps {rec.start}-{rec.stop}, the layout {bounds}"
            )
        rows = rows_in(rec.start, rec.stop, self.plan.save_every)
        for name in self.sink.arrays if self.manifest.stores(k) else ():  # a virtual block's record may hold none
            keys, recorded = self.sink.chunk_keys(name, *rows), rec.crc32c.get(name, [])
            if len(recorded) != len(keys):
                what = f"its record has {len(recorded)} checksums for the {len(keys)} chunks of {name!r}"
                raise self.bad_block(k, rec.start, rec.stop, what)
        return rec

    def chain(self, chosen: Iterable[int]) -> list[int]:
        """The blocks to recompute to check ``chosen``: each with the blocks since the last carry kept before it.

        A run keeps its carry after every block, or every few for a large carry (see
        ``record.carry_every``), so a block is recomputed from the nearest kept carry before
        it, through the blocks between, which are then checked too.
        """
        out: set[int] = set()
        for k in chosen:
            out.update(range(self.ledger.kept_before(self.manifest, k), k + 1))
        return sorted(out)

    def _recomputed(self, chosen: Iterable[int], pool: BlockPool) -> Iterator[_Recomputed]:
        """Each chosen block (and those it is recomputed through) recomputed, in scan order.

        A block starts from the carry kept before it, or from the carry the block before it
        just ended with. A block whose record fails travels as its error, so that it is
        raised in scan order after the blocks before it are judged; nothing after it is
        recomputed.
        """
        plan, m = self.plan, self.manifest
        previous: tuple[int, Any] | None = None  # the block recomputed last, and the carry it ended with
        for k in self.chain(chosen):
            try:
                rec = self._record(k)
                kept = self.ledger.carry(m, k)
                if kept is not None:
                    carry = from_host(kept, plan.init)
                else:
                    assert previous is not None and previous[0] == k - 1  # the chain holds the blocks since a kept one
                    carry = previous[1]
                after = self.ledger.carry(m, k + 1)
                block = compute_block(plan, carry, rec.start, rec.stop, pool=pool)
                previous = (k, block.carry)
                yield _Recomputed(k, rec, after, block)
            except VerifyError as exc:
                yield _Recomputed(k, None, None, None, exc)
                return

    def _compare(self, item: _Recomputed) -> dict[str, BlockPieces] | None:
        """Judge one recomputed block against its stored chunks, checksums and the carry after it.

        Returns the block's summary pieces (cut from the data now proven to be the stored data).
        """
        if item.error is not None:
            raise item.error
        rec, block = item.rec, item.block
        assert rec is not None and block is not None
        try:
            rows = rows_in(rec.start, rec.stop, self.plan.save_every)
            ys = dict(zip(self.sink.arrays, jax.tree_util.tree_leaves(block.ys), strict=True))
            stored = self.manifest.stores(item.index)  # a virtual block's data are its recomputation
            found = {
                name: compare_chunks(self.sink.writers[name], self.target, rows[0], ys[name], rec.crc32c[name])
                for name in self.sink.arrays
                if stored
            }
            for check in found.values():
                if check.problem is not None:
                    key, kind = check.problem
                    what = (
                        f"chunk {key} is missing"
                        if kind == "missing"
                        else f"the stored bytes of chunk {key} do not match their checksum (corrupted chunk)"
                    )
                    raise self.bad_block(item.index, rec.start, rec.stop, what)
            for name, check in found.items():
                for i in check.differing:
                    self._compare_values(item.index, rec, name, i, ys[name])
            ended = to_host(block.carry) if item.carry is None else item.carry
            if item.after is not None and not same_leaves(ended, item.after):
                what = "its final carry is not the carry recorded after it"
                raise self.not_recomputed(item.index, rec.start, rec.stop, what)
            self.ended[item.index] = ended
            return None if self.summary is None else self.summary.pieces(rows[0], ys)
        finally:
            block.release()

    def _compare_values(self, k: int, rec: BlockRecord, name: str, i: int, ys: np.ndarray) -> None:
        """Decode chunk ``i`` of the block (its bytes are not the writer's encoding) and compare its values."""
        first, last = rows_in(rec.start, rec.stop, self.plan.save_every)
        region = self.sink.writers[name].region(first, last, i)
        stored_region = (slice(first + region[0].start, first + region[0].stop), *region[1:])
        try:
            stored = self.sink.arrays[name][stored_region]
        except Exception as exc:  # a damaged compressed chunk fails in its codec, with the codec's own error
            what = f"its chunks cannot be decoded ({type(exc).__name__}: {one_line(exc)})"
            raise self.bad_block(k, rec.start, rec.stop, what) from None
        if np.ascontiguousarray(ys[region]).tobytes() != np.asarray(stored).tobytes():
            raise self.not_recomputed(k, rec.start, rec.stop, f"{name!r} differs")

    def blocks(self, chosen: Iterable[int], *, depth: int = DEFAULT_INFLIGHT) -> None:
        """Check the committed blocks ``chosen`` (in scan order) bit for bit; raise on the first bad one.

        As a write runs: blocks are recomputed on a thread of their own into a pool of recycled
        buffers while ``depth`` threads compare earlier ones with their stored chunks.
        """
        pool = BlockPool(pool_size(depth))
        recomputed = on_own_thread(self._recomputed(chosen, pool))  # Ctrl-C need not wait for a block
        try:
            run_ordered(recomputed, self._compare, self._judged, depth=depth, workers=depth)
        finally:
            recomputed.close()

    def _judged(self, item: _Recomputed, pieces: dict[str, BlockPieces] | None) -> None:
        if self.seen is not None and pieces is not None and item.rec is not None:
            self.seen(rows_in(item.rec.start, item.rec.stop, self.plan.save_every)[0], pieces)

    def block(self, k: int) -> None:
        """Check committed block ``k`` (in scan order) bit for bit."""
        self.blocks([k], depth=1)


@dataclasses.dataclass(frozen=True)
class _Recomputed:
    """A block recomputed from its record, or the error its record raised."""

    index: int
    rec: BlockRecord | None
    after: list[HostLeaf] | None  # the carry kept after the block, if one is
    block: Block | None
    error: VerifyError | None = None
    carry: list[HostLeaf] | None = None  # the carry leaving the block as host leaves, where already known


def verify_plan(target: Target, plan: Plan, manifest: Manifest, *, blocks: str | int = "all") -> VerifyReport:
    """Check ``target``'s manifest and committed blocks (all, or ``blocks`` of them).

    ``manifest`` is one whose structure is trusted already (:func:`trust.trusted_manifest`).
    """
    checker = Checker(target, manifest, plan)
    checker.manifest_agrees()
    chosen = checker.chain(select_blocks(manifest.committed_blocks, blocks))
    if len(chosen) < manifest.committed_blocks:  # the others at least have the chunks they committed
        checker.trailers_match(k for k in range(manifest.committed_blocks) if k not in set(chosen))
    summaries = Summaries.load(target, manifest.identity, manifest.summaries, manifest.committed_rows)
    check = None
    if summaries is not None:
        check = SummaryCheck(summaries, plan.rows, len(chosen) == manifest.committed_blocks, checker.fail)
        checker.summary, checker.seen = summaries.plan, check.block
    checker.blocks(chosen)
    if check is not None:
        check.finish()
    check_settled_root(target, manifest)
    return VerifyReport(
        tuple(chosen),
        manifest.committed_blocks,
        plan.block_count,
        manifest.committed_steps,
        plan.length,
        manifest.complete,
        0 if check is None else check.checked,
    )


def check_resumable(output: Output, plan: Plan, *, last_block: bool = True) -> None:
    """Refuse to continue an output whose committed part cannot be trusted.

    Before a resume writes anything: the run's arrays have their recorded metadata, every
    committed chunk exists, ends with the CRC-32C its block record names (so a chunk
    replaced in any committed block is found) and holds bytes that give it (so one damaged
    in place is found: the run keeps them all, so it reads them all once), and the last
    committed block recomputes (from the last carry kept before it, through the blocks
    between) to its stored bytes and checksums and ends with the carry kept after it, if
    one is; the carry it ends with is the one the run resumes from. A damaged carry, a
    foreign manifest or missing blocks stop the resume here. Without ``last_block`` the
    caller recomputes those blocks itself (a
    Stream, whose inputs only its program holds) and has them judged by :func:`check_recomputed`.
    """
    checker = Checker(output.target, output.manifest, plan, output.sink)
    last = output.manifest.committed_blocks - 1
    try:
        checker.manifest_agrees()
        checker.arrays_unchanged()
        checker.chunks_present()
        checker.trailers_match(range(output.manifest.committed_blocks), whole=True)
        if last_block:
            checker.block(last)
            output.resume_from(checker.ended[last])
    except VerifyError as exc:
        raise ResumeError(f"cannot resume: {one_line(exc)}") from None


def check_recomputed(output: Output, plan: Plan, k: int, block: Block, carry: list[HostLeaf]) -> None:
    """Refuse to continue ``output`` unless ``block``, its committed block ``k`` recomputed elsewhere (one of
    :func:`resume_chain`), holds exactly the stored bytes and ends with the carry kept after it, if one is.

    ``carry`` is the carry leaving the recomputed block, as host leaves. Host work only, no
    JAX (the recomputation is the caller's: a Stream's program); ``block`` is released. The
    last block's carry is the one the run resumes from.
    """
    checker = Checker(output.target, output.manifest, plan, output.sink)
    try:
        rec = checker._record(k)
        checker._compare(_Recomputed(k, rec, output.ledger.carry(output.manifest, k + 1), block, carry=carry))
    except VerifyError as exc:
        raise ResumeError(f"cannot resume: {one_line(exc)}") from None
    if k + 1 == output.manifest.committed_blocks:
        output.resume_from(carry)


def resume_chain(output: Output) -> range:
    """The committed blocks a resume recomputes before it writes: the last, and those since the carry kept
    before it (empty before the first commit)."""
    last = output.manifest.committed_blocks - 1
    if last < 0:
        return range(0)
    return range(output.ledger.kept_before(output.manifest, last), last + 1)


def check_function(manifest: Manifest, f: Step, label: str) -> None:
    """Refuse a step function ``f`` that is not the one the output of ``manifest`` (at ``label``) records."""
    recorded = manifest.identity.function
    current, values = fingerprint(f)
    if not same_function(recorded, current, label):
        changed = changed_values(manifest.identity.to_json(), {"function": current, "function_values": values})
        raise VerifyError(
            f"{label} was written by {recorded}, not {current}{f' ({changed})' if changed else ''}; pass the step "
            "function (and the values it uses) that wrote it"
        )


def plan_for(manifest: Manifest, f: Step, init: Any, xs: Any) -> Plan:
    """The plan of the recorded run: its length and block layout, with this step and inputs."""
    return make_plan(f, init, xs, **manifest.identity.blocking.keywords())


@interruptible
def verify(
    store: Any,
    f: Step | ScanSpec | None = None,
    init: Any = None,
    xs: Any = None,
    *,
    blocks: str | int = "all",
    storage_options: dict[str, Any] | None = None,
) -> VerifyReport:
    """Check an output against its manifest, recomputing its blocks from the carries it keeps.

    Checks that the manifest agrees with itself and with the layout, that nothing inside
    the output is a link or a special file, that the run's arrays have the metadata they
    were created with, that the root metadata agrees with the manifest (it may lag the
    manifest while a run writes, not once the run is complete), and then, for
    each checked block, that its chunks exist with the CRC-32Cs recorded at commit, that
    recomputing it with ``f`` from the last carry kept before it (every block's, or every few
    blocks' for a large carry, through the blocks between) gives exactly the stored bytes,
    and that it ends with the carry kept after it. Blocks not recomputed have their
    chunks' checksums compared with their records (4 bytes read per chunk). The window
    summaries are checked too: rebuilt from the data when every block is checked,
    otherwise the finest windows of the checked blocks against the data and every coarser
    window against the ones below it. Works on read-only stores and while a run writes
    (it checks what is committed). Ctrl-C on the main thread ends it within seconds.

    Parameters
    ----------
    store : str, os.PathLike or zarr store
        The output: a local path, an fsspec URL (with ``storage_options``) or a zarr store.
    f : callable or ScanSpec
        The step function that wrote the output (the same code and the same values it uses),
        or a :class:`~streamacc.ScanSpec` holding it with ``init`` and ``xs`` (its other
        settings are the output's own).
    init : pytree of arrays
        The initial carry the output was written with (its dtypes and shapes are checked;
        the blocks start from the output's kept carries).
    xs : pytree of arrays, optional
        The inputs the output was written with, if any.
    blocks : "all" or int, default "all"
        Recompute every committed block, or this many spread evenly over them (first and
        last included).
    storage_options : dict, optional
        fsspec options for a URL ``store``.

    Returns
    -------
    VerifyReport
        What was checked.

    Raises
    ------
    streamacc.errors.VerifyError
        The first problem found, in scan order: the step function is not the one that
        wrote the output, a chunk is missing, damaged or not the one committed, a block
        does not recompute to what is stored, or the manifest, array or root metadata
        contradict each other.
    streamacc.errors.NoOutputError
        Nothing is there, or no streamacc output.
    streamacc.errors.InputError
        ``f`` or ``init`` is missing, or ``blocks`` is not "all" or a positive integer.

    Examples
    --------
    >>> import jax, numpy as np, streamacc
    >>> jax.config.update("jax_enable_x64", True)
    >>> def step(x, _):
    ...     x = x * (1 + 1e-8)
    ...     return x, x
    >>> _ = streamacc.write("checked.zarr", step, np.float64(1.0), length=2**14, block_size=2**12, progress=False)
    >>> streamacc.verify("checked.zarr", step, np.float64(1.0))
    VerifyReport(checked_blocks=(0, 1, 2, 3), committed_blocks=4, total_blocks=4, committed_steps=16384,
    total_steps=16384, complete=True, summary_windows=...)

    A different step function is found at once:

    >>> def other(x, _):
    ...     x = x * (1 + 2e-8)
    ...     return x, x
    >>> streamacc.verify("checked.zarr", other, np.float64(1.0))
    Traceback (most recent call last):
    ...
    streamacc.errors.VerifyError: checked.zarr was written by __main__.step code:... values:..., not __main__.other
    code:... values:...; pass the step function (and the values it uses) that wrote it
    """
    if f is None:
        raise InputError(
            "verify recomputes the output's blocks, so it needs the step function that wrote it and its initial "
            "carry: pass streamacc.verify(store, f, init) (and xs, if the run had inputs), or a ScanSpec holding "
            "them; an output of `streamacc write` is verified by `streamacc verify PATH`"
        )
    f, init, xs = step_of(f, init, xs, needs_init=True)
    target = open_target(store, storage_options=storage_options, read_only=True)
    check_function(load_manifest(target), f, target.label)
    manifest = trusted_manifest(target)
    plan = plan_for(manifest, f, init, xs)
    return verify_plan(target, plan, manifest, blocks=blocks)
