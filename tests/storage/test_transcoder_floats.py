"""The fast path's floats without dtoa (jsonstate_fast.short_float and exact_decimal).

repr() and float() are the oracles: the fast path must write exactly repr's text for every
float it takes, and read exactly float()'s double for every decimal it takes. Where it does not
take a value (None here), dtoa decides as before, so only agreement is tested, plus that the
common cases are taken at all (else the fast path would be dead code and these tests vacuous).
"""

from __future__ import annotations

import json
import math
import random
import struct

import pytest
import zodbpickle.pickle
from hypothesis import given, settings
from hypothesis import strategies as st

from plone_connector.storage import jsonstate
from tests.storage.test_transcoder_fast import PURE, _answers, jsonstate_fast, needs_fast

pytestmark = needs_fast


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _check_repr(value: float) -> bool:
    """Whether the fast path took ``value``; fails if it wrote anything but repr's text."""
    written = jsonstate_fast.float_repr(value)
    if written is None:
        return False
    assert written == repr(value), value
    return True


def _check_parse(text: str) -> bool:
    read = jsonstate_fast.float_parse(text)
    if read is None:
        return False
    assert _bits(read) == _bits(float(text)), text
    return True


def _random_doubles(rnd: random.Random, count: int):
    for _ in range(count):
        kind = rnd.random()
        if kind < 0.3:  # any bit pattern: every exponent, NaNs and infinities included
            yield struct.unpack("<d", struct.pack("<Q", rnd.getrandbits(64)))[0]
        elif kind < 0.6:  # quotients: full 17-digit values, as ratios and averages are
            yield rnd.uniform(-1e6, 1e6) / rnd.choice([1, 3, 7, 1000, 1e9])
        elif kind < 0.8:  # short decimals: prices, percentages, coordinates
            yield round(rnd.uniform(-1e5, 1e5), rnd.randint(0, 8))
        else:
            yield rnd.randint(1, 10**6) / 10 ** rnd.randint(0, 12)


def test_repr_and_read_back_agree_with_python_on_half_a_million_doubles():
    rnd = random.Random(20261127)
    taken_repr = taken_parse = 0
    for value in _random_doubles(rnd, 500_000):
        taken_repr += _check_repr(value)
        text = repr(value)
        if math.isfinite(value) and "e" not in text:
            taken_parse += _check_parse(text)
    # Most of them are in the range the fast path takes (1e-4 <= |x| < 1e15).
    assert taken_repr > 300_000
    assert taken_parse > 250_000


def test_reading_decimals_of_up_to_19_digits_agrees_with_float():
    rnd = random.Random(7)
    taken = 0
    for _ in range(300_000):
        count = rnd.randint(1, 19)
        fraction = rnd.randint(0, min(21, count + 3))
        digits = "".join(rnd.choice("0123456789") for _ in range(count))
        if fraction == 0:
            text = digits + ".0"
        elif fraction < count:
            text = digits[:-fraction] + "." + digits[-fraction:]
        else:
            text = "0." + "0" * (fraction - count) + digits
        taken += _check_parse(rnd.choice(["", "-"]) + text)
    assert taken > 200_000


# Values next to the edges: powers of two (asymmetric rounding intervals), the ends of the
# range, halfway cases, integers, the largest 17-digit decimals.
EDGES = [
    1e-4, 0.0001, 1e15, 999999999999999.9, 1e15 - 0.125, 0.5, 0.25, 1.0, 2.0, 1024.0, 3.0,
    0.1, 0.2, 0.3, 0.1 + 0.2, 1 / 3, 2 / 3, 123456.789, 9007199254740991.0 / 1e2,
    math.pi, math.e, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308,
    0.30000000000000004, 0.000123, 100.0, 1e14, 1e14 + 0.5, 4503599627370496.0 / 8,
]


@pytest.mark.parametrize("value", EDGES + [-value for value in EDGES] + [math.nextafter(v, 0) for v in EDGES])
def test_edges(value):
    _check_repr(value)
    text = repr(value)
    if "e" not in text:
        _check_parse(text)


@settings(max_examples=3000, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64))
def test_any_finite_double(value):
    _check_repr(value)
    text = repr(value)
    if "e" not in text and text != "-0.0":
        _check_parse(text)


def test_the_common_values_are_taken():
    # The point of the change: without these the tests above could pass with a fast path that
    # never answers.
    for value in (1763.5714285714287, 0.14285714285714285, 19.99, 0.5 + 2**-30, -42.125):
        assert jsonstate_fast.float_repr(value) == repr(value)
        assert _bits(jsonstate_fast.float_parse(repr(value))) == _bits(value)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=False), max_size=8))
def test_records_with_floats_encode_as_the_reference_does(values):
    # A dict of floats, pickled as ZODB pickles a state: the whole encoder (JSON text, the
    # round-trip check's decode) against the pure reference.
    state = {f"f{i}": value for i, value in enumerate(values)}
    data = b"\x80\x03c__main__\nX\nq\x00." + zodbpickle.pickle.dumps(state, 3)
    assert _answers(jsonstate, data) == _answers(PURE, data)


def test_a_record_of_common_floats_takes_the_fast_path():
    # Keys in jsonb's order, so that the JSON is the plain dump (no "@order" member).
    state = {"price": 19.99, "ratio": 1763.5714285714287, "share": 0.14285714285714285}
    data = b"\x80\x03c__main__\nX\nq\x00." + zodbpickle.pickle.dumps(state, 3)
    fast = jsonstate_fast.encode(data)
    assert fast is not None
    assert fast[1] == json.dumps(state, separators=(",", ":"))
    assert _answers(jsonstate, data) == _answers(PURE, data)
