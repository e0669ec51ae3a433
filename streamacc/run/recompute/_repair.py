"""Kept carries rebuilt by recomputation: what ``verify`` does with ``repair=True``.

A kept carry is what the blocks before it computed, so one that is damaged (missing,
rewritten, its metadata changed) follows again from the carry kept before it (the run's
``init`` for the first) through the blocks between. Those blocks are recomputed as
``verify`` recomputes them, each judged against its stored chunks (a virtual block has
none), and a carry is written again only once its chunks, encoded, give exactly the
CRC-32Cs its record kept from the run that wrote it: the repair writes back what was there,
or nothing. What the carries cannot mend (damaged data chunks, records or manifest) is
refused as ``verify`` refuses it. The caller holds the writer lock.
"""

from __future__ import annotations

from ...engine import HostLeaf, Plan, to_host
from ...errors import VerifyError, arg
from ...store import CarryDamaged, Target
from ..bookkeeping import Manifest, carries_problem, carry_name
from ._checker import Checker

__all__ = ["repair_carries"]


def repair_carries(target: Target, manifest: Manifest, plan: Plan) -> list[int]:
    """Rebuild the damaged kept carries of ``target`` (its lock held) by recomputation; the boundaries rebuilt.

    Raises VerifyError where a carry cannot be rebuilt: the records and the manifest disagree
    on which carries are kept, ``init`` is not the run's, a block before it does not
    recompute to its stored chunks, or the carry recomputed is not the one recorded.
    """
    if manifest.v2:  # its carries are in its records, checked with them
        return []
    checker = Checker(target, manifest, plan)
    checker.manifest_agrees()
    carries = checker.ledger.carries(manifest)
    label = target.label
    problem = carries_problem(target, manifest, checker.ledger, metadata=False)
    if problem is not None:
        raise VerifyError(f"{label}: {problem}")
    if carries.metadata_problem(manifest.committed_blocks) is not None:
        target.check_lock()
        carries.create()  # the documents the run's carries must have: their chunks are judged by their records below
    damaged = []
    for boundary in range(manifest.committed_blocks + 1):
        crcs = checker.ledger.carry_checksums(manifest, boundary)
        if crcs is None:
            continue
        try:
            carries.read(boundary, crcs)
        except CarryDamaged:
            damaged.append(boundary)
    for boundary in damaged:
        for key in carries.keys(boundary):
            found = target.missing(key)
            if found != "is missing":  # something stands where the chunk belongs that a write would not replace
                raise VerifyError(
                    f"{label}: chunk {key} of {carry_name(boundary)} {found}, then run verify with "
                    f"{arg('repair', True)} again"
                )
    if damaged and damaged[0] == 0:
        _rewrite(target, manifest, checker, 0, to_host(plan.init), "the init given")
    rest = [b for b in damaged if b > 0]
    checker.rebuild = set(rest)
    checker.blocks([b - 1 for b in rest])
    for boundary in rest:
        _rewrite(target, manifest, checker, boundary, checker.ended[boundary - 1], "the carry recomputed")
    return damaged


def _rewrite(
    target: Target, manifest: Manifest, checker: Checker, boundary: int, carry: list[HostLeaf], what: str
) -> None:
    """Write ``carry`` as the carry kept at ``boundary``, durably, once its chunks give the CRC-32Cs recorded."""
    carries = checker.ledger.carries(manifest)
    values = [a for a, _ in carry]
    recorded = checker.ledger.carry_checksums(manifest, boundary)
    if carries.checksums(values) != recorded:
        fix = (
            "pass the init the output was written with" if boundary == 0
            else f"the record is damaged too: rewrite the output with {arg('mode', 'overwrite')}"
        )  # fmt: skip
        raise VerifyError(
            f"{target.label}: {what} for {carry_name(boundary)} is not the carry its run kept there (its chunks' "
            f"CRC-32Cs differ from the record), so it is not written; {fix}"
        )
    target.check_lock()
    keys, _ = carries.write(boundary, values)
    target.make_durable(keys)
