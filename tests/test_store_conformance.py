"""One contract over every kind of output location: a local folder, an object store, an Icechunk repository, memory.

As zarr's ``StoreTests`` does for its stores, :class:`TargetContract` says what every
``store.Target`` does (keys written, read, listed and deleted; writes made durable and
checkpointed for a new reader; one writer at a time; an output cleared but for the keys
kept; a killed writer's temp files removed, and only those of the keys it owned), and a
class per kind says only where one lives: a local folder, a bucket on moto's S3 server, an
Icechunk repository (where icechunk is installed), a zarr ``MemoryStore``. The local
files' ``read_into``, which reads a chunk into a caller's buffer, is tested at the end, and
first the targets' layering: the opener above the targets, each target above their base alone.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import errno
import json
import mmap
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import new_bucket

import streamacc.store
from streamacc.errors import LockedError, StoreError
from streamacc.store import LEASE_KEY, Target, open_target, read_into, sync

COMMAND = "--resume"
"""The fix a refused writer is told of."""

GROUP = json.dumps({"zarr_format": 3, "node_type": "group", "attributes": {}}).encode()
ARRAY = json.dumps(
    {
        "shape": [12],
        "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0,
        "codecs": [{"name": "bytes"}],
        "attributes": {},
        "zarr_format": 3,
        "node_type": "array",
    },
    indent=2,
).encode()
KEPT = "_streamacc/zarr.json"
KEYS = {
    "zarr.json": GROUP,
    KEPT: GROUP,
    "x/zarr.json": ARRAY,
    "x/c/0": b"\x01\x02\x03\x04",
    "x/c/1": b"\x05\x06\x07\x08",
}
"""An output in small: the root group, the bookkeeping group, an array of three chunks of which two are written."""

ABSENT = "x/c/2"
"""A chunk of the array that is never written."""

CHUNKS = ["x/c/0", "x/c/1", "x/zarr.json"]


def owned(key: str) -> bool:
    """The keys a run of array ``x`` writes, for ``clean_partials``."""
    return key.startswith("x/")


TARGETS = {"_localtarget", "_storetarget", "_icechunk"}
"""The modules of the store's targets; ``_target`` is their base, ``_opentarget`` chooses one."""


def store_imports(name: str) -> set[str]:
    """The store's own modules that its module ``name`` imports, at its top or inside a function."""
    tree = ast.parse((Path(streamacc.store.__file__).parent / f"{name}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module.split(".")[0]} if node.module else {alias.name for alias in node.names}
    return found


def test_the_opener_imports_the_targets_and_each_target_only_their_base():
    layer = {"_opentarget", "_target", *TARGETS}
    assert store_imports("_target") & layer == set()
    for name in TARGETS:
        assert store_imports(name) & layer == {"_target"}, name
    assert store_imports("_opentarget") & layer == {"_target", *TARGETS}


@dataclasses.dataclass(frozen=True)
class Place:
    """Where an output lives: what ``open_target`` is given."""

    store: Any
    options: dict[str, Any] | None = None


class TargetContract:
    """What every target does; a subclass gives the ``place`` fixture (and says how its kind differs)."""

    fsyncs = False
    """Whether ``make_durable`` flushes files to disk (a local folder), rather than finding them durable already."""

    @pytest.fixture
    def place(self, tmp_path: Path) -> Place:
        raise NotImplementedError

    @pytest.fixture
    def target(self, place: Place) -> Target:
        return self.open(place)

    def open(self, place: Place, *, read_only: bool = False) -> Target:
        return open_target(place.store, storage_options=place.options, read_only=read_only)

    def leave_temp_files(self, target: Target) -> list[str]:
        """Leave what a writer killed mid-write leaves; return the keys ``clean_partials(owned)`` must remove.

        A store whose writes are atomic requests (an object store's PUT) leaves none, so keys
        named like temp files are anyone's keys there, and stay.
        """
        for key in ("x/c/0.streamacc-tmp", f"x/c/1.{uuid.uuid4().hex}.partial"):
            target.write(key, b"half")
        return []

    def write_all(self, target: Target) -> None:
        for key, data in KEYS.items():
            target.write(key, data)

    def test_a_new_place_holds_nothing(self, target: Target) -> None:
        assert not target.exists()
        assert target.writer() is None
        assert target.read("zarr.json") is None and target.read_reused(ABSENT) is None
        assert target.list_keys() == [] and target.list_dir() == [] and target.sizes() == {}
        assert target.size(ABSENT) == 0 and target.tails([ABSENT]) == [None]
        assert target.ranges([(ABSENT, 0, 4)]) == [None]

    def test_keys_are_written_read_listed_and_deleted(self, target: Target) -> None:
        with target.lock(COMMAND):
            self.write_all(target)
            assert target.exists()
            for key, data in KEYS.items():
                assert target.read(key) == data and bytes(target.read_reused(key)) == data, key
                assert target.size(key) == len(data), key
            assert set(target.list_keys()) - {LEASE_KEY} == set(KEYS)
            assert target.list_keys("x/") == CHUNKS
            assert target.list_dir() == ["_streamacc", "x", "zarr.json"] and target.list_dir("x") == ["c", "zarr.json"]
            assert target.sizes("x/") == {key: len(KEYS[key]) for key in CHUNKS}
            assert target.tails(["x/c/0", ABSENT, "x/c/1"], 2) == [b"\x03\x04", None, b"\x07\x08"]
            parts = [("x/c/1", 1, 3), (ABSENT, 0, 2), ("x/c/0", 0, 1)]  # a shard's inner chunks are read so
            assert target.ranges(parts) == [KEYS["x/c/1"][1:3], None, KEYS["x/c/0"][:1]]
            target.delete("x/c/1")
            target.delete(ABSENT)  # nothing there: nothing happens
            assert target.read("x/c/1") is None and target.read_reused("x/c/1") is None and target.size("x/c/1") == 0
            assert target.list_keys("x/") == ["x/c/0", "x/zarr.json"]

    def test_what_is_made_durable_and_checkpointed_is_what_a_new_reader_sees(
        self, target: Target, place: Place, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from zarr.buffer import default_buffer_prototype

        fsyncs = []
        real_fsync = os.fsync
        monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd) or real_fsync(fd))
        with target.lock(COMMAND):
            for key, data in KEYS.items():
                if key in CHUNKS:  # as the sink writes chunks: through the zarr store, then made durable
                    sync(target.store.set(key, default_buffer_prototype().buffer.from_bytes(data)))
                else:
                    target.write(key, data)
            fsyncs.clear()
            target.make_durable(CHUNKS, drop_cache=True)
            assert bool(fsyncs) == self.fsyncs
            target.checkpoint("the contract's writes", nbytes=8, final=True)
            reader = self.open(place, read_only=True)
            assert reader.exists()
            assert {key: reader.read(key) for key in KEYS} == KEYS

    def test_one_writer_at_a_time(self, target: Target, place: Place) -> None:
        other = self.open(place)
        with target.lock(COMMAND):
            holder = other.writer()
            assert holder is not None
            refused = rf"is being written by {re.escape(holder)}\b.* rerun with {COMMAND}$"
            with pytest.raises(LockedError, match=refused), other.lock(COMMAND):
                pass
        assert other.writer() is None
        with other.lock(COMMAND):
            assert target.writer() is not None

    def test_clear_keeps_the_keys_given(self, target: Target) -> None:
        with target.lock(COMMAND):
            self.write_all(target)
            before = set(target.list_keys())
            target.check_clearable()
            target.clear({KEPT, LEASE_KEY})
            assert set(target.list_keys()) == before & {KEPT, LEASE_KEY}
            assert target.read(KEPT) == GROUP and target.read("zarr.json") is None and target.read("x/c/0") is None

    def test_clean_partials_removes_only_temp_files_of_owned_keys(self, target: Target) -> None:
        with target.lock(COMMAND):
            self.write_all(target)
            temps = self.leave_temp_files(target)
            before = set(target.list_keys())
            assert sorted(target.clean_partials(owned)) == sorted(temps)
            assert set(target.list_keys()) == before - set(temps)
            assert {key: target.read(key) for key in KEYS} == KEYS


class TestLocalFolder(TargetContract):
    fsyncs = True

    @pytest.fixture
    def place(self, tmp_path: Path) -> Place:
        return Place(str(tmp_path / "out.zarr"))

    def leave_temp_files(self, target: Target) -> list[str]:
        """streamacc's own temp files and zarr's, of owned keys and of others, and a user's file named like one."""
        temps = ["x/c/0.streamacc-tmp", f"x/c/1.{uuid.uuid4().hex}.partial"]
        others = [f"{KEPT}.streamacc-tmp", "x/c/notes.partial"]
        for key in (*temps, *others):
            (Path(target.store.root) / key).write_bytes(b"half")
        return temps


@pytest.fixture(scope="module")
def object_bucket(s3_server: Any) -> Iterator[Any]:
    """One bucket for the object store's contract, each test's output under a prefix of its own (a bucket takes
    long to make). A module's fixture: pytest 9.2 refuses a class-scoped fixture defined as a method."""
    bucket = new_bucket(s3_server)
    yield bucket
    with contextlib.suppress(Exception):
        s3_server.fs().rm(bucket.name, recursive=True)


class TestObjectStore(TargetContract):
    @pytest.fixture
    def place(self, object_bucket: Any) -> Place:
        bucket = object_bucket
        return Place(bucket.url(f"{uuid.uuid4().hex}.zarr"), bucket.storage_options)


class TestIcechunkRepository(TargetContract):
    @pytest.fixture
    def place(self, tmp_path: Path) -> Place:
        pytest.importorskip("icechunk")
        return Place(f"icechunk://{tmp_path / 'repo'}")

    def leave_temp_files(self, target: Target) -> list[str]:
        return []  # a repository holds zarr keys only, and a session's writes leave no temp files


class TestMemoryStore(TargetContract):
    @pytest.fixture
    def place(self) -> Place:
        from zarr.storage import MemoryStore

        return Place(MemoryStore())


# --- read_into: a local file read into a caller's buffer -------------------------------------------------------


def test_read_into_fills_the_callers_buffer(tmp_path: Path) -> None:
    path = tmp_path / "c0"
    path.write_bytes(b"0123456789")
    room = np.zeros(16, np.uint8)
    got = read_into(path, lambda size: room[16 - size :], drop_cache=True)
    assert got.base is room and bytes(got) == b"0123456789"
    assert read_into(path, lambda size: None) is None  # no room for it: nothing read
    assert read_into(tmp_path / "none", lambda size: room[:size]) is None


def test_read_into_follows_no_link_inside_an_output(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "folder").mkdir()
    buffer = lambda size: bytearray(size)  # noqa: E731
    assert read_into(tmp_path / "link", buffer) == b"abc"  # an input's file may be a link
    with pytest.raises(OSError) as raised:
        read_into(tmp_path / "link", buffer, follow=False)
    assert raised.value.errno == errno.ELOOP
    assert read_into(tmp_path / "folder", buffer, follow=False) is None  # not a file: not a key
    target = open_target(str(tmp_path))
    with pytest.raises(StoreError, match="link is a link; streamacc never reads through links inside an output"):
        target.read_reused("link")


def test_read_into_says_where_a_file_ended_early(tmp_path: Path) -> None:
    path = tmp_path / "c0"
    path.write_bytes(b"0123456789")
    views = []

    def shrinking(size: int) -> memoryview:
        os.truncate(path, 4)  # another process cuts the file while it is read
        views.append(memoryview(mmap.mmap(-1, mmap.PAGESIZE))[:size])
        return views[-1]

    with pytest.raises(OSError, match=f"^{path} ended after 4 of 10 bytes$"):
        read_into(path, shrinking)
    with pytest.raises(ValueError, match="released"):  # the buffer made for it is released, its mapping free
        views[-1].tobytes()
    path.write_bytes(b"0123456789")
    assert bytes(read_into(path, shrinking, whole=False)) == b"0123"  # the part read, for a checksum to refuse


def test_sizes_skips_what_a_writer_removes_while_the_folder_is_walked(tmp_path: Path, monkeypatch) -> None:
    for key in ("x/c/0", "x/c/1", "x/c/2", "y/c/0"):
        (tmp_path / key).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / key).write_bytes(b"1234")
    target = open_target(str(tmp_path))
    real_scandir = os.scandir

    class Listing(list[Any]):  # what os.scandir returns: its entries, and a context that closes them
        def __enter__(self) -> Listing:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    def racing(path: Any) -> Any:  # another process renames a file and drops a folder after they are listed
        entries = list(real_scandir(path))
        if Path(path) == tmp_path / "x" / "c":
            (tmp_path / "x" / "c" / "1").unlink()
        elif Path(path) == tmp_path:
            (tmp_path / "y" / "c" / "0").unlink()
            (tmp_path / "y" / "c").rmdir()
        return Listing(entries)

    monkeypatch.setattr(os, "scandir", racing)
    assert target.sizes() == {"x/c/0": 4, "x/c/2": 4}
