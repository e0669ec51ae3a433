"""Outputs as other tools see them: every reader is told the truth, and nothing trips them.

An interrupted or still-running output says so in its attributes and ``streamacc.open``
returns only its committed steps; every Zarr reader (xarray with and without consolidated
metadata, datatree, zarr, dask) opens outputs cleanly under ``-W error``; attributes sit
on the arrays and survive netCDF export; variables added with xarray do not disturb
``verify`` or ``info``; read-only stores and object-store failures are handled.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import uuid
import warnings
from pathlib import Path

import dask.array as da
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr
import zarr
from helpers import failing
from zarr.storage import FsspecStore, LocalStore

import streamacc
from streamacc.cli import main
from streamacc.errors import StoreError
from streamacc.run import Output

LENGTH, BLOCK = 1000, 64  # 16 blocks, the last one short
XS = np.linspace(-1.0, 1.0, LENGTH)
INIT = np.float64(0.25)
ATTRS = {"recipe": "demo", "params": {"a": 0.5, "tags": ["x", "y"]}, "flag": True, "big": 2**40}


def step(c, x):
    c = 0.5 * c + x
    return c, {"level": c, "pair": jnp.stack([c, c * c])}


def write(out, **kw):
    # summaries asked for: the default leaves an output this small without them (its overview reads its data)
    asked = {} if kw.get("reverse") else {"summaries": [16, 256]}  # a reverse scan has none
    kw = {"block_size": BLOCK, "progress": False, "attrs": ATTRS, **asked, **kw}
    return streamacc.write(out, step, INIT, kw.pop("xs", XS), **kw)


def reference() -> dict[str, np.ndarray]:
    """The outputs of a plain numpy loop, computed independently of streamacc."""
    level = np.empty(LENGTH)
    c = INIT
    for i, x in enumerate(XS):
        c = 0.5 * c + x
        level[i] = c
    return {"level": level, "pair": np.stack([level, level * level], axis=1)}


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    out = tmp_path_factory.mktemp("done") / "out.zarr"
    write(out, array_attrs={"level": {"units": "m", "long_name": "level of the thing"}})
    return out


@contextlib.contextmanager
def strict():
    """Every warning is an error (as under ``python -W error``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# --- the truth about partial outputs --------------------------------------------------------


def test_an_interrupted_output_says_so_and_open_returns_only_committed_steps(tmp_path):
    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError):
        write(failing(out, "level/c/9"), inflight=3)  # block 9
    ref = reference()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        raw = xr.open_zarr(out)
        assert raw.attrs["streamacc_complete"] == 0
        assert raw.attrs["streamacc_committed_steps"] <= 9 * BLOCK
        assert "incomplete" in raw.attrs["streamacc_status"]
        ds = streamacc.open(out)
    assert ds.sizes["step"] == 9 * BLOCK and ds.encoding["streamacc_committed_steps"] == 9 * BLOCK
    assert ds.encoding["streamacc_complete"] == 0
    assert ds.step.dtype == np.int64 and ds.step[-1] == 9 * BLOCK - 1
    np.testing.assert_array_equal(ds.level.values, ref["level"][: 9 * BLOCK])
    np.testing.assert_array_equal(ds.pair.values, ref["pair"][: 9 * BLOCK])
    assert not np.isnan(ds.level.values).any()
    write(out, mode="resume")
    ds = streamacc.open(out)
    assert ds.sizes["step"] == LENGTH and ds.encoding["streamacc_complete"] == 1
    assert xr.open_zarr(out).attrs["streamacc_committed_steps"] == LENGTH


def test_attributes_and_open_stay_true_while_the_run_goes(tmp_path, monkeypatch, seam):
    """Readers look after each commit (hooked where the run commits: a store wrapper's calls run on zarr's
    event loop, where a reader's own zarr calls would wait for ever)."""
    out = tmp_path / "out.zarr"
    seam("run.PUBLISH_SECONDS", 0.0)  # the root is refreshed at every commit
    seen = []
    real = Output.commit

    def commit(self, *results):
        before = xr.open_zarr(out).attrs
        real(self, *results)
        after = xr.open_zarr(out).attrs
        ds = streamacc.open(out)
        seen.append((before["streamacc_committed_steps"], after["streamacc_committed_steps"], ds.sizes["step"]))
        assert after["streamacc_complete"] == 0 and ds.encoding["streamacc_complete"] == 0

    monkeypatch.setattr(Output, "commit", commit)
    write(out)
    stops = [min((k + 1) * BLOCK, LENGTH) for k in range(16)]
    assert seen == [(k * BLOCK, stop, stop) for k, stop in enumerate(stops)]
    assert xr.open_zarr(out).attrs["streamacc_complete"] == 1


def test_the_root_says_the_first_commit_at_once_then_every_few_seconds(tmp_path, monkeypatch, seam):
    """A plain reader of the root sees the first block as soon as it is committed, however long the refresh
    interval; later commits wait for it (an hour here: none)."""
    out = tmp_path / "out.zarr"
    seam("run.PUBLISH_SECONDS", 3600.0)
    seen = []
    real = Output.commit

    def commit(self, *results):
        real(self, *results)
        seen.append(json.loads((out / "zarr.json").read_text())["attributes"]["streamacc_committed_steps"])

    monkeypatch.setattr(Output, "commit", commit)
    write(out, xs=XS[: 4 * BLOCK])
    assert seen == [BLOCK, BLOCK, BLOCK, BLOCK]


def test_open_of_a_reverse_scan_returns_the_committed_end(tmp_path):
    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError):
        write(failing(out, "level/c/11"), reverse=True, inflight=1)  # the 5th block it writes
    ds = streamacc.open(out)
    first = LENGTH - ds.sizes["step"]
    assert ds.step[0] == first and ds.step[-1] == LENGTH - 1 and first == 12 * BLOCK
    assert not np.isnan(ds.level.values).any()


@pytest.mark.parametrize("y", [None, {}], ids=["None", "empty-dict"])
def test_a_step_that_returns_no_y_opens_as_its_committed_steps(tmp_path, capsys, y):
    """A run that keeps only its carry (from write and from a Stream): no array, its steps and time labelled."""

    def carry_only(c, _):
        return c + 1.0, y

    written, streamed = tmp_path / "written.zarr", tmp_path / "streamed.zarr"
    keywords = {"length": 1000, "block_size": 128, "progress": False, "time": {"step": 0.5, "units": "s"}}
    assert float(streamacc.write(written, carry_only, np.float64(0.0), **keywords)) == 1000.0
    with streamacc.Stream(streamed, carry_only, **keywords) as stream:
        assert float(jax.jit(lambda c: stream.scan(c))(np.float64(0.0))) == 1000.0
    for out in (written, streamed):
        ds = streamacc.open(out)
        assert list(ds.data_vars) == [] and dict(ds.sizes) == {"step": 1000}
        assert ds.step.values.tolist() == list(range(1000)) and ds.time.values.tolist() == [0.5 * s for s in
                                                                                           range(1000)]  # fmt: skip
        assert ds.encoding["streamacc_committed_steps"] == 1000 and ds.encoding["streamacc_complete"] == 1
        assert ds.sel(step=slice(10, 19)).sizes["step"] == 10
        assert main(["plot", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"streamacc: error: {out} holds no output array (its step returns no y: the run keeps its carries only), "
            "so there is nothing to summarise; streamacc.open(path) gives its committed steps\n"
        )
    xr.testing.assert_identical(streamacc.open(streamed), streamacc.open(written))


def test_open_works_on_read_only_stores_and_urls(done, tmp_path):
    for store in (LocalStore(done, read_only=True), FsspecStore.from_url(f"file://{done}", read_only=True), done):
        ds = streamacc.open(store)
        assert ds.sizes["step"] == LENGTH and set(ds.data_vars) == {"level", "pair"}
    with pytest.raises(streamacc.errors.NoOutputError, match="does not exist"):
        streamacc.open(tmp_path / "missing.zarr")


# --- every reader, cleanly -------------------------------------------------------------------


def test_every_reader_opens_outputs_cleanly(done, tmp_path):
    ref = reference()
    with strict():
        for consolidated in (True, False):
            ds = xr.open_zarr(done, consolidated=consolidated)
            assert set(ds.data_vars) == {"level", "pair"}
            np.testing.assert_array_equal(ds.level.values, ref["level"])
        tree = xr.open_datatree(done, engine="zarr")
        np.testing.assert_array_equal(tree["level"].values, ref["level"])
        members = dict(zarr.open_group(done, mode="r", use_consolidated=False).members(max_depth=None))
        assert {"level", "pair"} <= set(members)
        np.testing.assert_array_equal(da.from_zarr(str(done), component="pair").compute(), ref["pair"])
    copy = tmp_path / "copy.zarr"
    shutil.copytree(done, copy)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part")  # zarr's own note
        zarr.consolidate_metadata(str(copy))
        extra = xr.Dataset({"logx": ("step", np.log(np.abs(ref["level"]) + 1.0))})
        extra.to_zarr(copy, mode="a", consolidated=True)
        assert set(xr.open_zarr(copy).data_vars) == {"level", "pair", "logx"}


def test_attributes_are_on_the_arrays_and_netcdf_safe(done, tmp_path):
    ds = xr.open_zarr(done)
    assert ds.level.attrs == {"units": "m", "long_name": "level of the thing"}
    assert ds.pair.attrs == {}
    assert json.loads(ds.attrs["params"]) == {"a": 0.5, "tags": ["x", "y"]}
    assert ds.attrs["flag"] == 1 and ds.attrs["big"] == 2**40 and isinstance(ds.attrs["big"], int)  # exact
    for key, value in ds.attrs.items():
        assert isinstance(value, (str, int, float)), (key, value)
    nc = tmp_path / "s.nc"
    ds.isel(step=slice(0, 100)).to_netcdf(nc)  # netCDF-4 (h5netcdf, of the xarray extra): 64-bit integers too
    back = xr.open_dataset(nc)
    assert back.attrs["recipe"] == "demo" and back.level.attrs["units"] == "m"
    np.testing.assert_array_equal(back.level.values, reference()["level"][:100])
    assert back.attrs["big"] == 2**40


def test_a_slice_written_elsewhere_carries_the_run_but_not_the_store_s_progress(done, tmp_path):
    ds = streamacc.open(done)
    progress = {
        "streamacc_complete": 1,
        "streamacc_committed_start": 0,
        "streamacc_committed_steps": LENGTH,
        "streamacc_total_steps": LENGTH,
        "streamacc_status": f"complete: all {LENGTH} steps committed",
    }
    head = ds.isel(step=slice(0, 10))
    assert {k: head.encoding[k] for k in progress} == progress  # what the store held when it was opened
    assert not progress.keys() & ds.attrs.keys()
    head.to_netcdf(tmp_path / "t.nc")
    with xr.open_dataset(tmp_path / "t.nc") as back:
        assert not [k for k in back.attrs if k in progress or k == "streamacc_virtual"]
        assert back.attrs["recipe"] == "demo" and back.attrs["streamacc_version"] == streamacc.__version__
        np.testing.assert_array_equal(back.level.values, reference()["level"][:10])


# --- the run's own arrays only ----------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part")
def test_variables_added_with_xarray_do_not_disturb_verify_info_or_resume(done, tmp_path, capsys):
    out = tmp_path / "out.zarr"
    shutil.copytree(done, out)
    xr.Dataset({"logx": ("step", np.arange(LENGTH, dtype="f8"))}).to_zarr(out, mode="a")
    report = streamacc.verify(out, step, INIT, XS)
    assert report.checked_blocks == tuple(range(16))
    assert set(streamacc.info(out).arrays) == {"level", "pair"}
    with pytest.warns(streamacc.errors.StreamaccWarning, match="already complete"):
        write(out, mode="resume")
    assert (out / "logx" / "zarr.json").exists()
    assert set(streamacc.open(out).data_vars) == {"level", "pair"}


def test_info_and_verify_work_on_read_only_stores(done):
    for store in (LocalStore(done, read_only=True), FsspecStore.from_url(f"file://{done}", read_only=True)):
        assert streamacc.info(store).committed_steps == LENGTH
        assert streamacc.verify(store, step, INIT, XS, blocks=3).checked_blocks == (0, 8, 15)


def test_verify_takes_storage_options():
    url = f"memory://streamacc-tests/{uuid.uuid4().hex}/out.zarr"
    write(url)
    options = {"skip_instance_cache": False}
    assert streamacc.verify(url, step, INIT, XS, blocks=2, storage_options=options).complete
    assert streamacc.open(url, storage_options=options).sizes["step"] == LENGTH


# --- object-store failures ----------------------------------------------------------------------


def test_a_network_failure_of_an_object_store_names_the_committed_steps():
    from botocore.exceptions import EndpointConnectionError

    url = f"memory://streamacc-tests/{uuid.uuid4().hex}/out.zarr"
    lost = EndpointConnectionError(endpoint_url="http://127.0.0.1:9/bucket")
    with pytest.raises(StoreError, match=r"failed after \d+ of 1000 steps \(Could not connect.*mode='resume'"):
        write(failing(url, "level/c/3", lost), inflight=1)
    assert streamacc.open(url).sizes["step"] == 3 * BLOCK  # blocks 0-2 committed; block 3 failed
    write(url, mode="resume")
    np.testing.assert_array_equal(streamacc.open(url).level.values, reference()["level"])


def test_cli_info_of_a_missing_path(tmp_path, capsys):
    assert main(["info", str(tmp_path / "missing.zarr")]) == 2
    assert capsys.readouterr().err.strip().endswith("missing.zarr does not exist; check the path")


@pytest.mark.parametrize("command", ["info", "verify", "plot"])
def test_readers_of_an_empty_folder_or_a_file_say_what_is_there(tmp_path, capsys, command):
    (tmp_path / "empty").mkdir()
    (tmp_path / "f.txt").write_text("notes")
    for path, what in (("empty", "is an empty folder, not a streamacc output"),
                       ("f.txt", "is a file, not a streamacc output (an output is a folder)")):  # fmt: skip
        assert main([command, str(tmp_path / path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.strip().endswith(f"{path} {what}; check the path"), err
        assert "choose another output path" not in err
    for read in (streamacc.open, streamacc.overview, streamacc.info):
        with pytest.raises(streamacc.errors.NoOutputError, match=r"f\.txt is a file, not a streamacc output"):
            read(tmp_path / "f.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "f.txt"] and not any((tmp_path / "empty").iterdir())


def test_the_readme_reading_example_runs_as_written(tmp_path, monkeypatch):
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = r"## Reading the result\s+(?:<!-- needs: xarray -->\s+)?```python\n(.+?)```"
    code = re.search(block, readme, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    from streamacc.cli import main

    assert main(["write", "out.zarr", "--size", "3000", "--block-size", "1024", "--no-progress"]) == 0
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # the README's own code, unchanged
    ref = np.multiply.accumulate(np.r_[1.0, np.full(2999, 1 + 1e-8)])
    np.testing.assert_array_equal(scope["ds"].x.values, ref)
    with xr.open_dataset(tmp_path / "first.nc") as first:
        np.testing.assert_array_equal(first.x.values, ref[:1000])
        assert first.attrs["recipe"] == "gp" and "streamacc_total_steps" not in first.attrs


# --- streamacc's bookkeeping, through the root ------------------------------------------------


def bookkeeping_opens_by_name(out: Path) -> None:
    """A Zarr reader that opens the root (with its consolidated metadata, as it does by default) finds
    ``_streamacc`` and every summary level by name, with the values stored under its own path."""
    with strict():
        root = zarr.open_group(out, mode="r")
        assert root.metadata.consolidated_metadata is not None  # the root was read in one document
        assert "manifest" in root["_streamacc"].attrs["description"]
        assert set(xr.open_zarr(out).variables) == {"level", "pair"}  # the data alone
        windows = json.loads(json.loads((out / "_streamacc/zarr.json").read_text())["attributes"]
                             ["streamacc_manifest"])["identity"]["summaries"]  # fmt: skip
        assert windows
        for window in windows:
            path = f"_streamacc/summaries/w{window}"
            own = zarr.open_array(out / path / "level_max", mode="r")[:]
            np.testing.assert_array_equal(root[path]["level_max"][:], own)
            np.testing.assert_array_equal(root["_streamacc"]["summaries"][f"w{window}/level_max"][:], own)
            level = xr.open_zarr(out, group=path)
            assert level.attrs["window"] == window
            np.testing.assert_array_equal(level.level_max.values, own)


def test_zarr_readers_open_the_bookkeeping_by_name_through_the_root(done, tmp_path):
    bookkeeping_opens_by_name(done)
    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError):
        write(failing(out, "level/c/9"), inflight=3)  # block 9
    assert json.loads((out / "zarr.json").read_text())["attributes"]["streamacc_complete"] == 0
    bookkeeping_opens_by_name(out)


def older_root(out: Path) -> None:
    """The root as streamacc 0.3 and older wrote it: its consolidated metadata lists the data arrays only."""
    doc = json.loads((out / "zarr.json").read_text())
    members = doc["consolidated_metadata"]["metadata"]
    doc["consolidated_metadata"]["metadata"] = {name: members[name] for name in ("level", "pair")}
    (out / "zarr.json").write_text(json.dumps(doc, indent=1))


def shrunk_summary(out: Path) -> None:
    doc = json.loads((out / "zarr.json").read_text())
    members = doc["consolidated_metadata"]["metadata"]
    name = min(k for k in members if k.endswith("/level_max"))
    members[name]["shape"] = [members[name]["shape"][0] - 1]
    (out / "zarr.json").write_text(json.dumps(doc, indent=1))


def test_a_root_without_the_bookkeeping_is_read_and_completed_by_resume(done, tmp_path):
    out = tmp_path / "out.zarr"
    shutil.copytree(done, out)
    older_root(out)
    with pytest.raises(KeyError):
        zarr.open_group(out, mode="r")["_streamacc"]
    assert streamacc.info(out).complete
    assert streamacc.verify(out, step, INIT, XS).checked_blocks == tuple(range(16))
    np.testing.assert_array_equal(streamacc.open(out).level.values, reference()["level"])
    with pytest.warns(streamacc.errors.StreamaccWarning, match="already complete"):
        write(out, mode="resume")
    assert (out / "zarr.json").read_bytes() == (done / "zarr.json").read_bytes()
    bookkeeping_opens_by_name(out)


def test_a_root_that_misdescribes_a_summary_is_refused_and_rewritten_by_resume(done, tmp_path):
    out = tmp_path / "out.zarr"
    shutil.copytree(done, out)
    shrunk_summary(out)
    with pytest.raises(StoreError, match=r"describes array '_streamacc/summaries/w\d+/level_max' otherwise"):
        streamacc.open(out)
    with pytest.warns(streamacc.errors.StreamaccWarning, match="already complete"):
        write(out, mode="resume")
    assert (out / "zarr.json").read_bytes() == (done / "zarr.json").read_bytes()
