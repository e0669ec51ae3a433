"""Where bytes live: output locations, locks and leases, chunk encoding, the Zarr sink, codecs.

Knows Zarr, fsspec and the operating system, and never JAX: it takes host arrays and
makes them durable. Its modules, in three layers, each importing only from those below it:

- what an output holds: ``_sink`` (the Zarr sink: the group, its arrays, the root metadata),
  ``_chunks`` (chunks encoded into reused buffers), ``_shards`` (a block's rows as one shard of
  small chunks: its geometry, its index, its checks), ``_compare`` (stored chunks compared with
  recomputed rows), ``_encoding`` (the data types stored, ``bfloat16`` among them, and the named codecs),
  ``_documents`` (the metadata documents as plain JSON), ``_carries`` (the carries kept at
  block boundaries), ``_fingerprint`` (an input array's contents, cheaply);
- where an output lives: ``_target`` (the base of an output location: a zarr store and what it
  lacks), ``_localtarget`` (a local folder), ``_storetarget`` (any other zarr store, and an
  object store's fsspec clients), ``_icechunk`` (an Icechunk repository) and ``_sessionstore``
  (its writer's session), ``_opentarget`` (the target of a path, URL or store object), ``_files``
  (link-safe, fsynced file primitives), ``_zarrapi`` (zarr's private names, each with its reason);
- the writer lease on object stores: ``_lease`` (take, renew, release, take over),
  ``_leaseobject`` (the lease object on each kind of store), ``_fence`` (every mutating request
  checked against the lease, and which exceptions mean a store failed).

These are the names the other wings use.
"""

from ._carries import CarryArrays, CarryDamaged, CarryLeaf
from ._chunks import ChunkWriter, EncodeBuffers
from ._compare import compare_chunks
from ._documents import (
    PROGRESS_ATTRS,
    ArraySpec,
    array_document,
    decoding_attributes,
    fingerprint_of,
    is_virtual,
    netcdf_safe,
    plain_document,
    progress_attrs,
    stored_crc32c,
)
from ._encoding import register_data_types, storable
from ._fence import FencedStore, describe_store_failure, is_store_failure
from ._files import aligned_empty, atomic_write, read_into, temp_file_of
from ._icechunk import IcechunkTarget
from ._lease import LEASE_ENV, LEASE_KEY, Lease, lease_seconds
from ._leaseobject import Holder, open_lease_object
from ._localtarget import DurableLocalStore, LocalTarget
from ._opentarget import open_target
from ._sessionstore import SessionStore
from ._shards import MISSING, Sharding, shard_problem, stored_checksums_of
from ._sink import ZarrSink, resize_arrays
from ._storetarget import StoreTarget, close_store_sessions
from ._target import BOOKKEEPING, Target, sync
from ._zarrapi import ArrayV3Metadata, GroupMetadata, settle_event_loop

__all__ = [
    "BOOKKEEPING",
    "LEASE_ENV",
    "LEASE_KEY",
    "MISSING",
    "PROGRESS_ATTRS",
    "ArraySpec",
    "ArrayV3Metadata",
    "CarryArrays",
    "CarryDamaged",
    "CarryLeaf",
    "ChunkWriter",
    "DurableLocalStore",
    "EncodeBuffers",
    "FencedStore",
    "GroupMetadata",
    "Holder",
    "IcechunkTarget",
    "Lease",
    "LocalTarget",
    "SessionStore",
    "Sharding",
    "StoreTarget",
    "Target",
    "ZarrSink",
    "aligned_empty",
    "array_document",
    "atomic_write",
    "close_store_sessions",
    "compare_chunks",
    "decoding_attributes",
    "describe_store_failure",
    "fingerprint_of",
    "is_store_failure",
    "is_virtual",
    "lease_seconds",
    "netcdf_safe",
    "open_lease_object",
    "open_target",
    "plain_document",
    "progress_attrs",
    "read_into",
    "register_data_types",
    "resize_arrays",
    "settle_event_loop",
    "shard_problem",
    "storable",
    "stored_checksums_of",
    "stored_crc32c",
    "sync",
    "temp_file_of",
]
