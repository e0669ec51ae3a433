"""Runs that end on a condition (``until``): one ``lax.scan`` cut after the first step where the condition holds.

The references are one in-memory ``lax.scan`` over the whole length, numpy's search for the
first step where the condition holds, and an uninterrupted run's files; the steps are
compared at ``unroll=1``, where the step with its condition compiles to the step's own bits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_bits_equal
from jax import lax

import streamacc
from streamacc.errors import InputError, StepFunctionError

XS = np.linspace(0.0, 5.0, 600)
INIT = np.float64(1.0)


def step(c, x):
    c = 0.999 * c + 0.01 * jnp.sin(x) + x * c * 1e-3
    return c, {"c": c, "sq": c * c}


def above(limit):
    def until(c, y):
        return c > limit

    return until


WHOLE = jax.tree_util.tree_map(np.asarray, lax.scan(step, INIT, XS)[1])


def first_step(limit: float, tested_from: int = 0) -> int:
    """The first step (from ``tested_from`` on) whose carry is above ``limit``: numpy's search, not streamacc's."""
    held = np.flatnonzero(WHOLE["c"][tested_from:] > limit)
    assert held.size, "the reference must hold somewhere"
    return tested_from + int(held[0])


K = first_step(1.5)
UNTIL = above(1.5)


def cut(k: int, every: int = 1) -> dict[str, np.ndarray]:
    """The reference's ys of steps 0 to ``k``, every ``every``-th kept."""
    return {name: y[: k + 1][every - 1 :: every] for name, y in WHOLE.items()}


def write(out, **kw):
    kw = {"block_size": 32, "chunks": 16, "until": UNTIL, "progress": False, "unroll": 1, **kw}
    return streamacc.write(out, step, INIT, XS, **kw)


# --- the scan in memory ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block_size", "every"),
    [(32, 1), (K, 1), (K + 1, 1), (600, 1), (33, 3), (K // 3 * 3, 3)],
    ids=["blocks", "k_first_of_a_block", "k_last_of_a_block", "one_block", "thinned", "thinned_k_in_a_row"],
)
def test_a_scan_ends_after_the_first_step_where_its_condition_holds(block_size, every):
    assert 40 < K < 560 and WHOLE["c"][K] > 1.5 >= WHOLE["c"][:K].max()
    carry, ys = streamacc.scan(step, INIT, XS, block_size=block_size, save_every=every, until=UNTIL, unroll=1)
    assert_bits_equal(ys, cut(K, every))
    assert_bits_equal(carry, WHOLE["c"][K])  # the carry step k left
    blocks = list(streamacc.iter_blocks(step, INIT, XS, block_size=block_size, save_every=every, until=UNTIL))
    assert [b.ended for b in blocks] == [False] * (len(blocks) - 1) + [True]
    assert blocks[-1].stop == K + 1 and blocks[-1].start <= K and len(blocks) == K // block_size + 1
    assert_bits_equal(blocks[-1].carry, WHOLE["c"][K])


def test_a_condition_that_never_holds_runs_the_whole_length_and_one_that_holds_at_once_keeps_one_step():
    carry, ys = streamacc.scan(step, INIT, XS, block_size=64, until=above(100.0))
    assert_bits_equal(ys, WHOLE) and assert_bits_equal(carry, WHOLE["c"][-1])
    carry, ys = streamacc.scan(step, INIT, XS, block_size=64, until=above(0.0))
    assert_bits_equal(ys, cut(0)) and assert_bits_equal(carry, WHOLE["c"][0])
    assert [(b.start, b.stop, b.ended) for b in streamacc.iter_blocks(step, INIT, XS, until=above(0.0))] == [
        (0, 1, True)
    ]


def test_a_pytree_carry_is_held_as_the_step_where_the_condition_held_left_it():
    """The carry's leaves are all step k's (the steps after it run, and change nothing kept)."""

    def counted(carry, x):
        c, n = carry
        c, y = step(c, x)
        return (c, n + 1), y

    (c, n), ys = streamacc.scan(counted, (INIT, np.int64(0)), XS, block_size=50, until=lambda carry, y: y["c"] > 1.5)
    assert int(n) == K + 1 and float(c) == WHOLE["c"][K]
    assert_bits_equal(ys, cut(K))


def test_with_unroll_blocks_of_any_size_compute_the_step_with_its_condition_alike():
    """With ``unroll`` > 1 XLA compiles the condition into the unrolled steps: blocks of any size give the same bits."""
    want = streamacc.scan(step, INIT, XS, block_size=600, unroll=4, until=UNTIL)
    for block_size in (32, 96):
        assert_bits_equal(streamacc.scan(step, INIT, XS, block_size=block_size, unroll=4, until=UNTIL), want)


class Unhashable:
    __hash__ = None

    def __call__(self, c, y):
        return c > 1


def python_bool(c, y):
    return bool(c > 1.5)


@pytest.mark.parametrize(
    ("until", "keywords", "match", "kind"),
    [
        (3, {}, r"until must be a function until\(carry, y\) -> bool", InputError),
        (lambda c: c > 1, {}, r"until must take two arguments.*got until\(c\)", InputError),
        (lambda c, y: jnp.array([c > 1, c < 2]), {}, r"until must return one boolean.*bool\[2\].*jnp\.all", InputError),
        (lambda c, y: c, {}, r"until must return one boolean.*float64\[\].*return a comparison", InputError),
        (python_bool, {}, r"until must be traceable by JAX, but at .*test_until.py:\d+ .*bool", StepFunctionError),
        (lambda c, y: y["missing"] > 1, {}, r"until failed on a step's carry float64\[\].*KeyError", InputError),
        (UNTIL, {"reverse": True}, r"until ends a scan .*; pass reverse=False", InputError),
        (Unhashable(), {}, r"until must be hashable", InputError),
    ],
    ids=["not_callable", "one_argument", "a_vector", "a_number", "python_bool", "fails", "reverse", "unhashable"],
)
def test_a_condition_that_cannot_be_tested_after_each_step_is_refused_in_one_line(until, keywords, match, kind):
    for entry in (streamacc.scan, streamacc.iter_blocks, streamacc.ScanSpec):
        with pytest.raises(kind, match=match) as refused:
            entry(step, INIT, XS, until=until, **keywords)
        assert "\n" not in str(refused.value)


def test_a_condition_is_given_once():
    spec = streamacc.ScanSpec(step, INIT, XS, until=UNTIL)
    assert spec.until is UNTIL and repr(spec).endswith(f"until={UNTIL!r})")
    with pytest.raises(InputError, match="drop until"):
        streamacc.scan(spec, until=UNTIL)
    assert_bits_equal(streamacc.scan(spec), streamacc.scan(step, INIT, XS, until=UNTIL))
