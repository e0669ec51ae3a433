"""Where an output's window summaries live: Zarr arrays under ``_streamacc/summaries/``.

One group per level, ``_streamacc/summaries/w<window>``, holding for each summarised
output ``x`` the arrays ``x_min``, ``x_max``, ``x_mean`` and ``x_count`` on dimension
``window`` (then the output's trailing dimensions). Window ``i`` covers steps
``[i * window, (i + 1) * window)``. Every level group carries consolidated metadata, so
``xr.open_zarr(f"{out}/_streamacc/summaries/w1048576")`` reads it with one request; the
root's consolidated metadata lists them too (see :func:`listing`), so that
``xr.open_zarr(out, group="_streamacc/summaries/w1048576")`` finds them, while
``xr.open_zarr(out)`` shows the data arrays only.

Chunks are written once, whole (the last one of a level at the end of the array), by the
same chunk writer as the data, so they are durable the same way. What is not yet in a
durable chunk travels in the commit's *tail*, in the manifest (see :func:`encode_tail`).
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..base import numpy_float
from ..errors import one_line
from ..store import BOOKKEEPING, ArraySpec, Target
from ._plain import PlainArray, plain_array, plain_group
from ._pyramid import Piece
from ._reduce import Acc, Rows

if TYPE_CHECKING:
    import zarr

    from ..store import ChunkWriter

__all__ = [
    "LISTED_GROUP", "STATS", "SUMMARIES", "SummaryArrays", "TailText", "decode_tail", "encode_tail", "level_path",
    "listing",
]

SUMMARIES = f"{BOOKKEEPING}/summaries"
STATS = ("min", "max", "mean", "count")


def level_path(window: int) -> str:
    """The group of the level whose windows hold ``window`` steps."""
    return f"{SUMMARIES}/w{window}"


LISTED_GROUP = {"kind": "inline", "must_understand": False, "metadata": {}}
"""The consolidated metadata of a group that a parent group's consolidated metadata lists (as zarr writes it:
the group's members are listed by their own paths in the parent's)."""


def listing(target: Target, windows: Sequence[int]) -> dict[str, dict[str, Any]]:
    """The summaries' groups and arrays as the root's consolidated metadata lists them, by path from the root.

    As zarr's ``consolidate_metadata`` lists them: each group with :data:`LISTED_GROUP`, each array as
    its level's consolidated metadata describes it. One read per level; a group whose metadata is
    missing or unreadable is left out, with its arrays.
    """
    nodes: dict[str, dict[str, Any]] = {}
    for path in [SUMMARIES, *(level_path(w) for w in windows)]:
        if path != SUMMARIES and not nodes:
            break
        try:  # what zarr cannot read would make the whole root unreadable
            doc = json.loads(target.read(f"{path}/zarr.json") or b"null")
            if not isinstance(doc, dict) or doc.get("zarr_format") != 3 or doc.get("node_type") != "group":
                continue
            if not plain_group(doc):  # what streamacc writes zarr reads; anything else zarr is asked about
                from ..store import GroupMetadata

                GroupMetadata.from_dict(doc)
        except (ValueError, TypeError, KeyError):
            continue
        members = (doc.get("consolidated_metadata") or {}).get("metadata") or {}
        nodes[path] = {**doc, "consolidated_metadata": LISTED_GROUP}
        if path != SUMMARIES:
            nodes.update((f"{path}/{name}", member) for name, member in members.items())
    return nodes


def _stat_dtype(stat: str, dtype: np.dtype) -> np.dtype:
    """A statistic's dtype: float64 means, int64 counts, and the min and max in the output's dtype (float32 for
    bfloat16, whose values it holds exactly: see ``_reduce``)."""
    return {"mean": np.dtype(np.float64), "count": np.dtype(np.int64)}.get(stat, numpy_float(dtype))


def _fill(dtype: np.dtype) -> object:
    return np.nan if dtype.kind == "f" else False if dtype.kind == "b" else 0


def _consolidate(window: int, documents: dict[str, Any], members: list[tuple[str, int, str]]) -> None:
    """List the level's arrays in its group's metadata (in ``documents``, zarr's buffers by key), as zarr's
    consolidated metadata does (without its warning), so that xarray opens the level with one read."""
    path = level_path(window)
    group = json.loads(documents[f"{path}/zarr.json"].to_bytes())
    listed = {
        f"{name}_{stat}": json.loads(documents[f"{path}/{name}_{stat}/zarr.json"].to_bytes())
        for (name, _, stat) in members
    }
    group["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": listed}
    encoded = json.dumps(group, indent=1).encode()
    from zarr.buffer import default_buffer_prototype

    documents[f"{path}/zarr.json"] = default_buffer_prototype().buffer.from_bytes(encoded)


def _metadata_keys(windows: list[int], arrays: Mapping[tuple[str, int, str], Any]) -> list[str]:
    """The metadata documents of the summaries of ``windows`` holding ``arrays`` (by output, window, statistic)."""
    keys = [f"{SUMMARIES}/zarr.json"]
    for window in windows:
        keys.append(f"{level_path(window)}/zarr.json")
        keys += [f"{level_path(w)}/{name}_{stat}/zarr.json" for (name, w, stat) in arrays if w == window]
    return keys


class SummaryArrays:
    """The summary arrays of one output: create them, write whole chunks, read rows back."""

    def __init__(self, target: Target, windows: list[int]) -> None:
        self.target = target
        self.windows = list(windows)
        self._arrays: dict[tuple[str, int, str], zarr.Array[Any]] = {}
        self._writers: dict[tuple[str, int, str], ChunkWriter] = {}
        self._listed: dict[str, set[str]] = {}
        self._plain: dict[tuple[str, int, str], PlainArray | None] = {}

    @staticmethod
    def _build(
        specs: Mapping[str, ArraySpec],
        windows: list[int],
        chunks: Mapping[str, Sequence[int]],
        dims: Mapping[str, Sequence[str | None]],
        over: Mapping[str, Sequence[str]],
    ) -> tuple[dict[str, Any], dict[tuple[str, int, str], zarr.Array[Any]]]:
        """Every level's group and arrays made in memory: their documents by key (zarr's buffers), and the arrays.

        The hierarchy is made in memory and its documents stored in one write each: zarr's create_array
        looks up every parent of every array first, some 15 requests per array on object storage.
        Their chunks are not compressed, only checksummed (CRC-32C), since 1.1 (older outputs keep the data's
        codec): a picture reads a few chunks of a few KiB, and reading compressed ones imported numcodecs, a tenth
        of ``overview``'s first call, to save a fraction of a percent of an output's bytes.
        """
        import zarr
        from zarr.codecs import Crc32cCodec

        compressors = [Crc32cCodec()]
        documents: dict[str, Any] = {}
        memory = zarr.storage.MemoryStore(documents)
        zarr.open_group(
            memory,
            path=SUMMARIES,
            mode="w",
            attributes={"description": "window summaries of the output's arrays (min, max, mean, count); "
                        "read them with streamacc.overview(path)"},
        )  # fmt: skip
        made: dict[tuple[str, int, str], zarr.Array[Any]] = {}
        for window in windows:
            group = zarr.open_group(memory, path=level_path(window), mode="w", attributes={"window": window})
            for name, (shape, dtype) in specs.items():
                n = -(-shape[0] // window)
                for stat in STATS:
                    dt = _stat_dtype(stat, dtype)
                    made[name, window, stat] = group.create_array(
                        f"{name}_{stat}",
                        shape=(n, *shape[1:]),
                        chunks=(max(1, min(chunks[name][windows.index(window)], n)), *shape[1:]),
                        dtype=dt,
                        fill_value=_fill(dt),
                        compressors=compressors,
                        dimension_names=["window", *dims[name][1:]],
                        attributes={
                            "window": window,
                            "statistic": stat,
                            "of": name,
                            **({"over": list(over[name])} if name in over else {}),
                        },
                        config={"write_empty_chunks": True},
                    )
        for window in windows:
            _consolidate(window, documents, [key for key in made if key[1] == window])
        return documents, made

    @classmethod
    def expected(
        cls,
        specs: Mapping[str, ArraySpec],
        *,
        windows: list[int],
        chunks: Mapping[str, Sequence[int]],
        dims: Mapping[str, Sequence[str | None]],
        over: Mapping[str, Sequence[str]] | None = None,
    ) -> dict[str, bytes]:
        """The metadata documents :meth:`create` stores, by key, made without storing anything."""
        documents, made = cls._build(specs, windows, chunks, dims, over or {})
        return {key: documents[key].to_bytes() for key in _metadata_keys(windows, made)}

    @classmethod
    def create(
        cls,
        target: Target,
        specs: Mapping[str, ArraySpec],
        *,
        windows: list[int],
        chunks: Mapping[str, Sequence[int]],
        dims: Mapping[str, Sequence[str | None]],
        over: Mapping[str, Sequence[str]] | None = None,
    ) -> SummaryArrays:
        """Create every level's group and arrays (for the outputs in ``specs``); returns the keys to make durable.

        ``over`` names the outputs summarised over their whole state, with the dimensions summarised over
        (their arrays' attribute ``over``); their ``specs`` and ``dims`` are those of their rows alone."""
        import zarr
        from zarr import AsyncArray
        from zarr.storage import StorePath

        from ..store import sync

        documents, made = cls._build(specs, windows, chunks, dims, over or {})
        store = cls(target, windows)
        for place, array in made.items():
            async_array = AsyncArray(array.metadata, StorePath(target.store, array.path), array.config)
            store._arrays[place] = zarr.Array(async_array)
        for key in store.metadata_keys():
            sync(target.store.set(key, documents[key]))
        return store

    def chunks(self, name: str) -> list[int] | None:
        """The windows per chunk of each level of output ``name``, as its arrays were written (None where a level's
        document cannot be read: what reads it says what is wrong). Outputs written before 1.1 have one chunk size
        for every level; later ones longer chunks at the coarser levels (see ``_pyramid.level_chunks``)."""
        found = []
        for window in self.windows:
            try:
                doc = json.loads(self.target.read(f"{level_path(window)}/{name}_min/zarr.json") or b"null")
                found.append(int(doc["chunk_grid"]["configuration"]["chunk_shape"][0]))
            except Exception:  # unreadable here: the reads say why
                return None
        return found

    def metadata_keys(self) -> list[str]:
        return _metadata_keys(self.windows, self._arrays)

    def array(self, name: str, window: int, stat: str) -> zarr.Array[Any]:
        key = (name, window, stat)
        if key not in self._arrays:
            import zarr

            mode = "r" if self.target.read_only else "r+"
            self._arrays[key] = zarr.open_array(
                self.target.store, path=f"{level_path(window)}/{name}_{stat}", mode=mode, zarr_format=3,
                config={"write_empty_chunks": True},
            )  # fmt: skip
        return self._arrays[key]

    def write(self, name: str, window: int, first: int, rows: Rows) -> list[str]:
        """Write whole chunks of windows ``[first, first + len(rows))``; the keys left to make durable.

        Each chunk is stored as the data's chunks are (see ``ChunkWriter.write``), and the
        caller makes all of a commit's chunks durable at once: a file's fsync each, and one
        for each folder, not one per file as an atomic write of each would take (thousands,
        for the finest rows of a 4096-point state).
        """
        from ..store import ChunkWriter

        keys = []
        for stat, values in rows.arrays().items():
            key = (name, window, stat)
            if key not in self._writers:
                self._writers[key] = ChunkWriter(self.array(name, window, stat))
            writer, data = self._writers[key], np.ascontiguousarray(values, dtype=self._arrays[key].dtype)
            keys += [c.key for c in writer.write(first, data)]
        return keys

    def _plain_array(self, name: str, window: int, stat: str) -> PlainArray | None:
        """A reader's summary array of exactly the form streamacc writes (see ``_plain``), read without zarr, else
        None (a writer's arrays, and any other, go through zarr)."""
        key = (name, window, stat)
        if key not in self._plain:
            doc = None
            if self.target.read_only and key not in self._arrays:
                try:
                    doc = json.loads(self.target.read(f"{level_path(window)}/{name}_{stat}/zarr.json") or b"null")
                except Exception:  # unreadable here: zarr opens it (or says why it cannot)
                    doc = None
            self._plain[key] = plain_array(doc)
        return self._plain[key]

    def read(self, name: str, window: int, start: int, stop: int) -> Rows:
        """Stored windows ``[start, stop)`` of output ``name`` at level ``window``.

        Arrays of the form streamacc writes are read without zarr; where that fails (a chunk missing or damaged),
        or for any other array, zarr reads them, and says what is wrong.
        """
        plain = [self._plain_array(name, window, stat) for stat in STATS]
        if all(plain):
            paths = [f"{level_path(window)}/{name}_{stat}" for stat in STATS]
            try:
                return Rows(*(a.read(self.target, p, start, stop) for a, p in zip(plain, paths, strict=True) if a))
            except Exception:  # zarr reads them again below, and raises what it finds
                pass
        return Rows(*(np.asarray(self.array(name, window, stat)[start:stop]) for stat in STATS))

    def _listing(self, path: str) -> set[str]:
        """The keys under array ``path``: one listing, kept by a reader (a writer adds chunks as it goes)."""
        if path in self._listed:
            return self._listed[path]
        keys = set(self.target.list_keys(f"{path}/"))
        if self.target.read_only:
            self._listed[path] = keys
        return keys

    def problem(self, name: str, window: int, start: int, stop: int, total: int, *, decode: bool = False) -> str | None:
        """What keeps windows ``[start, stop)`` of ``name`` at level ``window`` from being read as they were
        written, naming the file: an array missing or of another shape than ``total`` windows, a chunk missing
        (zarr would return the fill value), or, with ``decode``, one that does not decode (its checksum).
        None when nothing does."""
        for stat in STATS:
            path = f"{level_path(window)}/{name}_{stat}"
            plain = None if decode else self._plain_array(name, window, stat)  # the document zarr would read
            keys: Callable[[int, int], list[str]]
            if plain is not None:
                windows, keys = plain.shape[0], functools.partial(plain.keys, path)
            else:
                try:
                    array = self.array(name, window, stat)
                except Exception as exc:
                    return f"{path} cannot be opened ({type(exc).__name__}: {one_line(exc)})"
                from ..store import ChunkWriter

                writer = self._writers.get((name, window, stat)) or ChunkWriter(array)
                windows, keys = array.shape[0], writer.keys
            if windows != total:
                return f"{path} has {windows} windows where the run has {total}"
            if start >= stop:
                continue
            stored = self._listing(path)
            missing = [key for key in keys(start, stop) if key not in stored]
            if missing:
                return f"chunk {missing[0]} is missing"
            for first in range(start // writer.chunk * writer.chunk, stop, writer.chunk) if decode else ():
                try:
                    array[first : min(first + writer.chunk, array.shape[0])]
                except Exception as exc:
                    key = writer.key(first // writer.chunk)
                    why = one_line(exc).split(". ")[0]
                    return f"chunk {key} does not decode ({type(exc).__name__}: {why})"
        return None


def _base64(v: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(v).tobytes()).decode()


class TailText:
    """The base64 text of the finest level's pending rows as a commit encoded them, kept for the next commit.

    Rows only join the pending ones, until a chunk made durable takes the first of them: each commit then encodes
    its new rows alone and appends them to the text kept. Three rows of any size are a whole number of base64's
    groups of three bytes, so the text of the first ``3k`` rows followed by the text of the rest is the text of all.
    """

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], tuple[int, int, str]] = {}  # (name, key) -> (first row, rows, text)

    def text(self, name: str, key: str, first: int, rows: np.ndarray) -> str:
        """The base64 of ``rows``, the pending rows from row ``first`` on (window axis first)."""
        n = len(rows)
        kept = self._kept.get((name, key))
        done, text = (kept[1], kept[2]) if kept is not None and kept[0] == first and kept[1] <= n else (0, "")
        whole = n // 3 * 3
        if whole > done:
            text += _base64(rows[done:whole])
            done = whole
            self._kept[name, key] = (first, done, text)
        return text + _base64(rows[done:]) if done < n else text


def _pack(arrays: dict[str, np.ndarray], given: Mapping[str, str] | None = None) -> dict[str, list[Any]]:
    """Arrays as JSON: dtype, shape and the exact bytes in base64 (no archive format: a commit pays for this);
    ``given`` holds the base64 of some of them already."""
    given = given or {}
    return {k: [v.dtype.str, list(v.shape), given[k] if k in given else _base64(v)] for k, v in arrays.items()}


def _unpack(doc: dict[str, list[Any]]) -> dict[str, np.ndarray]:
    out = {}
    for k, (dtype, shape, text) in doc.items():
        dt = np.dtype(dtype)
        if dt.hasobject:
            raise ValueError("object arrays are not summaries")
        out[k] = np.frombuffer(base64.b64decode(text, validate=True), dtype=dt).reshape(shape)
    return out


def encode_tail(state: Mapping[str, Any], text: TailText | None = None) -> dict[str, Any]:
    """A commit's tail, for the manifest: for each output, what no durable chunk holds yet.

    ``state[name]`` is ``(levels, open)``: per level ``(emitted, durable, pending rows or
    None)``, and the open finest window (a :class:`Piece`, or None). Only the finest
    level's pending rows are recorded: every coarser row, complete or open, is a fold of
    rows below it and is rebuilt from them. ``text`` keeps the pending rows' base64 from one
    commit to the next (the same text, encoded once).
    """
    doc: dict[str, Any] = {}
    for name, (levels, piece) in state.items():
        arrays: dict[str, np.ndarray] = {}
        given: dict[str, str] = {}
        pending = levels[0][2]
        if pending is not None:
            arrays.update({f"0_{k}": v for k, v in pending.arrays().items() if k != "count"})
            count = pending.count
            if count.size and np.all(count == count.flat[0]):  # no NaN: one number says it
                arrays["0_count_all"] = np.asarray([count.flat[0], *count.shape], dtype=np.int64)
            else:
                arrays["0_count"] = count
            if text is not None:
                given = {k: text.text(name, k, levels[0][1], v) for k, v in arrays.items() if k != "0_count_all"}
        entry: dict[str, Any] = {"emitted": [lv[0] for lv in levels], "durable": [lv[1] for lv in levels]}
        if piece is not None:
            entry["open"] = [piece.window, piece.start, piece.stop]
            fields = zip(("min", "max", "sum", "count"), piece.acc.fields(), strict=True)
            arrays.update({f"open_{k}": v for k, v in fields})
        entry["arrays"] = _pack(arrays, given)
        doc[name] = entry
    return doc


def decode_tail(doc: Mapping[str, Any]) -> dict[str, tuple[list[tuple[int, int, Rows | None]], Piece | None]]:
    """Inverse of :func:`encode_tail`; ValueError, KeyError or TypeError when ``doc`` is not a tail."""
    out: dict[str, tuple[list[tuple[int, int, Rows | None]], Piece | None]] = {}
    for name, entry in doc.items():
        arrays = _unpack(entry["arrays"])
        levels: list[tuple[int, int, Rows | None]] = []
        for i, (emitted, durable) in enumerate(zip(entry["emitted"], entry["durable"], strict=True)):
            pending = None
            if i == 0 and "0_min" in arrays:
                if "0_count_all" in arrays:
                    value, *shape = arrays["0_count_all"].tolist()
                    arrays["0_count"] = np.full(shape, value, dtype=np.int64)
                pending = Rows(*(arrays[f"0_{k}"] for k in STATS))
            levels.append((int(emitted), int(durable), pending))
        piece = None
        if "open" in entry:
            window, start, stop = (int(v) for v in entry["open"])
            piece = Piece(window, start, stop, Acc(*(arrays[f"open_{k}"] for k in ("min", "max", "sum", "count"))))
        out[name] = (levels, piece)
    return out
