"""Compensated recipes against exact arithmetic: the error-free transformations, the
correctly rounded outputs of gp, affine, cumsum and cumprod, bit-identity across block
sizes and resumes, and the ``compensated`` option from Python and the command line.

Every reference is exact: Python integers (inputs are integer multiples of powers of
two, so every exact value is an integer times a power of two) and ``fractions.Fraction``,
rounded to the dtype by integer arithmetic here, never by the code under test.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import zarr
from helpers import faultrun

import streamacc
from streamacc.cli import main
from streamacc.errors import InputError, ResumeError
from streamacc.recipes import fast_two_sum, get_recipe, split, split_constant, two_prod, two_sum

PRECISION = {"float64": 53, "float32": 24}
DTYPES = ["float64", "float32"]


# --- exact references ----------------------------------------------------------------------


def dyadic(value: float) -> tuple[int, int]:
    """A finite float as ``(m, e)`` with ``value == m * 2**e`` exactly."""
    fraction = Fraction(value)
    return fraction.numerator, -(fraction.denominator.bit_length() - 1)


def round_dyadic(m: int, e: int, dtype: str) -> float:
    """``m * 2**e`` rounded to the nearest ``dtype`` value, ties to even (normal range only)."""
    if m == 0:
        return 0.0
    p, sign, m = PRECISION[dtype], -1 if m < 0 else 1, abs(m)
    shift = m.bit_length() - p
    if shift > 0:
        q, r = m >> shift, m & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        m, e = q + (r > half or (r == half and q & 1)), e + shift
    value = math.ldexp(sign * m, e)
    assert np.finfo(dtype).tiny <= abs(value) <= np.finfo(dtype).max
    return value


def ordered(a: np.ndarray) -> np.ndarray:
    """Floats mapped to integers in the same order, one apart for adjacent floats (ulp distances)."""
    a = np.asarray(a)
    signed = a.view(np.int64 if a.itemsize == 8 else np.int32).astype(np.int64)
    return np.where(signed < 0, np.iinfo(np.int64 if a.itemsize == 8 else np.int32).min - signed, signed)


def ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    return np.abs(ordered(got) - ordered(exact.astype(got.dtype)))


def geometric_exact(x0: float, ratio: float, n: int, dtype: str) -> np.ndarray:
    (m, e), (rm, re) = dyadic(x0), dyadic(ratio)
    out = []
    for _ in range(n):
        out.append(round_dyadic(m, e, dtype))
        m, e = m * rm, e + re
    return np.array(out, dtype=dtype)


def affine_exact(x0: float, a: float, b: float, n: int, dtype: str) -> np.ndarray:
    (m, e), (am, ae), (bm, be) = dyadic(x0), dyadic(a), dyadic(b)
    out = []
    for _ in range(n):
        out.append(round_dyadic(m, e, dtype))
        low = min(ae + e, be)
        m, e = ((am * m) << (ae + e - low)) + (bm << (be - low)), low
    return np.array(out, dtype=dtype)


def running_exact(values: np.ndarray, op: str, dtype: str) -> np.ndarray:
    m, e = (0, 0) if op == "add" else (1, 0)
    out = []
    for v in values.tolist():
        vm, ve = dyadic(float(v))
        if op == "add":
            low = min(e, ve)
            m, e = (m << (e - low)) + (vm << (ve - low)), low
        else:
            m, e = m * vm, e + ve
        out.append(round_dyadic(m, e, dtype))
    return np.array(out, dtype=dtype)


def run(job, block_size: int = 512) -> np.ndarray:
    return streamacc.scan(job.f, job.init, job.xs, length=job.length, block_size=block_size, unroll=job.unroll)[1]


def save(path, values: np.ndarray) -> str:
    array = zarr.create_array(str(path), shape=values.shape, dtype=values.dtype, chunks=(700,))
    array[...] = values
    return str(path)


# --- error-free transformations --------------------------------------------------------------


def awkward(dtype: str, n: int, seed: int) -> np.ndarray:
    """Random significands (many with long runs of ones or zeros), exponents and signs."""
    rng = np.random.default_rng(seed)
    p, span = PRECISION[dtype], (60 if dtype == "float64" else 20)
    sig = rng.integers(1 << (p - 1), 1 << p, size=n, dtype=np.int64)
    runs = rng.integers(0, p, size=n)
    ones = rng.random(n) < 0.3
    sig = np.where(ones, sig | ((1 << runs) - 1), sig)
    zeros = rng.random(n) < 0.3
    sig = np.where(zeros, sig >> runs << runs, sig)
    sig[:4] = [(1 << p) - 1, 1 << (p - 1), (1 << p) - 2, (1 << (p - 1)) + 1]
    values = np.ldexp(sig.astype(np.float64), rng.integers(-span, span, size=n) - (p - 1))
    return (values * rng.choice([-1.0, 1.0], size=n)).astype(dtype)


def exact_sum(*values: float) -> Fraction:
    return sum((Fraction(float(v)) for v in values), Fraction(0))


@pytest.mark.parametrize("dtype", DTYPES)
def test_two_sum_and_fast_two_sum_are_exact(dtype):
    a, b = awkward(dtype, 3000, 1), awkward(dtype, 3000, 2)
    s, e = map(np.asarray, jax.jit(two_sum)(a, b))
    assert s.tobytes() == (a + b).tobytes()
    assert all(exact_sum(x, y) == exact_sum(u, v) for x, y, u, v in zip(a, b, s, e, strict=True))
    big, small = np.where(np.abs(a) >= np.abs(b), a, b), np.where(np.abs(a) >= np.abs(b), b, a)
    s, e = map(np.asarray, jax.jit(fast_two_sum)(big, small))
    assert all(exact_sum(x, y) == exact_sum(u, v) for x, y, u, v in zip(big, small, s, e, strict=True))


@pytest.mark.parametrize("dtype", DTYPES)
def test_split_halves_the_significand_exactly(dtype):
    x = awkward(dtype, 3000, 3)
    hi, lo = map(np.asarray, jax.jit(split)(x))
    assert (hi + lo).tobytes() == x.tobytes()
    half = (PRECISION[dtype] + 1) // 2  # 27 (float64), 12 (float32): bits cleared from hi
    for h, lo_, v in zip(hi.tolist(), lo.tolist(), x.tolist(), strict=True):
        _, e = math.frexp(v)
        assert Fraction(h) % Fraction(2) ** (e - PRECISION[dtype] + half) == 0  # hi keeps p - half bits
        assert abs(lo_) <= math.ldexp(1, e - PRECISION[dtype] + half - 1)  # lo is at most half that grid
        assert split_constant(v, dtype) == (h, lo_)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("constant", [False, True], ids=["runtime-split", "constant-split"])
def test_two_prod_is_exact(dtype, constant):
    a, b = awkward(dtype, 2000, 4), awkward(dtype, 2000, 5)
    if constant:  # a multiplier known when tracing, split on the host: two of them, 1000 values each
        b = np.repeat(b[::1000], 1000)
        parts = []
        for k in range(0, len(b), 1000):
            c, sp = b[k], split_constant(float(b[k]), dtype)
            parts.append(jax.jit(lambda v, c=c, sp=sp: two_prod(v, jnp.asarray(c), v - v, sp))(a[k : k + 1000]))
        p, e = (np.concatenate([np.asarray(part[i]) for part in parts]) for i in (0, 1))
    else:
        p, e = map(np.asarray, jax.jit(lambda x, y: two_prod(x, y, x - x))(a, b))
    assert p.tobytes() == (a * b).tobytes()
    exact = [Fraction(float(x)) * Fraction(float(y)) == exact_sum(u, v) for x, y, u, v in zip(a, b, p, e, strict=True)]
    assert all(exact)


# --- recipes against exact values ------------------------------------------------------------


GP_CASES = [
    ("float64", 1.0, 1 + 1e-8),
    ("float64", 0.7, 1 - 3e-9),
    ("float32", 1.0, 1 + 2**-23),
    ("float32", 1.5, 1 + 1e-8),  # the float64 ratio as a float32 pair: exact, so the output is its rounding
    ("float32", -3.0, 0.9990234375),
]


@pytest.mark.parametrize(("dtype", "x0", "ratio"), GP_CASES)
def test_gp_is_correctly_rounded(dtype, x0, ratio):
    n = 3000
    exact = geometric_exact(x0, ratio, n, dtype)
    got = run(get_recipe("gp").build(n, dtype, x0=x0, ratio=ratio, compensated=True))
    assert got.dtype == np.dtype(dtype)
    assert got.tobytes() == exact.tobytes()


def test_plain_gp_is_not_correctly_rounded_so_the_reference_can_tell():
    n = 3000
    exact = geometric_exact(1.0, 1 + 1e-8, n, "float64")
    plain = run(get_recipe("gp").build(n, "float64"))
    assert (ulps(plain, exact) > 0).mean() > 0.5


@pytest.mark.parametrize(
    ("dtype", "x0", "a", "b"),
    [
        ("float64", 1.0, 1 - 2**-10 + 2**-30, 0.3),
        ("float64", 0.25, -0.75, 1.0 + 2**-40),  # alternating signs around the fixed point
        ("float32", 1.0, 1 - 2**-10 + 2**-30, round(0.3 * 2**40) / 2**40),
        ("float32", 5.0, -0.75, 1.0 + 2**-40),
    ],
)
def test_affine_is_correctly_rounded(dtype, x0, a, b):
    n = 2000
    exact = affine_exact(x0, a, b, n, dtype)
    got = run(get_recipe("affine").build(n, dtype, x0=x0, a=a, b=b, compensated=True))
    assert got.tobytes() == exact.tobytes()


def inputs(n: int, dtype: str, signed: bool, bits: int) -> np.ndarray:
    """Values in [0.5, 1) (negated at random when ``signed``) with ``bits`` significant bits."""
    rng = np.random.default_rng(bits + signed)
    k = rng.integers(1 << (bits - 1), 1 << bits, size=n)
    values = np.ldexp(k.astype(np.float64), -bits)
    if signed:
        values *= rng.choice([-1.0, 1.0], size=n)
    return values.astype(dtype)


@pytest.mark.parametrize(
    ("in_dtype", "dtype", "signed", "bits"),
    [
        ("float64", "float64", False, 53),
        ("float64", "float64", True, 40),
        ("float32", "float32", False, 24),
        ("float64", "float32", True, 40),  # a float64 input added as an exact float32 pair
    ],
)
def test_cumsum_is_correctly_rounded(tmp_path, in_dtype, dtype, signed, bits):
    values = inputs(4000, in_dtype, signed, bits)
    path = save(tmp_path / "in.zarr", values)
    got = run(get_recipe("cumsum").build(None, dtype, input=path, compensated=True))
    assert got.tobytes() == running_exact(values, "add", dtype).tobytes()


@pytest.mark.parametrize(
    ("in_dtype", "dtype"), [("float64", "float64"), ("float32", "float32"), ("float64", "float32")]
)
def test_cumprod_is_correctly_rounded(tmp_path, in_dtype, dtype):
    rng = np.random.default_rng(7)
    # factors 1 + k * 2**-30 near 1, so the product stays in range; float64 ones into float32 as pairs
    values = (1 + rng.integers(-(2**12), 2**12, size=1500) * 2.0**-30).astype(in_dtype)
    path = save(tmp_path / "in.zarr", values)
    got = run(get_recipe("cumprod").build(None, dtype, input=path, compensated=True))
    assert got.tobytes() == running_exact(values, "mul", dtype).tobytes()


# --- bit-identity ----------------------------------------------------------------------------


def one_scan(job) -> tuple:
    init = jax.tree_util.tree_map(jnp.asarray, job.init)
    xs = None if job.xs is None else jnp.asarray(np.asarray(job.xs[0 : job.length]))
    return jax.lax.scan(job.f, init, xs, length=job.length, unroll=job.unroll)


@pytest.mark.parametrize(
    ("name", "dtype"), [("gp", "float64"), ("affine", "float32"), ("cumsum", "float64"), ("cumprod", "float32")]
)
def test_any_block_size_gives_the_bits_of_one_scan(tmp_path, name, dtype):
    n = 1000
    params = {"compensated": True}
    if name in ("cumsum", "cumprod"):
        params["input"] = save(tmp_path / "in.zarr", 1 + np.arange(n) * 2.0**-20)
    job = get_recipe(name).build(n, dtype, **params)
    carry, ys = one_scan(job)
    for block_size in (6, 512):
        got_carry, got = streamacc.scan(job.f, job.init, job.xs, length=n, block_size=block_size, unroll=job.unroll)
        assert got.tobytes() == np.asarray(ys).tobytes()
        assert [np.asarray(c).tobytes() for c in got_carry] == [np.asarray(c).tobytes() for c in carry]


@pytest.mark.parametrize("dtype", DTYPES)
def test_cli_resume_after_a_failure_gives_the_uninterrupted_bits_and_refuses_the_other_mode(tmp_path, capsys, dtype):
    args = ["--size", "5000", "--block-size", "512", "--dtype", dtype, "--ratio", "1+2**-23", "--no-progress"]
    ref, out = tmp_path / "ref.zarr", tmp_path / "out.zarr"
    assert main(["write", str(ref), *args, "--compensated"]) == 0
    assert faultrun("chunk", 4, "write", out, *args, "--compensated").returncode == 1  # a full disk at chunk 4
    plain = get_recipe("gp").make(5000, dtype, {"ratio": 1 + 2**-23})  # the other mode, from Python
    with pytest.raises(ResumeError, match=r"params\.compensated: stored True, now False"):
        streamacc.write(str(out), plain.f, plain.init, length=5000, block_size=512, attrs=plain.attrs,
                        mode="resume", progress=False)  # fmt: skip
    capsys.readouterr()
    assert main(["write", str(out), *args, "--resume"]) == 0  # --compensated left out: the output records it
    got, want = zarr.open_group(out, mode="r")["x"][:], zarr.open_group(ref, mode="r")["x"][:]
    assert got.tobytes() == want.tobytes() == geometric_exact(1.0, 1 + 2**-23, 5000, dtype).tobytes()
    assert streamacc.info(str(out)).params["compensated"] is True
    assert main(["verify", str(out)]) == 0


# --- the option ------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", ["logistic", "randomwalk"])
def test_cli_refuses_compensated_where_no_exact_carry_exists(tmp_path, capsys, recipe):
    out = tmp_path / "out.zarr"
    assert main(["write", str(out), "--recipe", recipe, "--size", "100", "--compensated", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"streamacc: error: --compensated does not apply to recipe '{recipe}': its ")
    assert "run it without --compensated" in err
    assert not out.exists()


def test_python_spells_the_option_as_a_keyword():
    with pytest.raises(
        InputError, match=r"^compensated=True does not apply to recipe 'logistic': .*without compensated=True$"
    ):
        get_recipe("logistic").build(10, "float64", compensated=True)
    assert "compensated" not in get_recipe("randomwalk").build(10, "float64", compensated=False).attrs["params"]
    with pytest.raises(
        InputError, match=r"^compensated must be True or False, got 'yes'; pass e\.g\. compensated=True$"
    ):
        get_recipe("gp").build(10, "float64", compensated="yes")
    job = get_recipe("gp").build(10, "float32", compensated=True)
    assert job.attrs["params"] == {"x0": 1.0, "ratio": 1 + 1e-8, "compensated": True}
    assert [np.asarray(c).dtype for c in job.init] == [np.float32] * 3
