"""The base of every output location: a zarr store, and what a zarr ``Store`` lacks.

A :class:`Target` reads, writes, lists and deletes its keys through the zarr store it
wraps; what it adds is what a zarr store has no word for: the writer lock (a ``flock``, an
object store's lease), durability (``make_durable``), checkpoints (an Icechunk commit),
clearing an output for a rewrite, and removing the temp files a killed writer left. The
implementations (``_localtarget``, ``_storetarget``, ``_icechunk``) import this module and
nothing else of one another; ``_opentarget`` chooses one for a path, URL or store object.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import LockedError

if TYPE_CHECKING:
    from zarr.abc.buffer import BufferPrototype
    from zarr.abc.store import Store

__all__ = ["BOOKKEEPING", "LEASE_KEY", "TAIL_BATCH", "Target", "being_written", "default_buffer_prototype", "sync"]

BOOKKEEPING = "_streamacc"
"""The group streamacc keeps beside the arrays (manifest, block records, lease)."""

LEASE_KEY = f"{BOOKKEEPING}/lease/zarr.json"
"""The writer lease on object stores (see ``_lease.py``); kept when an output is cleared."""

TAIL_BATCH = 256
"""Keys whose last bytes are asked for at once (concurrent requests on an object store)."""


T = TypeVar("T")


def sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """zarr's ``sync`` (run ``coroutine`` on zarr's event loop), importing Zarr on first use."""
    from ._zarrapi import sync as run

    return run(coroutine)


def default_buffer_prototype() -> BufferPrototype:
    """zarr's default buffer prototype, importing Zarr on first use."""
    from zarr.buffer import default_buffer_prototype as prototype

    return prototype()


def being_written(label: str, holder: str, command: str) -> LockedError:
    """The refusal of a second writer of ``label``, which ``holder`` (a process) is writing."""
    return LockedError(
        f"{label} is being written by {holder}; wait for it to finish or stop it, then rerun with {command}"
    )


class Target:
    """One output location: the zarr store that holds its keys, and what a zarr ``Store`` lacks.

    Keys are '/'-separated paths relative to the output's root, as in zarr. The key methods
    (:meth:`read` to :meth:`exists`) are the store's own operations, called synchronously;
    an implementation overrides one only where its store would change the bytes, their
    durability or the output's link safety, or where it answers faster, and says why. The
    rest is what a zarr store lacks: the writer lock (:meth:`lock`, :meth:`writer`,
    :meth:`check_lock`), durability (:meth:`make_durable`), checkpoints (:meth:`checkpoint`),
    clearing (:meth:`check_clearable`, :meth:`clear`), a killed writer's temp files
    (:meth:`clean_partials`), the contents' safety (:meth:`check_contents`) and the words a
    refusal uses (:meth:`absence`, :meth:`elsewhere`). An implementation supplies ``store``,
    ``label`` and :meth:`lock`.
    """

    store: Store
    label: str

    @property
    def read_only(self) -> bool:
        return bool(self.store.read_only)

    # --- keys, through the zarr store ---------------------------------------------------------

    def read(self, key: str) -> bytes | None:
        """The bytes at ``key``, or None when absent."""
        buf = sync(self.store.get(key, prototype=default_buffer_prototype()))
        return None if buf is None else buf.to_bytes()

    def read_reused(self, key: str) -> Any:
        """The bytes at ``key`` (a bytes-like object), or None when absent; valid until this thread's next call.

        A local file is read into a buffer the thread reuses, so reading many large chunks maps
        no fresh memory; other stores return :meth:`read`'s bytes.
        """
        return self.read(key)

    def write(self, key: str, data: bytes) -> None:
        """Store ``data`` at ``key`` atomically and durably."""
        sync(self.store.set(key, default_buffer_prototype().buffer.from_bytes(data)))

    def delete(self, key: str) -> None:
        """Remove ``key`` (nothing when absent)."""
        sync(self.store.delete(key))

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every key under ``prefix`` ('' for all)."""

        async def collect() -> list[str]:
            return [key async for key in self.store.list_prefix(prefix)]

        return sorted(sync(collect()))

    def list_dir(self, prefix: str = "") -> list[str]:
        """The names directly under ``prefix`` ('' for the root): keys and folders, without walking deeper."""

        async def collect() -> list[str]:
            return [key async for key in self.store.list_dir(prefix)]

        return sorted(sync(collect()))

    def size(self, key: str) -> int:
        """Bytes stored at ``key`` (0 when absent)."""
        return sync(self.store.getsize(key)) if sync(self.store.exists(key)) else 0

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """Every key under ``prefix`` with its size in bytes, from one listing where the store allows it."""
        return {key: self.size(key) for key in self.list_keys(prefix)}

    def tails(self, keys: list[str], size: int = 4) -> list[bytes | None]:
        """The last ``size`` bytes stored at each key (None where absent), read concurrently where the store can."""
        from zarr.abc.store import SuffixByteRequest

        return self._parts([(key, SuffixByteRequest(size)) for key in keys])

    def ranges(self, requests: list[tuple[str, int, int]]) -> list[bytes | None]:
        """The bytes ``[start, stop)`` of each ``(key, start, stop)`` (None where the key is absent), read concurrently
        where the store can."""
        from zarr.abc.store import RangeByteRequest

        return self._parts([(key, RangeByteRequest(start, stop)) for key, start, stop in requests])

    def _parts(self, asked: list[tuple[str, Any]]) -> list[bytes | None]:
        """The part of each key that its byte request asks for (None where the key is absent), a batch at a time."""
        found: list[bytes | None] = []
        prototype = default_buffer_prototype()
        for i in range(0, len(asked), TAIL_BATCH):
            batch = asked[i : i + TAIL_BATCH]
            try:
                got = sync(self.store.get_partial_values(prototype, batch))
            except FileNotFoundError:  # zarr's LocalStore raises for a missing key here, where get returns None
                got = [sync(self.store.get(key, prototype, request)) for key, request in batch]
            found += [None if b is None else b.to_bytes() for b in got]
        return found

    def exists(self) -> bool:
        """Whether anything at all is stored here."""
        return not sync(self.store.is_empty(""))

    # --- what a zarr store lacks ----------------------------------------------------------------

    def absence(self) -> str:
        """What a reader finds here when nothing is stored (:meth:`exists` is False), in words."""
        return "does not exist"

    def missing(self, key: str) -> str:
        """Why ``key`` reads as nothing, in words that follow its name: ``is missing``."""
        return "is missing"

    def elsewhere(self) -> str:
        """Where else a writer refused here (its place holds someone else's data) may write, in words."""
        return "choose another output path"

    def make_durable(self, keys: list[str], *, drop_cache: bool = False) -> None:
        """Make keys written through the zarr store durable (local disk only).

        With ``drop_cache`` their pages also leave the page cache: written data nobody
        reads back soon would otherwise crowd it and cost the kernel time to reclaim.
        """

    def checkpoint(self, message: str, *, nbytes: int = 0, final: bool = False, tag: str | None = None) -> None:
        """The writes so far are a consistent state (a manifest was just saved, ``nbytes`` more of data since the
        last call): a transactional store commits them, at most every few seconds unless ``final``, and tags the
        final commit ``tag``. Other stores made every write durable already."""

    def check_lock(self) -> None:
        """Raise LockedError if the writer lock may be lost (an object store's lease); called before each write."""

    def clean_partials(self, owned: Callable[[str], bool]) -> list[str]:
        """Remove the temp files a killed writer left while writing keys for which ``owned`` holds; return them."""
        return []

    def check_clearable(self) -> None:
        """Refuse, before anything is written, to clear an output that must not be deleted (see LocalTarget)."""

    def check_contents(self, *, writing: bool = True) -> None:
        """Refuse contents streamacc must not act on (links and special files inside a local output); with
        ``writing``, also a folder where a file belongs (which a write would fail on; a clearing removes it)."""

    def clear(self, keep: set[str]) -> None:
        """Delete every key except those in ``keep`` (the root group's metadata first)."""
        self.delete("zarr.json")
        for key in self.list_keys():
            if key not in keep:
                self.delete(key)

    @contextlib.contextmanager
    def lock(self, command: str) -> Iterator[None]:
        """Hold the exclusive writer lock while the block runs; ``command`` names the fix."""
        raise NotImplementedError
        yield

    def writer(self) -> str | None:
        """Who holds the writer lock now (a process, as its refusal names it), asked without taking it; None for
        nobody, or where the store cannot tell."""
        return None
