"""Outputs on object storage, through moto's real S3 server, and the command line on a cluster.

Every run is compared object for object with the same run elsewhere (local disk, one
process): writing, reading back with xarray and ``streamacc.open``, ``info``, ``verify``, a
writer SIGKILLed and resumed, a second writer refused while the first lives, ``cumsum``
of an input on S3, and the CLI's ``--workers`` (including a driver killed with its cluster and
resumed on another).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import numpy as np
import pytest
import xarray as xr
import zarr
from helpers import (
    S3_SMALL,
    Popen,
    assert_same_objects,
    assert_same_output,
    cli,
    committed,
    etags,
    made_runs,
    paused_writer,
    python,
    read_manifest,
    remote_committed,
    s3_args,
    stripping_proxy,
)

import streamacc
from streamacc.cli import main
from streamacc.recipes import get_recipe

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

SMALL = S3_SMALL  # 12 blocks with summaries: where writers stop themselves part way
TINY = ["--size", "3000", "--block-size", "512", "--no-progress"]  # 6 blocks with summaries
LEASE_SECONDS = "2"  # a killed writer's lease expires quickly


@pytest.fixture(scope="module")
def local_ref(tmp_path_factory):
    """Uninterrupted local runs, one per argument list, made on first use."""
    return made_runs(tmp_path_factory)


def test_write_read_info_verify_on_s3(s3_bucket, local_ref, capsys):
    url = s3_bucket.url("out.zarr")
    assert main(["write", url, *TINY, *s3_args(s3_bucket)]) == 0
    assert capsys.readouterr().out.startswith(f"{url}: wrote 3000 steps")
    assert_same_objects(s3_bucket, "out.zarr", local_ref(*TINY))
    options = s3_bucket.storage_options
    ds = xr.open_zarr(url, storage_options=options)
    expected = zarr.open_group(local_ref(*TINY), mode="r")["x"][:]
    assert ds.x.values.tobytes() == expected.tobytes() and ds.attrs["streamacc_complete"] == 1
    assert streamacc.open(url, storage_options=options).x.values.tobytes() == expected.tobytes()
    assert main(["info", url, *s3_args(s3_bucket)]) == 0
    assert "3000 of 3000 steps committed, complete" in capsys.readouterr().out
    assert main(["verify", url, *s3_args(s3_bucket)]) == 0
    assert "OK, 6 of 6 committed blocks" in capsys.readouterr().out


@pytest.mark.slow
def test_sigkill_then_resume_on_s3_is_identical(s3_bucket, local_ref, monkeypatch):
    """The writer is SIGKILLed where it stopped itself, halfway through the run (its 90th lease check)."""
    monkeypatch.setenv("STREAMACC_LEASE_SECONDS", LEASE_SECONDS)
    url = s3_bucket.url("out.zarr")
    writer = paused_writer(90, "write", url, *SMALL, *s3_args(s3_bucket))
    try:
        writer.send_signal(signal.SIGKILL)
    finally:
        writer.wait(timeout=60)
    assert writer.returncode == -signal.SIGKILL, writer.stderr.read()
    done = remote_committed(s3_bucket, "out.zarr")
    assert 3 <= done < 12
    assert "_streamacc/lease/zarr.json" in etags(s3_bucket, "out.zarr")  # the dead writer's lease is still there
    assert main(["write", url, *SMALL, *s3_args(s3_bucket), "--resume"]) == 0  # waits out the lease, then resumes
    assert_same_objects(s3_bucket, "out.zarr", local_ref(*SMALL))
    assert main(["verify", url, *s3_args(s3_bucket), "--blocks", "4"]) == 0


@pytest.mark.slow
def test_a_second_writer_is_refused_while_the_first_lives(s3_bucket, capsys):
    """The first writer stops itself a few blocks in (its 80th lease check) while a second one tries."""
    url = s3_bucket.url("out.zarr")
    writer = paused_writer(80, "write", url, *SMALL, *s3_args(s3_bucket))
    try:
        assert remote_committed(s3_bucket, "out.zarr") >= 1
        for flag in ("--resume", "--overwrite"):
            capsys.readouterr()
            assert main(["write", url, *SMALL, *s3_args(s3_bucket), flag]) == 1
            err = capsys.readouterr().err
            assert (
                err.count("\n") == 1
                and "is being written by" in err
                and f"pid {writer.pid} " in err
                and f"with {flag}" in err
            )
        assert main(["verify", url, *s3_args(s3_bucket), "--blocks", "1"]) == 0  # a reader is not refused
        said = capsys.readouterr().out
        assert f"pid {writer.pid} holds its writer lock and is writing it now" in said and "--resume" not in said
        assert writer.poll() is None  # undisturbed
    finally:
        writer.send_signal(signal.SIGCONT)
        writer.wait(timeout=120)
    assert writer.returncode == 0, writer.stderr.read()
    assert "_streamacc/lease/zarr.json" not in etags(s3_bucket, "out.zarr")  # released at the end


def test_cumsum_of_an_input_on_s3(s3_bucket, tmp_path):
    values = np.random.default_rng(4).uniform(0.5, 1.0, 1500)
    options = s3_bucket.storage_options
    source = zarr.create_array(
        zarr.storage.FsspecStore.from_url(s3_bucket.url("in.zarr"), storage_options=options),
        shape=(1500,),
        chunks=(700,),
        dtype="f8",
    )
    source[:] = values
    url = s3_bucket.url("sum.zarr")
    args = ["--recipe", "cumsum", "--input", s3_bucket.url("in.zarr"), "--block-size", "256", "--no-progress"]
    assert main(["write", url, *args, *s3_args(s3_bucket)]) == 0
    assert streamacc.open(url, storage_options=options).y.values.tobytes() == np.cumsum(values).tobytes()
    assert main(["verify", url, *s3_args(s3_bucket)]) == 0


# --- the command line on a cluster ------------------------------------------------------------


@pytest.mark.slow
def test_workers_start_a_cluster_that_dies_with_its_driver_and_one_that_closes_when_done(tmp_path):
    """A driver killed with the cluster its --workers started; the run resumed on another cluster of one worker
    (started, used, closed): the bytes of one process, the input read by the workers themselves."""
    source = zarr.create_array(tmp_path / "in.zarr", shape=(2**16,), chunks=(2**12,), dtype="f8")
    source[:] = np.linspace(0.99999, 1.00001, 2**16)
    args = ["--recipe", "cumprod", "--input", str(tmp_path / "in.zarr"), "--block-size", "2**10", "--codec", "none",
            "--no-progress"]  # fmt: skip
    local, out = tmp_path / "local.zarr", tmp_path / "out.zarr"
    assert main(["write", str(local), *args]) == 0  # 64 blocks
    proc = Popen(cli("write", out, *args, "--workers", "1"), stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while committed(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    assert 3 <= read_manifest(out)["committed_blocks"] < 64
    assert main(["write", str(out), *args, "--workers", "1", "--resume"]) == 0
    assert_same_output(out, local)


def test_workers_and_scheduler_exclude_each_other(tmp_path, capsys):
    code = main(["write", str(tmp_path / "o.zarr"), "--size", "10", "--workers", "2", "--scheduler", "tcp://x:1"])
    assert code == 2 and "not allowed with argument" in capsys.readouterr().err
    assert main(["write", str(tmp_path / "o.zarr"), "--size", "10", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err and not (tmp_path / "o.zarr").exists()


def test_python_client_on_s3_is_byte_identical(s3_bucket, local_ref, dask_client):
    job = get_recipe("gp").build(3000, "float64")
    url = s3_bucket.url("out.zarr")
    streamacc.write(
        url,
        job.f,
        job.init,
        length=job.length,
        block_size=512,
        unroll=job.unroll,
        names=job.names,
        attrs={**job.attrs, "dtype": "float64"},
        array_attrs={"x": {"long_name": job.attrs["description"], "units": job.attrs["units"]}},
        storage_options=s3_bucket.storage_options,
        client=dask_client,
        progress=False,
    )
    assert_same_objects(s3_bucket, "out.zarr", local_ref(*TINY))


def test_info_asks_the_store_the_same_few_requests_whatever_the_number_of_chunks(s3_bucket):
    def requests(blocks: int) -> list[str]:
        url = s3_bucket.url(f"chunks{blocks}.zarr")
        streamacc.write(url, cumulative, np.float64(0), np.ones(blocks * 8), block_size=8, progress=False,
                        summaries=False, storage_options=s3_bucket.storage_options)  # fmt: skip
        seen: list[str] = []
        with stripping_proxy(s3_bucket.server.endpoint, strip=(), seen=seen) as endpoint:
            info = streamacc.info(url, storage_options={"endpoint_url": endpoint})
        assert info.committed_steps == blocks * 8 and info.arrays["y"].stored_bytes > 0
        return seen

    few, many = requests(2), requests(16)
    assert sorted(many) == sorted(few) and len(many) < 16  # a listing per array, not a request per chunk


def cumulative(c, x):
    return c + x, c + x


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_object_store_mistakes_are_one_line_with_the_fix(s3_bucket, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    endpoint = f"endpoint_url={s3_bucket.server.endpoint}"
    write = ["write", "--size", "100", "--no-progress", "--storage-option"]
    cases = [
        ([*write, endpoint, "s3://no-such-bucket/o.zarr"], 2, "the bucket 'no-such-bucket' of", "create the bucket"),
        (["info", "--storage-option", endpoint, "s3://no-such-bucket/o.zarr"], 2, "does not exist", "check the URL"),
        ([*write, endpoint, "--storage-option", "bogus_option=1", s3_bucket.url()], 2, "option 'bogus_option'",
         "check --storage-option"),
        (["verify", "--storage-option", f"endpoint_url=http://127.0.0.1:{free_port()}", s3_bucket.url()], 1,
         "cannot reach", "check the endpoint and credentials in --storage-option"),
    ]  # fmt: skip
    for argv, code, problem, fix in cases:
        assert main(argv) == code, argv
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and problem in err[0] and fix in err[0] and "Traceback" not in err[0], (argv, err)
    assert s3_bucket.keys() == [] and list(tmp_path.iterdir()) == []


S3_EXTRA = "S3 is opened through s3fs and fsspec (the s3 extra), not installed here; pip install 'streamacc[s3]'"
WITHOUT = """
import sys

sys.modules.update(dict.fromkeys(sys.argv[1].split(",")))  # not installed: each import of them fails
import streamacc
from streamacc.cli import main

main(["info", sys.argv[2]])
try:
    streamacc.info(sys.argv[2])
except streamacc.StreamaccError as error:
    print(error, file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("missing", "url", "fix"),
    [
        ("fsspec,s3fs", "s3://bucket/out.zarr", S3_EXTRA),
        ("s3fs", "s3://bucket/out.zarr", S3_EXTRA),
        ("fsspec", "memory://out.zarr", "URLs are opened through fsspec, which is not installed; pip install "
                                        "'streamacc[s3]' for S3, or pip install fsspec and the backend for memory://"),
    ],
)  # fmt: skip
def test_a_url_without_the_s3_extra_names_the_extra_to_install(tmp_path, missing, url, fix):
    done = python(WITHOUT, missing, url, cwd=tmp_path)
    lines = done.stderr.splitlines()
    assert lines == [f"streamacc: error: cannot open {url!r}: {fix}", f"cannot open {url!r}: {fix}"], done.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_url_whose_backend_is_missing_names_the_package(capsys):
    import importlib.util

    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed here")
    assert main(["info", "gs://bucket/out.zarr"]) == 1
    assert capsys.readouterr().err.strip() == (
        "streamacc: error: cannot open 'gs://bucket/out.zarr': no fsspec backend for gs:// is installed; "
        "pip install gcsfs"
    )
