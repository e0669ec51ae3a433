"""Virtual outputs: the carries are stored, the data recomputed on reading, bit for bit a stored write's.

Every reference is a stored write of the same run (itself checked against one lax.scan
elsewhere), compared value for value and, once materialized, file for file.
"""

from __future__ import annotations

import json
import shutil
import signal
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
import zarr
from helpers import RECORDS, OnesUntil, faultrun_process, node_attribute, read_manifest, run_warm, temp_files

import streamacc
from streamacc.errors import InputError, StoreError, VerifyError
from streamacc.record import trusted_manifest
from streamacc.run import RECYCLED_BLOCKS, recomputing_store
from streamacc.store import open_target

jax.config.update("jax_enable_x64", True)

MANIFEST = "_streamacc/zarr.json"


def gp(c, _):
    c = c * (1 + 1e-8)
    return c, c


def heat(u, _):
    u = u + 0.1 * (jnp.roll(u, 1) + jnp.roll(u, -1) - 2 * u)
    return u, u


def ensemble(carry, _):
    key, v = carry
    key, k = jax.random.split(key)
    v = v + jax.random.normal(k, v.shape)
    return (key, v), v


def field(u, _):
    u = 0.99 * u + 0.01 * jnp.roll(u, 1, axis=0)
    return u, {"u": u, "mean": u.mean()}


def cumsum(c, x):
    return c + x, c + x


CASES = {
    "scalar": (gp, np.float64(1.0), None, {"length": 5000, "block_size": 512}),
    "state_4096": (heat, np.sin(np.linspace(0, 3, 4096)), None, {"length": 300, "block_size": 64}),
    "ensemble_1000_thinned": (
        ensemble,
        (jax.random.key(0), jnp.zeros(1000)),
        None,
        {"length": 3000, "block_size": 200, "save_every": 10, "dims": {"y": ["path"]}},  # 300 rows: not small
    ),
    "field_256x256_time": (
        field,
        np.ones((256, 256)) * np.arange(256.0),
        None,
        {"length": 48, "block_size": 16, "time": {"step": 0.5, "units": "s"}},
    ),
    "input_xs": (cumsum, np.float64(0.0), np.arange(3000.0), {"block_size": 256}),
}


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def same_dataset(a: xr.Dataset, b: xr.Dataset) -> bool:
    return (
        set(a.data_vars) == set(b.data_vars)
        and all(np.array_equal(a[n].values, b[n].values, equal_nan=True) for n in a.data_vars)
        and all(np.array_equal(a[c].values, b[c].values) for c in a.coords)
    )


def write_both(tmp_path: Path, case: str, **extra):
    f, init, xs, kw = CASES[case]
    kw = {**kw, **extra}
    stored, virtual = tmp_path / "stored.zarr", tmp_path / "virtual.zarr"
    streamacc.write(virtual, f, init, xs, progress=False, virtual=True, **kw)
    streamacc.write(stored, f, init, xs, progress=False, **kw)
    windows = read_manifest(virtual)["identity"]["summaries"]
    if read_manifest(stored)["identity"]["summaries"] != windows:  # a small stored output has none by default
        streamacc.write(stored, f, init, xs, progress=False, mode="overwrite", **{**kw, "summaries": windows})
    return stored, virtual, (f, init, xs)


@pytest.mark.parametrize("case", list(CASES))
def test_a_virtual_output_reads_verifies_and_materializes_as_the_stored_write(tmp_path, case):
    stored, virtual, (f, init, xs) = write_both(tmp_path, case)
    reference = streamacc.open(stored)
    assert same_dataset(streamacc.open(virtual, f=f, init=init, xs=xs), reference)
    assert same_dataset(streamacc.overview(virtual, points=4), streamacc.overview(stored, points=4))
    report = streamacc.verify(virtual, f, init, xs)
    assert report.complete and len(report.checked_blocks) == report.committed_blocks
    assert streamacc.materialize(virtual, f=f, init=init, xs=xs, progress=False) == report.committed_blocks
    mine, theirs = files(virtual), files(stored)
    differ = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    # a virtual run keeps the carry after every block; a stored one after every few where its carry is large beside
    # its blocks' data (the field's): the stored run's carries are the virtual one's, and the rest is the same
    carries = [k for k in differ if k.startswith("_streamacc/carries/")]
    assert all(k not in theirs or k == "_streamacc/carries/zarr.json" for k in carries)
    sparse = read_manifest(stored)["carries"]["every"] > 1
    assert bool(carries) == sparse
    kept = {json.dumps(r) for r in node_attribute(stored / RECORDS, "streamacc_records") if r["carry"] is not None}
    every = node_attribute(virtual / RECORDS, "streamacc_records")
    assert kept <= {json.dumps(r) for r in every} and all(r["carry"] is not None for r in every)
    assert [k for k in differ if k not in carries] == [RECORDS, MANIFEST] if sparse else [MANIFEST]
    assert same_dataset(
        xr.open_zarr(virtual)[list(reference.data_vars)], reference.drop_vars(["step", "time"], errors="ignore")
    )


def test_a_virtual_output_stores_no_data_and_plain_readers_get_an_error(tmp_path):
    _, virtual, _ = write_both(tmp_path, "scalar")
    about = streamacc.info(virtual)
    assert about.virtual and about.stored_blocks == 0 and about.arrays["y"].stored_bytes == 0
    assert not list((virtual / "y").glob("c/*"))  # no chunk at all
    assert "the data of 0 of 10 committed blocks are stored" in str(about)
    for read in (lambda: xr.open_zarr(virtual), lambda: zarr.open_group(virtual, mode="r")["y"][:],
                 lambda: zarr.open_array(virtual / "y", mode="r")[:]):  # fmt: skip
        with pytest.raises(Exception, match="streamacc_virtual"):
            read()
    attrs = json.loads((virtual / "zarr.json").read_text())["attributes"]
    assert attrs["streamacc_virtual"] == 1 and "streamacc.open(path)" in attrs["streamacc_status"]
    assert streamacc.open(virtual, f=gp).encoding["streamacc_virtual"] == 1


def test_a_partly_materialized_output_reads_stored_and_recomputed_blocks_alike(tmp_path):
    stored, virtual, _ = write_both(tmp_path, "scalar")
    assert streamacc.materialize(virtual, steps=(1000, 2100), f=gp, progress=False) == 4  # blocks 1 to 4
    assert streamacc.materialize(virtual, steps=slice(1500, None), f=gp, progress=False) == 5  # 5 to 9
    about = streamacc.info(virtual)
    assert about.stored_blocks == 9 and about.virtual
    with pytest.raises(Exception, match="streamacc_virtual"):
        xr.open_zarr(virtual)  # block 0 is not stored yet
    assert same_dataset(streamacc.open(virtual, f=gp), streamacc.open(stored))
    assert streamacc.verify(virtual, gp, np.float64(1.0)).complete
    # a stored chunk that is not the one materialized is refused as for any stored output
    (virtual / "y" / "c" / "3").write_bytes((stored / "y" / "c" / "2").read_bytes())
    with pytest.raises(VerifyError, match="chunk y/c/3"):
        streamacc.open(virtual, f=gp).y.load()


def test_a_full_read_recycles_the_buffers_it_recomputes_into_and_keeps_no_block_it_served(tmp_path):
    """Read in full (each chunk once), blocks are computed into a few recycled buffers and let go once served."""
    out = tmp_path / "v.zarr"
    streamacc.write(out, gp, np.float64(1.0), length=24 * 256, block_size=256, names="x", virtual=True,
                    chunks={"step": 64}, progress=False)  # fmt: skip
    expected = np.cumprod(np.full(24 * 256, 1 + 1e-8))  # the same sequence of roundings as the scan's
    store = recomputing_store(open_target(out, read_only=True), trusted_manifest(open_target(out, read_only=True)),
                              f=gp, init=np.float64(1.0))  # fmt: skip
    with zarr.config.set({"async.concurrency": 1}):  # chunks read one at a time: how many blocks overlap is not
        values = zarr.open_array(store, path="x", mode="r")[:]  # left to the machine's load
    assert np.array_equal(values, expected)
    stats = store.buffer_stats
    assert stats.filled + stats.reused + stats.overflow == 24  # one computation per block, four chunks each
    assert stats.reused >= 24 - RECYCLED_BLOCKS and stats.copied == 0
    assert store.cached_blocks == 0


def test_extending_a_virtual_output_gives_the_longer_virtual_run(tmp_path):
    f, init, _, _ = CASES["scalar"]
    longer = tmp_path / "longer.zarr"
    streamacc.write(longer, f, init, length=9000, block_size=512, progress=False, virtual=True)
    out = tmp_path / "out.zarr"
    streamacc.write(out, f, init, length=4000, block_size=512, progress=False, virtual=True)
    streamacc.materialize(out, f=f, progress=False)  # wholly stored: a plain output, until it is extended
    xr.open_zarr(out)
    streamacc.write(out, f, init, length=9000, block_size=512, progress=False, virtual=True, mode="extend")
    with pytest.raises(Exception, match="streamacc_virtual"):
        xr.open_zarr(out)
    assert same_dataset(streamacc.open(out, f=f), streamacc.open(longer, f=f))
    assert streamacc.info(out).stored_blocks == 7  # the blocks before the stored run's last


def test_a_long_virtual_output_keeps_its_default_summaries_to_a_million_windows(tmp_path):
    """Summaries are most of what a virtual output stores: its finest default level holds at most 2**20 values per
    statistic, in windows of up to 2**16 rows, where a stored output keeps windows of at most 4096 (2**28 of them at
    2**40 steps); a run of 2**63 steps stopped early still has windows to draw."""
    from streamacc.base import default_windows

    for rows, size in [(2**34, 1), (2**40, 1), (2**63 - 1, 1), (2**30, 4096), (2**20, 2**21), (5, 2**22)]:
        windows = default_windows(rows, size, virtual=True)
        finest = windows[0]
        assert finest <= 2**16 and (-(-rows // finest) * size <= 2**20 or finest == 2**16 or finest >= rows)
        assert finest <= 4096 or -(-rows // (finest // 2)) * size > 2**20  # no shorter window would do
        levels = (finest, 4 * finest, 16 * finest, 64 * finest, 256 * finest)
        assert windows == [w for w in levels if w <= max(rows, finest)]
    for rows in (1, 1000, 2**22, 2**32):  # where the default keeps a million windows, a virtual output has the same
        assert default_windows(rows, virtual=True) == default_windows(rows)
    assert default_windows(2**34, virtual=True) == [2**14, 2**16, 2**18, 2**20, 2**22]
    assert default_windows(2**63 - 1, virtual=True) == [2**16, 2**18, 2**20, 2**22, 2**24]

    def count(c, x):
        return c + x, c + x

    for virtual, finest in ((True, 2**16), (False, 2**12)):  # 2**40 steps, stopped by the input after a few blocks
        out = tmp_path / f"{virtual}.zarr"
        with pytest.raises(RuntimeError, match="the input ends here"):
            streamacc.write(out, count, np.float64(0), OnesUntil(2**40, 2**14), block_size=2**12, names="x",
                            virtual=virtual, progress=False)  # fmt: skip
        assert streamacc.info(out).summaries.windows == (finest, 4 * finest, 16 * finest, 64 * finest, 256 * finest)


def test_a_virtual_write_killed_mid_run_resumes_to_the_same_output(seam):
    seam("run.COMMIT_SECONDS", 0.0)  # commit every block, as a long run does
    f, init, _, kw = CASES["scalar"]
    reference: dict = {}
    streamacc.write(zarr.storage.MemoryStore(reference), f, init, progress=False, virtual=True, **kw)

    class Failing(zarr.storage.MemoryStore):
        """A store whose sixth manifest save fails, as a full disk would."""

        saves = 0

        async def set(self, key, value):
            if key == MANIFEST:
                Failing.saves += 1
                if Failing.saves == 6:
                    raise OSError(28, "No space left on device")
            await super().set(key, value)

    stored: dict = {}
    with pytest.raises(StoreError, match="No space left on device"):
        streamacc.write(Failing(stored), f, init, progress=False, virtual=True, **kw)
    committed = json.loads(json.loads(stored[MANIFEST].to_bytes())["attributes"]["streamacc_manifest"])
    assert 0 < committed["committed_blocks"] < 10
    streamacc.write(zarr.storage.MemoryStore(stored), f, init, progress=False, virtual=True, mode="resume", **kw)
    assert {k: v.to_bytes() for k, v in stored.items()} == {k: v.to_bytes() for k, v in reference.items()}


def test_a_virtual_carry_pass_goes_on_while_a_commit_waits_for_the_disk(seam):
    """Without summaries a virtual run computes carries alone, a few bytes a block: the pass computes the next
    blocks' while a commit waits for its manifest to be durable, where it stood still until the commit was done,
    and the commits still come in order, each once the one before is durable."""
    seam("run.COMMIT_SECONDS", 0.0)  # a commit per block
    block, blocks = 256, 12

    read: list[int] = []  # the blocks whose rows the run has read, in order

    class Rows:
        """An input of ones that records the blocks whose rows are read."""

        shape, dtype, ndim = (block * blocks,), np.dtype(np.float64), 1

        def __len__(self) -> int:
            return self.shape[0]

        def __getitem__(self, key: slice) -> np.ndarray:
            read.append(key.start // block)
            return np.ones(key.stop - key.start)

    committed, read_before = [], []

    class Slow(zarr.storage.MemoryStore):
        """A store whose manifest saves wait, as an fsync on a busy disk does: the save committing block 3
        waits (at most 10 s) for the carry pass to read block 4."""

        async def set(self, key, value):
            if key == MANIFEST:
                manifest = json.loads(json.loads(value.to_bytes())["attributes"]["streamacc_manifest"])
                committed.append(manifest["committed_blocks"])
                if committed[-1] == 4:
                    deadline = time.monotonic() + 10
                    while max(read) < 4 and time.monotonic() < deadline:
                        time.sleep(0.001)
                    read_before.append(max(read))
            await super().set(key, value)

    stored: dict = {}
    streamacc.write(Slow(stored), cumsum, np.float64(0.0), Rows(), block_size=block, virtual=True, summaries=False,
                    progress=False)  # fmt: skip
    assert read_before[0] >= 4  # block 4 (or more) was read while the commit of block 3 waited
    assert [c for c in committed if c] == sorted(c for c in committed if c) and committed[-1] == blocks
    reference: dict = {}
    streamacc.write(zarr.storage.MemoryStore(reference), cumsum, np.float64(0.0), np.ones(block * blocks),
                    block_size=block, virtual=True, summaries=False, progress=False)  # fmt: skip
    carries = {k: v.to_bytes() for k, v in stored.items() if "records" in k}
    assert carries == {k: v.to_bytes() for k, v in reference.items() if "records" in k}


@pytest.mark.parametrize(("seconds", "saves"), [(0.0, 4), (30.0, 1)])
def test_a_materialize_commits_as_often_as_a_virtual_run(seam, seconds, saves):
    """One commit interval: a materialize's blocks commit together every ``run.COMMIT_SECONDS``, as a virtual
    run's do (each commit saves the manifest once)."""
    held: dict = {}
    streamacc.write(zarr.storage.MemoryStore(held), gp, np.float64(1.0), length=4 * 256, block_size=256, names="x",
                    virtual=True, summaries=False, progress=False)  # fmt: skip
    seam("run.COMMIT_SECONDS", seconds)
    saved = []

    class Recording(zarr.storage.MemoryStore):
        async def set(self, key, value):
            saved.extend([key] if key == MANIFEST else [])
            await super().set(key, value)

    assert streamacc.materialize(Recording(held), gp, np.float64(1.0), progress=False) == 4
    assert len(saved) == saves


def test_a_virtual_batch_commits_a_tail_of_a_few_summary_chunks_whatever_its_blocks(seam):
    """A batch's summary chunks are written as its blocks come, not all kept pending in the manifest it saves."""
    seam("run.COMMIT_SECONDS", 30.0)  # every block in one batch
    sizes = []

    class Recording(zarr.storage.MemoryStore):
        """A store that takes a while for each summary chunk, as a disk's fsync does."""

        async def set(self, key, value):
            if key == MANIFEST:
                sizes.append(len(value.to_bytes()))
            elif key.startswith("_streamacc/summaries/") and "/c/" in key:
                time.sleep(0.002)
            await super().set(key, value)

    length, window = 2**20, 4  # 262,144 windows of 4 steps, 1024 per block: 8 MiB of rows in all
    streamacc.write(Recording({}), gp, np.float64(1.0), length=length, block_size=4096, names="x", virtual=True,
                    summaries=[window], progress=False)  # fmt: skip
    all_rows = length // window * 4 * 8  # min, max, mean and count, 8 bytes each
    assert len(sizes) >= 3 and max(sizes) < all_rows / 6  # a few chunks of 4096 rows (128 KiB each) at most


def test_reading_a_virtual_output_needs_its_own_step_function(tmp_path):
    _, virtual, _ = write_both(tmp_path, "scalar")
    with pytest.raises(InputError, match=r"written from Python.*pass it as f"):
        streamacc.open(virtual)
    with pytest.raises(VerifyError, match=r"was written by .*gp"):
        streamacc.open(virtual, f=heat)
    _, ens_virtual, (f, _, _) = write_both(tmp_path / "ens", "ensemble_1000_thinned")
    with pytest.raises(InputError, match=r"carry .* has 2 leaves; pass init"):
        streamacc.open(ens_virtual, f=f)
    # a recorded carry that is not the run's: the recomputed block does not end where the next begins
    records = json.loads((virtual / "_streamacc/records_000000/zarr.json").read_text())
    blocks = json.loads(records["attributes"]["streamacc_records"])
    blocks[2]["carry"] = blocks[1]["carry"]  # the carry entering block 3 is made the one entering block 2
    shutil.copyfile(virtual / "_streamacc/carries/leaf_0/c/2", virtual / "_streamacc/carries/leaf_0/c/3")
    records["attributes"]["streamacc_records"] = json.dumps(blocks)
    (virtual / "_streamacc/records_000000/zarr.json").write_text(json.dumps(records))
    with pytest.raises(VerifyError, match=r"block [23] .* recomputes to another carry"):  # whichever is read first
        streamacc.open(virtual, f=gp).y.load()


def test_a_virtual_array_declared_plain_is_refused(tmp_path):
    _, virtual, _ = write_both(tmp_path, "scalar")
    doc = json.loads((virtual / "y/zarr.json").read_text())
    doc["codecs"] = [c for c in doc["codecs"] if c["name"] != "streamacc_virtual"]
    (virtual / "y/zarr.json").write_text(json.dumps(doc, indent=2))
    with pytest.raises(VerifyError, match=r"declared a plain array .* plain Zarr readers would read fill values"):
        streamacc.info(virtual)


def test_virtual_and_materialize_refuse_what_does_not_apply(tmp_path):
    stored, virtual, _ = write_both(tmp_path, "scalar")
    with pytest.raises(InputError, match="stores its data already"):
        streamacc.materialize(stored)
    with pytest.raises(InputError, match=r"no committed step of .* is in steps=\[9000, 9500\]"):
        streamacc.materialize(virtual, steps=(9000, 9500), f=gp)
    with pytest.raises(InputError, match="virtual must be True or False"):
        streamacc.write(tmp_path / "x.zarr", gp, np.float64(1.0), length=10, virtual="yes")
    with pytest.raises(InputError, match="inflight does not apply to a virtual write without summaries"):
        streamacc.write(tmp_path / "x.zarr", gp, np.float64(1.0), length=10, virtual=True, summaries=False, inflight=2)
    with pytest.raises(streamacc.errors.ResumeError, match="virtual: stored True, now None"):
        streamacc.write(virtual, gp, np.float64(1.0), length=5000, block_size=512, mode="resume", progress=False)


def test_the_command_line_writes_reads_and_materializes_a_virtual_output(tmp_path, capsys):
    from streamacc.cli import main

    out, ref = tmp_path / "v.zarr", tmp_path / "s.zarr"
    quiet = ["--size", "3000", "--block-size", "512", "--no-progress"]
    assert main(["write", str(out), *quiet, "--virtual"]) == 0
    assert main(["write", str(ref), *quiet]) == 0
    assert "stored 0B for 3000 steps" in capsys.readouterr().out
    assert main(["info", str(out)]) == 0 and "virtual: the data of 0 of 6" in capsys.readouterr().out
    assert main(["verify", str(out)]) == 0 and "OK, 6 of 6 committed blocks" in capsys.readouterr().out
    assert same_dataset(streamacc.open(out), streamacc.open(ref))  # a recipe recomputes from its record
    assert main(["materialize", str(out), "--steps", "0:1000", "--no-progress"]) == 0
    assert "stored the data of 2 blocks" in capsys.readouterr().out
    assert main(["materialize", str(out), "--no-progress"]) == 0
    assert "it reads as a plain Zarr output now" in capsys.readouterr().out
    assert main(["materialize", str(ref)]) == 2
    assert "--virtual" in capsys.readouterr().err


@pytest.mark.slow
def test_a_materialize_killed_twice_then_run_to_the_end_leaves_no_temp_file(tmp_path):
    """SIGKILLed half way through a data chunk in ``--steps 0:3000``, then again in a plain materialize: the run
    that finishes leaves none of their temp files, and the output is file for file a stored write's."""
    from streamacc.cli import main

    out, ref = tmp_path / "v.zarr", tmp_path / "s.zarr"
    args = ["--size", "5000", "--block-size", "512", "--codec", "none", "--no-progress"]
    assert main(["write", str(out), *args, "--virtual"]) == 0
    windows = ",".join(map(str, streamacc.info(out).summaries.windows))  # a small stored output has none by default
    assert main(["write", str(ref), *args, "--summary-windows", windows]) == 0
    proc = faultrun_process("die-in-chunk", 3, "materialize", out, "--steps", "0:3000", "--no-progress")
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    first = temp_files(out)
    assert first and all("/x/c/" in path for path in first), first  # the chunks being written when it died
    proc = faultrun_process("die-in-chunk", 2, "materialize", out, "--no-progress")
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    second = temp_files(out)
    assert second and not set(first) & set(second), (first, second)  # it cleared the first one's, then died
    assert main(["materialize", str(out), "--no-progress"]) == 0
    assert temp_files(out) == []
    mine, theirs = files(out), files(ref)
    assert sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k)) == [MANIFEST]
    assert main(["verify", str(out)]) == 0


@pytest.mark.slow
def test_a_virtual_write_and_reads_on_a_cluster(tmp_path, dask_client):
    out, ref = tmp_path / "v.zarr", tmp_path / "s.zarr"
    streamacc.write(ref, gp, np.float64(1.0), length=8000, block_size=512, progress=False)
    streamacc.write(
        out, gp, np.float64(1.0), length=8000, block_size=512, progress=False, virtual=True, client=dask_client
    )
    ds = streamacc.open(out, f=gp, chunks={"step": 512})
    assert np.array_equal(dask_client.compute(ds.y.data).result(), streamacc.open(ref).y.values)


@pytest.mark.slow
def test_a_virtual_output_on_object_storage(s3_bucket):
    url = s3_bucket.url("v.zarr")
    options = s3_bucket.storage_options
    streamacc.write(url, gp, np.float64(1.0), length=4000, block_size=512, progress=False, virtual=True,
                    storage_options=options)  # fmt: skip
    ds = streamacc.open(url, f=gp, storage_options=options)
    expected = np.multiply.accumulate(np.full(4000, 1 + 1e-8))
    assert np.array_equal(ds.y.values, expected)
    assert streamacc.materialize(url, steps=(0, 1024), f=gp, storage_options=options, progress=False) == 2
    assert not [key for key in s3_bucket.keys() if key.startswith("v.zarr/y/c/3")]  # noqa: SIM118
    assert np.array_equal(streamacc.open(url, f=gp, storage_options=options).y.values, expected)


def test_a_recipe_output_recomputes_in_a_fresh_interpreter_from_its_path_alone(tmp_path):
    """The recipe and its parameters are recorded: no step function to pass, and x64 on as the run had it.

    The reading process has JAX imported and left as a new process has it (x64 off; see ``helpers.Popen``).
    """
    from streamacc.cli import main

    out = tmp_path / "v.zarr"
    assert main(["write", str(out), "--size", "2000", "--virtual", "--no-progress"]) == 0
    fresh = "import jax, sys; assert not jax.config.jax_enable_x64; "  # as a new process has it
    code = fresh + "import streamacc; print(float(streamacc.open(sys.argv[1]).x[-1]))"
    done = run_warm([sys.executable, "-c", code, str(out)], text=True, timeout=120)
    expected = np.multiply.accumulate(np.r_[1.0, np.full(1999, 1 + 1e-8)])[-1]  # the gp recipe starts at x0
    assert done.returncode == 0 and float(done.stdout) == float(expected)


def test_a_read_through_open_takes_each_recomputed_block_as_it_lies(tmp_path):
    """A dask chunk that is one block gets a read-only view of the block's buffer; other rows go through zarr."""
    out = tmp_path / "v.zarr"
    streamacc.write(out, gp, np.float64(1.0), length=24 * 256, block_size=256, names="x", virtual=True,
                    chunks={"step": 64}, progress=False)  # fmt: skip
    expected = np.cumprod(np.full(24 * 256, 1 + 1e-8))  # the same sequence of roundings as the scan's
    ds = streamacc.open(out, f=gp)
    assert ds.x.chunks == ((256,) * 24,)
    taken = []  # what each dask task is handed: its block's rows, not a copy of them

    def take(rows: np.ndarray) -> np.ndarray:
        taken.append((rows.flags.writeable, rows.flags.owndata))
        return rows

    assert np.array_equal(ds.x.data.map_blocks(take, meta=np.array((), np.float64)).compute(scheduler="sync"), expected)
    assert taken == [(False, False)] * 24
    assert np.array_equal(ds.x.values, expected)
    for chunks in ({"step": 100}, None):  # rows across blocks, and rows of no whole block
        again = streamacc.open(out, f=gp, chunks=chunks).x
        assert np.array_equal(again[100:700].values, expected[100:700])
        assert np.array_equal(again[[3, 5000, 300]].values, expected[[3, 5000, 300]])

    target = open_target(out, read_only=True)
    store = recomputing_store(target, trusted_manifest(target), f=gp, init=np.float64(1.0))
    lazy = xr.open_zarr(store, consolidated=False, zarr_format=3, chunks=None)[["x"]]
    assert np.array_equal(store.recomputed_variables(lazy).chunk({"step": 256}).x.values, expected)
    stats = store.buffer_stats
    assert stats.filled + stats.reused + stats.overflow == 24 and stats.copied == 0  # one computation per block
    assert store.cached_blocks == 0  # each block let go once all of its rows were served
