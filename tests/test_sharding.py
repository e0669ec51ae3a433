"""An ensemble sharded over several devices streams as one output, the bits of one unsharded ``lax.scan``.

The devices are the CPU's, forced to four (``--xla_force_host_platform_device_count``), which
must be set before JAX starts: the checks run in a fresh interpreter, one after another, each in
a folder of its own. The carry is a
``jax.Array`` sharded along its members (a ``NamedSharding`` over a one-axis ``Mesh``);
``write`` keeps that sharding from block to block (and through a resume), ``iter_blocks``
too, and the stored output is byte for byte the one an unsharded carry writes. A ``Stream``,
whose blocks cross to the host by a callback from one device, refuses such a program with
the fix, writing nothing.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from helpers import python

TESTS = Path(__file__).parent

PRELUDE = f"""
import json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
sys.path.insert(0, {str(TESTS)!r})
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import streamacc
from helpers import assert_same_output, failing

assert len(jax.devices()) == 4, jax.devices()
MEMBERS = NamedSharding(Mesh(np.array(jax.devices()), ("member",)), PartitionSpec("member"))


def step(c, _):
    c = c * jnp.float32(1.001) + jnp.float32(0.25) * jnp.sin(c)
    return c, {{"state": c, "twice": 2 * c}}


init = jnp.arange(64, dtype=jnp.float32) / 7
sharded = jax.device_put(init, MEMBERS)
assert len(sharded.sharding.device_set) == 4
LENGTH, BLOCK = 1000, 128
carry, ys = jax.lax.scan(step, init, length=LENGTH)  # the reference: unsharded, whole
"""


CHECKS: dict[str, str] = {}
"""Each test's check, by name: code run after ``PRELUDE`` that prints what it found as its last line of JSON."""

RUN_CHECKS = """
import contextlib, io, traceback

found = {}
for name, folder, code in json.loads(sys.argv[1]):
    os.chdir(folder)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(code, dict(globals()))  # the prelude's names, not another check's
        found[name] = {"found": json.loads(printed.getvalue().strip().splitlines()[-1])}
    except BaseException:
        found[name] = {"raised": traceback.format_exc()}
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def run_sharded(tmp_path_factory):
    """``run_sharded(name)``: what check ``name`` found. The interpreter with four devices, and the reference in
    it, is made once for every check (its tests share a worker of pytest -n)."""
    jobs = [(name, str(tmp_path_factory.mktemp(name)), textwrap.dedent(code)) for name, code in CHECKS.items()]
    done = python(PRELUDE + RUN_CHECKS, json.dumps(jobs))
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])

    def get(name: str) -> dict:
        assert "raised" not in found[name], found[name].get("raised", "")[-4000:]
        return found[name]["found"]

    return get


pytestmark = pytest.mark.xdist_group("sharding")


CHECKS["write"] = """
        plain = streamacc.write("plain.zarr", step, init, length=LENGTH, block_size=BLOCK, progress=False)
        got = streamacc.write("sharded.zarr", step, sharded, length=LENGTH, block_size=BLOCK, progress=False)
        assert_same_output("sharded.zarr", "plain.zarr")
        stored = streamacc.open("sharded.zarr")
        print(json.dumps({
            "carry": np.asarray(got).tobytes() == np.asarray(carry).tobytes(),
            "plain carry": np.asarray(plain).tobytes() == np.asarray(carry).tobytes(),
            "state": stored.state.values.tobytes() == np.asarray(ys["state"]).tobytes(),
            "devices": len(got.sharding.device_set),
            "spec": list(getattr(got.sharding, "spec", [])),
        }))
"""


def test_a_sharded_ensemble_writes_one_scans_bytes_and_keeps_its_sharding(run_sharded):
    found = run_sharded("write")
    assert found == {"carry": True, "plain carry": True, "state": True, "devices": 4, "spec": ["member"]}


CHECKS["iter_blocks"] = """
        blocks = list(streamacc.iter_blocks(step, sharded, length=LENGTH, block_size=BLOCK))
        state = np.concatenate([np.asarray(b.ys["state"]) for b in blocks])
        print(json.dumps({
            "state": state.tobytes() == np.asarray(ys["state"]).tobytes(),
            "carry": np.asarray(blocks[-1].carry).tobytes() == np.asarray(carry).tobytes(),
            "devices": sorted({len(b.carry.sharding.device_set) for b in blocks}),
        }))
"""


def test_iter_blocks_runs_a_sharded_ensemble_block_by_block(run_sharded):
    found = run_sharded("iter_blocks")
    assert found == {"state": True, "carry": True, "devices": [4]}


CHECKS["resume"] = """
        streamacc.write("ref.zarr", step, init, length=LENGTH, block_size=BLOCK, progress=False)
        try:
            streamacc.write(failing("out.zarr", "state/c/4/0"), step, sharded, length=LENGTH, block_size=BLOCK,
                            progress=False)
        except streamacc.errors.StoreError:
            pass
        committed = streamacc.info("out.zarr").committed_steps
        got = streamacc.write("out.zarr", step, sharded, length=LENGTH, block_size=BLOCK, mode="resume",
                              progress=False)
        assert_same_output("out.zarr", "ref.zarr")
        print(json.dumps({
            "committed": committed,
            "carry": np.asarray(got).tobytes() == np.asarray(carry).tobytes(),
            "devices": len(got.sharding.device_set),
            "verified": streamacc.verify("out.zarr", step, sharded).checked_blocks == tuple(range(8)),
        }))
"""


def test_a_sharded_run_interrupted_and_resumed_sharded_is_the_uninterrupted_run(run_sharded):
    found = run_sharded("resume")
    assert found == {"committed": 4 * 128, "carry": True, "devices": 4, "verified": True}


CHECKS["stream"] = """
        try:
            with streamacc.Stream("out.zarr", step, length=LENGTH, block_size=BLOCK, progress=False) as stream:
                jax.jit(stream.scan)(sharded)
            error = None
        except streamacc.errors.InputError as exc:
            error = str(exc)
        left = sorted(os.listdir("out.zarr")) if os.path.exists("out.zarr") else []
        print(json.dumps({"error": error, "left": left}))
"""


def test_a_stream_refuses_a_program_partitioned_over_devices_and_writes_nothing(run_sharded):
    found = run_sharded("stream")
    assert found["left"] == []
    assert "partitioned over several devices" in found["error"]
    assert "jax.device_put(init, jax.devices()[0])" in found["error"] and "streamacc.write" in found["error"]
