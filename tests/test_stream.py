"""Stream: a scan streamed from inside a jitted program, bit for bit one ``lax.scan`` and byte for byte the output
``write`` makes of the same job; failures on the host end the program and surface as streamacc's errors; a
killed or interrupted program resumes to the bytes of an uninterrupted run.

The references are ``lax.scan`` jitted whole, and ``write``: never the Stream itself. Waits on
processes and threads have deadlines of minutes, far from the seconds a run takes.
"""

from __future__ import annotations

import errno
import itertools
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import Popen, assert_bits_equal, assert_same_output, committed, failing, kill_at, read_manifest
from jax import lax

import streamacc
from streamacc import testing
from streamacc.errors import InputError, ResumeError, StepFunctionError, StoreError, StreamaccError, StreamaccWarning
from streamacc.store import ZarrSink
from streamacc.stream import pieces

DEADLINE = 120.0


def affine(c, x):
    c = 0.999 * c + 0.01 * jnp.sin(x) + x * c * 1e-3
    return c, c


def keyed(carry, x):
    key, sub = jax.random.split(carry["key"])
    u = jax.random.normal(sub, dtype=jnp.float64)
    c = 0.999 * carry["c"] + 0.01 * jnp.sin(x) + x * carry["c"] * 1e-3 + 1e-3 * u
    return {"c": c, "key": key}, {"c": c, "u": u}


INITS = {
    "scalar": (affine, lambda: np.float64(0.5)),
    "vector": (affine, lambda: np.linspace(0.0, 1.0, 4096)),
    "keyed": (keyed, lambda: {"c": np.float64(0.5), "key": jax.random.key(7)}),
}


def inputs(length: int) -> jax.Array:
    return jnp.asarray(np.random.default_rng(length).normal(size=length))


def reference(f, init, xs, length, unroll, reverse, every):
    """One ``lax.scan`` over the whole length, jitted whole: its final carry and its kept ys."""
    carry, ys = jax.jit(lambda c, x: lax.scan(f, c, x, length=length, unroll=unroll, reverse=reverse))(init, xs)
    kept = (length // every) * every
    return carry, jax.tree_util.tree_map(lambda y: np.asarray(y[every - 1 : kept : every]), ys)


def stream(out, f, init, xs, length, *, mode="create", **keywords):
    """``init`` and ``xs`` through a Stream inside a jitted program, as its arguments: traced there."""
    with streamacc.Stream(out, f, length=length, mode=mode, progress=False, **keywords) as s:

        @jax.jit
        def program(c, x):
            return s.scan(c, x)

        return program(init, xs)


def stored(out: Path) -> dict[str, np.ndarray]:
    group = zarr.open_group(str(out), mode="r")
    return {name: np.asarray(array[...]) for name, array in group.arrays()}


def ys_by_name(ys) -> dict[str, np.ndarray]:
    return ys if isinstance(ys, dict) else {"y": ys}


# (init, unroll, block_size, save_every, reverse, length): one block and many, the last one odd (shorter, or
# longer where a tail of fewer than 2 * unroll steps joins it), thinned, reversed
CASES = [
    ("scalar", 1, 64, 1, False, 1000),
    ("scalar", 3, 96, 1, False, 1000),
    ("scalar", 8, 496, 1, False, 1000),
    ("scalar", 1, None, 1, False, 1000),
    ("scalar", 3, 84, 7, False, 1000),
    ("scalar", 1, 64, 1, True, 1000),
    ("scalar", 3, 96, 1, True, 999),
    ("vector", 3, 96, 1, False, 300),
    ("vector", 1, 63, 7, False, 300),
    ("vector", 8, None, 1, False, 256),
    ("keyed", 1, 50, 1, False, 333),
    ("keyed", 4, 56, 7, False, 500),
    ("keyed", 1, 49, 7, True, 350),
]
SAME_AS_WRITE = {1, 4, 6, 8, 11, 12}
"""The cases also written by ``write``, whose output the Stream's must equal file for file."""


@pytest.mark.parametrize("case", range(len(CASES)), ids=[str(c) for c in CASES])
def test_the_stream_holds_lax_scans_bits_and_writes_writes_bytes(tmp_path, case):
    name, unroll, block, every, reverse, length = CASES[case]
    f, make = INITS[name]
    init, xs = make(), inputs(length)
    keywords = {"unroll": unroll, "block_size": block, "save_every": every, "reverse": reverse}
    carry, ys = reference(f, init, xs, length, unroll, reverse, every)
    out = tmp_path / "stream.zarr"
    got = stream(out, f, init, xs, length, **keywords)
    assert_bits_equal(got, carry)
    data = stored(out)
    for key, want in ys_by_name(ys).items():
        assert data[key].dtype == want.dtype and data[key].tobytes() == want.tobytes(), key
    if case in SAME_AS_WRITE:
        written = tmp_path / "write.zarr"
        assert_bits_equal(streamacc.write(written, f, init, xs, length=length, progress=False, **keywords), carry)
        assert_same_output(out, written)


def test_a_program_computes_the_initial_carry_streams_and_works_on_after(tmp_path):
    """The initial carry is traced (a warm-up in the program), and the program uses the final carry after."""
    out, length = tmp_path / "out.zarr", 400
    xs = inputs(length)
    with streamacc.Stream(out, keyed, length=length, block_size=64, progress=False) as s:

        @jax.jit
        def program(seed, x):
            key, warm = jax.random.split(jax.random.key(seed))
            init = {"c": jnp.mean(jax.random.normal(warm, (100,), dtype=jnp.float64)), "key": key}
            final = s.scan(init, x)
            return init, final, 2.0 * final["c"]

        init, final, twice = program(3, xs)
    carry, ys = reference(keyed, init, xs, length, 1, False, 1)
    assert_bits_equal(final, carry)
    assert float(twice) == 2.0 * float(carry["c"])
    assert stored(out)["u"].tobytes() == ys["u"].tobytes()
    report = streamacc.verify(out, keyed, init, xs)
    assert report.complete and report.checked_blocks == tuple(range(7))
    assert streamacc.info(out).complete
    assert streamacc.open(out)["c"].values.tobytes() == ys["c"].tobytes()


def test_a_stream_with_x64_off_runs_in_32_bits_with_32_bit_block_indices(tmp_path, x64_off):
    length = 300
    init, xs = np.float32(0.5), jnp.asarray(np.random.default_rng(1).normal(size=length).astype(np.float32))
    got = stream(tmp_path / "out.zarr", affine, init, xs, length, block_size=63, unroll=3)
    carry, ys = reference(affine, init, xs, length, 3, False, 1)
    assert_bits_equal(got, carry)
    assert stored(tmp_path / "out.zarr")["y"].dtype == np.float32
    assert stored(tmp_path / "out.zarr")["y"].tobytes() == ys.tobytes()


def test_scan_called_outside_jit_runs_as_its_own_program(tmp_path):
    length = 300
    xs = inputs(length)
    with streamacc.Stream(tmp_path / "out.zarr", affine, length=length, block_size=64, progress=False) as s:
        got = s.scan(np.float64(0.5), xs)
    assert_bits_equal(got, reference(affine, np.float64(0.5), xs, length, 1, False, 1)[0])


@pytest.fixture(scope="module")
def in_place(tmp_path_factory):
    """``in_place(case)``: the case's reference (final carry, kept ys) and the output of its Stream with blocks
    handed over in place, as on the CPU (its final carry checked against the reference), made on first use."""
    made: dict[int, tuple] = {}

    def get(case: int) -> tuple:
        if case not in made:
            name, unroll, block, every, reverse, length = CASES[case]
            f, make = INITS[name]
            carry, ys = reference(f, make(), inputs(length), length, unroll, reverse, every)
            out = tmp_path_factory.mktemp("in-place") / "out.zarr"
            keywords = {"unroll": unroll, "block_size": block, "save_every": every, "reverse": reverse}
            assert_bits_equal(stream(out, f, make(), inputs(length), length, **keywords), carry)
            made[case] = carry, ys, out
        return made[case]

    return get


@pytest.mark.xdist_group("stream_io")  # in one worker of pytest -n: each case's in-place run made once
@pytest.mark.parametrize("how", ["ordered", "chained", "pinned"])
@pytest.mark.parametrize("case", [6, 12], ids=[str(CASES[6]), str(CASES[12])])
def test_blocks_cross_by_an_io_callback_to_the_same_bytes(tmp_path, in_place, case, how):
    """Off the CPU a block crosses to the host by an ``io_callback`` instead of in place (ordered, chained by a
    token, or from pinned host memory), each ys leaf in pieces of a few rows: the same bytes, reversed and odd or
    thinned, and a typed key in the carry."""
    name, unroll, block, every, reverse, length = CASES[case]
    f, make = INITS[name]
    init, xs = make(), inputs(length)
    keywords = {"unroll": unroll, "block_size": block, "save_every": every, "reverse": reverse}
    carry, ys, in_place_out = in_place(case)
    with testing.patched("stream.handover", lambda: how), testing.patched("stream.piece_bytes", lambda: 40):
        got = stream(tmp_path / "io.zarr", f, init, xs, length, **keywords)
    assert_bits_equal(got, carry)
    data = stored(tmp_path / "io.zarr")
    for key, want in ys_by_name(ys).items():
        assert data[key].tobytes() == want.tobytes(), key
    assert_same_output(tmp_path / "io.zarr", in_place_out)


def test_a_blocks_rows_cross_in_even_pieces_of_at_most_the_bytes_asked_a_row_at_least():
    for rows in range(41):
        for row_bytes in (1, 8, 24, 100):
            for most in (1, 8, 40, 64, 10**6):
                got = pieces(rows, row_bytes, most)
                assert got[0][0] == 0 and got[-1][1] == rows
                assert all(a[1] == b[0] for a, b in itertools.pairwise(got))
                sizes = [stop - start for start, stop in got]
                per = max(1, most // row_bytes)  # whole rows a piece may hold
                assert max(sizes) <= per and max(sizes) - min(sizes) <= 1
                assert (len(got) - 1) * per < max(rows, 1)  # one piece fewer could not hold them


@pytest.mark.parametrize("how", ["in_place", "ordered", "chained", "pinned"])
def test_blocks_queued_behind_a_slow_disk_keep_their_values(tmp_path, how):
    """The program runs on while the blocks it handed over wait for a slow disk: each crossed into host
    memory of its own, which the program's next blocks cannot overwrite, and the host holds ``inflight``."""
    length, block = 2048, 64
    real = testing.current("store.write_new")
    writing = threading.Semaphore(0)

    def slow(path, data):
        time.sleep(0.01)
        writing.release()
        return real(path, data)

    xs = inputs(length)
    with testing.patched("store.write_new", slow), testing.patched("stream.handover", lambda: how):
        got = stream(tmp_path / "out.zarr", affine, np.float64(0.5), xs, length, block_size=block, inflight=2)
    carry, ys = reference(affine, np.float64(0.5), xs, length, 1, False, 1)
    assert_bits_equal(got, carry)
    assert stored(tmp_path / "out.zarr")["y"].tobytes() == ys.tobytes()
    assert writing.acquire(timeout=0)  # the slow writer ran


# --- what a Stream refuses ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keywords", "refused"),
    [
        ({"virtual": True}, "virtual"),
        ({"layout": streamacc.Layout(virtual=True)}, "virtual"),
        ({"client": object()}, "client"),
        ({"executor": streamacc.Local()}, "executor"),
    ],
)
def test_keywords_that_cannot_apply_inside_jit_are_refused(tmp_path, keywords, refused):
    with pytest.raises(InputError, match=rf"Stream does not take {refused}: .*; leave it out"):
        streamacc.Stream(tmp_path / "out.zarr", affine, length=10, **keywords)
    assert not (tmp_path / "out.zarr").exists()


def test_bad_keywords_are_refused_as_write_refuses_them(tmp_path):
    with pytest.raises(InputError, match="length"):
        streamacc.Stream(tmp_path / "out.zarr", affine, length=0)
    with pytest.raises(InputError, match="mode"):
        streamacc.Stream(tmp_path / "out.zarr", affine, length=10, mode="append")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        streamacc.Stream(tmp_path / "out.zarr", affine, length=10, bogus=1)
    spec = streamacc.ScanSpec(lambda c, _: (c, c), np.float64(0.5), length=10)
    with pytest.raises(InputError, match="not a ScanSpec"):
        streamacc.Stream(tmp_path / "out.zarr", spec, length=10)


def test_names_as_a_dict_rename_each_output_by_its_key_as_write_does(tmp_path):
    def scaled(c, _):
        return c + 1.0, {"a": c, "b": c * 100.0}

    out = tmp_path / "out.zarr"
    stream(out, scaled, np.float64(1.0), None, 100, block_size=32, names={"b": "first", "a": "second"})
    ys = lax.scan(scaled, np.float64(1.0), None, length=100)[1]
    got = stored(out)
    np.testing.assert_array_equal(got["first"], np.asarray(ys["b"]))
    np.testing.assert_array_equal(got["second"], np.asarray(ys["a"]))
    with pytest.raises(InputError, match="not a set, which has no order"):
        streamacc.Stream(tmp_path / "set.zarr", scaled, length=100, names={"b", "a"})
    assert not (tmp_path / "set.zarr").exists()


@pytest.mark.parametrize("f", [None, "not a function", 3.0])
def test_a_step_that_is_not_callable_is_refused_when_the_stream_is_made(tmp_path, f):
    with pytest.raises(StepFunctionError, match=r"f must be the step function, callable as f\(carry, x\)") as caught:
        streamacc.Stream(tmp_path / "out.zarr", f, length=10, progress=False)
    assert type(f).__name__ in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "out.zarr").exists()


def test_a_with_block_left_without_streaming_warns_that_nothing_was_written(tmp_path):
    never = streamacc.Stream(tmp_path / "never.zarr", affine, length=100, progress=False)
    with pytest.warns(StreamaccWarning, match=r"without a call of stream\.scan: nothing was written; call"), never:
        pass
    s = streamacc.Stream(tmp_path / "traced.zarr", affine, length=100, progress=False)
    with pytest.warns(StreamaccWarning, match=r"traced but its program never run: nothing was written"), s:
        jax.jit(lambda c: s.scan(c, inputs(100))).lower(np.float64(0.5))
    assert not (tmp_path / "never.zarr" / "_streamacc").exists()
    assert not (tmp_path / "traced.zarr" / "_streamacc").exists()


def test_a_with_block_that_streams_or_fails_adds_no_warning(tmp_path, recwarn):
    stream(tmp_path / "out.zarr", affine, np.float64(0.5), inputs(100), 100)
    failed = streamacc.Stream(tmp_path / "failed.zarr", affine, length=100, progress=False)
    with pytest.raises(ZeroDivisionError), failed:
        1 / 0  # noqa: B018
    narrowing = lambda c, x: (c.astype(jnp.float32), c)  # noqa: E731
    refused = streamacc.Stream(tmp_path / "refused.zarr", narrowing, length=100, progress=False)
    with refused, pytest.raises(StepFunctionError):  # the caller saw the scan fail
        jax.jit(lambda c: refused.scan(c, inputs(100)))(jnp.float64(0.5))
    assert not [w for w in recwarn if issubclass(w.category, StreamaccWarning)]


def test_scan_outside_the_with_block_twice_or_after_it_is_refused(tmp_path):
    s = streamacc.Stream(tmp_path / "out.zarr", affine, length=100, progress=False)
    with pytest.raises(InputError, match=r"inside `with streamacc\.Stream"):
        s.scan(np.float64(0.5), inputs(100))
    with s:
        s.scan(np.float64(0.5), inputs(100))
        with pytest.raises(InputError, match="called on this Stream already"):
            s.scan(np.float64(0.5), inputs(100))
    with pytest.raises(InputError, match="closed"):
        s.scan(np.float64(0.5), inputs(100))
    with pytest.raises(InputError, match="entered once"):
        s.__enter__()


def test_a_program_run_twice_is_refused_at_its_second_run(tmp_path):
    out = tmp_path / "out.zarr"
    s = streamacc.Stream(out, affine, length=100, block_size=32, progress=False)
    with pytest.raises(InputError, match="streamed once already"), s:
        program = jax.jit(lambda c, x: s.scan(c, x))
        first = program(np.float64(0.5), inputs(100))
        with pytest.raises(jax.errors.JaxRuntimeError, match="streamed once already"):
            program(np.float64(0.5), inputs(100))
    assert read_manifest(out)["complete"]
    assert_bits_equal(first, reference(affine, np.float64(0.5), inputs(100), 100, 1, False, 1)[0])


@pytest.mark.parametrize("how", ["in_place", "pinned"])
def test_vmap_and_grad_are_refused_naming_what_works(tmp_path, how):
    """Refused whether the callbacks are ordered (as on the CPU) or not (as where the blocks cross pinned)."""
    with testing.patched("stream.handover", lambda: how):
        with streamacc.Stream(tmp_path / "vmapped.zarr", affine, length=100, progress=False) as s:
            program = jax.jit(jax.vmap(lambda c: s.scan(c, inputs(100))))
            with pytest.raises(InputError, match=r"cannot run under jax.vmap.*jax.vmap\(member_step\)"):
                program(jnp.ones(3))
        s = streamacc.Stream(tmp_path / "grad.zarr", affine, length=100, progress=False)
        with s, pytest.raises(InputError, match=r"cannot be differentiated.*stop_gradient"):
            jax.grad(lambda c: s.scan(c, inputs(100)))(0.5)
    assert not (tmp_path / "vmapped.zarr" / "_streamacc").exists()
    assert not (tmp_path / "grad.zarr" / "_streamacc").exists()


def test_an_ensemble_streams_with_vmap_inside_the_step(tmp_path):
    """What the refusal of vmap names: the members in the carry, the member's step mapped in f."""
    out, length = tmp_path / "out.zarr", 200
    ensemble = lambda c, x: jax.vmap(affine, in_axes=(0, None))(c, x)  # noqa: E731
    init, xs = np.linspace(0.1, 0.9, 5), inputs(length)
    got = stream(out, ensemble, init, xs, length, block_size=64)
    carry, ys = reference(ensemble, init, xs, length, 1, False, 1)
    assert_bits_equal(got, carry)
    assert stored(out)["y"].shape == (length, 5) and stored(out)["y"].tobytes() == ys.tobytes()


PARAMS: dict = {}


def rated(c, x):
    return c * PARAMS["rate"], c


def test_a_step_using_a_value_traced_in_the_program_is_refused_naming_the_carry(tmp_path):
    with streamacc.Stream(tmp_path / "out.zarr", rated, length=100, progress=False) as s:

        @jax.jit
        def program(rate):
            PARAMS["rate"] = rate  # f reads a value of this trace
            return s.scan(jnp.float64(1.0))

        with pytest.raises(InputError, match=r"f uses a value traced in the jitted program.*pass it in the carry"):
            program(1.0001)
    assert not (tmp_path / "out.zarr" / "_streamacc").exists()


def test_a_step_that_breaks_the_scan_contract_is_refused_as_write_refuses_it(tmp_path):
    def bad(c, x):
        return c.astype(jnp.float32), c

    s = streamacc.Stream(tmp_path / "out.zarr", bad, length=100, progress=False)
    with s, pytest.raises(StepFunctionError, match="changes the carry"):
        jax.jit(lambda c: s.scan(c, inputs(100)))(jnp.float64(0.5))


def test_an_existing_output_is_refused_before_anything_is_written(tmp_path):
    out, xs = tmp_path / "out.zarr", inputs(100)
    stream(out, affine, np.float64(0.5), xs, 100, block_size=32)
    before = (out / "_streamacc" / "zarr.json").read_bytes()
    with pytest.raises(StreamaccError, match=r"already exists.*mode='extend'"):
        stream(out, affine, np.float64(0.5), xs, 100, block_size=32)
    assert (out / "_streamacc" / "zarr.json").read_bytes() == before


# --- failures on the host -------------------------------------------------------------------------------


def within(seconds: float, fn):
    """``fn()`` on a thread, which must end within ``seconds`` (a hang fails the test instead of the suite)."""
    box: list = []

    def run():
        try:
            box.append((True, fn()))
        except BaseException as exc:
            box.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    ok, value = box[0]
    if not ok:
        raise value
    return value


LENGTH, BLOCK = 1000, 96  # 11 blocks, the last one of 40 steps


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The job written by ``write``, the reference of every run below."""
    out = tmp_path_factory.mktemp("ref") / "out.zarr"
    streamacc.write(out, affine, np.linspace(0, 1, 16), jnp.tile(inputs(LENGTH)[:, None], 16), length=LENGTH,
                    block_size=BLOCK, unroll=3, progress=False)  # fmt: skip
    return out


def run_job(out, **keywords):
    xs = keywords.pop("xs", jnp.tile(inputs(LENGTH)[:, None], 16))
    return stream(out, affine, np.linspace(0, 1, 16), xs, LENGTH, block_size=BLOCK, unroll=3, **keywords)


def test_a_full_disk_ends_the_program_with_write_s_error_and_a_resume_finishes_it(tmp_path, written):
    out = tmp_path / "out.zarr"
    full = failing(out, "y/c/4/0", OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(StoreError, match=r"after 384 of 1000 steps \(No space left on device\).*mode='resume'") as e:
        within(DEADLINE, lambda: run_job(full))
    assert isinstance(e.value.__cause__, OSError)
    assert isinstance(e.value.__context__, jax.errors.JaxRuntimeError)
    manifest = read_manifest(out)
    assert manifest["committed_blocks"] == 4 and not manifest["complete"]
    within(DEADLINE, lambda: run_job(out, mode="resume"))
    assert_same_output(out, written)


def test_a_disk_that_stays_full_ends_the_program(tmp_path, written):
    """Every block from the fifth on fails: their slots are given back and the failure is known at once, so the
    program, waiting for a slot, ends instead of waiting for blocks that will never be written."""
    out = tmp_path / "out.zarr"
    real = testing.current("store.write_new")

    def full(path, data):
        if "/c/" in str(path) and "_streamacc" not in str(path) and int(Path(path).parent.name) >= 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data)

    with testing.patched("store.write_new", full), pytest.raises(StoreError, match="No space left on device"):
        within(DEADLINE, lambda: run_job(out, inflight=2))
    assert read_manifest(out)["committed_blocks"] == 4
    within(DEADLINE, lambda: run_job(out, mode="resume"))
    assert_same_output(out, written)


def test_a_resume_whose_inputs_changed_is_refused_as_the_program_starts(tmp_path, written):
    """The inputs live in the program: their values reach the host as it starts, before any block runs."""
    out = tmp_path / "out.zarr"
    with pytest.raises(StoreError):
        within(DEADLINE, lambda: run_job(failing(out, "y/c/4/0")))
    other = jnp.tile(inputs(LENGTH)[:, None], 16).at[300].add(1.0)  # in block 3, the last committed
    with pytest.raises(ResumeError, match=r"the values of the inputs of its 1000 steps differ"):
        within(DEADLINE, lambda: run_job(out, mode="resume", xs=other))
    assert read_manifest(out)["committed_blocks"] == 4
    within(DEADLINE, lambda: run_job(out, mode="resume"))
    assert_same_output(out, written)


def test_an_output_removed_mid_run_ends_the_program(tmp_path, monkeypatch):
    out = tmp_path / "out.zarr"
    real = ZarrSink.write

    def write(self, start, stop, ys):
        if start == 3 * BLOCK:
            shutil.rmtree(out)
        return real(self, start, stop, ys)

    monkeypatch.setattr(ZarrSink, "write", write)
    with pytest.raises(StoreError, match="failed after"):
        within(DEADLINE, lambda: run_job(out))


@pytest.mark.parametrize("fails", [False, True])
def test_a_stream_whose_output_folder_goes_is_neither_complete_nor_safe(tmp_path, monkeypatch, fails):
    """y/ removed mid-run: the writes after it make its chunks' folders again, and the manifest counts on; the
    run ends with the output's loss, whether it finishes or a later write fails."""
    out = tmp_path / "out.zarr"
    real = ZarrSink.write

    def write(self, start, stop, ys):
        if start == 3 * BLOCK:
            shutil.rmtree(out / "y", ignore_errors=True)
        return real(self, start, stop, ys)

    monkeypatch.setattr(ZarrSink, "write", write)
    target = failing(out, "y/c/7/0", OSError(errno.ENOSPC, "No space left on device")) if fails else out
    lost = r"no longer holds what this run committed|and the store no longer holds them"
    with pytest.raises(StoreError, match=lost) as failed:
        within(DEADLINE, lambda: run_job(target))
    assert "safely committed" not in str(failed.value)
    assert not read_manifest(out)["complete"]


def test_a_resume_of_another_run_is_refused_before_anything_is_written(tmp_path, written):
    out = tmp_path / "out.zarr"
    shutil.copytree(written, out)
    before = (out / "_streamacc" / "zarr.json").read_bytes()

    def other(c, x):
        return affine(c, 2.0 * x)

    with pytest.raises(ResumeError):
        stream(out, other, np.linspace(0, 1, 16), jnp.tile(inputs(LENGTH)[:, None], 16), LENGTH, mode="extend",
               block_size=BLOCK, unroll=3)  # fmt: skip
    with pytest.raises(ResumeError, match=r"began with a carry of leaves \[float64\[16\]\].*\[float64\[8\]\]"):
        run_job_of(out, np.zeros(8))
    assert (out / "_streamacc" / "zarr.json").read_bytes() == before


def run_job_of(out, init):
    xs = jnp.tile(inputs(LENGTH)[:, None], 16)
    return stream(out, affine, init, xs, LENGTH, mode="resume", block_size=BLOCK, unroll=3)


# --- continued runs -------------------------------------------------------------------------------------


def test_a_finished_stream_is_extended_to_the_bytes_of_one_longer_run(tmp_path):
    out, longer = tmp_path / "out.zarr", tmp_path / "longer.zarr"
    xs = inputs(1000)
    stream(out, affine, np.float64(0.5), xs[:600], 600, block_size=64)
    got = stream(out, affine, np.float64(0.25), xs, 1000, block_size=64, mode="extend")  # init: only its type
    want = streamacc.write(longer, affine, np.float64(0.5), xs, length=1000, block_size=64, progress=False)
    assert_bits_equal(got, want)
    assert_same_output(out, longer)


def test_resuming_a_finished_stream_does_nothing_and_returns_its_carry(tmp_path):
    out, xs = tmp_path / "out.zarr", inputs(300)
    first = stream(out, affine, np.float64(0.5), xs, 300, block_size=64)
    before = (out / "_streamacc" / "zarr.json").read_bytes()
    with pytest.warns(StreamaccWarning, match="already complete"):
        again = stream(out, affine, np.float64(0.5), xs, 300, block_size=64, mode="resume")
    assert_bits_equal(again, first)
    assert (out / "_streamacc" / "zarr.json").read_bytes() == before


# --- processes killed and signalled ---------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys, time
    import jax, jax.numpy as jnp, numpy as np, streamacc, streamacc.testing

    jax.config.update("jax_enable_x64", True)
    real = streamacc.testing.original("store.write_new")

    def slow(path, data):  # a slow disk: the run lasts long enough to be stopped in the middle
        time.sleep(float(sys.argv[3]))
        return real(path, data)

    streamacc.testing.replace("store.write_new", slow)

    def step(c, x):
        c = 0.999 * c + 0.01 * jnp.sin(x) + x * c * 1e-3
        return c, c

    xs = jnp.asarray(np.random.default_rng(0).normal(size=4096))
    try:
        with streamacc.Stream(sys.argv[1], step, length=4096, block_size=64, mode=sys.argv[2], progress=False) as s:
            @jax.jit
            def program(a, x):
                return s.scan(jnp.sqrt(a), x)

            print(float(program(0.25, xs)), flush=True)
    except streamacc.run.Terminated:
        sys.exit(143)
    except KeyboardInterrupt:
        sys.exit(130)
    """
)


def start_child(out: Path, mode: str, pause: float) -> Popen:
    return Popen([sys.executable, "-c", CHILD, str(out), mode, str(pause)], stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE, text=True)  # fmt: skip


def finish_in_child(out: Path, mode: str) -> None:
    proc = start_child(out, mode, 0.0)
    _, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, err


@pytest.fixture(scope="module")
def child_reference(tmp_path_factory) -> Path:
    """The child's run, uninterrupted (made once for the tests below, which share a worker of pytest -n)."""
    out = tmp_path_factory.mktemp("child") / "reference.zarr"
    finish_in_child(out, "create")
    return out


CHILD_RUNS = pytest.mark.xdist_group("stream_child")


@CHILD_RUNS
@pytest.mark.slow
def test_a_program_killed_mid_stream_resumes_to_the_bytes_of_an_uninterrupted_run(tmp_path, child_reference):
    out = tmp_path / "out.zarr"
    proc = start_child(out, "create", 0.05)
    assert kill_at(proc, out, 3, delay=0.2), "the program finished before it could be killed"
    assert 3 <= committed(out) < 64 and not read_manifest(out)["complete"]
    finish_in_child(out, "resume")
    assert_same_output(out, child_reference)


@CHILD_RUNS
@pytest.mark.slow
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_ends_the_program_at_the_next_block_with_its_blocks_safe(tmp_path, signum, code, child_reference):
    """The main thread is inside XLA when the signal comes: Python's handler cannot run until XLA returns."""
    out = tmp_path / "out.zarr"
    proc = start_child(out, "create", 0.05)
    end = time.monotonic() + DEADLINE
    while committed(out) < 2:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the run never committed 2 blocks"
        time.sleep(0.02)
    proc.send_signal(signum)
    try:
        out_text, err = proc.communicate(timeout=DEADLINE)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running {DEADLINE:.0f} s after signal {signum}") from None
    assert proc.returncode == code, err
    assert out_text == "" and "jax.io_callback failed" not in err
    manifest = read_manifest(out)
    assert 2 <= manifest["committed_blocks"] < 64 and not manifest["complete"]
    finish_in_child(out, "resume")
    assert_same_output(out, child_reference)
