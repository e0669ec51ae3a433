"""The zarr stores streamacc makes and wraps around an output's keep zarr's store contract, and their own promise.

zarr's conformance suite (``zarr.testing.store.StoreTests``) runs over ``DurableLocalStore`` (a
local folder's store, durable and never through a link) in a folder, and over each wrapper around a
``MemoryStore``: ``FencedStore`` (every write fenced by the writer's lease), ``SessionStore``
(an Icechunk writer's session, holding group documents until the commit), ``CheckedStore``
(each committed chunk read checked against its record) and ``RecomputingStore`` (a virtual
output's chunks recomputed). A zarr ``WrapperStore`` forwards whatever a subclass does not
override straight to the store inside: :func:`test_every_key_method_goes_through_the_wrapper`
fails as soon as zarr gives ``WrapperStore`` (or ``Store``) a method that touches keys which a
wrapper leaves to that forwarding without saying so (zarr 3.3's ``get_sync``, ``set_sync`` and
``delete_sync`` would be such methods).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from zarr.abc.store import RangeByteRequest, Store, SuffixByteRequest
from zarr.buffer import default_buffer_prototype
from zarr.core.buffer.cpu import Buffer
from zarr.storage import MemoryStore, WrapperStore
from zarr.testing.store import StoreTests

import streamacc
from streamacc.errors import StoreError
from streamacc.record import CheckedStore, load_manifest
from streamacc.run import RecomputingStore, recompute_plan
from streamacc.store import DurableLocalStore, FencedStore, SessionStore, open_target


def STEP(c, _):
    return c + 1, {"counted": c}


def _memory(store: Any) -> MemoryStore:
    while not isinstance(store, MemoryStore):
        store = store._store
    return store


class _OverMemory:
    """What the conformance suite needs of a wrapper around a ``MemoryStore``: its contents read and written
    directly, and the wrapper's own kwargs beside the store (``store_kwargs``) or the store's class
    (``open_kwargs``)."""

    buffer_cls = Buffer

    async def get(self, store: Any, key: str) -> Buffer:
        return _memory(store)._store_dict[key]

    async def set(self, store: Any, key: str, value: Buffer) -> None:
        _memory(store)._store_dict[key] = value

    @pytest.fixture
    def extra(self) -> dict[str, Any]:
        """The wrapper's own arguments."""
        return {}

    @pytest.fixture
    def store_kwargs(self, extra) -> dict[str, Any]:
        return {"store": MemoryStore(), **extra}

    @pytest.fixture
    def open_kwargs(self, extra) -> dict[str, Any]:
        return {"store_cls": MemoryStore, **extra}

    def test_store_repr(self, store: Any) -> None:
        assert "MemoryStore" in repr(store) or "memory://" in repr(store)

    def test_store_supports_writes(self, store: Any) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: Any) -> None:
        assert store.supports_listing


def _no_fence() -> None:
    pass


class TestDurableLocalStore(StoreTests[DurableLocalStore, Buffer]):
    store_cls = DurableLocalStore
    buffer_cls = Buffer

    async def get(self, store: DurableLocalStore, key: str) -> Buffer:
        return self.buffer_cls.from_bytes((store.root / key).read_bytes())

    async def set(self, store: DurableLocalStore, key: str, value: Buffer) -> None:
        path = store.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value.to_bytes())

    @pytest.fixture
    def store_kwargs(self, tmp_path: Path) -> dict[str, Any]:
        return {"root": tmp_path}

    def test_store_repr(self, store: DurableLocalStore) -> None:
        assert repr(store) == f"DurableLocalStore('file://{store.root.as_posix()}')"

    def test_store_supports_writes(self, store: DurableLocalStore) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: DurableLocalStore) -> None:
        assert store.supports_listing


class TestFencedStore(_OverMemory, StoreTests[FencedStore, Buffer]):
    store_cls = FencedStore

    @pytest.fixture
    def extra(self) -> dict[str, Any]:
        return {"fence": _no_fence}


class TestSessionStore(_OverMemory, StoreTests[SessionStore, Buffer]):
    store_cls = SessionStore


@pytest.fixture(scope="module")
def virtual(tmp_path_factory) -> tuple[Any, Any, Path]:
    """The manifest and plan of a small virtual output (its array named as no key of the suite is), and where."""
    out = tmp_path_factory.mktemp("virtual") / "out.zarr"
    streamacc.write(out, STEP, np.int32(0), length=64, block_size=16, virtual=True, progress=False)
    target = open_target(out, read_only=True)
    manifest = load_manifest(target)
    return manifest, recompute_plan(target, manifest, f=STEP, init=np.int32(0))[0], out


class TestCheckedStore(_OverMemory, StoreTests[CheckedStore, Buffer]):
    store_cls = CheckedStore

    @pytest.fixture
    def extra(self, virtual) -> dict[str, Any]:
        return {"label": "out.zarr", "manifest": virtual[0]}


class TestRecomputingStore(_OverMemory, StoreTests[RecomputingStore, Buffer]):
    store_cls = RecomputingStore

    @pytest.fixture
    def extra(self, virtual) -> dict[str, Any]:
        return {"manifest": virtual[0], "plan": virtual[1]}

    @pytest.fixture
    def store_kwargs(self, extra) -> dict[str, Any]:
        return {"target": open_target(MemoryStore()), **extra}


# --- what the suite does not ask -------------------------------------------------------------

GROUP = b'{"zarr_format": 3, "node_type": "group", "attributes": {}}'


async def test_a_durable_local_store_never_goes_through_a_link_inside_its_folder(tmp_path):
    elsewhere, out = tmp_path / "elsewhere", tmp_path / "out"
    elsewhere.mkdir()
    (elsewhere / "zarr.json").write_bytes(GROUP)
    out.mkdir()
    (out / "x").symlink_to(elsewhere)
    store = DurableLocalStore(out, label="out.zarr")
    prototype = default_buffer_prototype()
    for call in (store.get("x/zarr.json", prototype), store.set("x/zarr.json", Buffer.from_bytes(b"{}"))):
        with pytest.raises(StoreError, match=r"x inside out.zarr is a link or not a folder"):
            await call
    assert [key async for key in store.list()] == [] and (elsewhere / "zarr.json").read_bytes() == GROUP


async def test_a_file_where_a_folder_would_be_holds_no_key_to_read_and_refuses_a_write(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "zarr.json.streamacc-tmp").write_bytes(GROUP)  # a writer's temp file, which a reader listing the root sees
    store = DurableLocalStore(out, label="out.zarr")
    prototype = default_buffer_prototype()
    assert await store.get("zarr.json.streamacc-tmp/zarr.json", prototype) is None
    assert not await store.exists("zarr.json.streamacc-tmp/zarr.json")
    with pytest.raises(StoreError, match=r"zarr.json.streamacc-tmp inside out.zarr is a link or not a folder"):
        await store.set("zarr.json.streamacc-tmp/zarr.json", Buffer.from_bytes(b"{}"))


async def test_a_session_store_refuses_a_group_document_when_read_only_and_returns_one_it_holds():
    prototype = default_buffer_prototype()
    reader = SessionStore(MemoryStore(read_only=True))
    with pytest.raises(ValueError, match="read-only"):
        await reader.set("g/zarr.json", Buffer.from_bytes(GROUP))  # held before, and lost
    assert reader.held("g/zarr.json") is None
    writer = SessionStore(MemoryStore())
    await writer.set("g/zarr.json", Buffer.from_bytes(GROUP))
    assert writer.held("g/zarr.json") == GROUP  # held until the commit
    got = [(key, buf.to_bytes()) async for key, buf in writer._get_many([("g/zarr.json", prototype, None)])]
    assert got == [("g/zarr.json", GROUP)]


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> Path:
    """A stored output whose chunk ``counted/c/1`` ends with another CRC-32C than its block recorded."""
    out = tmp_path_factory.mktemp("damaged") / "out.zarr"
    streamacc.write(out, STEP, np.int32(0), length=64, block_size=16, codec="none", progress=False)
    chunk = out / "counted" / "c" / "1"
    raw = bytearray(chunk.read_bytes())
    raw[-1] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    return out


async def test_a_checked_store_checks_a_chunk_however_it_is_read(damaged):
    target = open_target(damaged, read_only=True)
    store = CheckedStore(target.store, target.label, load_manifest(target))
    prototype = default_buffer_prototype()
    refused = r"chunk counted/c/1 of .* is not the chunk committed for block 1"
    with pytest.raises(streamacc.errors.VerifyError, match=refused):
        await store.get("counted/c/1", prototype, RangeByteRequest(0, 4))
    with pytest.raises(streamacc.errors.VerifyError, match=refused):
        await store.get_partial_values(prototype, [("counted/c/0", None), ("counted/c/1", SuffixByteRequest(4))])
    with pytest.raises(streamacc.errors.VerifyError, match=refused):
        [_ async for _ in store._get_many([("counted/c/1", prototype, None)])]
    part = await store.get_partial_values(prototype, [("counted/c/0", RangeByteRequest(0, 8))])
    assert np.frombuffer(part[0].to_bytes(), np.int32).tolist() == [0, 1]  # block 0 is whole: steps 0 and 1


async def test_a_recomputing_store_recomputes_a_chunk_however_it_is_read(virtual):
    manifest, plan, out = virtual
    store = RecomputingStore(open_target(out, read_only=True), manifest, plan)
    prototype = default_buffer_prototype()
    whole = (await store.get("counted/c/2", prototype)).to_bytes()
    assert np.frombuffer(whole, np.int32).tolist() == list(range(32, 48))  # the carry entering each step
    got = [buf.to_bytes() async for _, buf in store._get_many([("counted/c/2", prototype, None)])]
    assert got == [whole]
    part = await store.get_partial_values(prototype, [("counted/c/2", RangeByteRequest(4, 12))])
    assert part[0].to_bytes() == whole[4:12]


# --- every path zarr gives a wrapper --------------------------------------------------------

WRAPPERS = [FencedStore, SessionStore, CheckedStore, RecomputingStore]
KEY_PARAMETERS = {"key", "keys", "prefix", "key_ranges", "requests", "values", "value"}
KEY_VERBS = ("get", "set", "delete", "exists", "list", "clear", "is_empty")


def key_methods() -> set[str]:
    """The methods zarr's ``Store`` and ``WrapperStore`` have that read, write, list or delete keys."""
    found = set()
    for cls in (Store, WrapperStore):
        for name, member in vars(cls).items():
            function = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
            if name.startswith("__") or not inspect.isfunction(function):
                continue
            takes = set(inspect.signature(function).parameters)
            if takes & KEY_PARAMETERS or name.lstrip("_").startswith(KEY_VERBS):
                found.add(name)
    return found


def forwarded(wrapper: type) -> list[str]:
    """The key methods of ``wrapper`` that are zarr's ``WrapperStore``'s, straight to the store inside, unasked."""
    owners = {name: next(k for k in wrapper.__mro__ if name in vars(k)) for name in key_methods()}
    return sorted(n for n, owner in owners.items() if owner is WrapperStore and n not in wrapper.FORWARDED)


@pytest.mark.parametrize("wrapper", WRAPPERS, ids=lambda w: w.__name__)
def test_every_key_method_goes_through_the_wrapper(wrapper, monkeypatch):
    """Each key method is the wrapper's own (or ``Store``'s, built on the wrapper's own), or declared forwarded
    (``FORWARDED``: what the wrapper's promise does not concern); a method zarr adds to ``WrapperStore`` is neither
    until a wrapper says which."""
    assert {"get", "set", "_get_many", "get_partial_values", "list"} <= key_methods()
    assert forwarded(wrapper) == []
    assert key_methods() >= wrapper.FORWARDED

    def get_sync(self, key, prototype=None, byte_range=None):  # as zarr 3.3's WrapperStore forwards it
        return self._store.get_sync(key, prototype=prototype, byte_range=byte_range)

    monkeypatch.setattr(WrapperStore, "get_sync", get_sync, raising=False)
    assert forwarded(wrapper) == ["get_sync"]
