"""Outputs written by streamacc 1.1.0 (commit 1a7460f) for tests/test_format110.py."""
import os
import signal
import sys

import jax
import numpy as np

import streamacc
from streamacc import testing

jax.config.update("jax_enable_x64", True)

def gp(c, _):
    c = c * (1 + 1e-8)
    return c, c

def over(c, y):
    return c > 1.0002

def killed_after(chunks, run):
    pid = os.fork()
    if pid == 0:
        written, seen = testing.current("store.write_new"), []
        def dying(path, data):
            seen.extend(["x"] if "/x/c/" in str(path) else [])
            if len(seen) == chunks:
                os.kill(os.getpid(), signal.SIGKILL)
            return written(path, data)
        testing.replace("store.write_new", dying)
        testing.replace("run.COMMIT_SECONDS", 0.0)
        run()
        os._exit(0)
    os.waitpid(pid, 0)

what = sys.argv[1]
if what == "chosen":
    # the seed's progression, no unroll given: 1.1.0 chose 2 on a CPU for 2**20 steps; killed after 3 chunks
    killed_after(8, lambda: streamacc.write("gp_chosen.zarr", gp, np.float64(1.0), length=2**20, block_size=2**11,
                                            names="x", progress=False))
elif what == "until":
    for name, chunks in (("until_partial.zarr", 12), ("until_complete.zarr", None)):

        def run(name=name):
            return streamacc.write(name, gp, np.float64(1.0), length=2**20, block_size=2**10, unroll=8, until=over,
                                   names="x", progress=False)

        killed_after(chunks, run) if chunks else run()
