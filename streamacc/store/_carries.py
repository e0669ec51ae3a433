"""The carries kept at block boundaries: one Zarr v3 array per carry leaf, one chunk per kept boundary.

A run keeps the carry entering some of its blocks (every block's for a narrow carry, every
few blocks' for a wide one: the run's bookkeeping decides) so that any block can be
recomputed from the nearest carry before it. Each leaf is an array
``_streamacc/carries/leaf_{i}`` of shape ``[boundaries, *leaf shape]`` whose chunk ``b``
holds the carry after ``b`` blocks (in scan order), written once, compressed with the data's
codec and ending with its CRC-32C trailer (zarr's ``crc32c`` codec), so that a checker reads
four bytes to compare a carry with its record and any Zarr reader reads the carries as a
checkpoint series (boundaries not kept read as the fill value). Outputs written before the
carries were compressed (their manifest names no codec) keep them uncompressed. A dtype Zarr
cannot store (bfloat16 and the other ml_dtypes types) is stored as the unsigned integers of
its bits, with its name in the array's ``streamacc_dtype`` attribute; a PRNG key leaf is
stored as its key data, with its implementation in ``streamacc_key``.

Every leaf's metadata follows from the leaves, the codec and the number of boundaries
(:meth:`CarryArrays.documents`): it is written from there, chunks are encoded from there,
and the stored metadata is checked against it before a carry is read or written
(:meth:`CarryArrays.metadata_problem`). Host arrays in, host arrays out: no JAX.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..base import counted, dtype_from_name, dtype_name
from ._codecs import compressors_for, decompress
from ._documents import stored_crc32c
from ._target import BOOKKEEPING, Target

__all__ = ["CARRIES", "CarryArrays", "CarryDamaged", "CarryLeaf"]

CARRIES = f"{BOOKKEEPING}/carries"
"""The group of the kept carries."""

_NATIVE_KINDS = "biufc"  # what Zarr v3 stores under the dtype's own name
_DESCRIPTION = "the carry entering a block, kept at every few block boundaries (see the manifest)"


@dataclasses.dataclass(frozen=True)
class CarryLeaf:
    """One leaf of a run's carry as it is stored: its dtype, its shape, its PRNG key implementation (or None)."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]
    key: str | None = None

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def chunk_nbytes(self) -> int:
        """The bytes of its chunk before compression: an axis of length 0 is stored as one fill value."""
        return int(np.prod([max(1, n) for n in self.shape], dtype=np.int64)) * self.stored_dtype.itemsize

    @property
    def stored_dtype(self) -> np.dtype[Any]:
        """The dtype of its Zarr array: its own, or unsigned integers of its width for a dtype Zarr lacks."""
        return self.dtype if self.dtype.kind in _NATIVE_KINDS else np.dtype(f"u{self.dtype.itemsize}")

    def to_json(self) -> dict[str, Any]:
        return {"dtype": dtype_name(self.dtype), "shape": list(self.shape), "key": self.key}

    @classmethod
    def from_json(cls, doc: Any) -> CarryLeaf:
        """The leaf a manifest describes; ValueError, KeyError or TypeError when it describes none."""
        shape = doc["shape"]
        if not isinstance(shape, list) or not all(isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError(f"bad shape {shape!r}")
        key = doc.get("key")
        if key is not None and not isinstance(key, str):
            raise ValueError(f"bad key {key!r}")
        return cls(dtype_from_name(doc["dtype"]), tuple(shape), key)

    @classmethod
    def of(cls, array: np.ndarray, key: str | None) -> CarryLeaf:
        return cls(array.dtype, tuple(array.shape), key)


class CarryDamaged(ValueError):
    """A kept carry that is missing, or not the one its record names."""


def _fill(dtype: np.dtype[Any]) -> Any:
    return np.nan if dtype.kind in "fc" else (False if dtype.kind == "b" else 0)


@functools.lru_cache(maxsize=16)
def _documents(leaves: tuple[CarryLeaf, ...], codec: str | None, boundaries: int) -> tuple[bytes, ...]:
    """The group's ``zarr.json`` and each leaf's, as zarr writes them for these leaves, codec and boundaries (made
    in memory)."""
    import zarr
    from zarr.buffer import default_buffer_prototype
    from zarr.codecs import BytesCodec, Crc32cCodec
    from zarr.storage import MemoryStore

    from ._zarrapi import sync

    store = MemoryStore()
    group = zarr.open_group(store, path=CARRIES, mode="w", attributes={"description": _DESCRIPTION})
    for i, leaf in enumerate(leaves):
        attributes: dict[str, Any] = {}
        if leaf.stored_dtype != leaf.dtype:
            attributes["streamacc_dtype"] = dtype_name(leaf.dtype)
        if leaf.key is not None:
            attributes["streamacc_key"] = leaf.key
        group.create_array(
            f"leaf_{i}",
            shape=(boundaries, *leaf.shape),
            chunks=(1, *(max(1, n) for n in leaf.shape)),
            dtype=leaf.stored_dtype,
            fill_value=_fill(leaf.stored_dtype),
            serializer=BytesCodec(),
            compressors=[*(compressors_for(codec) if codec is not None else []), Crc32cCodec()],
            dimension_names=["boundary", *(f"leaf_{i}_dim_{d + 1}" for d in range(len(leaf.shape)))],
            attributes=attributes,
        )
    prototype = default_buffer_prototype()
    keys = [f"{CARRIES}/zarr.json", *(f"{CARRIES}/leaf_{i}/zarr.json" for i in range(len(leaves)))]
    found = [sync(store.get(key, prototype)) for key in keys]
    return tuple(buf.to_bytes() for buf in found if buf is not None)


def _normalized(doc: Any) -> dict[str, Any]:
    """An array's metadata document as zarr writes it back once read: what it means, not how it was spelt.

    Raises (ValueError, TypeError, KeyError, ...) where it is no Zarr v3 array's metadata.
    """
    from zarr.buffer import default_buffer_prototype

    from ._encoding import register_data_types
    from ._zarrapi import ArrayV3Metadata

    register_data_types()
    if not isinstance(doc, dict):
        raise TypeError("not a JSON object")
    buffers = ArrayV3Metadata.from_dict(dict(doc)).to_buffer_dict(default_buffer_prototype())
    out: dict[str, Any] = json.loads(buffers["zarr.json"].to_bytes())
    return out


class CarryArrays:
    """The kept carries of one output: written chunk by chunk as blocks commit, read back checked.

    ``codec`` is the name of the data's codec their chunks are compressed with (None: not
    compressed, as outputs written before carries were), and ``boundaries`` the run's blocks
    plus one.
    """

    def __init__(
        self, target: Target, leaves: Sequence[CarryLeaf], *, codec: str | None = None, boundaries: int = 1
    ) -> None:
        self.target = target
        self.leaves = list(leaves)
        self.codec = codec
        self.boundaries_of_run = boundaries
        self._writers: list[Any] | None = None

    @staticmethod
    def path(i: int) -> str:
        return f"{CARRIES}/leaf_{i}"

    def key(self, i: int, boundary: int) -> str:
        """The key of leaf ``i``'s chunk at ``boundary``."""
        leaf = self.leaves[i]
        return f"{self.path(i)}/c/{boundary}" + "/0" * len(leaf.shape)

    def keys(self, boundary: int) -> list[str]:
        return [self.key(i, boundary) for i in range(len(self.leaves))]

    def documents(self, boundaries: int | None = None) -> tuple[bytes, ...]:
        """Each leaf's ``zarr.json`` as it must be stored, for ``boundaries`` (default: the run's)."""
        count = self.boundaries_of_run if boundaries is None else boundaries
        return _documents(tuple(self.leaves), self.codec, count)[1:]

    def create(self) -> None:
        """Write the group and its arrays' metadata for the run's boundaries, durably (no chunk is kept yet)."""
        group = _documents(tuple(self.leaves), self.codec, self.boundaries_of_run)[0]
        self.target.write(f"{CARRIES}/zarr.json", group)
        self._write_documents(self.boundaries_of_run)

    def resize(self, boundaries: int) -> None:
        """Give every leaf's array ``boundaries`` boundaries (an extended run), durably."""
        self.boundaries_of_run = boundaries
        self._write_documents(boundaries)

    def _write_documents(self, boundaries: int) -> None:
        for i, document in enumerate(self.documents(boundaries)):
            self.target.write(f"{self.path(i)}/zarr.json", document)
        self.target.make_durable([f"{self.path(i)}/zarr.json" for i in range(len(self.leaves))])
        self._writers = None

    def boundaries(self) -> int:
        """How many boundaries each leaf's array has (its first axis), as stored; 0 when it is missing."""
        try:
            raw = self.target.read(f"{self.path(0)}/zarr.json") if self.leaves else None
            return int(json.loads(raw)["shape"][0]) if raw is not None else 0
        except (ValueError, KeyError, TypeError, IndexError, OSError):
            return 0

    def metadata_problem(self, committed: int) -> str | None:
        """What is wrong with the stored metadata of the carries' group and arrays, in words, or None.

        The group's must be a Zarr group's; each leaf's must mean what :meth:`documents` says,
        its boundaries at least the ``committed`` blocks' plus one: as many as the run's, or,
        until an extension has given them its run's (its manifest saved first), fewer (a
        longer run), or more (a run that ended on its condition before its length, extended to
        a shorter one).
        """
        problems = self._problems(committed)
        return next(iter(problems.values()), None)

    def _problems(self, committed: int) -> dict[str, str]:
        """Each metadata document of the carries that is wrong, by key, and what is wrong with it."""
        found: dict[str, str] = {}
        group, doc = f"{CARRIES}/zarr.json", None
        try:
            doc = json.loads(self.target.read(group) or b"null")
        except OSError as exc:
            found[group] = f"the metadata of the kept carries' group ({group}) cannot be read ({exc.strerror or exc})"
        except ValueError:
            pass
        if group not in found and not (isinstance(doc, dict) and doc.get("zarr_format") == 3
                                       and doc.get("node_type") == "group"):  # fmt: skip
            found[group] = f"the metadata of the kept carries' group ({group}) is missing or not a Zarr group's"
        for i, expected in enumerate(self.documents()):
            where = f"{self.path(i)}/zarr.json"
            problem = self._leaf_problem(where, expected, committed)
            if problem is not None:
                found[where] = problem
        return found

    def _leaf_problem(self, where: str, expected: bytes, committed: int) -> str | None:
        try:
            raw = self.target.read(where)
        except OSError as exc:
            return f"the metadata of the kept carries ({where}) cannot be read ({exc.strerror or exc})"
        if raw is None:
            return f"the metadata of the kept carries ({where}) is missing"
        try:
            stored = _normalized(json.loads(raw))
        except Exception:  # not JSON, or no array zarr reads
            return f"the metadata of the kept carries ({where}) is not the Zarr array metadata streamacc wrote"
        want = _normalized(json.loads(expected))
        shape, runs = stored.get("shape"), want["shape"]
        first = shape[0] if isinstance(shape, list) and shape and shape[1:] == runs[1:] else None
        if isinstance(first, int) and committed + 1 <= first:
            stored["shape"] = runs
        changed = sorted(k for k in stored.keys() | want.keys() if stored.get(k) != want.get(k))
        if changed:
            return (
                f"the metadata of the kept carries ({where}) is not what the manifest says it must be "
                f"({', '.join(changed)} changed)"
            )
        return None

    def mend_metadata(self, committed: int) -> list[str]:
        """Write again, durably, each metadata document of the carries that :meth:`metadata_problem` finds wrong, as
        the run's carries must have it; the keys written."""
        documents = _documents(tuple(self.leaves), self.codec, self.boundaries_of_run)
        keys = [f"{CARRIES}/zarr.json", *(f"{self.path(i)}/zarr.json" for i in range(len(self.leaves)))]
        wrong = self._problems(committed)
        written = [key for key in keys if key in wrong]
        for key, document in zip(keys, documents, strict=True):
            if key in wrong:
                self.target.write(key, document)
        self.target.make_durable(written)
        self._writers = None
        return written

    def described(self, boundary: int, crcs: Sequence[int]) -> bool | None:
        """Whether the carry kept at ``boundary`` (its chunks' CRC-32Cs ``crcs``, recorded) is one these leaves and
        this codec describe: its chunks, intact, decode to leaves of these shapes and dtypes and encode back to
        the same bytes. None where they cannot tell (a chunk missing or damaged).

        A run's carries are written as its manifest describes them, so an intact chunk that
        this description does not give back says the description is not the one that wrote it.
        """
        if len(crcs) != len(self.leaves):
            return None
        values = []
        for i, (leaf, crc) in enumerate(zip(self.leaves, crcs, strict=True)):
            try:
                raw = self.target.read(self.key(i, boundary))
            except Exception:  # unreadable: not for this question
                return None
            if raw is None or len(raw) < 4 or int.from_bytes(raw[-4:], "little") != crc or stored_crc32c(raw) is None:
                return None
            try:
                body = decompress(self.codec, raw[:-4])
            except Exception:  # the bytes it wrote, which this codec does not read
                return False
            if len(body) != leaf.chunk_nbytes:
                return False
            count = int(np.prod(leaf.shape, dtype=np.int64))
            value = np.frombuffer(body, dtype=leaf.stored_dtype, count=count)
            values.append(value.view(leaf.dtype).reshape(leaf.shape))
        return self.checksums(values) == list(crcs)

    def remove_past(self, boundary: int) -> list[str]:
        """Remove every stored carry chunk after ``boundary`` (a killed writer's, or an extended run's last, which
        the longer run recomputes); the keys removed."""
        removed = []
        for i in range(len(self.leaves)):
            prefix = f"{self.path(i)}/c/"
            for key in self.target.list_keys(f"{self.path(i)}/"):  # an array's prefix: Icechunk lists no other
                head = key[len(prefix) :].partition("/")[0] if key.startswith(prefix) else ""
                if head.isdigit() and head.isascii() and int(head) > boundary:
                    self.target.delete(key)
                    removed.append(key)
        return removed

    def _chunk_writers(self, store: Any) -> list[Any]:
        from ._chunks import ChunkWriter

        return [
            ChunkWriter.of_document(store, self.path(i), json.loads(document))
            for i, document in enumerate(self.documents())
        ]

    def write(self, boundary: int, values: Sequence[np.ndarray]) -> tuple[list[str], list[int]]:
        """Write the carry at ``boundary`` (one host array per leaf, not yet durable); its keys and CRC-32Cs.

        Encoded as the metadata the run's carries must have says (never as a stored document
        says, which may have been changed).
        """
        if self._writers is None:
            self._writers = self._chunk_writers(self.target.store)
        keys, crcs = [], []
        for writer, leaf, value in zip(self._writers, self.leaves, values, strict=True):
            (chunk,) = writer.write(boundary, self._chunk(leaf, value))
            crc = chunk.crc32c
            if crc is None:  # zarr encoded it itself
                raw = self.target.read(chunk.key)
                crc = None if raw is None else stored_crc32c(raw)
                if crc is None:
                    raise FileNotFoundError(f"carry chunk {chunk.key} is not in the store right after it was written")
            keys.append(chunk.key)
            crcs.append(int(crc))
        return keys, crcs

    @staticmethod
    def _chunk(leaf: CarryLeaf, value: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(value).reshape(leaf.shape).view(leaf.stored_dtype)[None]

    def encoded(self, values: Sequence[np.ndarray]) -> list[bytes]:
        """Each leaf's chunk of the carry ``values`` as :meth:`write` stores it, encoded in memory."""
        from zarr.buffer import default_buffer_prototype
        from zarr.storage import MemoryStore

        from ._zarrapi import sync

        store = MemoryStore()
        prototype = default_buffer_prototype()
        out = []
        for writer, leaf, value in zip(self._chunk_writers(store), self.leaves, values, strict=True):
            (chunk,) = writer.write(0, self._chunk(leaf, value))
            buf = sync(store.get(chunk.key, prototype))
            assert buf is not None
            out.append(buf.to_bytes())
        return out

    def checksums(self, values: Sequence[np.ndarray]) -> list[int]:
        """The CRC-32C each leaf's chunk of the carry ``values`` gets when written, computed without writing it."""
        return [int.from_bytes(raw[-4:], "little") for raw in self.encoded(values)]

    def read(self, boundary: int, crcs: Sequence[int]) -> list[np.ndarray]:
        """The carry at ``boundary``, each leaf's chunk checked against its recorded CRC-32C.

        Raises :class:`CarryDamaged` naming the chunk and what is wrong with it when one is
        missing, unreadable, or not the one recorded.
        """
        if len(crcs) != len(self.leaves):
            leaves = counted(len(self.leaves), "leaf", "leaves")
            raise CarryDamaged(f"{counted(len(crcs), 'checksum')} recorded for the carry's {leaves}")
        out = []
        for i, (leaf, crc) in enumerate(zip(self.leaves, crcs, strict=True)):
            key = self.key(i, boundary)
            body = self._body(key, crc)
            if len(body) != leaf.chunk_nbytes:
                raise CarryDamaged(f"chunk {key} holds {len(body)} bytes where its leaf has {leaf.chunk_nbytes}")
            data = np.frombuffer(body, dtype=leaf.stored_dtype, count=int(np.prod(leaf.shape, dtype=np.int64)))
            out.append(data.view(leaf.dtype).reshape(leaf.shape).copy())
        return out

    def _body(self, key: str, crc: int) -> bytes:
        """Chunk ``key``'s bytes before compression, once its stored bytes are the ones recorded (CRC-32C ``crc``)."""
        try:
            raw = self.target.read(key)
        except OSError as exc:
            raise CarryDamaged(f"chunk {key} cannot be read ({exc.strerror or exc})") from None
        if raw is None:
            raise CarryDamaged(f"chunk {key} {self.target.missing(key)}")
        trailer = int.from_bytes(raw[-4:], "little") if len(raw) >= 4 else None
        if trailer != crc:
            what = "is too short to be a chunk" if trailer is None else f"ends with the CRC-32C {trailer:08x}"
            raise CarryDamaged(f"chunk {key} {what}, where its record says {crc:08x}: it is not the chunk written")
        if stored_crc32c(raw) is None:
            raise CarryDamaged(f"the stored bytes of chunk {key} do not match their checksum (damaged in place)")
        try:
            return decompress(self.codec, raw[:-4])
        except Exception:  # what its codec says of bytes it did not write
            raise CarryDamaged(f"the stored bytes of chunk {key} cannot be decoded") from None
