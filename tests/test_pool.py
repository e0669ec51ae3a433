"""The engine's pool of block buffers: recycled blocks keep one ``lax.scan``'s bits, the
pool bounds the buffers alive, and no block a caller still holds is ever overwritten.

References come from ``lax.scan`` over the whole length (never from the engine), and
from integers for ``count_step``, whose ys say exactly which step produced them.
"""

from __future__ import annotations

import collections
import gc
import pickle
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from streamacc.base import pool_size
from streamacc.engine import POOL_MIN_BYTES, BlockPool, computes_ahead, make_plan, run_plan

DATA = np.random.default_rng(7).normal(size=(200, 3))


def count_step(c, _):
    return c + 1, c


def product_step(c, _):
    return c * 1.0000001, c


def tree_xs_step(c, x):
    """Two y leaves, one of them 2-D, and a bool leaf; consumes xs."""
    c = 0.9 * c + jnp.sin(x[0]) - x[1] * x[2]
    return c, {"pair": jnp.stack([c, -c]), "sign": c > 0}


def _bytes(tree: Any) -> list[bytes]:
    return [np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(tree)]


def _address(block) -> int:
    return jax.tree_util.tree_leaves(block.ys)[0].__array_interface__["data"][0]


CASES = {
    "count": (count_step, np.int64(5), None, {"length": 100}),
    "product_unroll4": (product_step, np.float64(1.0), None, {"length": 96, "unroll": 4}),
    "tree_xs": (tree_xs_step, np.float64(0.5), DATA[:100], {}),
    "tree_xs_reverse": (tree_xs_step, np.float64(0.5), DATA[:100], {"reverse": True}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_recycled_blocks_are_bit_identical_to_one_scan(name):
    f, init, xs, kwargs = CASES[name]
    want_carry, want_ys = lax.scan(f, init, xs, **kwargs)
    plan = make_plan(f, init, xs, block_size=8, **kwargs)
    for pool, ahead in ((BlockPool(0), False), (BlockPool(2), False), (BlockPool(2), True)):
        # no reuse at all; reuse with explicit release, computing each block on demand or one ahead
        parts, carry = [], None
        for block in run_plan(plan, pool=pool, ahead=ahead):
            parts.append((block.start, _bytes(block.ys)))
            carry = block.carry
            block.release()
        parts.sort()
        joined = [b"".join(p[1][i] for p in parts) for i in range(len(parts[0][1]))]
        assert joined == _bytes(want_ys)
        assert _bytes(carry) == _bytes(want_carry)
    assert pool.stats.reused >= plan.block_count - 4  # the short last block and the first fills are not reuses
    assert pool.stats.copied == 0 and pool.stats.overflow == 0


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("depth", [1, 3])
def test_pool_of_pool_size_never_overflows(depth, ahead):
    """A caller holding ``depth`` blocks, releasing the oldest first, needs ``pool_size(depth, ahead=...)`` buffers."""
    plan = make_plan(count_step, np.int64(0), length=40 * 8, block_size=8)
    pool = BlockPool(pool_size(depth, ahead=ahead))
    held, addresses = collections.deque(), set()
    for block in run_plan(plan, pool=pool, ahead=ahead):
        addresses.add(_address(block))
        held.append(block)
        if len(held) > depth:
            oldest = held.popleft()
            np.testing.assert_array_equal(oldest.ys, np.arange(oldest.start, oldest.stop))
            oldest.release()
    assert pool.stats.overflow == 0
    assert len(addresses) == pool_size(depth, ahead=ahead) == depth + 1 + ahead
    assert pool.stats.reused == plan.block_count - pool_size(depth, ahead=ahead)


@pytest.mark.parametrize("ahead", [False, True])
def test_one_buffer_less_overflows_and_stays_correct(ahead):
    """``pool_size`` is the least that suffices: one buffer less and blocks get buffers of their own."""
    depth = 2
    plan = make_plan(count_step, np.int64(0), length=20 * 8, block_size=8)
    pool = BlockPool(pool_size(depth, ahead=ahead) - 1)
    held = collections.deque()
    for block in run_plan(plan, pool=pool, ahead=ahead):
        held.append(block)
        if len(held) > depth:
            held.popleft().release()
        np.testing.assert_array_equal(block.ys, np.arange(block.start, block.stop))
    for block in held:
        np.testing.assert_array_equal(block.ys, np.arange(block.start, block.stop))
    assert pool.stats.overflow > 0


@pytest.mark.parametrize("ahead", [False, True])
def test_dropped_blocks_come_back_without_release(ahead):
    """A plain loop that drops each block reuses the default pool's buffers: two, three computing ahead."""
    plan = make_plan(count_step, np.int64(0), length=30 * 8, block_size=8)
    pool = BlockPool(pool_size(1, ahead=ahead))
    addresses = set()
    for block in run_plan(plan, pool=pool, ahead=ahead):
        addresses.add(_address(block))
    assert len(addresses) == 2 + ahead
    assert pool.stats.overflow == 0 and pool.stats.reused == 30 - 2 - ahead


def test_a_cpu_computes_no_block_ahead():
    """XLA's CPU client returns once a block is computed: computing ahead would only hold a buffer more."""
    assert jax.default_backend() != "cpu" or not computes_ahead()
    with jax.default_device(jax.devices("cpu")[0]):
        assert not computes_ahead()


def test_kept_blocks_are_never_overwritten():
    """Blocks a caller keeps (no release) hold their buffers; later blocks get their own."""
    plan = make_plan(count_step, np.int64(0), length=20 * 8, block_size=8)
    pool = BlockPool(3)
    blocks = list(run_plan(plan, pool=pool))
    for b in blocks:
        np.testing.assert_array_equal(b.ys, np.arange(b.start, b.stop))
    assert pool.stats.overflow == 20 - 3 and pool.stats.reused == 0
    assert len({_address(b) for b in blocks}) == 20


def test_a_derived_view_keeps_its_buffer_leased():
    plan = make_plan(count_step, np.int64(0), length=10 * 8, block_size=8)
    pool = BlockPool(3)
    gen = run_plan(plan, pool=pool)
    first = next(gen)
    part = first.ys[2:5]  # a view of a view: its base is still the lease
    del first
    gc.collect()
    rest = [b.start for b in gen]  # every later block is dropped at once
    np.testing.assert_array_equal(part, [2, 3, 4])
    assert rest == list(range(8, 80, 8))
    assert pool.leased == 1
    del part
    gc.collect()
    assert pool.leased == 0


def test_a_view_outlives_the_pool():
    plan = make_plan(count_step, np.int64(0), length=6 * 8, block_size=8)
    pool = BlockPool(3)
    gen = run_plan(plan, pool=pool)
    part = next(gen).ys[-3:]
    for _ in gen:
        pass
    del gen, pool
    gc.collect()
    np.testing.assert_array_equal(part, [5, 6, 7])


def test_default_pool_recycles_large_blocks():
    """A plain loop over blocks of ``POOL_MIN_BYTES`` cycles through the default pool's buffers (two on a CPU)."""
    block_size = POOL_MIN_BYTES // 8  # float64: 8 bytes per step
    plan = make_plan(product_step, np.float64(1.0), length=8 * block_size, block_size=block_size)
    assert len({_address(b) for b in run_plan(plan)}) == pool_size(1, ahead=computes_ahead())


def test_release_from_writer_threads_and_twice():
    f, init, xs, kwargs = CASES["tree_xs"]
    want = _bytes(lax.scan(f, init, xs, **kwargs)[1])
    plan = make_plan(f, init, xs, block_size=4, **kwargs)
    pool = BlockPool(pool_size(2))
    got: dict[int, list[bytes]] = {}
    threads = []

    def consume(block):
        got[block.start] = _bytes(block.ys)
        block.release()
        block.release()  # a second release must not free the slot of a later block

    for block in run_plan(plan, pool=pool):
        threads = [t for t in threads if t.is_alive()]
        while len(threads) >= 2:
            threads.pop(0).join()
        thread = threading.Thread(target=consume, args=(block,))
        thread.start()
        threads.append(thread)
        del block
    for t in threads:
        t.join()
    joined = [b"".join(got[s][i] for s in sorted(got)) for i in range(len(want))]
    assert joined == want
    assert pool.leased == 0 and pool.stats.copied == 0


def test_block_pickles_without_its_lease():
    block = next(run_plan(make_plan(count_step, np.int64(3), length=16, block_size=8)))
    copy = pickle.loads(pickle.dumps(block))
    assert (copy.start, copy.stop) == (0, 8)
    np.testing.assert_array_equal(copy.ys, np.arange(3, 11))
    copy.release()  # nothing to give back
    np.testing.assert_array_equal(block.ys, np.arange(3, 11))


def test_block_nbytes_is_the_pool_buffer_size():
    plan = make_plan(tree_xs_step, np.float64(0.5), DATA[:100], block_size=8)
    assert plan.block_nbytes == 8 * (2 * 8 + 1)  # float64 pair + bool per step


@pytest.mark.parametrize("inflight", [1, 3])
def test_a_local_write_needs_one_buffer_beyond_its_blocks_in_flight(tmp_path, seam, inflight):
    """On a CPU a write's pool holds its ``inflight`` blocks and the one being computed, and never overflows."""
    import streamacc

    pools = []

    class Recorded(BlockPool):
        def __init__(self, size: int) -> None:
            super().__init__(size)
            pools.append(self)

    seam("run.BlockPool", Recorded)
    streamacc.write(
        tmp_path / "o.zarr", count_step, np.int64(0), length=40 * 8, block_size=8, inflight=inflight, progress=False
    )
    (pool,) = pools
    assert pool.size == pool_size(inflight, ahead=computes_ahead())
    if not computes_ahead():
        assert pool.size == inflight + 1
    assert pool.stats.overflow == 0 and pool.stats.copied == 0
    assert pool.stats.filled <= pool.size and pool.stats.reused == 40 - pool.stats.filled
    np.testing.assert_array_equal(streamacc.open(tmp_path / "o.zarr")["y"].values, np.arange(40 * 8))
