"""streamacc.testing: every seam a wing names is listed, and replacing one is undone as documented."""

import re

import numpy as np
import pytest

import streamacc
from streamacc import testing


def test_the_docstring_lists_every_seam_and_each_holds_its_wings_value():
    table = re.findall(r"^``([\w.]+)``\s{2,}", testing.__doc__, re.M)
    assert table == list(testing.seams())
    for name in testing.seams():
        assert testing.current(name) is testing.original(name), name


def test_a_seam_patched_is_back_afterwards_and_one_replaced_until_restored():
    real = testing.original("run.PUBLISH_SECONDS")
    with testing.patched("run.PUBLISH_SECONDS", 0.0) as previous:
        assert previous == real and testing.current("run.PUBLISH_SECONDS") == 0.0
        with testing.patched("run.PUBLISH_SECONDS", 1.5):
            assert testing.current("run.PUBLISH_SECONDS") == 1.5
        assert testing.current("run.PUBLISH_SECONDS") == 0.0
    assert testing.current("run.PUBLISH_SECONDS") == real
    assert testing.replace("engine.physical_memory", lambda: 2**19) is testing.original("engine.physical_memory")
    try:  # two blocks of 2**16 float64 steps are 1 MiB
        with pytest.raises(streamacc.errors.InputError, match="do not fit in memory"):
            streamacc.iter_blocks(lambda c, _: (c + 1.0, c), np.float64(0), length=2**17, block_size=2**16)
    finally:
        testing.restore("engine.physical_memory")
    assert testing.current("engine.physical_memory") is testing.original("engine.physical_memory")


def test_an_unknown_seam_is_refused_with_the_list():
    with pytest.raises(KeyError, match=r"no seam 'store\.nope'; its seams are .*store\.write_new"):
        testing.current("store.nope")
    with pytest.raises(KeyError, match=r"seam 'run.output.PUBLISH_SECONDS' is named 'run.PUBLISH_SECONDS' since 1.1.0"):
        testing.patched("run.output.PUBLISH_SECONDS", 0.0).__enter__()
