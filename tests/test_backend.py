"""xarray's own doors: ``xr.open_dataset(path, engine="streamacc")`` gives what ``streamacc.open`` gives.

The backend is tested as a class (``engine=StreamaccBackend``, which xarray accepts as it
accepts a name), and its registration by what ``setup.cfg`` declares: xarray finds the name
``"streamacc"`` in the installed package's entry points. References are numpy loops and
``streamacc.open`` itself, whose own tests check it against numpy.
"""

from __future__ import annotations

import configparser
import importlib.metadata
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from helpers import failing
from xarray.backends import BackendEntrypoint

import streamacc
from streamacc.errors import StoreError, VerifyError

ROOT = Path(__file__).resolve().parents[1]


def declared_backends() -> dict[str, str]:
    """The entry points of group ``xarray.backends`` that ``setup.cfg`` declares, by name."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    text = config["options.entry_points"]["xarray.backends"]
    return dict(line.split(" = ", 1) for line in text.strip().splitlines() if line.strip())


ENTRY = importlib.metadata.EntryPoint("streamacc", declared_backends()["streamacc"], "xarray.backends")
StreamaccBackend = ENTRY.load()
"""The backend as xarray loads it from the installed package's entry point."""

LENGTH, BLOCK = 600, 64


def step(c, _):
    c = c + 1.0
    return c, {"level": c, "field": c * np.arange(6.0).reshape(2, 3)}


def numpy_level(n: int) -> np.ndarray:
    return np.arange(1.0, n + 1.0)  # c after each step, exact in float64


def write(out, **kw):
    return streamacc.write(out, step, np.float64(0.0), length=LENGTH, block_size=BLOCK, progress=False,
                           dims={"field": ["y", "x"]}, **kw)  # fmt: skip


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("backend") / "done.zarr"
    write(out, time={"step": 0.5, "start": 1.0, "units": "s"})
    return out


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Path:
    """An output whose run stopped after 3 of its 10 blocks, its arrays as long as the whole run."""
    out = tmp_path_factory.mktemp("backend") / "interrupted.zarr"
    with pytest.raises(StoreError):
        write(failing(out, "level/c/3"))
    return out


@pytest.mark.parametrize("which", ["done", "interrupted"])
def test_open_dataset_with_the_engine_is_streamacc_open(request, which):
    out = request.getfixturevalue(which)
    got = xr.open_dataset(out, engine=StreamaccBackend)
    xr.testing.assert_identical(got, streamacc.open(out))
    rows = LENGTH if which == "done" else 3 * BLOCK  # the committed steps only, where zarr holds every row
    assert zarr.open_array(out / "level").shape == (LENGTH,) and got.sizes["step"] == rows
    assert got.level.values.tobytes() == numpy_level(rows).tobytes()
    assert got.encoding["streamacc_committed_steps"] == rows
    assert got.encoding["streamacc_complete"] == (which == "done")


def test_the_class_opens_directly_and_xarray_chunks_and_drops_as_for_any_backend(done):
    direct = StreamaccBackend().open_dataset(done)
    xr.testing.assert_identical(direct, streamacc.open(done, chunks=None))
    assert list(direct.time.values[:2]) == [1.0, 1.5]
    chunked = xr.open_dataset(done, engine=StreamaccBackend, chunks={})
    assert chunked.level.chunks is not None
    xr.testing.assert_identical(chunked.compute(), streamacc.open(done).compute())
    dropped = xr.open_dataset(done, engine=StreamaccBackend, drop_variables=["field"])
    assert list(dropped.data_vars) == ["level"]
    many = xr.open_mfdataset([done], engine=StreamaccBackend, combine="nested", concat_dim="step")
    xr.testing.assert_identical(many.compute(), streamacc.open(done).compute())


def test_a_chunk_that_is_not_the_one_committed_is_refused_through_xarray(tmp_path):
    out = tmp_path / "damaged.zarr"
    write(out)
    (out / "level" / "c" / "2").write_bytes((out / "level" / "c" / "3").read_bytes())  # a valid chunk, not block 2's
    ds = xr.open_dataset(out, engine=StreamaccBackend)
    with pytest.raises(VerifyError, match="level"):
        ds.level.values  # noqa: B018


def test_it_guesses_a_local_output_and_nothing_else(tmp_path, done):
    backend = StreamaccBackend()
    plain = tmp_path / "plain.zarr"
    zarr.create_array(plain, shape=(4,), dtype="f8")
    assert backend.guess_can_open(done) and backend.guess_can_open(str(done)) and backend.guess_can_open(
        f"file://{done}")  # fmt: skip
    assert not any(backend.guess_can_open(spec) for spec in [plain, tmp_path / "missing.zarr", "s3://bucket/out.zarr",
                                                              done / "level", b"bytes", 3])  # fmt: skip
    assert backend.description and backend.url.startswith("https://")
    assert set(backend.open_dataset_parameters) == {"filename_or_obj", "drop_variables", "storage_options", "f",
                                                    "init", "xs"}  # fmt: skip


def test_setup_cfg_registers_the_backend_with_xarray(done):
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    declared = {
        group: dict(line.split(" = ", 1) for line in text.strip().splitlines() if line.strip())
        for group, text in config["options.entry_points"].items()
    }
    assert declared["xarray.backends"] == {"streamacc": "streamacc._backend:StreamaccBackend"}
    entry = importlib.metadata.EntryPoint("streamacc", declared["xarray.backends"]["streamacc"], "xarray.backends")
    loaded = entry.load()
    assert loaded is StreamaccBackend and issubclass(loaded, BackendEntrypoint)
    if "streamacc" in xr.backends.list_engines():  # where the package is installed from this checkout
        xr.testing.assert_identical(xr.open_dataset(done, engine="streamacc"), streamacc.open(done))


def test_an_output_on_s3_opens_with_its_storage_options(s3_bucket):
    url, options = s3_bucket.url("out.zarr"), s3_bucket.storage_options
    write(url, storage_options=options)
    assert not StreamaccBackend().guess_can_open(url)  # no request to guess: the engine is named
    want = streamacc.open(url, storage_options=options)
    xr.testing.assert_identical(xr.open_dataset(url, engine=StreamaccBackend, storage_options=options), want)
    got = xr.open_dataset(url, engine=StreamaccBackend, backend_kwargs={"storage_options": options})
    xr.testing.assert_identical(got, want)
    assert got.level.values.tobytes() == numpy_level(LENGTH).tobytes()
