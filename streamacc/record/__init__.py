"""The bookkeeping format: what an output records about its run, and what every reader checks before it trusts it.

What is recorded: the manifest and block records (``_manifest``), the ledger that reads and
writes them with the kept carries (``_ledger``), and the run's identity as the manifest keeps it
(``_runidentity``: read back, typed). What is checked: an output's structure and its root
metadata against the manifest, and what a writer killed mid-write leaves behind (``_trust``);
chunk trailers against the block records and whether the store still holds what a run
committed (``_trailers``), and each chunk ``open`` reads (``_checked``). Reading and checking them imports no JAX.

These are the names the other wings use.
"""

from ._checked import CheckedStore, ranged
from ._ledger import Ledger, carry_description, carry_every, carry_name, damaged_carry, load_manifest
from ._manifest import (
    CARRY_CODEC,
    LEGACY_MANIFEST_KEY,
    MANIFEST_ATTR,
    MANIFEST_KEY,
    BlockRecord,
    Manifest,
    changed_values,
    decode_leaves,
    describe_nonfinite,
    encode_leaves,
    identity_differences,
    node_attribute,
    require_same_run,
    same_function,
)
from ._runidentity import RunIdentity
from ._trailers import carry_problem, missing_from_store, trailer_problem
from ._trust import (
    arrays_problem,
    bookkeeping_listing,
    carries_problem,
    check_settled_root,
    check_structure,
    contradicts_itself,
    only_leftovers,
    remove_partial_writes,
    root_problem,
    trusted_manifest,
)

__all__ = [
    "CARRY_CODEC", "LEGACY_MANIFEST_KEY", "MANIFEST_ATTR", "MANIFEST_KEY", "BlockRecord", "CheckedStore", "Ledger",
    "Manifest", "RunIdentity", "arrays_problem", "bookkeeping_listing", "carries_problem", "carry_description",
    "carry_every", "carry_name", "carry_problem", "changed_values", "check_settled_root", "check_structure",
    "contradicts_itself", "damaged_carry", "decode_leaves", "describe_nonfinite", "encode_leaves",
    "identity_differences", "load_manifest", "missing_from_store", "node_attribute", "only_leftovers", "ranged",
    "remove_partial_writes", "require_same_run", "root_problem", "same_function", "trailer_problem", "trusted_manifest",
]
