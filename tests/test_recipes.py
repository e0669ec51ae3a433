"""Recipes: each against its numpy reference, block-size invariance, hashing, metadata, errors."""

import json
import pickle
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr

import streamacc
from streamacc.cli import cli_message
from streamacc.errors import InputError
from streamacc.recipes import RECIPES, Job, Param, Recipe, get_recipe

DTYPES = ["float64", "float32"]


def run(job: Job, block_size: int = 64, unroll: int | None = None) -> np.ndarray:
    unroll = job.unroll if unroll is None else unroll
    _, ys = streamacc.scan(job.f, job.init, job.xs, length=job.length, block_size=block_size, unroll=unroll)
    return ys


def one_scan(job: Job) -> np.ndarray:
    """The same step as a single lax.scan over the whole length."""
    init = jax.tree_util.tree_map(jnp.asarray, job.init)
    xs = None if job.xs is None else jnp.asarray(np.asarray(job.xs[0 : job.length]))
    return np.asarray(jax.lax.scan(job.f, init, xs, length=job.length, unroll=job.unroll)[1])


def loop(step, x0, n: int) -> np.ndarray:
    out, x = [], x0
    for _ in range(n):
        out.append(x)
        x = step(x)
    return np.array(out)


def save(path, data: np.ndarray, chunk: int = 100) -> str:
    array = zarr.create_array(str(path), shape=data.shape, dtype=data.dtype, chunks=(chunk,) * data.ndim)
    array[...] = data
    return str(path)


# --- registry -------------------------------------------------------------------------


def test_registry_order_and_types():
    assert list(RECIPES) == ["gp", "affine", "logistic", "randomwalk", "lorenz", "cumsum", "cumprod"]
    for name, recipe in RECIPES.items():
        assert isinstance(recipe, Recipe) and recipe.name == name and get_recipe(name) is recipe
        assert recipe.description and "\n" not in recipe.description
        for param in recipe.params:
            assert isinstance(param, Param) and param.name.isidentifier()
            assert param.kind in ("float", "int", "path", "flag") and param.help and "\n" not in param.help


def test_get_recipe_unknown():
    with pytest.raises(InputError) as info:
        get_recipe("foo")
    message = str(info.value)
    assert "\n" not in message and "'foo'" in message
    assert "gp, affine, logistic, randomwalk, lorenz, cumsum, cumprod" in message and "streamacc recipes" in message


# --- progressions -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_gp_matches_multiply_accumulate_exactly(dtype):
    job = get_recipe("gp").build(2000, dtype, x0=1.5, ratio=1.001)
    ref = np.multiply.accumulate(np.r_[np.asarray([1.5], dtype), np.full(1999, 1.001, dtype=dtype)])
    assert ref.dtype == dtype and job.unroll == 8 and job.names == ("x",)
    out = run(job, block_size=304)
    assert out.dtype == dtype and out.tobytes() == ref.tobytes()
    assert run(job, block_size=7, unroll=1).tobytes() == out.tobytes()  # unroll does not change the bits


def test_gp_defaults_are_the_seed_question():
    job = get_recipe("gp").build(1000, "float64")
    ref = np.multiply.accumulate(np.r_[1.0, np.full(999, 1 + 1e-8)])
    assert run(job).tobytes() == ref.tobytes()
    assert job.attrs["params"] == {"x0": 1.0, "ratio": 1 + 1e-8, "compensated": False}


@pytest.mark.parametrize("dtype", DTYPES)
def test_affine(dtype):
    job = get_recipe("affine").build(2000, dtype, x0=3.0, a=0.7, b=0.3)
    a, b = np.asarray(0.7, dtype), np.asarray(0.3, dtype)
    ref = loop(lambda x: a * x + b, np.asarray(3.0, dtype), 2000)
    out = run(job, block_size=64)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, ref, rtol=1e-12 if dtype == "float64" else 1e-6)
    assert out.tobytes() == one_scan(job).tobytes()
    assert job.unroll == 1


@pytest.mark.parametrize("dtype", DTYPES)
def test_logistic(dtype):
    job = get_recipe("logistic").build(2000, dtype)
    r, one = np.asarray(3.7, dtype), np.asarray(1.0, dtype)
    ref = loop(lambda x: r * x * (one - x), np.asarray(0.5, dtype), 2000)
    out = run(job, block_size=128)
    assert out.dtype == dtype and job.unroll == 1
    # (r * x) * (1 - x) leaves XLA nothing to contract or reassociate, so even this chaotic map matches exactly
    assert out.tobytes() == ref.tobytes()
    assert out.tobytes() == one_scan(job).tobytes()
    assert np.all((out >= 0) & (out <= 1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_logistic_inner(dtype):
    job = get_recipe("logistic").build(64, dtype, x0=0.25, r=3.9, inner=32)
    r, one = np.asarray(3.9, dtype), np.asarray(1.0, dtype)

    def step(x):
        for _ in range(32):
            x = r * x * (one - x)
        return x

    ref = loop(step, np.asarray(0.25, dtype), 64)
    out = run(job, block_size=10)
    assert out.tobytes() == ref.tobytes()
    assert out.tobytes() == one_scan(job).tobytes()


# --- randomwalk -------------------------------------------------------------------------


def walk_reference(n: int, dtype: str, x0: float, sigma: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The walk and its final carry from eager draws, one at a time, summed by numpy."""
    key = jax.random.key(seed)
    z = np.array([np.asarray(jax.random.normal(jax.random.fold_in(key, i), dtype=dtype)) for i in range(1, n + 1)])
    d = np.asarray(sigma, dtype) * z  # each increment rounded once
    walk = np.add.accumulate(np.r_[np.asarray([x0], dtype), d])  # numpy adds in order, one rounding each
    return walk[:n], walk[n]


@pytest.mark.parametrize("dtype", DTYPES)
def test_randomwalk_is_the_running_sum_of_its_draws_for_any_block_size(dtype):
    job = get_recipe("randomwalk").build(600, dtype, x0=2.0, sigma=0.3, seed=11)
    ref, ref_carry = walk_reference(600, dtype, 2.0, 0.3, 11)
    assert ref.dtype == dtype and job.names == ("x",)
    for block_size in (7, 1000):  # blocks shorter than the walk, the last one shorter still; one longer
        carry, out = streamacc.scan(job.f, job.init, job.xs, length=job.length, block_size=block_size)
        assert out.tobytes() == ref.tobytes()
        assert np.asarray(carry).tobytes() == ref_carry.tobytes()
    assert one_scan(job).tobytes() == ref.tobytes()
    steps = np.diff(ref)
    assert abs(steps.std() - 0.3) < 0.05 and abs(steps.mean()) < 0.05


def test_randomwalk_increments_are_keyed_by_the_global_step():
    job = get_recipe("randomwalk").build(2**32, "float32", sigma=2.0, seed=2**40)  # a seed past 32 bits
    key = jax.random.key(2**40)
    for i in (0, 5, 2**31 + 3, 2**32 - 2):
        expected = np.float32(2.0) * np.asarray(jax.random.normal(jax.random.fold_in(key, i + 1), dtype="float32"))
        assert job.xs[i].tobytes() == expected.tobytes()
        assert job.xs[i : i + 2][0].tobytes() == expected.tobytes()
    # the last increment folds in 2**32, which fold_in takes modulo 2**32, as the scalar draw always did
    last = np.float32(2.0) * np.asarray(jax.random.normal(jax.random.fold_in(key, 0), dtype="float32"))
    assert job.xs[-1].tobytes() == last.tobytes()
    assert job.xs[10:4:-3].tobytes() == np.stack([job.xs[10], job.xs[7]]).tobytes()
    with pytest.raises(IndexError):
        job.xs[2**32]


def test_randomwalk_float32_needs_no_x64(x64_off):
    job = get_recipe("randomwalk").build(100, "float32", seed=2**40)
    _, out = streamacc.scan(job.f, job.init, job.xs, length=job.length, block_size=16)
    jax.config.update("jax_enable_x64", True)
    assert out.tobytes() == walk_reference(100, "float32", 0.0, 1.0, 2**40)[0].tobytes()


def test_randomwalk_seed_and_sigma():
    job = get_recipe("randomwalk").build(50, "float64", seed=3)
    carry, out = streamacc.scan(job.f, job.init, job.xs, length=50, block_size=16)
    assert out[0] == 0.0 and np.asarray(carry).shape == ()
    other = run(get_recipe("randomwalk").build(50, "float64", seed=4), block_size=16)
    assert not np.array_equal(out, other)
    narrow = run(get_recipe("randomwalk").build(50, "float64", x0=1.5, sigma=1e-300), block_size=16)
    assert np.all(narrow == 1.5)  # each increment is far below half an ulp of 1.5


# --- cumulative -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_cumsum_and_cumprod_from_zarr(tmp_path, dtype):
    rng = np.random.default_rng(0)
    data = rng.standard_normal(1500)
    factors = 1.0 + 1e-3 * rng.standard_normal(1500)
    sums = get_recipe("cumsum").build(None, dtype, input=save(tmp_path / "a.zarr", data))
    prods = get_recipe("cumprod").build(None, dtype, input=save(tmp_path / "b.zarr", factors))
    assert sums.xs.whole is not None and sums.length == 1500 and sums.names == ("y",)  # all of the input, lazily
    for job, values, ref_fn in ((sums, data, np.cumsum), (prods, factors, np.cumprod)):
        ref = ref_fn(values.astype(dtype))
        out = run(job, block_size=64)
        assert out.dtype == dtype and out.tobytes() == ref.tobytes()
        assert run(job, block_size=1000, unroll=1).tobytes() == out.tobytes()


def test_cumsum_prefix_is_lazy(tmp_path):
    data = np.arange(1000, dtype=np.int32)
    job = get_recipe("cumsum").build(700, "float64", input=save(tmp_path / "i.zarr", data))
    assert not isinstance(job.xs, (np.ndarray, zarr.Array))  # a view of the input's first 700 rows, read lazily
    assert job.xs.shape == (700,) and job.xs.dtype == np.int32
    assert job.length == 700
    np.testing.assert_array_equal(job.xs[690:800], data[690:700])
    np.testing.assert_array_equal(job.xs[-3:], data[697:700])
    np.testing.assert_array_equal(job.xs[20:5:-4], data[:700][20:5:-4])
    assert job.xs[-1] == 699
    with pytest.raises(IndexError):
        job.xs[700]
    assert run(job, block_size=64).tobytes() == np.cumsum(data[:700].astype(np.float64)).tobytes()


CODECS = {"zstd": "auto", "blosc": [zarr.codecs.BloscCodec()], "gzip": [zarr.codecs.GzipCodec()], "none": None}


@pytest.mark.parametrize("codec", CODECS)
def test_input_rows_read_as_zarr_reads_them(tmp_path, codec):
    """Rows decoded chunk by chunk into aligned memory equal zarr's own slices, whatever the slice."""
    values = np.random.default_rng(5).standard_normal(1000).astype(np.float32)
    array = zarr.create_array(
        tmp_path / "in.zarr", shape=(1000,), chunks=(96,), dtype="f4", fill_value=2.5, compressors=CODECS[codec]
    )
    array[:500] = values[:500]
    array[600:] = values[600:]  # chunks 5 and 6 partly, none of [500, 576) stored: the fill value
    job = get_recipe("cumsum").build(990, "float32", input=str(tmp_path / "in.zarr"))
    expected = np.asarray(array[:990])
    assert job.xs.whole is None and not np.array_equal(expected[500:600], values[500:600])
    for key in (slice(0, 990), slice(0, 64), slice(64, 400), slice(400, 990), slice(950, None), slice(30, 31)):
        rows = job.xs[key]
        assert rows.tobytes() == expected[key].tobytes() and rows.ctypes.data % 64 == 0
    assert job.xs[::-7].tobytes() == expected[::-7].tobytes() and job.xs[-1] == expected[-1]
    again = pickle.loads(pickle.dumps(job.xs))
    assert again[100:300].tobytes() == expected[100:300].tobytes()
    assert run(job, block_size=64).tobytes() == np.cumsum(expected).tobytes()


def test_a_blocks_input_rows_are_freed_before_the_next_blocks_are_read(tmp_path, monkeypatch):
    """XLA lets go of the rows it computed on in place from a thread of its own, and jaxlib drops that reference
    only at Python's next collection; the engine collects before reading a block, so at most one block's rows live."""
    import gc
    import weakref

    from streamacc.engine import make_plan, run_plan
    from streamacc.recipes import InputRows

    steps = 2**19  # 4 MiB of float64 rows per block, as large as the engine lets go of
    data = np.random.default_rng(3).uniform(0.5, 1.0, 4 * steps)
    job = get_recipe("cumsum").build(4 * steps, "float64", input=save(tmp_path / "i.zarr", data, chunk=steps))
    read, alive_at_read = [], []
    real = InputRows._read

    def recorded(self, start, stop):
        alive_at_read.append(sum(r() is not None for r in read))
        rows = real(self, start, stop)
        read.append(weakref.ref(rows.base if rows.base is not None else rows))
        return rows

    monkeypatch.setattr(InputRows, "_read", recorded)
    plan = make_plan(job.f, job.init, job.xs, length=job.length, block_size=steps, unroll=job.unroll)
    gc.collect()
    gc.disable()  # no collection of its own may free them
    try:
        out = np.concatenate([np.array(block.ys) for block in run_plan(plan)])
    finally:
        gc.enable()
    assert len(read) == 4 and alive_at_read == [0, 0, 0, 0]
    assert out.tobytes() == np.cumsum(data).tobytes()


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_whole_zstd_and_plain_chunks_are_read_into_their_rows_alone(tmp_path, monkeypatch, codec):
    """A block of whole chunks reads each chunk's stored bytes into its own rows (zstd's at their end,
    decompressed in place), so no buffer of stored bytes exists besides the rows: the only large
    allocations of a read are its rows, one per read."""
    import mmap

    steps = 2**16
    data = np.random.default_rng(8).uniform(0.5, 1.0, 4 * steps)
    array = zarr.create_array(
        tmp_path / "in.zarr", shape=data.shape, chunks=(steps,), dtype="f8", compressors=CODECS[codec]
    )
    array[...] = data
    job = get_recipe("cumsum").build(4 * steps, "float64", input=str(tmp_path / "in.zarr"))
    from streamacc import store

    maps, rows = [], []
    real_mmap, real_empty = mmap.mmap, store.aligned_empty
    monkeypatch.setattr(mmap, "mmap", lambda *a, **k: maps.append(a) or real_mmap(*a, **k))
    monkeypatch.setattr(store, "aligned_empty", lambda n, align: rows.append(n) or real_empty(n, align))
    for start in range(0, 4 * steps, 2 * steps):  # blocks of two whole chunks
        got = job.xs[start : start + 2 * steps]
        assert got.tobytes() == data[start : start + 2 * steps].tobytes() and got.ctypes.data % 64 == 0
    # the rows, and for zstd the room past them that the last chunk's frame is read into (256 KiB)
    assert maps == [] and len(rows) == 2 and all(2 * steps * 8 <= n <= 2 * steps * 8 + 2**18 for n in rows)
    assert run(job, block_size=steps).tobytes() == np.cumsum(data).tobytes()


def zstd_frames(data: bytes, level: int = 0, checksum: bool = False) -> bytes:
    import numcodecs

    return bytes(numcodecs.Zstd(level=level, checksum=checksum).encode(data))


def test_zstd_margin_of_incompressible_data_is_its_overhead_and_one_block():
    """Random bytes compress to raw blocks: the frame is its header, 3 bytes per block, the bytes themselves
    (and a checksum), so zstd's in-place margin is the frame's size less the data, plus one block of 128 KiB."""
    from streamacc.recipes import zstd_margin

    data = np.random.default_rng(2).integers(0, 256, 2**21 + 5, dtype=np.uint8).tobytes()
    for checksum in (False, True):
        frame = zstd_frames(data, checksum=checksum)
        assert len(frame) > len(data)  # stored raw
        assert zstd_margin(frame, len(data)) == len(frame) - len(data) + 128 * 2**10


def test_zstd_margin_refuses_what_it_cannot_vouch_for():
    from streamacc.recipes import zstd_margin

    data = np.arange(50_000, dtype=np.float64).tobytes()
    frame = zstd_frames(data, level=3)
    margin = zstd_margin(frame, len(data))
    assert margin is not None and 128 * 2**10 < margin < 128 * 2**10 + 1000
    assert zstd_margin(frame, len(data) + 1) is None  # not what the chunk holds
    assert zstd_margin(frame[:-1], len(data)) is None  # cut short
    assert zstd_margin(frame + b"\0", len(data)) is None  # trailing bytes
    assert zstd_margin(b"\x00" * 16, len(data)) is None  # not zstd
    dictionary = bytearray(frame)
    dictionary[4] |= 1  # a frame that needs a dictionary
    assert zstd_margin(bytes(dictionary), len(data)) is None
    # frames one after the other: their overheads add up, and the larger block counts once
    small = np.random.default_rng(3).integers(0, 256, 800, dtype=np.uint8).tobytes()
    second = zstd_frames(small)  # stored raw: its overhead is its size less the 800 bytes, its block at most 800
    assert zstd_margin(frame + second, len(data) + 800) == margin + len(second) - 800
    skippable = (0x184D2A53).to_bytes(4, "little") + (5).to_bytes(4, "little") + b"12345"
    assert zstd_margin(skippable + frame, len(data)) == margin + 13


@pytest.mark.parametrize("kind", ["uniform", "walk", "zeros", "small integers", "random bits"])
@pytest.mark.parametrize("level", [0, 1, 9, 19])
def test_zstd_chunks_decompressed_in_place_are_zarrs_values(tmp_path, kind, level):
    """Chunks of every kind of zstd block (compressed, RLE, raw) decompressed in place, in a block of
    several chunks and in one smaller than a chunk, are the bytes zarr reads."""
    rng = np.random.default_rng(level)
    n = 3 * 2**15
    data = {
        "uniform": rng.uniform(0.5, 1.0, n),
        "walk": np.cumsum(rng.uniform(0.5, 1.0, n)),
        "zeros": np.zeros(n),
        "small integers": rng.integers(0, 10, n).astype(np.float64),
        "random bits": rng.integers(0, 2**63, n).view(np.float64),
    }[kind]
    array = zarr.create_array(
        tmp_path / "in.zarr", shape=(n,), chunks=(2**15,), dtype="f8", fill_value=1.5,
        compressors=[zarr.codecs.ZstdCodec(level=level, checksum=level == 9)],
    )  # fmt: skip
    array[...] = data
    job = get_recipe("cumsum").build(n, "float64", input=str(tmp_path / "in.zarr"))
    for key in (slice(0, n), slice(2**15, n), slice(0, 2**14), slice(2**14, 2**15)):
        assert job.xs[key].tobytes() == np.asarray(array[key]).tobytes()


def test_a_damaged_zstd_chunk_fails_as_zarr_fails(tmp_path):
    """A chunk zstd cannot decompress in place is read again into a buffer of its own and decoded there, so a
    damaged chunk raises the error of a plain decode."""
    data = np.random.default_rng(4).uniform(0.5, 1.0, 2**16)
    save(tmp_path / "in.zarr", data, chunk=2**15)
    chunk = tmp_path / "in.zarr" / "c" / "1"
    stored = bytearray(chunk.read_bytes())
    stored[len(stored) // 2 : len(stored) // 2 + 64] = bytes(64)
    chunk.write_bytes(bytes(stored))
    job = get_recipe("cumsum").build(2**16, "float64", input=str(tmp_path / "in.zarr"))
    assert job.xs[: 2**15].tobytes() == data[: 2**15].tobytes()
    with pytest.raises(RuntimeError, match="Zstd"):
        zarr.open_array(tmp_path / "in.zarr", mode="r")[2**15 :]
    with pytest.raises(RuntimeError, match="Zstd"):
        job.xs[2**15 :]


# --- identity and metadata ----------------------------------------------------------------

BUILDS = [
    ("gp", {"ratio": 1.5}),
    ("affine", {"a": 0.25}),
    ("logistic", {"r": 3.5, "inner": 2}),
    ("randomwalk", {"seed": 7}),
]


@pytest.mark.parametrize(("name", "params"), BUILDS)
def test_step_functions_hash_by_value(name, params):
    recipe = get_recipe(name)
    first, second = recipe.build(10, "float64", **params), recipe.build(10, "float64", **params)
    assert first.f is not second.f and first.f == second.f and hash(first.f) == hash(second.f)
    assert recipe.build(10, "float32", **params).f != first.f
    assert recipe.build(10, "float64").f != first.f
    x = None if first.xs is None else first.xs[0]
    assert jax.jit(first.f)(jax.tree_util.tree_map(jnp.asarray, first.init), x)[1] is not None


def test_signed_zero_is_a_different_step():
    plus, minus = (get_recipe("affine").build(5, "float64", b=b).f for b in (0.0, -0.0))
    assert plus != minus


def test_rebuild_reuses_compiled_blocks():
    build = get_recipe("affine").build
    compiles = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(duration)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        run(build(100, "float64", a=0.1875), block_size=50)
        assert compiles  # the first build compiled its block
        compiles.clear()
        run(build(100, "float64", a=0.1875), block_size=50)  # an equal step function: nothing to compile
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
    assert compiles == []


def test_attrs_are_json(tmp_path):
    path = save(tmp_path / "u.zarr", np.ones(10))
    for name, recipe in RECIPES.items():
        params = {"input": tmp_path / "u.zarr"} if name in ("cumsum", "cumprod") else {}
        params |= {"ratio": 1.5} if name == "gp" else {}  # the default ratio rounds to 1 in float32
        job = recipe.build(10, "float32", **params)
        attrs = json.loads(json.dumps(job.attrs))
        assert attrs == job.attrs
        assert set(attrs) == {"recipe", "params", "description", "units"} and attrs["recipe"] == name
        one_walk = {"paths"} if name == "randomwalk" else set()  # recorded as before ensembles existed
        assert set(attrs["params"]) == {p.name for p in recipe.params} - one_walk
    assert get_recipe("cumsum").build(None, "float64", input=tmp_path / "u.zarr").attrs["params"] == {
        "input": path,
        "compensated": False,
    }


# --- bad parameters -----------------------------------------------------------------------

BAD = [
    ("gp", None, "float64", {}, "size", "needs size", "size=1000000"),
    ("gp", 0, "float64", {}, "size", "size must be >= 1", "size=1000000"),
    ("gp", 2.5, "float64", {}, "size", "size must be a whole number", "size=1000000"),
    ("gp", 10, "int32", {}, "dtype", "dtype must be", "dtype='float64'"),
    ("gp", 10, "float16", {}, "dtype", "dtype must be", "dtype='float64'"),
    ("gp", 10, "float64", {"ratio": float("nan")}, "ratio", "ratio must be finite", "ratio=1.00000001"),
    ("gp", 10, "float64", {"x0": float("inf")}, "x0", "x0 must be finite", "x0=1.0"),
    ("gp", 10, "float64", {"ratio": "abc"}, "ratio", "ratio must be a number", "ratio=1.00000001"),
    ("gp", 10, "float64", {"rate": 2.0}, "rate", "no parameter rate", "x0, ratio"),
    ("affine", 10, "float64", {"b": -float("inf")}, "b", "b must be finite", "b=1.0"),
    ("logistic", 10, "float64", {"r": 0.0}, "r", "r must be in (0, 4]", "r=3.7"),
    ("logistic", 10, "float64", {"r": 4.5}, "r", "r must be in (0, 4]", "r=3.7"),
    ("logistic", 10, "float64", {"inner": 0}, "inner", "inner must be >= 1", "inner=1"),
    ("logistic", 10, "float64", {"inner": 1.5}, "inner", "inner must be a whole number", "inner=1"),
    ("logistic", 10, "float64", {"x0": 1.5}, "x0", "x0 must be in [0, 1]", "x0=0.5"),
    ("randomwalk", 10, "float64", {"sigma": -1.0}, "sigma", "sigma must be >= 0", "sigma=1.0"),
    ("randomwalk", 10, "float64", {"seed": -1}, "seed", "seed must be in", "seed=0"),
    ("randomwalk", 2**32 + 1, "float64", {}, "size", "size must be <= 4294967296", "different seed values"),
    ("cumsum", None, "float64", {}, "input", "needs input", "input='in.zarr'"),
    (
        "cumsum",
        None,
        "float64",
        {"input": "{tmp}/missing.zarr"},
        "input",
        "input='{tmp}/missing.zarr' is not",
        "1-D zarr",
    ),
    ("cumsum", None, "float64", {"input": "{tmp}/group.zarr"}, "input", "group.zarr' is a zarr group", "its arrays"),
    ("cumprod", None, "float64", {"input": "{tmp}/2d.zarr"}, "input", "input must be a 1-D", "got shape (4, 4)"),
    (
        "cumprod",
        None,
        "float64",
        {"input": "{tmp}/empty.zarr"},
        "input",
        "input='{tmp}/empty.zarr' is empty",
        "one value",
    ),
    ("cumsum", 11, "float64", {"input": "{tmp}/ok.zarr"}, "size", "size=11 exceeds the 10 values", "size=10 or less"),
    ("cumsum", 0, "float64", {"input": "{tmp}/ok.zarr"}, "size", "size must be >= 1", "size=1000000"),
    ("cumsum", None, "bfloat16", {"input": "{tmp}/ok.zarr"}, "dtype", "dtype must be", "dtype='float64'"),
]


@pytest.fixture
def inputs(tmp_path):
    save(tmp_path / "ok.zarr", np.ones(10))
    save(tmp_path / "2d.zarr", np.ones((4, 4)), chunk=2)
    save(tmp_path / "empty.zarr", np.ones(0))
    zarr.create_group(str(tmp_path / "group.zarr"))
    return tmp_path


ARGS = ("name", "size", "dtype", "params", "arg", "problem", "fix")


@pytest.mark.parametrize(ARGS, BAD)
def test_bad_params_speak_python(inputs, name, size, dtype, params, arg, problem, fix):
    params = {k: v.format(tmp=inputs) if isinstance(v, str) else v for k, v in params.items()}
    with pytest.raises(InputError) as info:
        get_recipe(name).build(size, dtype, **params)
    message = str(info.value)
    assert "\n" not in message and "--" not in message
    assert problem.format(tmp=inputs) in message and fix in message


@pytest.mark.parametrize(ARGS, BAD)
def test_bad_params_speak_cli_options_in_the_cli(inputs, name, size, dtype, params, arg, problem, fix):
    params = {k: v.format(tmp=inputs) if isinstance(v, str) else v for k, v in params.items()}
    with pytest.raises(InputError) as info:
        get_recipe(name).build(size, dtype, **params)
    message = cli_message(info.value)
    assert "\n" not in message and f"--{arg}" in message and f"{arg}=" not in message


# --- parameters that round to a degenerate value in the output dtype ----------------------

DEGENERATE = [
    ("gp", {}, "ratio=1.00000001 rounds to 1.0 in float32, so every value would equal x0", "a ratio farther from 1"),
    ("gp", {"ratio": -1 - 1e-9}, "ratio=-1.000000001 rounds to -1.0 in float32", "a ratio farther from -1"),
    ("gp", {"ratio": 1e-50}, "ratio=1e-50 rounds to 0.0 in float32", "a ratio farther from 0"),
    ("gp", {"ratio": 1e39}, "ratio=1e+39 rounds to inf in float32", "a smaller ratio"),
    ("gp", {"x0": -1e39, "ratio": 2.0}, "x0=-1e+39 rounds to -inf in float32", "a smaller x0"),
    ("gp", {"x0": 1e-46, "ratio": 2.0}, "x0=1e-46 rounds to 0.0 in float32, so every value would be 0", "from 0"),
    ("affine", {"a": 1e-50}, "a=1e-50 rounds to 0.0 in float32, so every value after x0 would equal b", "from 0"),
    ("affine", {"a": 1 + 1e-9, "b": 0.0}, "a=1.000000001 rounds to 1.0 in float32, so the map would be x -> x", "1"),
    ("affine", {"a": 1.0, "b": 1e-50}, "b=1e-50 rounds to 0.0 in float32, so the map would be x -> x", "from 0"),
    ("affine", {"b": 3e38 * 2}, "b=6e+38 rounds to inf in float32", "a smaller b"),
    ("logistic", {"r": 1e-50}, "r=1e-50 rounds to 0.0 in float32, so every value after x0 would be 0", "from 0"),
    ("logistic", {"x0": 1e-50}, "x0=1e-50 rounds to 0.0 in float32, so every value would be 0", "from 0"),
    ("logistic", {"x0": 1 - 1e-9}, "x0=0.999999999 rounds to 1.0 in float32, so every value after x0", "from 1"),
    ("randomwalk", {"sigma": 1e-50}, "sigma=1e-50 rounds to 0.0 in float32, so every value would equal x0", "sigma"),
    ("randomwalk", {"x0": 1e39}, "x0=1e+39 rounds to inf in float32", "a smaller x0"),
]


@pytest.mark.parametrize(("name", "params", "problem", "fix"), DEGENERATE)
def test_a_parameter_that_rounds_to_a_degenerate_value_is_refused(name, params, problem, fix):
    with pytest.raises(InputError) as info:
        get_recipe(name).build(10, "float32", **params)
    message = str(info.value)
    assert problem in message and "\n" not in message
    assert fix in message.split("; pass dtype='float64' or ")[1]
    get_recipe(name).build(10, "float64", **params)  # exact in float64: accepted


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("gp", {"ratio": 1 + 2**-20}),  # close to 1 but distinct in float32
        ("affine", {"a": 1 + 1e-9, "b": 1.0}),  # a rounds to 1: an arithmetic progression, not a degenerate one
        ("affine", {"a": -1 + 2**-20}),
        ("logistic", {"x0": 2**-20}),
        ("randomwalk", {"x0": 1e-50}),  # the start rounds to 0, the walk goes on
    ],
)
def test_harmless_rounding_is_accepted(name, params):
    job = get_recipe(name).build(10, "float32", **params)
    assert job.attrs["params"] == {**job.attrs["params"], **params}


GIVEN_DEGENERATE = [
    ("gp", {"ratio": 1.0}, "ratio=1.0 is degenerate: every value would equal x0", "a ratio farther from 1"),
    ("gp", {"ratio": -1.0}, "ratio=-1.0 is degenerate: the values would alternate between x0 and -x0", "-1"),
    ("gp", {"ratio": 0.0}, "ratio=0.0 is degenerate: every value after x0 would be 0", "a ratio farther from 0"),
    ("gp", {"x0": 0.0, "ratio": 2.0}, "x0=0.0 is degenerate: every value would be 0", "an x0 farther from 0"),
    ("affine", {"a": 1.0, "b": 0.0}, "b=0.0 is degenerate: the map would be x -> x", "a b farther from 0"),
    ("affine", {"a": 0.0}, "a=0.0 is degenerate: every value after x0 would equal b", "an a farther from 0"),
    ("affine", {"a": -1.0}, "a=-1.0 is degenerate: the values would alternate between x0 and b - x0", "from -1"),
    ("logistic", {"x0": 0.0}, "x0=0.0 is degenerate: every value would be 0", "an x0 farther from 0"),
    ("logistic", {"x0": 1.0}, "x0=1.0 is degenerate: every value after x0 would be 0", "an x0 farther from 1"),
    ("randomwalk", {"sigma": 0.0}, "sigma=0.0 is degenerate: every value would equal x0", "a larger sigma"),
]


@pytest.mark.parametrize(("name", "params", "problem", "fix"), GIVEN_DEGENERATE)
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_degenerate_parameter_is_refused_as_given_too(name, params, problem, fix, dtype):
    """One rule: judged on the value the dtype holds, whether given so or rounded to it (see DEGENERATE)."""
    with pytest.raises(InputError) as info:
        get_recipe(name).build(10, dtype, **params)
    message = str(info.value)
    assert problem in message and fix in message.rsplit("; pass ", 1)[1]
    assert "\n" not in message


def test_the_rule_for_degenerate_parameters_is_stated_where_users_look(capsys):
    from streamacc.cli import main
    from streamacc.recipes import DEGENERATE_RULE

    assert main(["recipes"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == DEGENERATE_RULE
    guide = " ".join((Path(__file__).resolve().parents[1] / "docs/guide/writing.md").read_text().split())
    assert DEGENERATE_RULE in guide


def test_a_compensated_recipe_holds_a_parameter_as_a_pair_before_calling_it_degenerate():
    """1 + 1e-8 is 1.0 in float32 but a float32 pair holds it; 1e-50 is 0 even as a pair."""
    with pytest.raises(InputError, match=r"rounds to 1\.0 in float32"):
        get_recipe("gp").build(10, "float32", ratio=1 + 1e-8)
    job = get_recipe("gp").build(10, "float32", ratio=1 + 1e-8, compensated=True)
    assert job.attrs["params"]["compensated"] is True
    with pytest.raises(InputError, match=r"x0=1e-50 rounds to 0\.0 in float32, so every value would be 0"):
        get_recipe("gp").build(10, "float32", x0=1e-50, compensated=True)  # below float32's range, pair or not


def test_each_recipe_writes_the_array_its_description_and_the_writing_guide_name(tmp_path):
    guide = " ".join((Path(__file__).resolve().parents[1] / "docs/guide/writing.md").read_text().split())
    names = "`x` for every recipe's recurrence, with `y` and `z` beside it for `lorenz`; `y` for `cumsum` and `cumprod`"
    assert names in guide
    source = save(tmp_path / "in.zarr", np.ones(10))
    for name, recipe in RECIPES.items():
        job = recipe.build(10, "float64", **({"input": source} if name in ("cumsum", "cumprod") else {}))
        if name == "lorenz":  # a system of three: its description names them
            assert job.names == ("x", "y", "z") and "outputs x, y, z" in recipe.description
            continue
        assert job.names == (("y",) if name in ("cumsum", "cumprod") else ("x",))
        assert f"{job.names[0]}[i] = " in recipe.description, (name, recipe.description)


def test_an_input_that_is_a_group_names_its_arrays(tmp_path):
    out = tmp_path / "out.zarr"
    streamacc.write(out, lambda c, _: (c * 2.0, c), np.float64(1.0), length=10, names=["x"], progress=False)
    with pytest.raises(InputError) as info:
        get_recipe("cumsum").build(None, "float64", input=str(out))
    assert str(info.value) == (
        f"input={str(out)!r} is a zarr group, not an array (its arrays: x); pass one of its arrays, "
        f"e.g. input={str(out / 'x')!r}"
    )
    assert get_recipe("cumsum").build(None, "float64", input=str(out / "x")).length == 10
