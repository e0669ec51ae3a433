"""Features used together as scientists combine them: a recipe on a cluster, an extension of a
thinned, tiled, timed output, reverse scans and their summaries, object storage with all of it.

References come from numpy and one in-memory ``lax.scan``; outputs written two ways are
compared byte for byte.
"""

from __future__ import annotations

import jax
import numpy as np
from _fault_helpers import assert_same_output

import streamacc
from streamacc.engine import carry_pass, make_plan
from streamacc.recipes import get_recipe

# --- Lorenz-63 on a cluster ------------------------------------------------------------------


def test_lorenz_on_a_cluster_is_the_single_process_output(tmp_path, dask_client):
    """XLA compiles Lorenz's RK4 step without its ys slightly differently (1 ulp, in 1 of the first
    31,000 steps here): the carry pass then disagrees with the workers' blocks, which are right."""
    job = get_recipe("lorenz").build(40000, "float64")
    kw = {"length": job.length, "block_size": 8000, "names": job.names, "attrs": job.attrs, "progress": False}
    carry, ys = jax.lax.scan(job.f, job.init, None, length=job.length)
    plan = make_plan(job.f, job.init, None, length=job.length, block_size=8000)
    *_, (_, _, last) = carry_pass(plan, exact=True)  # the block function's own carries
    np.testing.assert_array_equal(last, carry)
    local, remote = tmp_path / "local.zarr", tmp_path / "cluster.zarr"
    streamacc.write(local, job.f, job.init, **kw)
    streamacc.write(remote, job.f, job.init, client=dask_client, **kw)
    assert_same_output(remote, local)
    ds = streamacc.open(remote)
    for name in "xyz":
        np.testing.assert_array_equal(ds[name].values, np.asarray(ys[name]))
