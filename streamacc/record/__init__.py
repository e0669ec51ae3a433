"""The bookkeeping format: what an output records about its run, and what every reader checks before it trusts it.

What is recorded: the manifest and block records (``_manifest``), the ledger that reads and
writes them with the kept carries (``_ledger``), and the run's identity as the manifest keeps it
(``_runidentity``: read back, typed). What is checked: an output's structure and its root
metadata against the manifest, and what a writer killed mid-write leaves behind (``_trust``);
chunk trailers against the block records, whether the store still holds what a run committed,
and each chunk ``open`` reads (``_trailers``). Reading and checking them imports no JAX.

These are the names the other wings use.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_face

if TYPE_CHECKING:
    from ._checked import CheckedStore as CheckedStore, ranged as ranged
    from ._ledger import (
        Ledger as Ledger,
        carry_description as carry_description,
        carry_every as carry_every,
        carry_name as carry_name,
        damaged_carry as damaged_carry,
        load_manifest as load_manifest,
    )
    from ._manifest import (
        CARRY_CODEC as CARRY_CODEC,
        LEGACY_MANIFEST_KEY as LEGACY_MANIFEST_KEY,
        MANIFEST_ATTR as MANIFEST_ATTR,
        MANIFEST_KEY as MANIFEST_KEY,
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
    from ._runidentity import RunIdentity as RunIdentity
    from ._trailers import (
        carry_problem as carry_problem,
        missing_from_store as missing_from_store,
        trailer_problem as trailer_problem,
    )
    from ._trust import (
        arrays_problem as arrays_problem,
        bookkeeping_listing as bookkeeping_listing,
        carries_misdescribed as carries_misdescribed,
        carries_problem as carries_problem,
        check_settled_root as check_settled_root,
        check_structure as check_structure,
        contradicts_itself as contradicts_itself,
        only_leftovers as only_leftovers,
        remove_partial_writes as remove_partial_writes,
        root_problem as root_problem,
        trusted_manifest as trusted_manifest,
    )
else:  # type checkers read the imports above, and would take any name for one __getattr__ gives
    __getattr__, __dir__, __all__ = lazy_face(__name__, __file__)
