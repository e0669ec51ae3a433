"""Tests for the safe arithmetic of the command line's numbers (parse_int, parse_number: never eval)."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from streamacc.cli import parse_int, parse_number
from streamacc.errors import InputError

GOOD_INT = [
    ("2**32", 4294967296),
    ("3*2**20", 3145728),
    ("1_000", 1000),
    (" 2 ** 10 ", 1024),
    ("1e6", 1000000),
    ("(1+2)*3", 9),
    ("2**33/2", 4294967296),
    ("2**63+(2**63-1)", 2**64 - 1),
    ("-2**63", -(2**63)),
    ("10**18", 10**18),
    ("+5", 5),
    ("-5", -5),
    ("0**0", 1),
    ("1**1000", 1),
    ("(-8)**2", 64),
    ("2.0**53", 2**53),
    ("1/3*3", 1),
]

GOOD_NUMBER = [
    ("1+1e-8", 1 + 1e-8),
    ("-0.5", -0.5),
    ("2**-1", 0.5),
    ("2.5e-3", 2.5e-3),
    ("7/2", 3.5),
    ("2**0.5", 2**0.5),
    ("2**32", 4294967296.0),
    ("1e6", 1e6),
    ("(1+2)*3", 9.0),
    ("-2**-2", -0.25),
]


@pytest.mark.parametrize(("text", "expected"), GOOD_INT)
def test_parse_int_good(text, expected):
    value = parse_int(text, name="--size")
    assert value == expected
    assert type(value) is int


@pytest.mark.parametrize(("text", "expected"), GOOD_NUMBER)
def test_parse_number_good(text, expected):
    value = parse_number(text, name="--tol")
    assert value == expected
    assert type(value) is float


# (text, substring the message must contain); bad for parse_int and parse_number alike
BAD_BOTH = [
    ("", "not a valid arithmetic expression"),
    ("   ", "not a valid arithmetic expression"),
    ("(2**3", "not a valid arithmetic expression"),
    ("2**3)", "not a valid arithmetic expression"),
    ("2**1000", "2**64"),
    ("2**64", "2**64"),
    ("-(2**64)", "2**64"),
    ("2**64-1", "2**64"),
    ("10**10**10", "exponent"),
    ("9**9**9**9", "exponent"),
    ("__import__('os')", "only numbers"),
    ("__import__('os').system('echo hi')", "only numbers"),
    ("os.system", "only numbers"),
    ("x", "only numbers"),
    ("lambda: 1", "only numbers"),
    ("[1]", "only numbers"),
    ("1 if 1 else 2", "only numbers"),
    ("1 < 2", "only numbers"),
    ("True", "only numbers"),
    ("None", "only numbers"),
    ("...", "only numbers"),
    ("'3'", "only numbers"),
    ("b'3'", "only numbers"),
    ("1j", "only numbers"),
    ("1e400", "finite"),
    ("1e300*1e300", "finite"),
    ("10.0**400", "finite"),
    ("1/0", "division by zero"),
    ("1.5/0.0", "division by zero"),
    ("0**-1", "0 to a negative power"),
    ("(-8)**(1/3)", "not a real number"),
    ("7//2", "only numbers"),
    ("7%2", "only numbers"),
    ("1<<3", "only numbers"),
    ("~1", "only numbers"),
    ("a.b", "only numbers"),
    ("f()", "only numbers"),
    ("()", "only numbers"),
    ("1,2", "only numbers"),
    ("1;2", "not a valid arithmetic expression"),
    ("1\n2", "not a valid arithmetic expression"),
    ("1\x002", "not a valid arithmetic expression"),
    ("x" * 300, "over the limit"),
    ("1" * 30, "2**64"),
]

# (text, minimum, substring): bad for parse_int only
BAD_INT = [
    ("2.5", None, "must be a whole number"),
    ("7/2", None, "must be a whole number"),
    ("2**-1", None, "must be a whole number"),
    ("1e17", None, "2**53"),
    ("2**64-1", None, "intermediate results count too"),
    ("0", 1, "--size must be >= 1, got 0"),
    ("-5", 0, "--size must be >= 0, got -5"),
    ("1-1", 1, "--size must be >= 1, got 0 (from '1-1')"),
]


def _assert_one_line(exc: InputError, name: str, fragment: str) -> None:
    message = str(exc)
    assert "\n" not in message and "\r" not in message
    assert name in message
    assert fragment in message


@pytest.mark.parametrize(("text", "fragment"), BAD_BOTH)
def test_bad_int(text, fragment):
    with pytest.raises(InputError) as info:
        parse_int(text, name="--size")
    _assert_one_line(info.value, "--size", fragment)


@pytest.mark.parametrize(("text", "fragment"), BAD_BOTH)
def test_bad_number(text, fragment):
    with pytest.raises(InputError) as info:
        parse_number(text, name="--tol")
    _assert_one_line(info.value, "--tol", fragment)


@pytest.mark.parametrize(("text", "minimum", "fragment"), BAD_INT)
def test_bad_int_only(text, minimum, fragment):
    with pytest.raises(InputError) as info:
        parse_int(text, name="--size", minimum=minimum)
    _assert_one_line(info.value, "--size", fragment)


def test_exact_messages():
    with pytest.raises(InputError) as info:
        parse_int('__import__("os")', name="--size")
    assert str(info.value) == (
        "--size: cannot parse '__import__(\"os\")': only numbers and + - * / ** ( ) are allowed, e.g. '2**32'"
    )
    with pytest.raises(InputError) as info:
        parse_int("(2**3", name="--size")
    assert str(info.value) == "--size: '(2**3' is not a valid arithmetic expression; write e.g. '2**32'"
    with pytest.raises(InputError, match=r"must be >= 1, got 0; pass --size 1 or more$"):
        parse_int("0", name="--size", minimum=1)


def test_minimum_met_and_newline_escaped():
    assert parse_int("1", name="--size", minimum=1) == 1
    with pytest.raises(InputError) as info:
        parse_int("1\n2", name="--size")
    assert "'1\\n2'" in str(info.value)


def test_non_text_rejected():
    with pytest.raises(InputError, match="--size"):
        parse_int(5, name="--size")  # type: ignore[arg-type]


@given(st.integers(-1000, 1000), st.integers(-1000, 1000))
def test_int_arithmetic_matches_python(a, b):
    assert parse_int(f"{a}*{b}+{a}", name="--n") == a * b + a
    assert parse_number(f"{a}*{b}+{a}", name="--n") == float(a * b + a)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789+-*/().e_ xab", max_size=30))
def test_random_text_only_input_error(text):
    for parse in (parse_int, parse_number):
        try:
            value = parse(text, name="--x")
        except InputError as exc:
            assert "\n" not in str(exc)
            assert "--x" in str(exc)
        else:
            assert isinstance(value, int | float)
            assert math.isfinite(value)
