"""The S3 test server is real S3 to every client: zarr through s3fs here and in a subprocess."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest
import zarr
from helpers import run_warm
from zarr.storage import FsspecStore

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")


def test_zarr_writes_and_reads_through_the_server(s3_bucket):
    values = np.arange(10, dtype="f8") ** 2
    store = FsspecStore.from_url(s3_bucket.url("x.zarr"), storage_options=s3_bucket.storage_options)
    group = zarr.open_group(store, mode="w")
    group.create_array("x", shape=(10,), chunks=(4,), dtype="f8")[:] = values
    chunks = [f"x.zarr/x/c/{i}" for i in range(3)]
    assert s3_bucket.keys() == [*chunks, "x.zarr/x/zarr.json", "x.zarr/zarr.json"]
    reader = FsspecStore.from_url(s3_bucket.url("x.zarr"), storage_options=s3_bucket.storage_options, read_only=True)
    np.testing.assert_array_equal(zarr.open_group(reader, mode="r")["x"][:], values)


WRITER = textwrap.dedent(
    """
    import sys, numpy as np, zarr
    from zarr.storage import FsspecStore
    store = FsspecStore.from_url(sys.argv[2], storage_options={"endpoint_url": sys.argv[1]})
    zarr.create_array(store, shape=(6,), chunks=(3,), dtype="i8")[:] = np.arange(6) * 7
    """
)


def test_a_subprocess_reaches_the_server_with_the_inherited_credentials(s3_bucket):
    url = s3_bucket.url("sub.zarr")
    run_warm([sys.executable, "-c", WRITER, s3_bucket.server.endpoint, url], check=True, timeout=120)
    store = FsspecStore.from_url(url, storage_options=s3_bucket.storage_options, read_only=True)
    np.testing.assert_array_equal(zarr.open_array(store, mode="r")[:], np.arange(6) * 7)


def test_each_test_gets_an_empty_bucket_of_its_own(s3_bucket, s3_server):
    assert s3_bucket.keys() == []
    assert s3_bucket.name in s3_server.fs().ls("", refresh=True)
