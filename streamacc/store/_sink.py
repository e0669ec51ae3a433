"""The Zarr sink: one Zarr v3 group per run, one array per output leaf.

Arrays are chunked so that every block covers whole chunks (no read-modify-write, no
two writers on one chunk), filled with NaN where floating so that unwritten steps read
as missing, named by dimension for xarray, and carry their own metadata (units,
description). The root group's attributes tell every reader whether the output is
complete and how many steps are committed; its consolidated metadata lists the run's
arrays and the nodes of streamacc's bookkeeping it is given. The sink takes host arrays;
it knows nothing of JAX.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr
from zarr import AsyncArray
from zarr.abc.store import SuffixByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.codecs import Crc32cCodec
from zarr.storage import StorePath

from ..base import is_float
from ..errors import NoOutputError, arg, one_line
from ._chunks import ChunkWriter, EncodedChunk
from ._codecs import compressors_for
from ._documents import (
    PROGRESS_ATTRS,
    ArraySpec,
    as_recorded,
    document_bytes,
    is_virtual,
    netcdf_safe,
    plain_document,
    virtual_document,
)
from ._encoding import register_data_types
from ._shards import stored_checksums
from ._target import Target
from ._zarrapi import ArrayConfig, ArrayConfigParams, ArrayV3Metadata, sync

__all__ = ["ZarrSink", "resize_arrays"]

register_data_types()  # the sink creates and opens bfloat16 arrays


def _fill_value(dtype: np.dtype) -> object:
    if dtype.kind == "c" or is_float(dtype):
        return np.nan
    return False if dtype.kind == "b" else 0


# every committed chunk exists in the store, even one equal to the fill
_CONFIG: ArrayConfigParams = {"write_empty_chunks": True}


def resize_arrays(target: Target, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Give the arrays ``shapes`` (only ever longer: no chunk is deleted) and make their metadata durable.

    zarr writes the metadata, so that it is byte for byte what creating the array with that
    shape writes.
    """
    for name, shape in shapes.items():
        raw = target.read(f"{name}/zarr.json")
        if raw is not None and is_virtual(raw):  # zarr refuses the declaration: the shape alone changes
            target.write(f"{name}/zarr.json", document_bytes({**json.loads(raw), "shape": list(shape)}))
            continue
        zarr.open_array(target.store, path=name, mode="r+", zarr_format=3, config=_CONFIG).resize(shape)
    target.make_durable([f"{name}/zarr.json" for name in shapes])


def _array_at(target: Target, name: str, metadata: ArrayV3Metadata) -> zarr.Array[Any]:
    """The array ``name`` of ``target`` with ``metadata``, made without reading it (its documents may differ)."""
    config = ArrayConfig.from_dict(_CONFIG)
    return zarr.Array(AsyncArray(metadata, StorePath(target.store, name), config))


class ZarrSink:
    """Writes blocks of named host arrays into a Zarr group, durably."""

    def __init__(self, target: Target, arrays: dict[str, zarr.Array[Any]]) -> None:
        self.target = target
        self.arrays = arrays
        self.writers = {name: ChunkWriter(arr) for name, arr in arrays.items()}
        self._root: dict[str, Any] | None = None
        self._members: dict[str, dict[str, Any]] | None = None

    @classmethod
    def create(
        cls,
        target: Target,
        specs: Mapping[str, ArraySpec],
        *,
        chunks: Mapping[str, tuple[int, ...]],
        dims: Mapping[str, tuple[str, ...]],
        codec: str,
        attrs: dict[str, Any],
        array_attrs: Mapping[str, dict[str, Any]],
        virtual: bool = False,
        shards: Mapping[str, tuple[int, ...] | None] | None = None,
    ) -> ZarrSink:
        """Create the group and its arrays (the target must be empty apart from bookkeeping).

        ``chunks[name]`` is the chunk shape of array ``name`` (capped here at its shape,
        at least 1), ``dims[name]`` its dimension names, ``shards[name]`` (where given and
        not None) the shape of the shards its chunks are stored in. The arrays of a ``virtual``
        output declare :data:`VIRTUAL` until :meth:`publish_arrays`; chunks are written
        where a stored output's are.
        """
        compressors = compressors_for(codec)
        group = zarr.open_group(target.store, mode="a", attributes=netcdf_safe(attrs))
        documents: dict[str, Any] = {}
        made = zarr.open_group(zarr.storage.MemoryStore(documents), mode="a") if virtual else group
        arrays = {}
        for name, (shape, dtype) in specs.items():
            arrays[name] = made.create_array(
                name,
                shape=shape,
                chunks=tuple(max(1, min(c, n)) for c, n in zip(chunks[name], shape, strict=True)),
                shards=(shards or {}).get(name),  # index last, its own crc32c: zarr's default
                dtype=dtype,
                fill_value=_fill_value(np.dtype(dtype)),
                compressors=[*compressors, Crc32cCodec()],  # every reader checks each chunk it decodes
                dimension_names=list(dims[name]),
                attributes=netcdf_safe(array_attrs.get(name, {})),
                config=_CONFIG,
            )
        if virtual:
            for name in specs:
                doc = json.loads(documents[f"{name}/zarr.json"].to_bytes())
                target.write(f"{name}/zarr.json", document_bytes(virtual_document(doc)))
            made_arrays = arrays
            arrays = {}
            for name in specs:
                metadata = made_arrays[name].metadata
                assert isinstance(metadata, ArrayV3Metadata)  # created as Zarr v3 just above
                arrays[name] = _array_at(target, name, metadata)
        sink = cls(target, arrays)
        sink._root = json.loads(target.read("zarr.json") or b"{}")
        return sink

    @classmethod
    def open(cls, target: Target, names: list[str]) -> ZarrSink:
        """Open the run's arrays ``names`` of an existing output, for resuming or reading."""
        arrays = {}
        for name in names:
            try:
                raw = target.read(f"{name}/zarr.json")
                if raw is None:
                    raise FileNotFoundError(f"{name}/zarr.json is missing")
                doc = plain_document(json.loads(raw))[0]  # a virtual array's chunks are stored where any other's are
                arrays[name] = _array_at(target, name, ArrayV3Metadata.from_dict(doc))
            except (FileNotFoundError, ValueError, KeyError, TypeError) as exc:
                raise NoOutputError(
                    f"array {name!r} of {target.label} cannot be opened ({one_line(exc)}); "
                    f"rewrite the output with {arg('mode', 'overwrite')}"
                ) from None
        return cls(target, arrays)

    def declare_virtual(self) -> None:
        """Declare the arrays virtual again (a virtual output extended past its stored blocks), durably."""
        keys = []
        for name in self.arrays:
            raw = self.target.read(f"{name}/zarr.json")
            if raw is not None and not is_virtual(raw):
                self.target.write(f"{name}/zarr.json", document_bytes(virtual_document(json.loads(raw))))
                keys.append(f"{name}/zarr.json")
        self.target.make_durable(keys)
        self._members = None

    def publish_arrays(self) -> None:
        """Declare the arrays of a virtual output whose chunks are all stored now as plain arrays, durably.

        Their metadata becomes the bytes a stored output's has, and the root lists them so.
        """
        keys = []
        for name in self.arrays:
            raw = self.target.read(f"{name}/zarr.json")
            if raw is not None and is_virtual(raw):
                self.target.write(f"{name}/zarr.json", document_bytes(plain_document(json.loads(raw))[0]))
                keys.append(f"{name}/zarr.json")
        self.target.make_durable(keys)
        self._members = None  # the root lists them as they are now

    def _stored_metadata(self) -> dict[str, dict[str, Any]]:
        """Each array's stored ``zarr.json``, read once: it never changes during a run."""
        if self._members is None:
            self._members = {name: json.loads(self.target.read(f"{name}/zarr.json") or b"{}") for name in self.arrays}
        return self._members

    def documents(self) -> dict[str, dict[str, Any] | None]:
        """Each array's stored metadata as a run records it (see :func:`array_document`)."""
        return {name: as_recorded(doc) if doc else None for name, doc in self._stored_metadata().items()}

    def reset_root(self, attrs: Mapping[str, Any]) -> None:
        """Start the root metadata afresh from ``attrs`` (the run's), keeping only its users' other attributes.

        For a root that is missing, damaged or out of date; :meth:`publish` then writes it.
        """
        try:
            old = json.loads(self.target.read("zarr.json") or b"{}")
        except ValueError:
            old = {}
        stored = old.get("attributes") if isinstance(old, dict) else None
        ours = netcdf_safe(attrs)
        users = {k: v for k, v in stored.items() if not k.startswith("streamacc_")} if isinstance(stored, dict) else {}
        # the key order of a root zarr wrote, so that a repaired root is the bytes of one never damaged
        self._root = {"attributes": {**ours, **users, **ours}, "zarr_format": 3, "node_type": "group"}

    def retract_root(self) -> None:
        """Rewrite the root metadata so that it claims nothing the output's next steps could contradict, durably.

        Without its progress attributes and its consolidated metadata, plain readers read each
        array's own metadata: an extension writes it before it changes the arrays' shapes and
        the manifest, and :meth:`publish` writes the root afresh once they are done.
        """
        try:
            old = json.loads(self.target.read("zarr.json") or b"{}")
        except ValueError:
            old = {}
        stored = old.get("attributes") if isinstance(old, dict) else None
        attrs = {k: v for k, v in stored.items() if k not in PROGRESS_ATTRS} if isinstance(stored, dict) else {}
        self._root = {"attributes": attrs, "zarr_format": 3, "node_type": "group"}
        self.target.write("zarr.json", json.dumps(self._root, indent=1, allow_nan=False).encode())

    def publish(self, attrs: Mapping[str, Any], nodes: Mapping[str, dict[str, Any]]) -> None:
        """Rewrite the root group's metadata with ``attrs`` merged in, consolidating the run's arrays and ``nodes``.

        Consolidated metadata makes ``xr.open_zarr`` read one document; it lists the run's
        arrays and ``nodes``, the metadata of other nodes by path (streamacc's bookkeeping,
        listed so that a reader of the root finds it by name).
        """
        if self._root is None:
            raw = self.target.read("zarr.json")
            self._root = json.loads(raw) if raw else {}
        root = self._root
        root.update(zarr_format=3, node_type="group")
        root["attributes"] = {**root.get("attributes", {}), **netcdf_safe(attrs)}
        if "streamacc_virtual" not in attrs:  # every block's data are stored now
            root["attributes"].pop("streamacc_virtual", None)
        members = {**self._stored_metadata(), **nodes}
        root["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": members}
        self.target.write("zarr.json", json.dumps(root, indent=1, allow_nan=False).encode())

    def cut(self, rows: int) -> dict[str, dict[str, Any]]:
        """End every array at ``rows`` rows (a run that ended on its condition), durably; their metadata as a run
        records it.

        Only the shape in each ``zarr.json`` changes (as zarr writes it): the chunks past the
        end were never written, and the last one was padded with the fill value when it was
        (see :meth:`write`). An array already that short is left as it is.
        """
        keys = []
        for name in self.arrays:
            raw = self.target.read(f"{name}/zarr.json")
            doc = json.loads(raw) if raw is not None else None
            if isinstance(doc, dict) and isinstance(doc.get("shape"), list) and doc["shape"][:1] > [rows]:
                self.target.write(f"{name}/zarr.json", document_bytes({**doc, "shape": [rows, *doc["shape"][1:]]}))
                keys.append(f"{name}/zarr.json")
        self.target.make_durable(keys)
        self._members = None  # the root lists them as they are now
        return {name: doc for name, doc in self.documents().items() if doc is not None}

    def chunk_keys(self, name: str, start: int, stop: int) -> list[str]:
        """The keys of the chunks of array ``name`` holding rows ``[start, stop)``, in the order they are written."""
        return self.writers[name].keys(start, stop)

    def write(
        self, start: int, stop: int, ys: Mapping[str, np.ndarray], *, end: bool = False
    ) -> tuple[dict[str, list[int]], int]:
        """Write rows ``[start, stop)`` of every array and make them durable.

        With ``end``, the arrays are to end at ``stop`` (a run that ended on its condition:
        see :meth:`cut`), and their last chunk is padded with the fill value. Returns each
        array's CRC-32Cs as its block record keeps them (the value zarr's ``crc32c`` codec
        appends to each stored chunk; for a shard, each inner chunk's and its index's: see
        ``ChunkWriter.split_record``) and the bytes stored.
        """
        chunks = {name: self.writers[name].write(start, np.asarray(data), end=end) for name, data in ys.items()}
        self.target.make_durable([c.key for written in chunks.values() for c in written], drop_cache=True)
        crcs, stored = {}, 0
        for name, written in chunks.items():
            held = self.writers[name].held_rows(start, stop)
            crcs[name] = [crc for c, rows in zip(written, held, strict=True) for crc in self._checksums(name, c, rows)]
            stored += sum(c.nbytes if c.nbytes >= 0 else self.target.size(c.key) for c in written)
        return crcs, stored

    def _checksums(self, name: str, chunk: EncodedChunk, rows: int) -> list[int]:
        """The CRC-32Cs a record keeps of a chunk just written (whose first ``rows`` rows hold data): as encoded, or
        read back where zarr encoded it itself."""
        if chunk.checksums:
            return list(chunk.checksums)
        sharding = self.writers[name].sharding
        if sharding is None:
            return [chunk.crc32c if chunk.crc32c is not None else self._tail_crc(chunk.key)]
        found = stored_checksums(self.target, chunk.key, sharding, rows)
        if isinstance(found, str):  # the store accepted the shard but does not hold it as written: the store failing
            raise FileNotFoundError(f"shard {chunk.key} {found} right after it was written")
        return found

    def _tail_crc(self, key: str) -> int:
        """The CRC-32C zarr appended to a chunk it encoded itself (its last four bytes)."""
        buf = sync(self.target.store.get(key, default_buffer_prototype(), byte_range=SuffixByteRequest(4)))
        if buf is None:  # the store accepted the chunk but does not have it: the store failing
            raise FileNotFoundError(f"chunk {key} is not in the store right after it was written")
        return int.from_bytes(buf.to_bytes(), "little")

    def read(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Read back rows ``[start, stop)`` of every array."""
        return {name: np.asarray(arr[start:stop]) for name, arr in self.arrays.items()}

    def stored_bytes(self, span: tuple[int, int]) -> dict[str, int]:
        """Bytes stored in each array's chunks holding the rows ``span`` (committed chunks only).

        One listing per array: its cost follows the chunks stored, not the array's length.
        """
        totals = {}
        for name, writer in self.writers.items():
            first, end = span[0] // writer.chunk, -(-span[1] // writer.chunk)
            total = 0
            for key, nbytes in self.target.sizes(f"{name}/").items():
                index = writer.index(key)
                if index is not None and first <= index < end:
                    total += nbytes
            totals[name] = total
        return totals
