"""Where bytes live: output locations, locks and leases, chunk encoding, the Zarr sink, codecs.

Knows Zarr, fsspec and the operating system, and never JAX: it takes host arrays and
makes them durable. Its modules, in three layers, each importing only from those below it:

- what an output holds: ``_sink`` (the Zarr sink: the group, its arrays, the root metadata),
  ``_chunks`` (chunks encoded into reused buffers, and stored chunks compared with recomputed
  rows), ``_encoding`` (the data types stored, ``bfloat16`` among them, and the named codecs),
  ``_documents`` (the metadata documents as plain JSON), ``_carries`` (the carries kept at
  block boundaries), ``_fingerprint`` (an input array's contents, cheaply);
- where an output lives: ``_target`` (the base of an output location: a zarr store and what it
  lacks), ``_localtarget`` (a local folder), ``_storetarget`` (any other zarr store, and an
  object store's fsspec clients), ``_icechunk`` (an Icechunk repository) and ``_sessionstore``
  (its writer's session), ``_opentarget`` (the target of a path, URL or store object), ``_files``
  (link-safe, fsynced file primitives), ``_zarrapi`` (zarr's private names, each with its reason);
- the writer lease on object stores: ``_lease`` (take, renew, release, take over),
  ``_leasestore`` (the lease object on each kind of store), ``_fence`` (every mutating request
  checked against the lease, and which exceptions mean a store failed).

These are the names the other wings use; each is imported on first use, so that
``streamacc.store.open_target`` costs no Zarr import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import lazy_exports

if TYPE_CHECKING:
    from ._carries import (
        CARRIES as CARRIES,
        CarryDamaged as CarryDamaged,
        CarryLeaf as CarryLeaf,
        CarryStore as CarryStore,
    )
    from ._chunks import ChunkWriter as ChunkWriter, EncodeBuffers as EncodeBuffers, compare_chunks as compare_chunks
    from ._documents import (
        PROGRESS_ATTRS as PROGRESS_ATTRS,
        VIRTUAL as VIRTUAL,
        ArraySpec as ArraySpec,
        array_document as array_document,
        decoding_attributes as decoding_attributes,
        is_virtual as is_virtual,
        netcdf_safe as netcdf_safe,
        plain_document as plain_document,
        progress_attrs as progress_attrs,
        stored_crc32c as stored_crc32c,
    )
    from ._encoding import (
        CODECS as CODECS,
        compressors_for as compressors_for,
        register_data_types as register_data_types,
        storable as storable,
    )
    from ._fence import (
        FencedStore as FencedStore,
        describe_store_failure as describe_store_failure,
        is_store_failure as is_store_failure,
    )
    from ._files import aligned_empty as aligned_empty, atomic_write as atomic_write, read_into as read_into
    from ._fingerprint import fingerprint_of as fingerprint_of
    from ._icechunk import IcechunkTarget as IcechunkTarget
    from ._lease import LEASE_ENV as LEASE_ENV, Lease as Lease, lease_seconds as lease_seconds
    from ._leasestore import Holder as Holder, open_lease_store as open_lease_store
    from ._localtarget import LocalTarget as LocalTarget
    from ._opentarget import open_target as open_target
    from ._sessionstore import SessionStore as SessionStore
    from ._sink import ZarrSink as ZarrSink, resize_arrays as resize_arrays
    from ._storetarget import StoreTarget as StoreTarget, close_store_sessions as close_store_sessions
    from ._target import BOOKKEEPING as BOOKKEEPING, LEASE_KEY as LEASE_KEY, Target as Target
    from ._zarrapi import (
        ArrayV3Metadata as ArrayV3Metadata,
        GroupMetadata as GroupMetadata,
        RegularChunkGrid as RegularChunkGrid,
        settle_event_loop as settle_event_loop,
        sync as sync,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
