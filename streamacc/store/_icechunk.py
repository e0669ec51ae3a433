"""An output in an Icechunk repository: its commits are the writer's durable points.

A writer writes into a writable session of a branch, and the session is committed (one
Icechunk commit: the blocks' chunks, their summaries and the manifest that counts them)
at the checkpoints the output asks for, at most every ``COMMIT_SECONDS`` or
``COMMIT_BYTES`` unless forced; a crash loses only the uncommitted session, and the
branch head is always a state a plain folder could have been left in by a crash, so a
resumed run continues from it. A committed session is read-only, so each commit opens the
next session on the same branch, and :class:`SessionStore` (``_sessionstore``: the zarr
store every array holds) passes each request to the session of the moment; a commit
waits until the requests in flight are done, and the group documents it holds meanwhile
are set in the session just before.

A second writer is refused by a ``flock`` on a local repository's folder (Icechunk's
local storage is not safe for concurrent commits) and, on object storage, by Icechunk's
own conflict detection: a commit whose branch moved raises :class:`LockedError`.

Readers open a read-only session at a branch, a tag or a snapshot id. Icechunk is
imported only here (:func:`import_icechunk`), and only when such an output is named;
``_opentarget`` makes the target of an Icechunk URL or object.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from zarr.abc.store import Store

from ..errors import InputError, LockedError, NoOutputError, StoreError, arg, one_line
from ._files import DirLock, flock_holder
from ._sessionstore import SessionStore
from ._target import TAIL_BATCH, Target, being_written, sync

__all__ = ["COMMIT_BYTES", "COMMIT_SECONDS", "MANIFEST_SPLIT", "IcechunkTarget", "import_icechunk"]

COMMIT_SECONDS = 10.0
"""Seconds between two commits at most: a crash loses at most this much of a run, and the commits a
small share of it (what one costs: the Icechunk benchmark)."""

COMMIT_BYTES = 1024 * 2**20
"""Bytes of stored data between two commits at most (32 blocks of the default size):
a session holds the changes' record in memory until it commits."""

MANIFEST_SPLIT = 64
"""Chunks along the step axis per manifest split: a commit rewrites only the splits it
changed, so its cost stays flat however long the output grows."""

REF_KINDS = ("branch", "tag")
"""The prefixes of a ``ref`` that says which kind of name it is (``branch:NAME``, ``tag:NAME``)."""


def import_icechunk() -> Any:
    """The icechunk module, or the refusal that names the extra to install."""
    try:
        import icechunk
    except ImportError:
        raise InputError("Icechunk repositories need the icechunk package: pip install 'streamacc[icechunk]'") from None
    return icechunk


def repository_config() -> Any:
    """The configuration of a repository streamacc creates: manifests split along the step axis."""
    ic = import_icechunk()
    splitting = ic.ManifestSplittingConfig.from_dict(
        {ic.ManifestSplitCondition.AnyArray(): {ic.ManifestSplitDimCondition.Axis(0): MANIFEST_SPLIT}}
    )
    return ic.RepositoryConfig(manifest=ic.ManifestConfig(splitting=splitting))


class IcechunkTarget(Target):
    """An output on one branch of an Icechunk repository (or, read-only, at a branch, tag or snapshot)."""

    def __init__(
        self,
        label: str,
        *,
        storage: Any = None,
        repository: Any = None,
        session: Any = None,
        branch: str = "main",
        ref: str | None = None,
        local: Path | None = None,
        read_only: bool = False,
    ) -> None:
        """One of ``storage`` (an ``icechunk.Storage``), ``repository`` or (read-only) ``session``.

        ``local`` is the folder of a local repository (locked by ``flock`` while writing).
        """
        self.label = label
        self.branch = branch
        self.ref = ref
        self.local = local
        self._storage = storage
        self._repository = repository
        self._session = session
        self._read_only = read_only
        self._store: Store | None = None
        self._pending = 0
        self._last_commit = time.monotonic()
        self._locked = False
        self._made_branch = False  # this writer made its branch (from main's head), which nothing has committed to
        self.snapshots: list[str] = []  # the snapshots this writer committed, in order
        self.tags: list[str] = []  # the tags it created

    # --- the repository and its sessions ------------------------------------------------------

    def repository(self, *, create: bool = False) -> Any:
        """The repository (created with :func:`repository_config` when ``create`` and absent), or None."""
        if self._repository is None and self._storage is not None:
            ic = import_icechunk()
            try:
                if ic.Repository.exists(self._storage):
                    self._repository = ic.Repository.open(self._storage)
                elif create:
                    self._repository = ic.Repository.create(self._storage, config=repository_config())
            except ic.IcechunkError as exc:
                raise StoreError(f"cannot open the Icechunk repository {self.label}: {one_line(exc)}") from None
        return self._repository

    def _reader_session(self) -> Any:
        if self._session is not None:
            return self._session
        repo = self.repository()
        if repo is None:
            raise NoOutputError(f"{self.label} is not an Icechunk repository; check the path")
        kind, name = ("branch", self.branch) if self.ref is None else _ref_kind(self.ref)
        branches, tags = repo.list_branches(), repo.list_tags()
        if kind is None and name in branches and name in tags:
            raise InputError(
                f"{arg('storage_options', {'ref': name})} names both a branch and a tag of {self.label}; say which "
                f"with {arg('storage_options', {'ref': f'branch:{name}'})} or "
                f"{arg('storage_options', {'ref': f'tag:{name}'})}"
            )
        if kind in (None, "branch") and name in branches:
            return repo.readonly_session(branch=name)
        if kind in (None, "tag") and name in tags:
            return repo.readonly_session(tag=name)
        if kind is None:
            with contextlib.suppress(Exception):
                return repo.readonly_session(snapshot_id=name)
        raise NoOutputError(
            f"{self.label} has no {kind or 'branch, tag or snapshot'} {name!r}; its branches: "
            f"{', '.join(sorted(branches))}; its tags: {', '.join(sorted(tags)) or 'none'}"
        )

    @property
    def store(self) -> Store:  # type: ignore[override]  # an attribute elsewhere, made on first use here
        """The zarr store of the session: a reader's read-only one, or the writer's :class:`SessionStore`."""
        if self._store is None:
            if self._read_only:
                self._store = self._reader_session().store
            else:
                self._store = SessionStore(self._writable().store)
        return self._store

    def _writable(self) -> Any:
        repo = self.repository(create=True)
        if self.branch not in repo.list_branches():
            repo.create_branch(self.branch, repo.lookup_branch("main"))
            self._made_branch = True
        self._session = repo.writable_session(self.branch)
        return self._session

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def snapshot_id(self) -> str | None:
        """The snapshot the session reads from (a writer's: the last one committed)."""
        return None if self._session is None else str(self._session.snapshot_id)

    # --- keys -----------------------------------------------------------------------------

    def read(self, key: str) -> bytes | None:
        """None for a key Icechunk cannot hold (a repository holds zarr keys only) or a chunk of an array it does not
        hold (where Icechunk 1.1 raises), as for any key not stored."""
        held = self._store.held(key) if isinstance(self._store, SessionStore) else None
        if held is not None:
            return held
        ic = import_icechunk()
        try:
            return super().read(key)
        except ic.IcechunkError as exc:
            # streamacc 0.1's manifest.json, asked for by every reader; a chunk of an array deleted or never made
            if "invalid zarr key" in str(exc) or "node not found" in str(exc):
                return None
            raise

    def write(self, key: str, data: bytes) -> None:
        """A group document is held by the writer's store until the next commit (see ``SessionStore``)."""
        if not (isinstance(self._store, SessionStore) and self._store.hold(key, data)):
            super().write(key, data)

    def size(self, key: str) -> int:
        """From the session's manifest (Icechunk's ``getsize``: 0 for a chunk never written), not by reading the key."""
        held = self._store.held(key) if isinstance(self._store, SessionStore) else None
        if held is not None:
            return len(held)
        try:
            return int(sync(self.store.getsize(key)))
        except KeyError:  # no such node
            return 0

    def tails(self, keys: list[str], size: int = 4) -> list[bytes | None]:
        """Each key read alone (as :meth:`read`: None where absent) where Icechunk 1.1 fails on a key it does not hold:
        its ``get_partial_values`` makes a buffer of a missing chunk's None, and a chunk of a missing array raises."""
        ic = import_icechunk()
        try:
            return super().tails(keys, size)
        except (TypeError, ic.IcechunkError):
            found = (self.read(key) for key in keys)
            return [None if data is None else data[-size:] for data in found]

    def ranges(self, requests: list[tuple[str, int, int]]) -> list[bytes | None]:
        """Each key read alone where Icechunk 1.1 fails on a key it does not hold (see :meth:`tails`)."""
        ic = import_icechunk()
        try:
            return super().ranges(requests)
        except (TypeError, ic.IcechunkError):
            found = ((self.read(key), start, stop) for key, start, stop in requests)
            return [None if data is None else data[start:stop] for data, start, stop in found]

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """Every key under ``prefix`` with its size from the manifest, asked for concurrently."""
        keys = self.list_keys(prefix)

        async def collect() -> list[int]:
            found: list[int] = []
            for i in range(0, len(keys), TAIL_BATCH):
                found += await asyncio.gather(*(self.store.getsize(key) for key in keys[i : i + TAIL_BATCH]))
            return found

        return dict(zip(keys, map(int, sync(collect())), strict=True))

    def exists(self) -> bool:
        if self._session is None and self.repository() is None:
            return False
        return not sync(self.store.is_empty(""))

    def absence(self) -> str:
        if self.repository() is None:
            return "is not an Icechunk repository"
        return f"holds nothing at {self.ref or self.branch!r}, not a streamacc output"

    def elsewhere(self) -> str:
        return "choose another repository, or a branch that holds no arrays (a new branch starts at main's head)"

    def clear(self, keep: set[str]) -> None:
        """Deleting a group's document deletes every node under it here (the root's: all of them), so the kept keys
        are read first and those gone written back, parents first."""
        kept = {key: data for key in sorted(keep, key=_depth) if (data := self.read(key)) is not None}
        self.delete("zarr.json")
        for name in self.list_dir():
            if name != "zarr.json" and not any(k == name or k.startswith(f"{name}/") for k in keep):
                sync(self.store.delete_dir(name))
        for key in self.list_keys():
            if key not in keep:
                self.delete(key)
        for key, data in kept.items():
            if self.read(key) is None:
                self.write(key, data)

    # --- commits ------------------------------------------------------------------------

    def checkpoint(self, message: str, *, nbytes: int = 0, final: bool = False, tag: str | None = None) -> None:
        """Commit the session when ``final`` or once ``COMMIT_SECONDS`` or ``COMMIT_BYTES`` have passed since the last
        commit; a ``final`` one is tagged ``BRANCH-TAG`` (made unique with ``-2``, ``-3``... when taken)."""
        self._pending += nbytes
        due = time.monotonic() - self._last_commit >= COMMIT_SECONDS or self._pending >= COMMIT_BYTES
        if final or due:
            self.commit(message)
        if final and tag is not None:
            self._tag(tag)

    def commit(self, message: str) -> str | None:
        """Commit what the session holds (nothing when it holds no change); return the new snapshot id."""
        store = self._store
        if self._session is None or not isinstance(store, SessionStore):
            return None
        ic = import_icechunk()
        with store.quiet():
            if not self._session.has_uncommitted_changes:
                return None
            try:
                snapshot = str(self._session.commit(message))
            except ic.ConflictError:
                raise LockedError(
                    f"another writer committed to branch {self.branch!r} of {self.label} while this run wrote; "
                    "this run's uncommitted steps are dropped and it stops: let the other writer finish, then "
                    f"rerun with {arg('mode', 'resume')}"
                ) from None
            self.snapshots.append(snapshot)
            self._session = self.repository().writable_session(self.branch)
            store.swap(self._session.store)
        self._pending = 0
        self._last_commit = time.monotonic()
        return snapshot

    def _tag(self, base: str) -> None:
        repo = self.repository()
        taken, base = repo.list_tags(), f"{self.branch}-{base}"
        name = next(t for t in itertools.chain([base], (f"{base}-{n}" for n in itertools.count(2))) if t not in taken)
        snapshot = self.snapshots[-1] if self.snapshots else repo.lookup_branch(self.branch)
        repo.create_tag(name, snapshot)
        self.tags.append(name)

    @contextlib.contextmanager
    def lock(self, command: str) -> Iterator[None]:
        """Hold the writer lock (a ``flock`` on a local repository), with a fresh session of the branch head;
        whatever the session holds at the end is committed (nothing is when a conflict stopped the run)."""
        with self._folder_lock(command):
            self._store = None
            self._session = None
            self.store  # noqa: B018  # the session starts at the branch head, now that no other writer moves it
            try:
                yield
            except LockedError:  # another writer moved the branch: nothing more of this session is committed
                raise
            except BaseException:
                with contextlib.suppress(Exception):  # the run's own error says what happened
                    self.commit("streamacc: the writer stopped")
                    self._unmake_branch()
                raise
            self.commit("streamacc: the writer stopped")

    def _unmake_branch(self) -> None:
        """Delete the branch this writer made, where it committed nothing to it: a refused write leaves none."""
        if self._made_branch and not self.snapshots:
            self.repository().delete_branch(self.branch)
            self._made_branch = False

    def writer(self) -> str | None:
        return flock_holder(self.local) if self.local is not None and self.local.is_dir() else None

    @contextlib.contextmanager
    def _folder_lock(self, command: str) -> Iterator[None]:
        if self.local is None:
            yield
            return
        made = not self.local.exists()
        try:
            self.local.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {self.label} ({exc.strerror or exc}); check the path") from None
        lock = DirLock(self.local)
        holder = lock.acquire()
        try:
            if holder is not None:
                raise being_written(self.label, holder, command)
            yield
        except BaseException:
            if made and not self.snapshots:  # a repository this writer made and never committed to: a refused write
                self._repository = self._store = self._session = None
                shutil.rmtree(self.local, ignore_errors=True)
            raise
        finally:
            lock.release()


def _depth(key: str) -> tuple[int, str]:
    return key.count("/"), key


def _ref_kind(ref: Any) -> tuple[str | None, str]:
    """``(kind, name)`` of a reader's ``ref``: ``branch:NAME``, ``tag:NAME``, or a name of any kind (None)."""
    if not isinstance(ref, str) or not ref:
        raise InputError(f"{arg('storage_options', {'ref': ref})} must name a branch, a tag or a snapshot id")
    kind, colon, name = ref.partition(":")
    return (kind, name) if colon and kind in REF_KINDS else (None, ref)


