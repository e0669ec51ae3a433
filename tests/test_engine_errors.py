"""Every argument error of the block engine: its class, and a one-line message naming the argument.

Each error is checked through ``iter_blocks`` at call time (before any ``next()``) and
through ``scan``.
"""

from __future__ import annotations

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import streamacc
from streamacc.errors import InputError, StepFunctionError, StreamaccError, X64Error


def product_step(c, _):
    return c * 1.0000001, c


def xs_step(c, x):
    return c + x, c


ONE = np.float64(1.0)


def raises(cls: type[Exception], *words: str, f=product_step, init=ONE, xs=None, **kwargs) -> str:
    """Assert both entry points raise ``cls`` at call time, with one line containing ``words``."""
    message = None
    for run in (streamacc.iter_blocks, streamacc.scan):
        with pytest.raises(cls) as info:
            run(f, init, xs, **kwargs)  # iter_blocks must raise here, not at the first next()
        err = info.value
        assert type(err) is cls
        assert isinstance(err, StreamaccError)
        text = str(err)
        assert text and "\n" not in text
        for word in words:
            assert word in text
        assert message in (None, text)
        message = text
    return message


def test_error_classes():
    assert issubclass(InputError, StreamaccError) and issubclass(InputError, ValueError)
    assert issubclass(StepFunctionError, InputError)
    assert issubclass(X64Error, InputError)


# --- length and xs ----------------------------------------------------------------------


def test_length_missing_without_xs():
    raises(InputError, "length", "xs")


def test_xs_leaves_of_different_lengths():
    raises(InputError, "xs", "[3, 4]", f=lambda c, x: (c + x[0] + x[1], c), xs=(np.ones(3), np.ones(4)))


def test_length_disagrees_with_xs():
    raises(InputError, "length=4", "xs", "3", f=xs_step, xs=np.ones(3), length=4)


def test_negative_length():
    raises(InputError, "length", "-1", length=-1)


def test_non_integer_length():
    raises(InputError, "length", "3.0", length=3.0)


def test_xs_leaf_without_step_axis():
    raises(InputError, "xs", f=xs_step, xs=np.float64(2.0))


# --- block_size, unroll, reverse ----------------------------------------------------------


@pytest.mark.parametrize("block_size", [0, -1, 2.5, "8", True], ids=repr)
def test_bad_block_size(block_size):
    raises(InputError, "block_size", repr(block_size), length=10, block_size=block_size)


def test_block_size_accepts_numpy_integer():
    (block,) = streamacc.iter_blocks(product_step, np.float64(1.0), length=3, block_size=np.int64(8))
    assert len(block) == 3


@pytest.mark.parametrize("unroll", [0, 1.5], ids=repr)
def test_bad_unroll(unroll):
    raises(InputError, "unroll", length=10, unroll=unroll)


def test_bad_reverse():
    raises(InputError, "reverse", "'yes'", length=10, reverse="yes")


# --- the step function ------------------------------------------------------------------


def test_f_not_callable():
    raises(StepFunctionError, "f must be callable", f=3, length=10)


def test_f_returns_single_array():
    raises(StepFunctionError, "f must return a (carry, y) pair", f=lambda c, _: c * 2.0, length=10)


def test_f_returns_three_tuple():
    raises(StepFunctionError, "f must return a (carry, y) pair", f=lambda c, _: (c, c, c), length=10)


def test_carry_changes_shape():
    msg = raises(StepFunctionError, "carry", f=lambda c, _: (jnp.stack([c, c]), c), length=10)
    assert "float64[]" in msg and "float64[2]" in msg


def test_carry_changes_dtype():
    msg = raises(StepFunctionError, "carry", f=lambda c, _: (c.astype(jnp.float32), c), length=10)
    assert "float64[]" in msg and "float32[]" in msg


def test_carry_changes_structure():
    raises(StepFunctionError, "carry", f=lambda c, _: ((c, c), c), length=10)
    raises(
        StepFunctionError,
        "carry",
        "'b'",
        "'c'",
        f=lambda c, _: ({"a": c["a"], "c": c["b"]}, c["a"]),
        init={"a": np.float64(1.0), "b": np.float64(2.0)},
        length=10,
    )


def test_weakly_typed_init_may_take_the_step_dtype():
    """As in lax.scan, a Python scalar init takes the dtype the step gives it."""

    def f(c, _):
        return c.astype(jnp.float32) * 2, c

    carry, ys = streamacc.scan(f, 1.0, length=5, block_size=2)
    want_carry, want_ys = jax.lax.scan(f, 1.0, length=5)
    assert carry.dtype == want_carry.dtype == np.float32 and ys.dtype == want_ys.dtype == np.float32
    np.testing.assert_array_equal(ys, want_ys)
    assert all(b.ys.dtype == np.float32 for b in streamacc.iter_blocks(f, 1, length=5, block_size=2))


def test_init_leaf_not_an_array():
    raises(InputError, "init['b']", "str", init={"a": np.float64(1.0), "b": "x"}, length=10)


def test_a_list_init_that_the_step_takes_for_an_array_says_a_list_is_a_pytree_of_scalars(tmp_path):
    words = ("f failed on its carry (TypeError: can't multiply sequence", "and init is a Python list: a list is a "
             "pytree of scalars, each number a carry leaf of its own, not an array", "pass one: init=np.asarray([...])")
    raises(StepFunctionError, *words, init=[1.0, 2.0], length=10)  # fmt: skip
    with pytest.raises(StepFunctionError) as refused:
        streamacc.write(tmp_path / "out.zarr", product_step, [1.0, 2.0], length=10, progress=False)
    assert all(word in str(refused.value) for word in words) and isinstance(refused.value.__cause__, TypeError)
    assert not (tmp_path / "out.zarr").exists()

    def sums(c, _):
        return {"a": c["a"].sum() + c["a"]}, c["a"]

    raises(StepFunctionError, "init['a'] is a Python list", "init['a']=np.asarray", f=sums, init={"a": [1.0]},
           length=10)  # fmt: skip


def test_a_list_init_used_as_a_list_keeps_working():
    def pair(c, _):
        a, b = c
        return [a + b, b * 2.0], a

    init = [np.float64(1.0), np.float64(0.5)]
    carry, ys = streamacc.scan(pair, init, length=20, block_size=8)
    a, b, want = 1.0, 0.5, []
    for _ in range(20):
        want.append(a)
        a, b = a + b, b * 2.0
    assert [float(c) for c in carry] == [a, b] and np.asarray(ys).tolist() == want


def test_y_holds_prng_keys():
    def f(key, _):
        return jax.random.split(key)[0], {"k": key}

    raises(StepFunctionError, "y['k']", "key_data", f=f, init=jax.random.key(0), length=10)


# --- x64 --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("init", "xs", "name"),
    [
        (np.float64(1.0), None, "init"),
        (np.array([1, 2], dtype=np.int64), None, "init"),
        (np.uint64(1), None, "init"),
        (np.complex128(1.0), None, "init"),
        (np.float32(1.0), np.zeros(5), "xs"),
    ],
    ids=["float64", "int64", "uint64", "complex128", "float64_xs"],
)
def test_64_bit_input_with_x64_off(x64_off, init, xs, name):
    kwargs = {} if xs is not None else {"length": 5}
    msg = raises(X64Error, name, "jax_enable_x64", f=lambda c, x: (c, 0.0), init=init, xs=xs, **kwargs)
    assert msg.startswith(name)


def test_scan_of_ys_larger_than_memory_points_to_the_streaming_ways():
    """2**50 rows of a float32 are 4 PiB, more than any machine holds: refused before numpy allocates, naming
    what scan keeps in memory and the ways that stream (numpy's MemoryError named neither)."""
    with pytest.raises(InputError) as refused:
        streamacc.scan(lambda c, _: (c + 1.0, c), np.float32(0), length=2**50)
    text = str(refused.value)
    assert "\n" not in text and "scan keeps every row of ys in memory, and 1125899906842624 rows take 4.0 PiB" in text
    assert "stream them instead with streamacc.iter_blocks (block by block) or streamacc.write" in text
    assert "keep fewer rows with save_every" in text


def test_a_python_number_in_init_with_x64_off_warns_that_the_run_is_32_bit(x64_off, tmp_path):
    """init=1.0 computes in float32 while x64 is off: 1 + 1e-8 rounds to 1, the output is constant, and this
    warning is the only sign; np.float32 says 32 bits are meant, and with x64 on a Python float is float64."""
    import warnings

    def grow(c, _):
        c = c * (1 + 1e-8)
        return c, c

    with pytest.warns(streamacc.errors.StreamaccWarning) as caught:
        _, ys = streamacc.scan(grow, 1.0, length=4)
    assert ys.dtype == np.float32 and (ys == 1.0).all()  # what the warning is about
    (warning,) = caught
    assert warning.filename == __file__  # the line that called scan
    text = str(warning.message)
    assert "init is a Python float, which JAX computes as float32 while jax_enable_x64 is off" in text
    assert 'jax.config.update("jax_enable_x64", True)' in text and "np.float32(...)" in text
    with pytest.warns(streamacc.errors.StreamaccWarning, match=r"init\['n'\] is a Python int.*int32"):
        list(streamacc.iter_blocks(lambda c, _: ({"n": c["n"] + 1}, c["n"]), {"n": 0}, length=4))
    with pytest.warns(streamacc.errors.StreamaccWarning, match="init is a Python float") as caught:
        streamacc.write(tmp_path / "o.zarr", grow, 1.0, length=4, progress=False)  # computed on a thread of its own
    assert [w.filename for w in caught] == [__file__]  # this line, not the thread's start
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        streamacc.scan(grow, np.float32(1.0), length=4)
        jax.config.update("jax_enable_x64", True)
        assert streamacc.scan(grow, 1.0, length=4)[1].dtype == np.float64


# --- a step JAX cannot trace ------------------------------------------------------------------


def branches(c, _):
    if c > 2:  # a Python branch on the traced carry
        return c, c
    return c + 1.0, c


def indexes(c, _):
    return c + [1.0, 2.0][c.astype(jnp.int32)], c  # a traced value as a Python list's index


def concrete(c, _):
    return c + float(c), c  # a traced value as a Python float


def to_numpy(c, _):
    return c + np.asarray(c), c  # numpy on a traced value


@dataclasses.dataclass(frozen=True)
class Branching:
    limit: float

    def __call__(self, c, _):
        while c < self.limit:  # a Python loop on the traced carry
            c = c + 1.0
        return c, c


BOOL_ERROR = jax.errors.TracerBoolConversionError


def line_of(code, text: str) -> tuple[int, str]:
    """The line of ``code``'s file holding ``text`` within the function (where tracing fails), and that line."""
    lines, first = inspect.getsourcelines(code)
    i = next(i for i, line in enumerate(lines) if text in line)
    return first + i, " ".join(lines[i].split())


@pytest.mark.parametrize(
    ("f", "text", "what", "jax_error"),
    [
        (branches, "if c > 2:", "it uses a traced value as a Python bool", BOOL_ERROR),
        (indexes, "[1.0, 2.0]", "it uses a traced value as a Python int", jax.errors.TracerIntegerConversionError),
        (concrete, "float(c)", "it needs the concrete value of a traced one", jax.errors.ConcretizationTypeError),
        (to_numpy, "np.asarray(c)", "it hands a traced value to numpy", jax.errors.TracerArrayConversionError),
        (Branching(3.0), "while c < self", "it uses a traced value as a Python bool", BOOL_ERROR),
    ],
    ids=["if", "index", "float", "numpy", "callable-object"],
)
def test_a_step_jax_cannot_trace_names_its_line_in_one_line(f, text, what, jax_error, tmp_path):
    """JAX's 34-line traceback through seven streamacc frames becomes one line naming the line of f that failed,
    from every entry point; JAX's error stays chained beneath it, its traceback starting in f."""
    code = type(f).__call__ if isinstance(f, Branching) else f
    name = "Branching" if isinstance(f, Branching) else f.__name__
    line, source = line_of(code, text)
    message = raises(StepFunctionError, f=f, init=np.float64(1.0), length=8)
    assert message.startswith(f"f ({name}) must be traceable by JAX, but at {__file__}:{line} (`{source}`) {what}")
    out = tmp_path / "out.zarr"
    with pytest.raises(StepFunctionError) as refused:
        streamacc.write(out, f, np.float64(1.0), length=8, progress=False)
    assert str(refused.value) == message
    cause = refused.value.__cause__
    assert isinstance(cause, jax_error)
    assert message.endswith(f"(JAX: {str(cause).splitlines()[0]})")
    assert cause.__traceback__.tb_frame.f_code.co_filename == __file__  # JAX's traceback begins in f
    assert not out.exists()  # traced before the output is created
    from streamacc.cli import cli_message

    assert cli_message(refused.value) == message  # the command line's one line
