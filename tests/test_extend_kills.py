"""An extension killed at any store write: readers read its committed steps meanwhile, and it finishes.

A writer dies at write number N of an ``--extend`` (every write after it fails too, as
nothing more reaches a store from a dead process): the root's, the manifest, each array's
metadata, each summary level's arrays and chunks, block chunks and records. At every N,
``open`` and ``info`` read the committed steps (never an error that tells them to resume
or rewrite), and ``--resume`` (or ``--extend`` again) with the longer length finishes an
output that is, file for file, one uninterrupted run of the longer length. Killed before
its manifest is saved, the output is still the shorter run, and ``--resume`` with the
longer length names ``--extend``. Every write is a place to die, the summary levels'
metadata between one another included, so every one is tried: an output that no command
can finish, or a reader that asks for ``--overwrite`` or a resume of a live writer's run,
would cost the user the steps already committed.
"""

from __future__ import annotations

import contextlib
import io
import shutil

import numpy as np
import pytest
import zarr
from helpers import assert_same_output, dies_at, store_files
from zarr.storage import LocalStore, WrapperStore

import streamacc
from streamacc.cli import main

SHORT, LONG = 1500, 2600  # blocks of 512: the extension keeps two blocks and writes three
ARGS = ["--block-size", "512", "--summary-windows", "64", "--no-progress"]


def run(*argv: object) -> tuple[int, str]:
    """The command line in this process: its exit code and its stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main([str(a) for a in argv])
    return code, err.getvalue()


def write(out, length: int, *flags: str, extra: tuple[str, ...] = ()) -> tuple[int, str]:
    return run("write", out, "--size", length, *ARGS, *extra, *flags)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The shorter run, and one uninterrupted run of the longer length, per argument list."""
    made = {}

    def get(*extra: str):
        if extra not in made:
            root = tmp_path_factory.mktemp("runs")
            assert write(root / "short.zarr", SHORT, extra=extra)[0] == 0
            assert write(root / "long.zarr", LONG, extra=extra)[0] == 0
            made[extra] = root / "short.zarr", root / "long.zarr"
        return made[extra]

    return get


def extension_writes(short, tmp_path, extra=()) -> list[str]:
    out = tmp_path / "dry.zarr"
    shutil.copytree(short, out)
    seen: list[str] = []
    with dies_at(0, seen):
        assert write(out, LONG, "--extend", extra=extra)[0] == 0
    shutil.rmtree(out)
    return seen


def readers_read_the_committed_steps(out, long_values: np.ndarray, what: str) -> None:
    ds = streamacc.open(out, chunks=None)
    rows = ds.sizes["step"]
    assert rows in (SHORT, 1024, LONG) or 1024 < rows < LONG, what
    np.testing.assert_array_equal(ds.x.values, long_values[:rows], err_msg=what)
    code, err = run("info", out)
    assert code == 0, (what, err)


def finish(out, what: str, extra=()) -> None:
    """``--resume`` with the longer length; where it names ``--extend`` instead, that."""
    code, err = write(out, LONG, "--resume", extra=extra)
    if code != 0:
        assert code == 2 and err.count("\n") == 1 and "asks for more; lengthen it with --extend" in err, (what, err)
        assert "--overwrite" not in err
        code, err = write(out, LONG, "--extend", extra=extra)
    assert code == 0, (what, err)


def test_an_extension_killed_at_any_write_is_read_and_finishes_as_one_longer_run(runs, tmp_path):
    short, long = runs()
    writes = extension_writes(short, tmp_path)
    assert any("summaries/w64/x_min/zarr.json" in w for w in writes) and any("/c/" in w for w in writes)
    long_values = zarr.open_array(long / "x", mode="r")[:]
    for n, what in enumerate(writes, 1):
        what = f"killed at write {n} ({what})"
        out = tmp_path / f"k{n}.zarr"
        shutil.copytree(short, out)
        with dies_at(n):
            code, err = write(out, LONG, "--extend")
        assert code == 1 and "Killed" in err, (what, err)
        readers_read_the_committed_steps(out, long_values, what)
        if n % 2:  # half of them are finished by extending again, as the user first asked
            assert write(out, LONG, "--extend")[0] == 0, what
        else:
            finish(out, what)
        assert_same_output(out, long)
        shutil.rmtree(out)


def test_a_virtual_extension_killed_at_any_write_finishes_as_one_longer_virtual_run(runs, tmp_path):
    extra = ("--virtual",)
    short, long = runs(*extra)
    writes = extension_writes(short, tmp_path, extra)
    assert not any("/c/" in w and "_streamacc/" not in w for w in writes)  # a virtual run stores no data chunk
    long_values = streamacc.open(long, chunks=None).x.values
    for n, what in enumerate(writes, 1):
        what = f"killed at write {n} ({what})"
        out = tmp_path / f"k{n}.zarr"
        shutil.copytree(short, out)
        with dies_at(n):
            assert write(out, LONG, "--extend", extra=extra)[0] == 1, what
        assert run("info", out)[0] == 0, what
        assert streamacc.open(out, chunks=None).x.values.tobytes() in long_values.tobytes(), what
        finish(out, what, extra)
        assert store_files(out) == store_files(long), what  # plain Zarr readers refuse a virtual array
        shutil.rmtree(out)


def test_resume_with_another_length_names_the_command_that_keeps_the_steps(runs, tmp_path):
    short, _ = runs()
    out = tmp_path / "out.zarr"
    shutil.copytree(short, out)
    before = store_files(out)
    code, err = write(out, LONG, "--resume")
    assert code == 2 and "finished run of 1500 steps, and --size 2600 asks for more; lengthen it with --extend" in err
    writes = extension_writes(short, tmp_path)
    manifest = writes.index("write _streamacc/zarr.json")
    with dies_at(manifest + 2):  # the longer run's manifest is saved: it is being extended
        write(out, LONG, "--extend")
    code, err = write(out, SHORT, "--resume")
    assert code == 2 and err.count("\n") == 1
    assert "its run is 2600 steps long (1024 committed), not 1500; continue it with --size 2600" in err
    assert store_files(out) != before
    assert write(out, LONG, "--resume")[0] == 0


def test_every_refusal_after_an_interrupted_extension_names_the_command_that_keeps_its_steps(runs, tmp_path):
    """Killed once the longer run's manifest is saved: a plain write, an extension to another length and a
    resume with the shorter length each name --resume with the length being written first; readers read."""
    short, long = runs()
    out = tmp_path / "out.zarr"
    shutil.copytree(short, out)
    writes = extension_writes(short, tmp_path)
    with dies_at(writes.index("write _streamacc/zarr.json") + 2):
        assert write(out, LONG, "--extend")[0] == 1
    before = store_files(out)
    refusals = {
        (): f"holds an unfinished run (1024 of {LONG} steps committed); continue it with --resume and --size {LONG}",
        ("--extend",): f"not finished (1024 of {LONG} steps committed); finish it first with --resume and --size "
        f"{LONG}, then extend it",
    }
    for flags, needle in refusals.items():
        code, err = write(out, 3000, *flags)
        assert code == 2 and err.count("\n") == 1 and needle in err, err
        assert "--overwrite" not in err or err.index("--resume") < err.index("--overwrite"), err
    code, err = write(out, SHORT, "--resume")
    assert code == 2 and f"continue it with --size {LONG}" in err and "--overwrite" not in err, err
    for command in ("info", "verify"):
        assert run(command, out)[0] == 0, command
    assert store_files(out) == before
    assert write(out, LONG, "--resume")[0] == 0
    assert_same_output(out, long)
    code, err = write(out, LONG)
    assert code == 2 and f"holds a finished run of {LONG} steps; lengthen it with --extend and a longer --size" in err


def test_an_extension_on_object_storage_killed_at_its_own_writes_finishes(runs, s3_bucket):
    """On S3, a kill after the longer run's manifest (the array's shape lags it), and one half way through
    making the summary arrays afresh."""
    pytest.importorskip("s3fs")
    short, long = runs()
    fs, options = s3_bucket.server.fs(), ["--storage-option", f"endpoint_url={s3_bucket.server.endpoint}"]
    shutil.copytree(short, short.parent / "upload")
    fs.put(str(short.parent / "upload"), f"{s3_bucket.name}/short.zarr", recursive=True)
    seen: list[str] = []
    url = s3_bucket.url("dry.zarr")
    fs.copy(f"{s3_bucket.name}/short.zarr", f"{s3_bucket.name}/dry.zarr", recursive=True)
    with dies_at(0, seen):
        assert write(url, LONG, "--extend", extra=tuple(options))[0] == 0
    kinds = ["set x/zarr.json", "set _streamacc/summaries/w64/x_max/zarr.json"]
    points = [next(n for n, w in enumerate(seen, 1) if w.startswith(kind)) for kind in kinds]
    assert points == sorted(points)
    for n in points:
        key = f"k{n}.zarr"
        fs.copy(f"{s3_bucket.name}/short.zarr", f"{s3_bucket.name}/{key}", recursive=True)
        with dies_at(n):
            assert write(s3_bucket.url(key), LONG, "--extend", extra=tuple(options))[0] == 1, seen[n - 1]
        assert run("info", s3_bucket.url(key), *options)[0] == 0, seen[n - 1]
        finish(s3_bucket.url(key), seen[n - 1], tuple(options))
        fs.invalidate_cache()
        root = f"{s3_bucket.name}/{key}"
        found = {p[len(root) + 1 :]: fs.cat_file(p) for p in fs.find(root)}
        found.pop("_streamacc/lease/zarr.json", None)
        assert found == store_files(long), seen[n - 1]


class Stale(WrapperStore):
    """The output as a reader sees it that read the manifest before a writer moved the output on: its first
    read of the manifest returns ``manifest``, every later read what the store holds."""

    def __init__(self, store, manifest: bytes) -> None:
        super().__init__(store)
        self.stale = [manifest]

    def _with_store(self, store):
        return type(self)(store, *self.stale)

    async def get(self, key, prototype, byte_range=None):
        if key == "_streamacc/zarr.json" and self.stale:
            return prototype.buffer.from_bytes(self.stale.pop())
        return await self._store.get(key, prototype, byte_range)


def test_a_reader_that_read_the_manifest_before_a_writer_moved_on_reads_the_newer_one(runs, tmp_path):
    """A reader reads the manifest, then a writer extends the output (manifest, arrays) before the reader
    looks at the arrays: it reads the manifest again rather than calling the arrays changed."""
    short, long = runs()
    out = tmp_path / "out.zarr"
    shutil.copytree(short, out)
    before = (out / "_streamacc" / "zarr.json").read_bytes()
    writes = extension_writes(short, tmp_path)
    with dies_at(writes.index("set x/zarr.json") + 2):  # the longer manifest saved and the array grown
        write(out, LONG, "--extend")
    assert zarr.open_array(out / "x", mode="r").shape == (LONG,)
    stale = Stale(LocalStore(out, read_only=True), before)
    ds = streamacc.open(stale, chunks=None)
    assert not stale.stale  # it read the older manifest first
    np.testing.assert_array_equal(ds.x.values, zarr.open_array(long / "x", mode="r")[: ds.sizes["step"]])
