"""The bookkeeping format: what an output records about its run, and what every reader checks before it trusts it.

What is recorded: the manifest and block records (``_manifest``), the ledger that reads and
writes them with the kept carries (``_ledger``), the run's identity (``_runidentity``: read
back, typed; ``_identity``: made from a plan) and its step function's fingerprint
(``_fingerprint``). What is checked: an output's structure (``_trust``), the root metadata
against the manifest (``_root``), chunk trailers against the block records (``_trailers``,
and whether the store still holds what a run committed), and each chunk ``open`` reads
(``_checked``). Reading and checking them imports no JAX.

These are the names the other rooms and wings use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ._checked import CheckedStore as CheckedStore, ranged as ranged
    from ._fingerprint import describe_function as describe_function, fingerprint as fingerprint
    from ._identity import carry_digest as carry_digest, input_values as input_values, run_identity as run_identity
    from ._ledger import (
        CACHED_SEGMENTS as CACHED_SEGMENTS,
        Ledger as Ledger,
        carry_description as carry_description,
        carry_every as carry_every,
        carry_name as carry_name,
        damaged_carry as damaged_carry,
        load_manifest as load_manifest,
    )
    from ._manifest import (
        CARRY_CODEC as CARRY_CODEC,
        FORMAT as FORMAT,
        FORMAT_2 as FORMAT_2,
        LEGACY_MANIFEST_KEY as LEGACY_MANIFEST_KEY,
        MANIFEST_ATTR as MANIFEST_ATTR,
        MANIFEST_DESCRIPTION as MANIFEST_DESCRIPTION,
        MANIFEST_KEY as MANIFEST_KEY,
        RECORDS_ATTR as RECORDS_ATTR,
        SEGMENT as SEGMENT,
        BlockRecord as BlockRecord,
        Manifest as Manifest,
        changed_values as changed_values,
        decode_leaves as decode_leaves,
        describe_nonfinite as describe_nonfinite,
        encode_leaves as encode_leaves,
        identity_differences as identity_differences,
        node_attribute as node_attribute,
        require_same_run as require_same_run,
        same_function as same_function,
    )
    from ._root import bookkeeping_listing as bookkeeping_listing, root_problem as root_problem
    from ._runidentity import RunIdentity as RunIdentity
    from ._trailers import (
        carry_problem as carry_problem,
        missing_from_store as missing_from_store,
        trailer_problem as trailer_problem,
    )
    from ._trust import (
        arrays_problem as arrays_problem,
        carries_problem as carries_problem,
        check_settled_root as check_settled_root,
        check_structure as check_structure,
        contradicts_itself as contradicts_itself,
        trusted_manifest as trusted_manifest,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
