"""No misleading success and no misleading failure: what a command says is what happened.

A user acts on what a command says, so each case here is one where the easy answer would
mislead: ``streamacc write memory://o.zarr`` keeps nothing, so it is refused rather than
reporting steps written; a writer whose S3 server lost its data does not call its steps
safely committed; a lease too short to renew is named as such, not as a store out of
reach; a full stdout does not turn a complete run into a failure; an unhashable step
function is refused in one line before anything is written; ``--workers`` is bounded by
the machine.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest
from helpers import S3_BIG, SMALL, Bucket, Popen, S3Server, cli, remote_committed, run, s3_args

import streamacc
from streamacc.cli import main


def test_a_store_in_memory_is_refused_by_the_command_line(capfd):
    code, line = run("write", "memory://o.zarr", "--size", "1000", capfd=capfd)
    assert code == 2 and "ends with the command, so nothing would be kept" in line, line


def test_a_full_stdout_does_not_turn_a_complete_run_into_a_failure(tmp_path, monkeypatch, capfd):
    out = tmp_path / "out.zarr"
    with open("/dev/full", "w") as full:  # every write to it fails with ENOSPC
        monkeypatch.setattr(sys, "stdout", full)
        code = main(["write", str(out), *SMALL])
        monkeypatch.undo()
    err = capfd.readouterr().err
    assert code == 1 and err.splitlines() == [
        "streamacc: error: the command completed, but its report could not be written to stdout "
        "(No space left on device)"
    ]
    assert main(["verify", str(out)]) == 0


def test_an_unhashable_step_function_is_refused_before_anything_is_written(tmp_path):
    @dataclasses.dataclass  # not frozen: defines __eq__, so __hash__ is None
    class Grow:
        ratio: float

        def __call__(self, carry, _):
            return carry * self.ratio, carry

    out = tmp_path / "out.zarr"
    with pytest.raises(streamacc.errors.StepFunctionError, match=r"f must be hashable.*frozen dataclass"):
        streamacc.write(out, Grow(1.5), np.float64(1.0), length=10, progress=False)
    assert not out.exists()


def test_workers_are_bounded_by_the_machine(tmp_path, capfd):
    code, line = run("write", tmp_path / "o.zarr", "--size", "10", "--workers", "1000", capfd=capfd)
    assert code == 2 and "--workers 1000 asks for more worker processes than this machine can run" in line, line
    assert "--scheduler" in line and not (tmp_path / "o.zarr").exists()


def test_a_lease_too_short_to_renew_is_refused(s3_bucket, monkeypatch, capfd):
    monkeypatch.setenv("STREAMACC_LEASE_SECONDS", "0.01")
    code, line = run("write", s3_bucket.url(), *SMALL, *s3_args(s3_bucket), capfd=capfd)
    assert code == 2 and "STREAMACC_LEASE_SECONDS='0.01' is shorter than 1 s" in line, line
    assert s3_bucket.keys() == []


MOTO = (
    "import sys, time; from moto.server import ThreadedMotoServer\n"
    "server = ThreadedMotoServer(ip_address='127.0.0.1', port=0, verbose=False); server.start()\n"
    "print('http://%s:%d' % server.get_host_and_port(), flush=True); time.sleep(600)"
)


@pytest.mark.slow
def test_a_store_that_lost_the_data_is_not_said_to_keep_it(aws_credentials, monkeypatch):
    """A store restarted without its data, mid-run: moto's reset, in a server process of its own."""
    monkeypatch.setenv("STREAMACC_LEASE_SECONDS", "2")
    server = subprocess.Popen([sys.executable, "-c", MOTO], stdout=subprocess.PIPE, text=True)
    try:
        endpoint = server.stdout.readline().strip()
        bucket = Bucket("lost", S3Server(endpoint))
        bucket.server.fs().mkdir("lost")
        writer = Popen(cli("write", bucket.url(), *S3_BIG, *s3_args(bucket)), stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while remote_committed(bucket, "out.zarr") < 2 and writer.poll() is None:
            assert time.monotonic() < deadline, "the writer never committed two blocks"
            time.sleep(0.01)
        urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST"))
        _, err = writer.communicate(timeout=120)
    finally:
        server.kill()
        server.communicate()
    assert writer.returncode == 1, err
    assert "no longer holds them" in err and "the output is lost" in err and "safely committed" not in err, err
    assert err.count("\n") == 1
