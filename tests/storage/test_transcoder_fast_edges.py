"""Hand-made records and texts on which the compiled fast path once disagreed with the reference
(found in a review of jsonstate_fast.pyx, stop 19; each failed before its fix).

The pure modules are the oracle, as in test_transcoder_fast.py. The pickler never writes these
records, but the fast path's contract is that no record makes it disagree with the reference.
"""

from __future__ import annotations

import json

import pytest

from plone_connector.storage import jsonstate
from tests.storage.test_jsonstate import record
from tests.storage.test_transcoder_fast import PURE, _answers, jsonstate_fast, needs_fast

KLASS = b"cm\nC\nq\x00"


@needs_fast
@pytest.mark.parametrize(
    "ops",
    [
        b"}(]K\x01u",  # {[]: 1}: unhashable key, no unpickler can load it
        b"}(}X\x01\x00\x00\x00au",  # {{}: 'a'}
        b"}(]\x85K\x01u",  # {([],): 1}
    ],
)
def test_a_dict_with_an_unhashable_key_is_refused_as_the_reference_refuses_it(ops):
    # The reference raises TranscodeError (the record cannot be unpickled); the fast path
    # stores {"@dict": [[[], 1]]} with no exact copy, and every later load fails.
    data = record(ops, klass=KLASS)
    assert _answers(PURE, data)[0] == "TranscodeError"
    assert jsonstate_fast.encode(data) is None
    assert _answers(jsonstate, data) == _answers(PURE, data)


@needs_fast
@pytest.mark.parametrize(
    "ops",
    [
        b"}(K\x01K\x01K\x01K\x02u",  # {1: 1, 1: 2}: the unpickled dict is {1: 2}
        b"}(K\x01X\x01\x00\x00\x00a\x88X\x01\x00\x00\x00bu",  # {1: 'a', True: 'b'} -> {1: 'b'}
        b"}(X\x01\x00\x00\x00aK\x01K\x01K\x01X\x01\x00\x00\x00aK\x02u",  # 'a' twice, with an int key
    ],
)
def test_a_key_twice_in_an_at_dict_gives_the_references_json(ops):
    # JSON objects with a key twice are caught by the decoder; @dict pairs are not checked for
    # equal keys, so the stale pair is stored in the JSON (and passes encode()'s own check).
    data = record(ops, klass=KLASS)
    assert _answers(jsonstate, data) == _answers(PURE, data)


@needs_fast
@pytest.mark.parametrize(
    "text",
    ['{"a":01}', '{"a":1x}', '{"a":1.5.5}', '{"a":nullnull}', '{"a":true1,"b":2}', '[{"a":-5abc}]'],
)
def test_the_decoder_refuses_invalid_json_after_a_members_value(text):
    # member() reads the value at the position skip_value() found, but never checks that the
    # value ends where skip_value() said: trailing bytes of a scalar are ignored.
    with pytest.raises(ValueError):
        json.loads(text)
    assert jsonstate_fast.decode("m.C", text, True) is None
