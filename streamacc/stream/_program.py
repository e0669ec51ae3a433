"""The traced side of a Stream: its blocks as a loop inside the caller's program, each handed to the host.

The blocks are write's (``engine.block_bounds``): the full ones run in a ``lax.while_loop``
over a block index that starts where the host says (0, or a resumed run's first uncommitted
block), each running the engine's own block function (``lax.scan`` itself, or its thinned
form) on its rows of ``xs``; the one block of another length (the last in index order, the
first run when ``reverse``) runs under ``lax.cond``, skipped once committed. With a
condition (``until``) each block runs the engine's block function that tests it after each
step, and the loop's bound is dynamic: it stops after the block where the condition held
(and the odd block is skipped then), so no block past it is computed. After each block
a callback hands its index, the carries around it and its ys to the host (and where the
condition held in it, if it did), which copies them into buffers of its own and writes
them on threads of its own. The carry enters the
loop through the host too (the program's own initial carry as the host saw it, or a
resumed run's recorded one), so that the loop never starts from a value XLA could fold
into it, and is selected over the program's own by a condition XLA cannot know (a carry that
began as a callback's buffer slowed a TPU's loop 2.3-fold).

On the CPU the block's callback is a ``buffer_callback``: the host reads the block straight
from the program's buffers, where ``io_callback`` would first copy it into freshly allocated
memory, a block's worth of new pages for the kernel to fault in each time. A buffer callback
is not an ordered effect, so each returns a token that the next block's callback and the
final one take: the host sees the blocks in scan order, after the start (and the check) and
before the finish. On other platforms the callback is an ``io_callback``, which brings the
block to the host; how it crosses is chosen per platform (``_defaults.stream_handover``), one
of :data:`HANDOVERS`: ``ordered``, an ordered ``io_callback`` per block; ``chained``, an
unordered one that takes and returns the token as the buffer callback does, so that XLA
orders the blocks by their data alone; ``pinned``, as ``chained`` with the block's ys first
moved into the host's pinned memory by the program (``jax.device_put`` to
``memory_kind="pinned_host"``), as JAX's own tests stream a scan's outputs. By a callback,
each ys leaf crosses as pieces of consecutive rows of at most ``piece_bytes`` each
(``base.stream_piece_bytes``), operands of the one callback, which a chip copies at once
(on a TPU v5e about twice as fast as one: the Accelerators benchmark page, ``loops``). JAX lowers no
program that moves data to host memory and has an ordered effect, so with ``chained`` and
``pinned`` the start, check and finish callbacks are unordered too, each ordered by the
data it takes from the one before, and the start refuses ``vmap`` itself (by a
``custom_vmap``), as an ordered effect would. The accelerator benchmark
(``benchmarks/accelerator.py``) measures each on the chip.

PRNG keys cannot cross a callback: carries travel as :func:`jax.random.key_data` and are
wrapped again on arrival (see :class:`CrossingLeaf`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.custom_batching import custom_vmap
from jax.experimental import io_callback

from ..base import Blocking, stream_handover, stream_piece_bytes
from ..engine import Step, Until, block_function, compute_platform, until_block

try:
    from jax.experimental.buffer_callback import buffer_callback
except ImportError:  # an older JAX: every block crosses by io_callback
    buffer_callback = None  # type: ignore[assignment]

__all__ = ["HANDOVERS", "CrossingLeaf", "Host", "Loop", "handover", "host_call", "pieces", "streamed"]


@dataclasses.dataclass(frozen=True)
class CrossingLeaf:
    """A carry leaf as it crosses to the host: its shape and dtype there, and its PRNG key implementation."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    impl: str | None = None

    @property
    def struct(self) -> jax.ShapeDtypeStruct:
        return jax.ShapeDtypeStruct(self.shape, self.dtype)

    def plain(self, leaf: Any) -> Any:
        """``leaf`` as it crosses: a key's data, any other leaf as it is."""
        return jax.random.key_data(leaf) if self.impl is not None else leaf

    def wrapped(self, value: Any) -> Any:
        """A leaf that crossed, as the carry holds it."""
        return jax.random.wrap_key_data(value, impl=self.impl) if self.impl is not None else value


class Host(Protocol):
    """The host's ends of the callbacks, in the order the program calls them."""

    def start(self, *carry: Any) -> tuple[Any, ...]:
        """Given the program's initial carry, return the first block to run, the carry entering it, and the
        carry entering the block before it (for :meth:`check`; anything of its shape otherwise)."""

    def check(self, token: Any, index: Any, *arrays: Any) -> Any:
        """A committed block ``index`` recomputed (after the callback that made ``token``): its ys, then the carry
        leaving it (and with a condition the block's step where it first held); returns a token (any index)."""

    def block(self, counts: tuple[int, ...], index: Any, *arrays: Any) -> None:
        """Block ``index`` (in scan order) computed: the carry entering it, its ys (each leaf as ``counts[i]``
        pieces of consecutive rows), the carry leaving it, and with a condition the block's step where it first
        held (-1: none). The arrays may be views of the program's buffers, valid only during the call."""

    def finish(self, token: Any, *carry: Any) -> tuple[Any, ...]:
        """The carry after the last block; returned once every block is committed."""


@dataclasses.dataclass(frozen=True)
class Loop:
    """What the traced loop needs: the step, the block layout and the carry as it crosses to the host."""

    f: Step
    blocking: Blocking
    """The scan's length, blocks (their size chosen), unroll, direction and thinning."""
    carry: tuple[CrossingLeaf, ...]
    index_dtype: np.dtype[Any]
    until: Until | None = None
    """The scan's condition (None: it runs to its length)."""
    y_struct: Any = None
    """One step's y (shape structs): what the condition reads of it."""

    def run(self, length: int) -> Callable[[Any, Any, Any], tuple[Any, list[jax.Array], Any]]:
        """The engine's block function for blocks of ``length`` steps beginning at step ``start``: ``(carry, xs,
        start) -> (carry, ys leaves, first)``, ``first`` the block's step where the condition first held (-1: none,
        or no condition). With a condition, the engine's block with it (``engine.until_block``): the step where it
        held, and the carry that step left, as the engine's blocks have them."""
        b = self.blocking
        if self.until is None:
            plain = block_function(self.f, length, b.unrolled_by, b.reverse, b.save_every)

            def run(carry: Any, xs: Any, start: Any) -> tuple[Any, list[jax.Array], Any]:
                return *plain(carry, xs), jnp.int32(-1)

            return run
        block = until_block(self.f, self.until, self.y_struct, length, b.unrolled_by, b.save_every)
        armed = self.until.armed

        def run_until(carry: Any, xs: Any, start: Any) -> tuple[Any, list[jax.Array], Any]:
            if not armed:
                tested_from: Any = np.int32(0)
            elif isinstance(start, int):  # an extended run: tested from the step after its old end
                tested_from = np.int32(min(max(armed - start, 0), length))
            else:
                tested_from = jnp.clip(armed - start, 0, length).astype(jnp.int32)
            return block(carry, xs, tested_from)

        return run_until

    def plain(self, carry: Any) -> list[Any]:
        return [leaf.plain(x) for leaf, x in zip(self.carry, jax.tree_util.tree_leaves(carry), strict=True)]

    def wrapped(self, treedef: Any, values: Sequence[Any]) -> Any:
        leaves = [leaf.wrapped(v) for leaf, v in zip(self.carry, values, strict=True)]
        return jax.tree_util.tree_unflatten(treedef, leaves)


HANDOVERS = ("in_place", "ordered", "chained", "pinned")
"""The ways a block can cross to the host (see the module's docstring); ``in_place`` needs ``buffer_callback``."""


def _handover() -> str:
    """How a block crosses to the host on the platform the program runs on (one of :data:`HANDOVERS`)."""
    how = stream_handover(compute_platform())
    return "ordered" if how == "in_place" and buffer_callback is None else how


def handover() -> str:
    """How this program's blocks cross to the host: the seam's answer, checked."""
    how = _handover()
    if how not in HANDOVERS:
        raise ValueError(f"a block crosses to the host by one of {', '.join(HANDOVERS)}, not {how!r}")
    return how


def host_call(callback: Callable[..., Any], results: Any, *args: Any, ordered: bool) -> Any:
    """``io_callback(callback, results, *args)``: ordered, or unordered and refusing ``vmap`` as an ordered one does."""
    if ordered:
        return io_callback(callback, results, *args, ordered=True)

    @custom_vmap
    def call(*values: Any) -> Any:
        return io_callback(callback, results, *values, ordered=False)

    @call.def_vmap
    def refuse(axis_size: int, in_batched: Any, *values: Any) -> Any:
        raise ValueError("Cannot vmap a Stream's host callback")

    return call(*args)


def _piece_bytes() -> int:
    """Bytes of ys a piece crossing by a callback holds at most, where the program runs."""
    return stream_piece_bytes(compute_platform())


def pieces(rows: int, row_bytes: int, most: int) -> list[tuple[int, int]]:
    """``rows`` rows of ``row_bytes`` each as ``(start, stop)`` ranges of at most ``most`` bytes (a row at least),
    as even as they can be."""
    if rows == 0:
        return [(0, 0)]
    count = -(-rows // max(1, most // max(1, row_bytes)))
    cuts = [rows * i // count for i in range(count + 1)]
    return list(itertools.pairwise(cuts))


def _split(ys: Sequence[Any]) -> tuple[list[Any], tuple[int, ...]]:
    """Each ys leaf as its pieces (:func:`pieces` of ``_piece_bytes()``), and how many each made."""
    most = _piece_bytes()
    out: list[Any] = []
    counts = []
    for y in ys:
        ranges = pieces(y.shape[0], y.dtype.itemsize * int(np.prod(y.shape[1:], dtype=np.int64)), most)
        out += [lax.slice_in_dim(y, a, b) for a, b in ranges]
        counts.append(len(ranges))
    return out, tuple(counts)


def _handing_over(host: Host, index_dtype: np.dtype[Any], how: str, n: int, extra: int = 0) -> Callable[..., Any]:
    """``hand(token, index, *arrays) -> token``: the block callback (``arrays``: the ``n`` leaves of the carry
    entering the block, its ys, the carry leaving it, and ``extra`` scalars: the step where the condition held),
    called after the callback that made ``token``."""
    after = n + extra  # the arrays after the ys

    def crossing(arrays: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[int, ...]]:
        ys, counts = _split(arrays[n : len(arrays) - after])
        return (*arrays[:n], *ys, *arrays[len(arrays) - after :]), counts

    if how == "ordered":

        def ordered(token: Any, index: Any, *arrays: Any) -> Any:
            arrays, counts = crossing(arrays)
            io_callback(functools.partial(host.block, counts), None, index, *arrays, ordered=True)
            return token

        return ordered
    if how in ("chained", "pinned"):
        pinned = how == "pinned"

        def chained(token: Any, index: Any, *arrays: Any) -> Any:
            arrays, counts = crossing(arrays)
            if pinned:
                arrays = tuple(jax.device_put(a, jax.memory.Space.Host) for a in arrays)

            def passed(token: Any, index: Any, *arrays: Any) -> Any:
                host.block(counts, index, *arrays)
                return np.asarray(token)

            return io_callback(passed, jax.ShapeDtypeStruct((), index_dtype), token, index, *arrays, ordered=False)

        return chained

    def in_place(ctx: Any, out: Any, token: Any, index: Any, *arrays: Any) -> None:
        host.block((1,) * (len(arrays) - n - after), np.asarray(index), *(np.asarray(a) for a in arrays))
        np.asarray(out)[...] = np.asarray(token)

    assert buffer_callback is not None
    return buffer_callback(in_place, jax.ShapeDtypeStruct((), index_dtype), has_side_effect=True)  # type: ignore[no-any-return]


def _rows(xs: Any, start: Any, length: int) -> Any:
    """Rows ``[start, start + length)`` of every xs leaf; ``start`` traced or not."""
    if xs is None:
        return None
    if isinstance(start, int):
        return jax.tree_util.tree_map(lambda a: lax.slice_in_dim(a, start, start + length), xs)
    return jax.tree_util.tree_map(lambda a: lax.dynamic_slice_in_dim(a, start, length), xs)


def _computed(received: Sequence[Any], own: Sequence[Any], first: Any) -> list[Any]:
    """The carry leaves the host sent, as values the program computes (a select of them over its own initial
    carry, by a condition always true that XLA cannot know: the first block's index is never negative). On a
    TPU v5e a loop whose carry began as the buffer a callback returned ran more than twice as slow as one whose
    carry was computed (the Accelerators benchmark page, its ``loops`` scenario)."""
    always = first >= 0
    return [lax.select(always, r, jnp.asarray(o, r.dtype)) for r, o in zip(received, own, strict=True)]


def streamed(
    loop: Loop,
    host: Host,
    init: Any,
    xs: Any,
    *,
    begin: Callable[[list[Any], bool], Sequence[Any]],
    check: Callable[[], list[tuple[int, int, int]] | None],
) -> Any:
    """``lax.scan(loop.f, init, xs, length=loop.blocking.length, ...)[0]`` with every block handed to ``host``.

    ``begin(plain, ordered)`` binds the start callback by :func:`host_call` (where JAX refuses ``vmap``
    and derivatives, before
    the caller opens anything) and returns its results: the first block to run, the carry
    entering it, and the carry entering the first block ``check`` names. ``check()``, asked
    after ``begin``, is the ``(index, start, stop)`` of the committed blocks a resumed run
    recomputes where the host cannot (its inputs live in the program): its last committed
    block and those since the carry kept before it. They are recomputed here, in scan order
    from that carry, each judged by ``host.check``, and the first new block starts from the
    carry the last one ends with.
    """
    treedef = jax.tree_util.tree_structure(init)
    n = len(loop.carry)
    how = handover()
    ordered = how in ("in_place", "ordered")
    own = loop.plain(init)
    started = begin(own, ordered)
    first = started[0]
    carry = loop.wrapped(treedef, _computed(started[1 : 1 + n], own, first))
    token = first  # what each callback takes from the one before it
    tested = loop.until is not None  # the step where the condition held crosses with each block
    judged = check()
    if judged is not None:
        carry = loop.wrapped(treedef, _computed(started[1 + n :], own, first))
        index = jax.ShapeDtypeStruct((), loop.index_dtype)
        for k, start, stop in judged:
            carry, ys, held = loop.run(stop - start)(carry, _rows(xs, start, stop - start), start)
            k_index = np.asarray(k, dtype=loop.index_dtype)
            found = (held,) if tested else ()
            token = host_call(host.check, index, token, k_index, *ys, *loop.plain(carry), *found, ordered=ordered)
    hand = _handing_over(host, loop.index_dtype, how, n, 1 if tested else 0)

    # the loop's state: the carry, the token, and with a condition the step where it held in the last block
    def one(index: Any, state: tuple[Any, ...], start: Any, length: int) -> tuple[Any, ...]:
        carry, token = state[:2]
        after, ys, held = loop.run(length)(carry, _rows(xs, start, length), start)
        found = (held,) if tested else ()
        return after, hand(token, index, *loop.plain(carry), *ys, *loop.plain(after), *found), *found

    count, size, odd = loop.blocking.block_count, loop.blocking.size, loop.blocking.last_steps
    last = count - 1  # the block of index count - 1 may be of another length
    full = count if odd == size else last  # the blocks of block_size steps

    def body(state: tuple[Any, ...]) -> tuple[Any, ...]:
        index = state[0]
        k = last - index if loop.blocking.reverse else index  # the block's place in index order
        return index + 1, *one(index, state[1:], k * size, size)

    def going(state: tuple[Any, ...], end: int) -> Any:
        """Whether the loop runs another block: one is left, and the condition has not held (a dynamic bound)."""
        more = state[0] < end
        return jnp.logical_and(more, state[3] < 0) if tested else more

    def full_blocks(begin_at: Any, end: int, state: tuple[Any, ...]) -> tuple[Any, ...]:
        if end <= 0:
            return state
        looped = lax.while_loop(functools.partial(going, end=end), body, (jnp.asarray(begin_at, loop.index_dtype),
                                                                           *state))  # fmt: skip
        return tuple(looped[1:])

    def odd_block(index: int, state: tuple[Any, ...]) -> tuple[Any, ...]:
        return one(jnp.asarray(index, loop.index_dtype), state, last * size, odd)

    state: tuple[Any, ...] = (carry, token, *((jnp.int32(-1),) if tested else ()))
    if odd == size:
        state = full_blocks(first, count, state)
    elif loop.blocking.reverse:  # the odd block runs first
        state = lax.cond(first == 0, lambda s: odd_block(0, s), lambda s: s, state)
        state = full_blocks(jnp.maximum(first, 1), count, state)
    else:
        state = full_blocks(first, full, state)
        runs = jnp.logical_and(first <= last, state[2] < 0) if tested else first <= last  # none after the end
        state = lax.cond(runs, lambda s: odd_block(last, s), lambda s: s, state)
    carry, token = state[:2]
    structs = tuple(leaf.struct for leaf in loop.carry)
    final = host_call(host.finish, structs, token, *loop.plain(carry), ordered=ordered)
    return loop.wrapped(treedef, final)
