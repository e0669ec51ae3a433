"""An ensemble sharded over several devices streams as one output, the bits of one unsharded ``lax.scan``.

The devices are the CPU's, forced to four (``--xla_force_host_platform_device_count``), which
must be set before JAX starts: each check runs in a fresh interpreter. The carry is a
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


def run_sharded(tmp_path: Path, code: str) -> dict:
    done = python(PRELUDE + textwrap.dedent(code), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_sharded_ensemble_writes_one_scans_bytes_and_keeps_its_sharding(tmp_path):
    found = run_sharded(tmp_path, """
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
    """)
    assert found == {"carry": True, "plain carry": True, "state": True, "devices": 4, "spec": ["member"]}


def test_iter_blocks_runs_a_sharded_ensemble_block_by_block(tmp_path):
    found = run_sharded(tmp_path, """
        blocks = list(streamacc.iter_blocks(step, sharded, length=LENGTH, block_size=BLOCK))
        state = np.concatenate([np.asarray(b.ys["state"]) for b in blocks])
        print(json.dumps({
            "state": state.tobytes() == np.asarray(ys["state"]).tobytes(),
            "carry": np.asarray(blocks[-1].carry).tobytes() == np.asarray(carry).tobytes(),
            "devices": sorted({len(b.carry.sharding.device_set) for b in blocks}),
        }))
    """)
    assert found == {"state": True, "carry": True, "devices": [4]}


def test_a_sharded_run_interrupted_and_resumed_sharded_is_the_uninterrupted_run(tmp_path):
    found = run_sharded(tmp_path, """
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
    """)
    assert found == {"committed": 4 * 128, "carry": True, "devices": 4, "verified": True}


def test_a_stream_refuses_a_program_partitioned_over_devices_and_writes_nothing(tmp_path):
    found = run_sharded(tmp_path, """
        try:
            with streamacc.Stream("out.zarr", step, length=LENGTH, block_size=BLOCK, progress=False) as stream:
                jax.jit(stream.scan)(sharded)
            error = None
        except streamacc.errors.InputError as exc:
            error = str(exc)
        left = sorted(os.listdir("out.zarr")) if os.path.exists("out.zarr") else []
        print(json.dumps({"error": error, "left": left}))
    """)
    assert found["left"] == []
    assert "partitioned over several devices" in found["error"]
    assert "jax.device_put(init, jax.devices()[0])" in found["error"] and "streamacc.write" in found["error"]
