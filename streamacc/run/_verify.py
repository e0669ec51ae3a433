"""``verify``: check an output against its manifest, recomputing blocks from the carries kept before them.

The manifest must agree with itself and with the layout, the run's arrays must still have
the metadata they were created with, and every checked block must pass: its chunks exist,
their stored bytes match the CRC-32Cs recorded at commit, recomputing it from the last
carry kept before it reproduces those bytes exactly, and the carry it ends with is the
carry kept after it, where one is.
Only the run's own arrays are judged, so variables a user added later change nothing.

Outputs of the command line's recipes, recomputed from what they record.

An output written by ``streamacc write`` records its recipe, parameters and dtype, so its
step function can be rebuilt, and its blocks recomputed, without any code from the user.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..base import HostLeaf, as_count, interruptible
from ..engine import (
    Block,
    BlockFailed,
    Plan,
    Predicate,
    ScanSpec,
    Step,
    caller_scopes,
    make_plan,
    recorded_way,
    step_of,
    until_of,
)
from ..errors import InputError, ResumeError, StepError, VerifyError, arg, one_line
from ..recipes import Job, get_recipe
from ..record import Manifest, changed_values, check_settled_root, load_manifest, same_function, trusted_manifest
from ..store import Target, open_target
from ..summaries import Summaries, SummaryCheck
from ._checker import Checker, repair_carries
from ._commit import Output
from ._identity import fingerprint

__all__ = [
    "VerifyReport", "check_recomputed", "check_resumable", "plan_for", "recorded_job", "resume_chain", "verify",
    "verify_plan", "verify_recipe_output",
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
        Blocks of the whole run (up to the one where it ended on its condition, if it did).
    committed_steps : int
        Steps the committed blocks hold.
    total_steps : int
        Steps of the whole run: its ``length``, or, for a run that ended on its condition,
        those up to and including the step where it did (``ended_at + 1``), as
        :func:`streamacc.info`, the root's ``streamacc_total_steps`` and the manifest count them.
    complete : bool
        Whether the run finished.
    summary_windows : int
        Summary rows compared with the data or with the rows below them (0 without summaries).
    repaired : tuple of int
        The boundaries whose kept carries ``repair=True`` rebuilt before the check (0 is the
        initial carry; boundary b the carry kept after block b - 1).
    ended_at : int or None
        The step where the run's condition held, its last; None where it did not end on it.
    length : int
        The ``length`` the run was given: the most steps it runs (``total_steps`` but for a
        run that ended on its condition).
    rewritten : tuple of str
        The metadata documents of the kept carries (their group's and arrays' ``zarr.json``)
        that ``repair=True`` wrote again, as the manifest says they must be, before the check.

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
    repaired: tuple[int, ...] = ()  # the boundaries whose kept carries were rebuilt first
    ended_at: int | None = None
    length: int = 0
    rewritten: tuple[str, ...] = ()  # the carries' metadata documents written again first


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


@contextlib.contextmanager
def recomputing(target: Target, manifest: Manifest) -> Iterator[None]:
    """Raise the step failing at run time as it recomputes a block of ``target`` as the :class:`StepError` that
    names the block and says that the output is as it was, JAX's error chained."""
    try:
        yield
    except BlockFailed as exc:
        bounds = manifest.identity.blocking.bounds()
        index = next((k for k, (a, _) in enumerate(bounds) if a == exc.start), None)
        steps = f"steps {exc.start} to {exc.stop}"
        block = steps if index is None else f"block {index} ({steps})"
        raise StepError(
            f"the step failed at run time in {block} of {target.label} as it was recomputed ({exc.error}); the "
            f"output is as it was ({manifest.committed_steps} steps committed): fix the cause and verify it again"
        ) from (exc.__cause__ or exc)


def verify_plan(target: Target, plan: Plan, manifest: Manifest, *, blocks: str | int = "all") -> VerifyReport:
    """Check ``target``'s manifest and committed blocks (all, or ``blocks`` of them).

    ``manifest`` is one whose structure is trusted already (:func:`trust.trusted_manifest`).
    """
    with recomputing(target, manifest):
        return _verify_plan(target, plan, manifest, blocks)


def _verify_plan(target: Target, plan: Plan, manifest: Manifest, blocks: str | int) -> VerifyReport:
    plan = as_recorded(plan, manifest)
    checker = Checker(target, manifest, plan)
    checker.manifest_agrees()
    checker.carries_agree()
    chosen = checker.chain(select_blocks(manifest.committed_blocks, blocks))
    if len(chosen) < manifest.committed_blocks:  # the others at least have the chunks they committed
        checker.trailers_match(k for k in range(manifest.committed_blocks) if k not in set(chosen))
    summaries = Summaries.load(target, manifest.identity, manifest.summaries, manifest.committed_rows)
    check = None
    if summaries is not None:  # summarised as the whole length's rows (a run that ended leaves its last window open)
        rows = manifest.identity.rows
        check = SummaryCheck(summaries, rows, len(chosen) == manifest.committed_blocks, checker.fail)
        checker.summary, checker.seen = summaries.plan, check.block
    checker.blocks(chosen)
    if check is not None:
        check.finish()
    check_settled_root(target, manifest)
    return VerifyReport(
        tuple(chosen),
        manifest.committed_blocks,
        manifest.total_blocks,
        manifest.committed_steps,
        manifest.length,
        manifest.complete,
        0 if check is None else check.checked,
        ended_at=manifest.ended_at,
        length=manifest.identity.blocking.length,
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
    checker = Checker(output.target, output.manifest, as_recorded(plan, output.manifest), output.sink)
    last = output.manifest.committed_blocks - 1
    try:
        checker.manifest_agrees()
        checker.arrays_unchanged(declared=not output.extending)  # an extension declares them where it must
        checker.carries_agree()
        checker.chunks_present()
        checker.trailers_match(range(output.manifest.committed_blocks), whole=True)
        if last_block:
            checker.block(last)
            output.resume_from(checker.ended[last])
    except VerifyError as exc:
        if output.extending:
            raise ResumeError(f"cannot extend: {one_line(exc)}; the output is left as it was") from None
        raise ResumeError(f"cannot resume: {one_line(exc)}") from None


def check_recomputed(output: Output, plan: Plan, k: int, block: Block, carry: list[HostLeaf]) -> None:
    """Refuse to continue ``output`` unless ``block``, its committed block ``k`` recomputed elsewhere (one of
    :func:`resume_chain`), holds exactly the stored bytes and ends with the carry kept after it, if one is.

    ``carry`` is the carry leaving the recomputed block, as host leaves. Host work only, no
    JAX (the recomputation is the caller's: a Stream's program); ``block`` is released. The
    last block's carry is the one the run resumes from.
    """
    checker = Checker(output.target, output.manifest, as_recorded(plan, output.manifest), output.sink)
    try:
        checker.judge(k, block, carry, output.ledger.carry(output.manifest, k + 1))
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


def verify_repairing(
    store: Any, storage_options: dict[str, Any] | None, blocks: str | int, plan_of: Callable[[Manifest, str], Plan]
) -> VerifyReport:
    """Rebuild the damaged kept carries of ``store`` under its writer lock (see ``_repair``), then verify it.

    ``plan_of(manifest, label)`` is the plan that recomputes the output's blocks.
    """
    target = open_target(store, storage_options=storage_options)
    with target.lock(arg("repair", True)):
        manifest = trusted_manifest(target)
        plan = plan_of(manifest, target.label)
        with recomputing(target, manifest):
            repaired = repair_carries(target, manifest, plan)
        report = verify_plan(target, plan, manifest, blocks=blocks)
    return dataclasses.replace(report, repaired=tuple(repaired.boundaries), rewritten=tuple(repaired.metadata))


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


def plan_for(manifest: Manifest, f: Step, init: Any, xs: Any, until: Predicate | None = None) -> Plan:
    """The plan of the recorded run: its length and block layout, with this step, inputs and condition (tested
    from the step the run tested it from), up to the step where it ended on it."""
    plan = make_plan(f, init, xs, until=until, **manifest.identity.blocking.keywords())
    identity = manifest.identity.to_json()
    if plan.until is not None:
        condition = recorded_way(plan.until, identity.get("until_tested"))
        armed = identity.get("until_from", 0)
        if isinstance(armed, int) and armed > 0:
            condition = dataclasses.replace(condition, armed=armed)
        plan = dataclasses.replace(plan, until=condition)
    return as_recorded(plan, manifest)


def as_recorded(plan: Plan, manifest: Manifest) -> Plan:
    """``plan``, which runs the recorded run, cut where that run ended on its condition (if it did)."""
    if manifest.ended_at is None or plan.blocking.end is not None:
        return plan
    return dataclasses.replace(plan, blocking=plan.blocking.ended(manifest.ended_at + 1))


def check_condition(manifest: Manifest, until: Predicate | None, label: str) -> None:
    """Refuse a condition ``until`` that is not the one the output of ``manifest`` (at ``label``) records: its
    blocks recompute with it (with ``unroll`` > 1 their bits depend on it), and where it held is recorded."""
    recorded = manifest.identity.to_json().get("until")
    if until is None and recorded is None:
        return
    if until is None:
        raise InputError(
            f"{label} was written by a run with a condition ({recorded}), which its blocks recompute with: pass it "
            f"as {arg('until')}"
        )
    current, values = fingerprint(until)
    if recorded is None:
        raise VerifyError(
            f"{label} was written by a run without a condition, not with {arg('until')} {current}; leave "
            f"{arg('until')} out"
        )
    if not same_function(recorded, current, label):
        changed = changed_values(manifest.identity.to_json(), {"until": current, "until_values": values}, "until")
        raise VerifyError(
            f"{label} was written with the condition {recorded}, not {arg('until')} {current}"
            f"{f' ({changed})' if changed else ''}; pass the condition (and the values it uses) that wrote it"
        )


@interruptible(caller_scopes)
def verify(
    store: Any,
    f: Step | ScanSpec | None = None,
    init: Any = None,
    xs: Any = None,
    *,
    blocks: str | int = "all",
    storage_options: dict[str, Any] | None = None,
    repair: bool = False,
    until: Predicate | None = None,
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
    repair : bool, default False
        First rebuild the kept carries that are damaged (missing, rewritten, or their
        metadata changed), under the output's writer lock: each is recomputed from the carry
        kept before it (``init`` for the first) through the blocks between, which must
        recompute to their stored chunks, and written only if it is exactly the carry its
        record names (``VerifyReport.repaired`` lists them). Damaged data, records or
        manifest are refused as without it.
    until : callable, optional
        The condition the output was written with, if it was (the same code and values),
        or in the ``ScanSpec``: its blocks recompute with it, and the block where it held
        must end after the step its record ends after.

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
    streamacc.errors.StepError
        The step failed at run time as a block was recomputed (a host callback raised, a
        runtime check): the message names the block, JAX's error is its ``__cause__``; the
        output is left as it was.
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
    until = until_of(f, until)
    f, init, xs = step_of(f, init, xs, needs_init=True)
    if repair:

        def plan_of(manifest: Manifest, label: str) -> Plan:
            check_function(manifest, f, label)
            return plan_for(manifest, f, init, xs)

        return verify_repairing(store, storage_options, blocks, plan_of)
    target = open_target(store, storage_options=storage_options, read_only=True)
    recorded = load_manifest(target)
    check_function(recorded, f, target.label)
    check_condition(recorded, until, target.label)
    manifest = trusted_manifest(target)
    plan = plan_for(manifest, f, init, xs, until)
    return verify_plan(target, plan, manifest, blocks=blocks)


def recorded_job(manifest: Manifest, label: str, storage_options: dict[str, Any] | None = None) -> Job:
    """The recipe job that wrote the output of ``manifest`` (at ``label``), rebuilt from its record."""
    ident = manifest.identity
    if not ident.recipe:  # not a failed check (exit 1): the command line cannot check this output
        raise InputError(
            f"{label} was written from Python, not by a recipe; verify it with streamacc.verify(path, f, init)"
        )
    dtype = np.dtype(next(iter(ident.arrays.values()))[0]).name
    return get_recipe(ident.recipe).make(ident.blocking.length, dtype, ident.params or {}, storage_options)


def verify_recipe_output(
    store: Any, *, blocks: str | int = "all", storage_options: dict[str, Any] | None = None, repair: bool = False
) -> VerifyReport:
    """Verify an output written by ``streamacc write``, rebuilding its recipe from the manifest (and first its
    damaged kept carries, with ``repair``: see ``streamacc.verify``)."""
    if repair:

        def plan_of(manifest: Manifest, label: str) -> Plan:
            job = recorded_job(manifest, label, storage_options)
            return plan_for(manifest, job.f, job.init, job.xs)

        return verify_repairing(store, storage_options, blocks, plan_of)
    target = open_target(store, storage_options=storage_options, read_only=True)
    manifest = trusted_manifest(target)
    job = recorded_job(manifest, target.label, storage_options)
    plan = plan_for(manifest, job.f, job.init, job.xs)
    return verify_plan(target, plan, manifest, blocks=blocks)
