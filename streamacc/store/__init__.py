"""Where bytes live: output locations, locks and leases, chunk encoding, the Zarr sink, codecs.

Knows Zarr, fsspec and the operating system, and never JAX: it takes host arrays and
makes them durable. Its rooms: ``targets`` where an output lives (the target base, a local
folder, any other zarr store, an Icechunk repository, the choice among them, fsspec's
clients, the link-safe, fsynced file primitives), ``arrays`` what an output holds (the
Zarr sink, the chunk encoder, codecs, data types, metadata documents, the comparison of
stored chunks for verify, the carries kept at block boundaries, an input array's
fingerprint), and ``lease`` the writer lease on object stores and which exceptions mean a
store failed. They are in layers, each importing only from those below it: ``arrays``,
``targets``, ``lease``.

These are the names the other wings use; each is imported on first use, so that
``streamacc.store.CODECS`` costs no Zarr import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base import lazy_exports

if TYPE_CHECKING:
    from .arrays import (
        CARRIES as CARRIES,
        CODECS as CODECS,
        MAX_CHUNK_BYTES as MAX_CHUNK_BYTES,
        PROGRESS_ATTRS as PROGRESS_ATTRS,
        VIRTUAL as VIRTUAL,
        ArraySpec as ArraySpec,
        CarryDamaged as CarryDamaged,
        CarryLeaf as CarryLeaf,
        CarryStore as CarryStore,
        ChunkWriter as ChunkWriter,
        EncodeBuffers as EncodeBuffers,
        ZarrSink as ZarrSink,
        array_document as array_document,
        compare_chunks as compare_chunks,
        compressors_for as compressors_for,
        decoding_attributes as decoding_attributes,
        fingerprint_of as fingerprint_of,
        is_virtual as is_virtual,
        netcdf_safe as netcdf_safe,
        plain_document as plain_document,
        progress_attrs as progress_attrs,
        register_data_types as register_data_types,
        resize_arrays as resize_arrays,
        storable as storable,
        stored_crc32c as stored_crc32c,
    )
    from .lease import (
        FencedStore as FencedStore,
        describe_store_failure as describe_store_failure,
        is_store_failure as is_store_failure,
    )
    from .targets import (
        BOOKKEEPING as BOOKKEEPING,
        LEASE_KEY as LEASE_KEY,
        ArrayV3Metadata as ArrayV3Metadata,
        GroupMetadata as GroupMetadata,
        IcechunkTarget as IcechunkTarget,
        LocalTarget as LocalTarget,
        RegularChunkGrid as RegularChunkGrid,
        SessionStore as SessionStore,
        StoreTarget as StoreTarget,
        Target as Target,
        aligned_empty as aligned_empty,
        atomic_write as atomic_write,
        close_store_sessions as close_store_sessions,
        open_target as open_target,
        read_into as read_into,
        settle_event_loop as settle_event_loop,
        sync as sync,
    )

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
