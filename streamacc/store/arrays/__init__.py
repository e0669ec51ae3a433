"""What an output holds: its Zarr group and arrays, their chunks, metadata documents and carries.

``_zarr`` is the sink that creates the group and writes blocks, ``_documents`` the metadata
documents as plain JSON (no Zarr: readers check them first), ``_chunks`` the chunk encoder,
``_codecs`` the named compressors, ``_datatypes`` the data types stored (``bfloat16``
among them), ``_compare`` stored chunks against recomputed rows (for verify), ``_carries``
the carries kept at block boundaries and ``_fingerprint`` a stored input array's fingerprint.

These are the names the store uses; each is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...base import lazy_exports

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
        decoding_attributes as decoding_attributes,
        is_virtual as is_virtual,
        netcdf_safe as netcdf_safe,
        plain_document as plain_document,
        progress_attrs as progress_attrs,
        stored_crc32c as stored_crc32c,
    )
    from ._fingerprint import fingerprint_of as fingerprint_of
    from ._zarr import ZarrSink as ZarrSink, resize_arrays as resize_arrays

__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
