"""``verify``: check an output against its manifest, recomputing blocks from their recorded carry-ins.

The manifest must agree with itself and with the layout, the run's arrays must still have
the metadata they were created with, and every checked block must pass: its chunks exist,
their stored bytes match the CRC-32Cs recorded at commit, recomputing it from its carry-in
reproduces those bytes exactly, and the carry it ends with is the carry recorded after it.
Only the run's own arrays are judged, so variables a user added later change nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import jax
import numpy as np

from .._errors import InputError, NoOutputError, ResumeError, VerifyError, spell
from ..engine import Plan, compute_block, from_host, make_plan, same_leaves, to_host
from ..store import Target, ZarrSink, array_document, open_target, stored_crc32c
from ._identity import describe_function
from ._interrupt import call_on_own_thread, check_stop, interruptible
from ._manifest import Ledger, Manifest, decode_leaves
from ._output import Output
from ._root import root_problem
from ._trailers import trailer_problem

__all__ = ["Checker", "VerifyReport", "check_resumable", "load_manifest", "plan_for", "verify", "verify_plan"]


@dataclasses.dataclass(frozen=True)
class VerifyReport:
    """What a successful verification checked."""

    checked_blocks: tuple[int, ...]
    committed_blocks: int
    total_blocks: int
    committed_steps: int
    total_steps: int
    complete: bool


def load_manifest(target: Target) -> Manifest:
    """The manifest of ``target``, or an error saying why there is none."""
    manifest = Ledger(target).load()
    if manifest is None:
        if not target.exists():
            raise NoOutputError(f"{target.label} does not exist; check the path")
        raise NoOutputError(f"{target.label} has no streamacc manifest; it was not written by streamacc or is empty")
    return manifest


def select_blocks(committed: int, blocks: str | int) -> list[int]:
    """All committed blocks, or ``blocks`` of them spread evenly, first and last included."""
    if blocks == "all":
        return list(range(committed))
    if isinstance(blocks, bool) or not isinstance(blocks, (int, np.integer)) or blocks < 1:
        raise InputError(
            f"{spell('blocks')} must be 'all' or a positive number of blocks to check, got {blocks!r}; "
            f"pass e.g. {spell('blocks', 16)}"
        )
    count = min(int(blocks), committed)
    if count <= 1:
        return list(range(count))
    return sorted({round(i * (committed - 1) / (count - 1)) for i in range(count)})


class Checker:
    """The checks of one output against its manifest and a plan that recomputes its blocks."""

    def __init__(self, target: Target, manifest: Manifest, plan: Plan | None, sink: ZarrSink | None = None) -> None:
        self.target = target
        self.manifest = manifest
        self.plan = plan
        self.ledger = Ledger(target)
        self._sink = sink

    def fail(self, what: str) -> VerifyError:
        return VerifyError(f"{self.target.label}: {what}; rewrite the output with {spell('overwrite', True)}")

    def bad_block(self, k: int, start: int, stop: int, what: str) -> VerifyError:
        return VerifyError(
            f"block {k} (steps {start}-{stop}) of {self.target.label} is bad: {what}; rewrite the output with "
            f"{spell('overwrite', True)}"
        )

    def manifest_agrees(self) -> None:
        """The manifest's counts agree with each other and with the plan's layout."""
        problem = self.manifest.inconsistency()
        if problem is None and self.manifest.total_blocks != self.plan.block_count:
            problem = f"it counts {self.manifest.total_blocks} blocks where the layout has {self.plan.block_count}"
        if problem is not None:
            raise self.fail(f"its manifest contradicts itself ({problem})")

    def arrays_unchanged(self) -> None:
        """Each of the run's arrays has exactly the metadata (minus attributes) it was created with."""
        recorded = self.manifest.arrays
        for name in self.manifest.identity["arrays"]:
            stored = array_document(self.target.read(f"{name}/zarr.json"))
            if stored is None:
                raise self.fail(f"the metadata of array {name!r} ({name}/zarr.json) is missing or unreadable")
            if name not in recorded:
                raise self.fail(f"the manifest records no metadata for array {name!r}")
            changed = sorted(k for k in recorded[name].keys() | stored.keys() if recorded[name].get(k) != stored.get(k))
            if changed:
                raise self.fail(f"the metadata of array {name!r} changed since it was written ({', '.join(changed)})")

    def structure_trusted(self) -> None:
        """What every reader checks first: no link or special file inside the output, the run's arrays with
        the metadata they were created with, and root metadata that agrees with the manifest."""
        self.target.check_contents()
        self.arrays_unchanged()
        problem = root_problem(self.target, self.manifest)
        if problem is not None:
            raise VerifyError(
                f"{self.target.label}: its root metadata (zarr.json) {problem}; resume the run with "
                f"{spell('resume', True)} to rewrite it from the manifest"
            )

    @property
    def sink(self) -> ZarrSink:
        if self._sink is None:
            names = list(self.manifest.identity["arrays"])
            self._sink = ZarrSink.open(self.target, names, self.manifest.identity["chunk"])
        return self._sink

    def chunks_present(self) -> None:
        """Every chunk of every committed block is stored (one listing per array)."""
        stored = {name: set(self.target.list_keys(f"{name}/")) for name in self.sink.arrays}
        bounds = self.plan.bounds()
        for k in range(self.manifest.committed_blocks):
            start, stop = next(bounds)
            for name in self.sink.arrays:
                missing = [key for key in self.sink.chunk_keys(name, start, stop) if key not in stored[name]]
                if missing:
                    raise self.bad_block(k, start, stop, f"chunk {missing[0]} is missing")

    def trailers_match(self, blocks: Iterable[int]) -> None:
        """Every chunk of ``blocks`` ends with the CRC-32C its block record names (4 bytes read per chunk)."""
        problem = trailer_problem(self.target, self.ledger, self.sink, blocks)
        if problem is not None:
            raise self.bad_block(*problem)

    def block(self, k: int) -> None:
        """Check committed block ``k`` (in scan order) bit for bit."""
        check_stop()
        rec = self.ledger.block(k)
        bounds = next(self.plan.bounds(k))
        if (rec.start, rec.stop) != bounds:
            raise self.bad_block(
                k, rec.start, rec.stop, f"its record says steps {rec.start}-{rec.stop}, the layout {bounds}"
            )
        for name in self.sink.arrays:
            keys, recorded = self.sink.chunk_keys(name, rec.start, rec.stop), rec.crc32c.get(name, [])
            if len(recorded) != len(keys):
                what = f"its record has {len(recorded)} checksums for the {len(keys)} chunks of {name!r}"
                raise self.bad_block(k, rec.start, rec.stop, what)
            for key, crc in zip(keys, recorded, strict=True):
                raw = self.target.read(key)
                if raw is None:
                    raise self.bad_block(k, rec.start, rec.stop, f"chunk {key} is missing")
                if stored_crc32c(raw) != crc:
                    what = f"the stored bytes of chunk {key} do not match their checksum (corrupted chunk)"
                    raise self.bad_block(k, rec.start, rec.stop, what)
        try:
            stored = self.sink.read(rec.start, rec.stop)
        except Exception as exc:  # a damaged compressed chunk fails in its codec, with the codec's own error
            what = f"its chunks cannot be decoded ({type(exc).__name__}: {' '.join(str(exc).split())})"
            raise self.bad_block(k, rec.start, rec.stop, what) from None
        plan = self.plan
        carry = from_host(decode_leaves(rec.carry_in), plan.init)
        block = call_on_own_thread(compute_block, plan, carry, rec.start, rec.stop)  # Ctrl-C need not wait for it
        for name, y in zip(self.sink.arrays, jax.tree_util.tree_leaves(block.ys), strict=True):
            if y.tobytes() != np.ascontiguousarray(stored[name]).tobytes():
                raise self.bad_block(
                    k, rec.start, rec.stop, f"recomputing {name!r} from its carry-in gives different bytes"
                )
        m = self.manifest
        after = m.carry if k + 1 == m.committed_blocks else self.ledger.block(k + 1).carry_in
        if not same_leaves(to_host(block.carry), decode_leaves(after or [])):
            raise self.bad_block(k, rec.start, rec.stop, "its final carry is not the carry recorded after it")


def verify_plan(target: Target, plan: Plan, manifest: Manifest, *, blocks: str | int = "all") -> VerifyReport:
    """Check ``target``'s manifest, array metadata and committed blocks (all, or ``blocks`` of them)."""
    chosen = select_blocks(manifest.committed_blocks, blocks)
    checker = Checker(target, manifest, plan)
    checker.manifest_agrees()
    checker.structure_trusted()
    if len(chosen) < manifest.committed_blocks:  # the others at least have the chunks they committed
        checker.trailers_match(k for k in range(manifest.committed_blocks) if k not in set(chosen))
    for k in chosen:
        checker.block(k)
    return VerifyReport(
        tuple(chosen),
        manifest.committed_blocks,
        plan.block_count,
        manifest.committed_steps,
        plan.length,
        manifest.complete,
    )


def check_resumable(output: Output, plan: Plan) -> None:
    """Refuse to continue an output whose committed part cannot be trusted.

    Before a resume writes anything: the run's arrays have their recorded metadata, every
    committed chunk exists, and the last committed block recomputes from its recorded
    carry-in to its stored bytes and checksum and ends with the carry the manifest resumes
    from. A damaged carry, a foreign manifest or missing blocks stop the resume here.
    """
    checker = Checker(output.target, output.manifest, plan, output.sink)
    try:
        checker.manifest_agrees()
        checker.arrays_unchanged()
        checker.chunks_present()
        checker.trailers_match(range(output.manifest.committed_blocks))
        checker.block(output.manifest.committed_blocks - 1)
    except VerifyError as exc:
        raise ResumeError(f"cannot resume: {exc}") from None


def plan_for(manifest: Manifest, f: Callable, init: Any, xs: Any) -> Plan:
    """The plan of the recorded run: its length and block layout, with this step and inputs."""
    ident = manifest.identity
    return make_plan(
        f,
        init,
        xs,
        length=ident["length"],
        block_size=ident["block_size"],
        unroll=ident["unroll"],
        reverse=ident["reverse"],
    )


@interruptible
def verify(
    store: Any,
    f: Callable,
    init: Any,
    xs: Any = None,
    *,
    blocks: str | int = "all",
    storage_options: dict | None = None,
) -> VerifyReport:
    """Verify an output written by :func:`write` with this ``f``, ``init`` and ``xs``.

    Raises :class:`VerifyError` naming the first problem (the first bad block in scan
    order) on any mismatch, missing chunk, changed array metadata or inconsistent
    manifest. Works on read-only stores; ``storage_options`` as for :func:`write`.
    """
    target = open_target(store, storage_options=storage_options, read_only=True)
    manifest = load_manifest(target)
    ident = manifest.identity
    if describe_function(f) != ident.get("function"):
        raise VerifyError(f"{target.label} was written by {ident.get('function')}, not {describe_function(f)}")
    plan = plan_for(manifest, f, init, xs)
    return verify_plan(target, plan, manifest, blocks=blocks)
