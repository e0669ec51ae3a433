"""Recipes: each against its numpy reference, block-size invariance, hashing, metadata, errors."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr

import streamacc
from streamacc import InputError
from streamacc._engine import _scan_fn
from streamacc.recipes import RECIPES, Job, Param, Recipe, get_recipe
from streamacc.recipes._cumulative import Rows

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
    assert list(RECIPES) == ["gp", "affine", "logistic", "randomwalk", "cumsum", "cumprod"]
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
    assert "gp, affine, logistic, randomwalk, cumsum, cumprod" in message and "streamacc recipes" in message


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


@pytest.mark.parametrize("dtype", DTYPES)
def test_randomwalk_independent_of_block_size(dtype):
    job = get_recipe("randomwalk").build(2000, dtype, x0=2.0, sigma=0.3, seed=11)
    outs = [run(job, block_size=bs) for bs in (7, 64, 1000)]
    assert outs[0].dtype == dtype and job.names == ("x",)
    assert outs[0].tobytes() == outs[1].tobytes() == outs[2].tobytes() == one_scan(job).tobytes()
    key = jax.random.key(11)
    ref = [np.asarray(2.0, dtype)]
    for i in range(1, 6):
        ref.append(
            ref[-1] + np.asarray(0.3, dtype) * np.asarray(jax.random.normal(jax.random.fold_in(key, i), dtype=dtype))
        )
    # the draws inside the compiled loop may differ from eager ones in the last bit
    np.testing.assert_allclose(outs[0][:6], np.array(ref), rtol=1e-12 if dtype == "float64" else 1e-5, atol=1e-6)
    steps = np.diff(outs[0])
    assert abs(steps.std() - 0.3) < 0.05 and abs(steps.mean()) < 0.05


def test_randomwalk_carry_and_seed():
    job = get_recipe("randomwalk").build(50, "float64", seed=3)
    carry, out = streamacc.scan(job.f, job.init, None, length=50, block_size=16)
    assert np.asarray(carry[1]).dtype == np.uint64 and int(carry[1]) == 50
    assert out[0] == 0.0
    other = run(get_recipe("randomwalk").build(50, "float64", seed=4))
    assert not np.array_equal(out, other)
    flat = run(get_recipe("randomwalk").build(50, "float64", x0=1.5, sigma=0.0))
    assert np.all(flat == 1.5)


# --- cumulative -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_cumsum_and_cumprod_from_zarr(tmp_path, dtype):
    rng = np.random.default_rng(0)
    data = rng.standard_normal(1500)
    factors = 1.0 + 1e-3 * rng.standard_normal(1500)
    sums = get_recipe("cumsum").build(None, dtype, input=save(tmp_path / "a.zarr", data))
    prods = get_recipe("cumprod").build(None, dtype, input=save(tmp_path / "b.zarr", factors))
    assert isinstance(sums.xs, zarr.Array) and sums.length == 1500 and sums.names == ("y",)
    for job, values, ref_fn in ((sums, data, np.cumsum), (prods, factors, np.cumprod)):
        ref = ref_fn(values.astype(dtype))
        out = run(job, block_size=64)
        assert out.dtype == dtype and out.tobytes() == ref.tobytes()
        assert run(job, block_size=1000, unroll=1).tobytes() == out.tobytes()


def test_cumsum_prefix_is_lazy(tmp_path):
    data = np.arange(1000, dtype=np.int32)
    job = get_recipe("cumsum").build(700, "float64", input=save(tmp_path / "i.zarr", data))
    assert isinstance(job.xs, Rows) and job.xs.shape == (700,) and job.xs.dtype == np.int32
    assert job.length == 700
    np.testing.assert_array_equal(job.xs[690:800], data[690:700])
    np.testing.assert_array_equal(job.xs[-3:], data[697:700])
    np.testing.assert_array_equal(job.xs[20:5:-4], data[:700][20:5:-4])
    assert job.xs[-1] == 699
    with pytest.raises(IndexError):
        job.xs[700]
    assert run(job, block_size=64).tobytes() == np.cumsum(data[:700].astype(np.float64)).tobytes()


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
    assert jax.jit(first.f)(jax.tree_util.tree_map(jnp.asarray, first.init), None)[1] is not None


def test_signed_zero_is_a_different_step():
    plus, minus = (get_recipe("affine").build(5, "float64", b=b).f for b in (0.0, -0.0))
    assert plus != minus


def test_rebuild_reuses_compiled_blocks():
    build = get_recipe("affine").build
    run(build(100, "float64", a=0.125), block_size=50)
    hits = _scan_fn.cache_info().hits
    run(build(100, "float64", a=0.125), block_size=50)
    assert _scan_fn.cache_info().hits == hits + 2


def test_attrs_are_json(tmp_path):
    path = save(tmp_path / "u.zarr", np.ones(10))
    for name, recipe in RECIPES.items():
        params = {"input": tmp_path / "u.zarr"} if name in ("cumsum", "cumprod") else {}
        job = recipe.build(10, "float32", **params)
        attrs = json.loads(json.dumps(job.attrs))
        assert attrs == job.attrs
        assert set(attrs) == {"recipe", "params", "description", "units"} and attrs["recipe"] == name
        assert set(attrs["params"]) == {p.name for p in recipe.params}
    assert get_recipe("cumsum").build(None, "float64", input=tmp_path / "u.zarr").attrs["params"] == {
        "input": path,
        "compensated": False,
    }


# --- bad parameters -----------------------------------------------------------------------

BAD = [
    ("gp", None, "float64", {}, "--size"),
    ("gp", 0, "float64", {}, "--size"),
    ("gp", 2.5, "float64", {}, "--size"),
    ("gp", 10, "int32", {}, "--dtype"),
    ("gp", 10, "float16", {}, "--dtype"),
    ("gp", 10, "float64", {"ratio": float("nan")}, "--ratio"),
    ("gp", 10, "float64", {"x0": float("inf")}, "--x0"),
    ("gp", 10, "float64", {"ratio": "abc"}, "--ratio"),
    ("gp", 10, "float64", {"rate": 2.0}, "--rate"),
    ("affine", 10, "float64", {"b": -float("inf")}, "--b"),
    ("logistic", 10, "float64", {"r": 0.0}, "--r"),
    ("logistic", 10, "float64", {"r": 4.5}, "--r"),
    ("logistic", 10, "float64", {"inner": 0}, "--inner"),
    ("logistic", 10, "float64", {"inner": 1.5}, "--inner"),
    ("logistic", 10, "float64", {"x0": 1.5}, "--x0"),
    ("randomwalk", 10, "float64", {"sigma": -1.0}, "--sigma"),
    ("randomwalk", 10, "float64", {"seed": -1}, "--seed"),
    ("randomwalk", 2**32 + 1, "float64", {}, "--size"),
    ("cumsum", None, "float64", {}, "--input"),
    ("cumsum", None, "float64", {"input": "{tmp}/missing.zarr"}, "--input"),
    ("cumsum", None, "float64", {"input": "{tmp}/group.zarr"}, "--input"),
    ("cumprod", None, "float64", {"input": "{tmp}/2d.zarr"}, "--input"),
    ("cumprod", None, "float64", {"input": "{tmp}/empty.zarr"}, "--input"),
    ("cumsum", 11, "float64", {"input": "{tmp}/ok.zarr"}, "--size"),
    ("cumsum", 0, "float64", {"input": "{tmp}/ok.zarr"}, "--size"),
    ("cumsum", None, "bfloat16", {"input": "{tmp}/ok.zarr"}, "--dtype"),
]


@pytest.mark.parametrize(("name", "size", "dtype", "params", "opt"), BAD)
def test_bad_params(tmp_path, name, size, dtype, params, opt):
    save(tmp_path / "ok.zarr", np.ones(10))
    save(tmp_path / "2d.zarr", np.ones((4, 4)), chunk=2)
    save(tmp_path / "empty.zarr", np.ones(0))
    zarr.create_group(str(tmp_path / "group.zarr"))
    params = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in params.items()}
    with pytest.raises(InputError) as info:
        get_recipe(name).build(size, dtype, **params)
    message = str(info.value)
    assert "\n" not in message and opt in message
