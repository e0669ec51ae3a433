"""Where bytes live: output locations, locks and leases, chunk encoding, the Zarr sink, codecs.

Knows Zarr, fsspec and the operating system, and never JAX: it takes host arrays and
makes them durable. Its modules, in three layers, each importing only from those below it:

- what an output holds: ``_sink`` (the Zarr sink: the group, its arrays, the root metadata),
  ``_chunks`` (chunks encoded into reused buffers), ``_shards`` (a block's rows as one shard of
  small chunks: its geometry, its index, its checks), ``_compare`` (stored chunks compared with
  recomputed rows), ``_encoding`` (the data types stored, ``bfloat16`` among them), ``_codecs`` (the named
  codecs), ``_documents`` (the metadata documents as plain JSON, and an input array's
  fingerprint), ``_carries`` (the carries kept at block boundaries);
- where an output lives: ``_target`` (the base of an output location: a zarr store and what it
  lacks), ``_localtarget`` (a local folder, its keys read without Zarr) and ``_localstore`` (its
  durable, link-safe zarr store), ``_storetarget`` (any other zarr store, and an object store's
  fsspec clients), ``_icechunk`` (an Icechunk repository) and ``_sessionstore`` (its writer's
  session), ``_opentarget`` (the target of a path, URL or store object), ``_files`` (link-safe,
  fsynced file primitives), ``_folder`` (a local output's keys), ``_zarrapi`` (zarr's private names, each with
  its reason);
- the writer lease on object stores: ``_lease`` (take, renew, release, take over),
  ``_leaseobject`` (the lease object on each kind of store), ``_fence`` (every mutating request
  checked against the lease, and which exceptions mean a store failed).

A reader of a local output imports no Zarr until it reads data: the documents, the codecs, the
local target and the opener import it only where they use it.

These are the names the other wings use.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy_face

if TYPE_CHECKING:
    from ._carries import CarryArrays as CarryArrays, CarryDamaged as CarryDamaged, CarryLeaf as CarryLeaf
    from ._chunks import ChunkWriter as ChunkWriter, EncodeBuffers as EncodeBuffers
    from ._compare import compare_chunks as compare_chunks
    from ._documents import (
        PROGRESS_ATTRS as PROGRESS_ATTRS,
        ArraySpec as ArraySpec,
        array_document as array_document,
        decoding_attributes as decoding_attributes,
        fingerprint_of as fingerprint_of,
        is_virtual as is_virtual,
        netcdf_safe as netcdf_safe,
        plain_document as plain_document,
        progress_attrs as progress_attrs,
        stored_crc32c as stored_crc32c,
    )
    from ._encoding import register_data_types as register_data_types, storable as storable
    from ._fence import (
        FencedStore as FencedStore,
        describe_store_failure as describe_store_failure,
        is_store_failure as is_store_failure,
    )
    from ._files import (
        aligned_empty as aligned_empty,
        atomic_write as atomic_write,
        read_file as read_file,
        read_into as read_into,
        temp_file_of as temp_file_of,
    )
    from ._icechunk import IcechunkTarget as IcechunkTarget
    from ._lease import LEASE_ENV as LEASE_ENV, Lease as Lease, lease_seconds as lease_seconds
    from ._leaseobject import Holder as Holder, open_lease_object as open_lease_object
    from ._localstore import DurableLocalStore as DurableLocalStore
    from ._localtarget import LocalTarget as LocalTarget
    from ._opentarget import open_target as open_target
    from ._sessionstore import SessionStore as SessionStore
    from ._shards import (
        MISSING as MISSING,
        Sharding as Sharding,
        shard_problem as shard_problem,
        stored_checksums_of as stored_checksums_of,
    )
    from ._sink import ZarrSink as ZarrSink, resize_arrays as resize_arrays
    from ._storetarget import StoreTarget as StoreTarget, close_store_sessions as close_store_sessions
    from ._target import BOOKKEEPING as BOOKKEEPING, LEASE_KEY as LEASE_KEY, Target as Target, sync as sync
    from ._wrapper import StateSharingWrapper as StateSharingWrapper
    from ._zarrapi import (
        ArrayV3Metadata as ArrayV3Metadata,
        GroupMetadata as GroupMetadata,
        settle_at_exit as settle_at_exit,
        settle_event_loop as settle_event_loop,
    )
else:  # type checkers read the imports above, and would take any name for one __getattr__ gives
    __getattr__, __dir__, __all__ = lazy_face(__name__, __file__)
