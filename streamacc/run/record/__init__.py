"""What an output records about its run: names of the ``bookkeeping`` room, kept importable from here.

Each is imported from ``bookkeeping`` on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from ..bookkeeping import (
        CACHED_SEGMENTS as CACHED_SEGMENTS,
        FORMAT as FORMAT,
        FORMAT_2 as FORMAT_2,
        LEGACY_MANIFEST_KEY as LEGACY_MANIFEST_KEY,
        MANIFEST_ATTR as MANIFEST_ATTR,
        MANIFEST_DESCRIPTION as MANIFEST_DESCRIPTION,
        MANIFEST_KEY as MANIFEST_KEY,
        RECORDS_ATTR as RECORDS_ATTR,
        SEGMENT as SEGMENT,
        BlockRecord as BlockRecord,
        Ledger as Ledger,
        Manifest as Manifest,
        RunIdentity as RunIdentity,
        carry_description as carry_description,
        carry_digest as carry_digest,
        carry_every as carry_every,
        changed_values as changed_values,
        decode_leaves as decode_leaves,
        describe_function as describe_function,
        describe_nonfinite as describe_nonfinite,
        encode_leaves as encode_leaves,
        fingerprint as fingerprint,
        identity_differences as identity_differences,
        load_manifest as load_manifest,
        node_attribute as node_attribute,
        require_same_run as require_same_run,
        run_identity as run_identity,
        same_function as same_function,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
