"""The writer lease on object stores, writes fenced by it, and which exceptions mean a store failed.

``_leasestore`` speaks to the store (conditional writes where it has them), ``_lease``
takes, renews and releases the lease, ``_fence`` refuses any write once it may be lost, and
``_storeerrors`` tells a store's failure (I/O, network, service) from a bug and words it,
for the lease's own refusals and for every writer's "N of M steps committed".

These are the names the other rooms and wings use; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

if TYPE_CHECKING:
    from ._fence import FencedStore as FencedStore, unwrap as unwrap
    from ._lease import LEASE_ENV as LEASE_ENV, Lease as Lease, LeaseView as LeaseView, lease_seconds as lease_seconds
    from ._leasestore import Holder as Holder, open_lease_store as open_lease_store
    from ._storeerrors import describe_store_failure as describe_store_failure, is_store_failure as is_store_failure

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
