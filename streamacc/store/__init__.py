"""Where bytes live: output locations, locks and leases, chunk encoding, the Zarr sink, codecs.

Knows Zarr, fsspec and the operating system, and never JAX: it takes host arrays and
makes them durable. ``_target`` is the base of an output location (a zarr store and what
it lacks: the lock, durability, checkpoints, clearing, cleanup), ``_localtarget`` a local
folder, ``_storetarget`` any other zarr store, ``_opentarget`` the choice among them for a
path or URL, ``_probe`` the first question to an object store, ``_files`` the link-safe,
fsynced file primitives (``read_into``: a chunk file read into a caller's buffer), ``_zarr``
the sink that creates the group and writes blocks, ``_documents`` the metadata documents
as plain JSON (no Zarr: readers check them first), ``_chunks`` the chunk encoder,
``_compare`` stored chunks against recomputed rows (for verify), ``_carries`` the carries
kept at block boundaries, ``_codecs`` the named compressors, ``_icechunk`` an output in an
Icechunk repository (its commits the writer's durable points) and ``_sessionstore`` its
writer's zarr store, ``_storeerrors`` and ``_sessions`` the failures and clients of fsspec
backends, and the ``lease`` room the writer lease on object stores.

These are the names the other wings use; each is imported on first use, so that
``streamacc.store.CODECS`` costs no Zarr import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

if TYPE_CHECKING:
    from ._carries import (
        CARRIES as CARRIES,
        CarryDamaged as CarryDamaged,
        CarryLeaf as CarryLeaf,
        CarryStore as CarryStore,
    )
    from ._chunks import ChunkWriter as ChunkWriter, EncodeBuffers as EncodeBuffers
    from ._codecs import CODECS as CODECS, MAX_CHUNK_BYTES as MAX_CHUNK_BYTES, compressors_for as compressors_for
    from ._compare import compare_chunks as compare_chunks
    from ._datatypes import register_data_types as register_data_types, storable as storable
    from ._documents import (
        PROGRESS_ATTRS as PROGRESS_ATTRS,
        VIRTUAL as VIRTUAL,
        ArraySpec as ArraySpec,
        array_document as array_document,
        is_virtual as is_virtual,
        netcdf_safe as netcdf_safe,
        plain_document as plain_document,
        progress_attrs as progress_attrs,
        stored_crc32c as stored_crc32c,
    )
    from ._files import aligned_empty as aligned_empty, atomic_write as atomic_write, read_into as read_into
    from ._fingerprint import fingerprint_of as fingerprint_of
    from ._icechunk import IcechunkTarget as IcechunkTarget
    from ._localtarget import LocalTarget as LocalTarget
    from ._opentarget import open_target as open_target
    from ._seams import SEAMS as SEAMS
    from ._sessions import close_store_sessions as close_store_sessions
    from ._storeerrors import describe_store_failure as describe_store_failure, is_store_failure as is_store_failure
    from ._storetarget import StoreTarget as StoreTarget
    from ._target import BOOKKEEPING as BOOKKEEPING, LEASE_KEY as LEASE_KEY, Target as Target
    from ._zarr import ZarrSink as ZarrSink, resize_arrays as resize_arrays
    from ._zarrapi import (
        ArrayV3Metadata as ArrayV3Metadata,
        GroupMetadata as GroupMetadata,
        RegularChunkGrid as RegularChunkGrid,
        sync as sync,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
