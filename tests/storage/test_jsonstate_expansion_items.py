"""The expansion budget (jsonstate.EXPANSION_*, _Encoder.charge and spend, the fast path's
limits), found too loose in a second review (stop 20; each test failed before its fix):
state_format.md promises that a record whose JSON would exceed 8 values or 64 characters of text
per byte (plus the slack) is kept exact.

1. The reference charges a text only from LONG_TEXT characters on, and a scalar item nothing,
   per use: a tuple of many short texts (or ints) used many times from the memo costs one
   container per use, so the JSON grows as (items x uses) while the record grows as
   (items + uses). A 4 kB record encodes to 259 MB; a few more kB never end (memory).
2. Bytes are not charged at all: one long bytes value repeated from the memo.
3. The fast path bounds only the JSON's length, the reference also its containers: a record with
   between ~66,000 and ~110,000 containers of shared tuples in JSON under ~1 MB is stored as
   JSON by the compiled build and kept exact by the reference (the two must agree).
"""

from __future__ import annotations

import pickle

import pytest

from plone_connector.storage import jsonstate
from tests.storage.test_jsonstate import record
from tests.storage.test_transcoder_fast import PURE, _answers

KLASS = b"cm\nC\nq\x00"


def state_record(value) -> bytes:
    return record(pickle.dumps(value, protocol=3)[2:-1], klass=KLASS)


def _json_chars(module, data: bytes) -> int | None:
    """The JSON's length, or None if the record is kept exact."""
    encoded = module.encode_record(data)
    if encoded.exact is not None:
        return None
    return len(module.json_dumps(encoded.state))


def _within_budget(module, data: bytes) -> None:
    chars = _json_chars(module, data)
    _, budget = jsonstate.expansion_budget(len(data))
    assert chars is None or chars <= budget, (
        f"a {len(data)}-byte record encoded to {chars} characters of JSON (budget {budget}); "
        "not kept exact"
    )


@pytest.mark.parametrize("module", [PURE, jsonstate], ids=["reference", "compiled"])
def test_a_shared_tuple_of_short_texts_used_often_is_kept_exact(module):
    text = "y" * 255  # one below LONG_TEXT
    shared = tuple([text] * 300)  # 300 memo gets of one text
    data = state_record([shared] * 300)  # 300 memo gets of the tuple
    assert len(data) < 2_000
    _within_budget(module, data)  # 23 MB of JSON from 1.5 kB; 3,000 x 3,000 would be 2.3 GB


@pytest.mark.parametrize("module", [PURE, jsonstate], ids=["reference", "compiled"])
def test_a_shared_tuple_of_ints_used_often_is_kept_exact(module):
    shared = tuple(range(1_000, 2_000))
    data = state_record([shared] * 1_000)
    assert len(data) < 6_000
    _within_budget(module, data)  # 6 MB of JSON from 5 kB


@pytest.mark.parametrize("module", [PURE, jsonstate], ids=["reference", "compiled"])
def test_long_bytes_repeated_from_the_memo_are_kept_exact(module):
    data = state_record([b"\x01" * 100_000] * 300)  # 100 kB of bytes, 300 uses: 40 MB of base64
    _within_budget(module, data)


def _nested(levels: int):
    value = ()
    for _ in range(levels):
        value = (value, value)
    return value


def test_fast_path_and_reference_agree_on_many_small_shared_tuples():
    big = _nested(15)  # 65,535 tuples in JSON
    data = state_record([big, big[0]])  # and 32,767 more: over the reference's container budget
    assert len(data) < 200
    compiled, reference = _answers(jsonstate, data), _answers(PURE, data)
    assert (compiled[3] is None) == (reference[3] is None), (
        f"compiled: {compiled[4] or 'JSON'}; reference: {reference[4] or 'JSON'}"
    )
