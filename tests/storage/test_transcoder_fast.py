"""The compiled fast path of the transcoder (jsonstate_fast.pyx) against the reference.

The fast path reads plain records opcode by opcode, writes their JSON, and checks itself: the
record it reads must come out again byte for byte, and the record a load rebuilds from the JSON
(its own decoder, which loads also use) must be the one it predicts from what it read. The pure Python
modules stay the oracle: every answer of the compiled ``encode_record``/``decode_text`` must be
the reference's, byte for byte, whether the fast path took the record or not.
"""

from __future__ import annotations

import io
import json
import math
import pickle

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from persistent.list import PersistentList
from persistent.mapping import PersistentMapping
from ZODB import DB
from ZODB.MappingStorage import MappingStorage

from plone_connector.storage import jsonstate, transcoder
from tests.storage.test_jsonstate import (
    SPECIAL_FLOATS,
    SPECIAL_INTS,
    TAG_KEYS,
    Holder,
    commit_value,
    equal_state,
    json_values,
    latest_records,
    record,
)

PURE = transcoder.load_pure()["jsonstate"]

try:
    from plone_connector.storage import jsonstate_fast
except ImportError:  # only when the run asks for the reference (checked below)
    jsonstate_fast = None


def test_the_fast_path_is_built_and_used_by_the_compiled_transcoder():
    if transcoder.pure_requested():
        assert jsonstate._fast is None  # the reference alone, as asked
        return
    assert jsonstate_fast is not None, "jsonstate_fast is not compiled: run `make install`"
    assert jsonstate._fast is jsonstate_fast
    assert PURE._fast is None  # the oracle never takes it


needs_fast = pytest.mark.skipif(
    jsonstate_fast is None and transcoder.pure_requested(),
    reason="PLONE_CONNECTOR_PURE_PYTHON: the run tests the reference alone",
)


# -- what the fast path takes -------------------------------------------------------------

plain_texts = st.one_of(
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
    st.sampled_from(["", "a", "é", '"q"', "back\\slash", "\n\t\r\b\f\x01\x1f\x7f", "\u2028", "\U0001f600"]),
)
safe_ints = st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
finite_floats = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda x: not (x == 0 and math.copysign(1, x) < 0) and not (x.is_integer() and abs(x) >= 1e16)
)
plain_leaves = st.one_of(
    st.none(), st.booleans(), safe_ints, finite_floats, plain_texts, st.binary(max_size=40)
)


def _plain_containers(children):
    return st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=5).map(tuple),
        st.dictionaries(plain_texts.filter(lambda k: not k.startswith("@")), children, max_size=5),
        st.dictionaries(safe_ints, children, min_size=1, max_size=4),
        st.dictionaries(st.sampled_from(TAG_KEYS), children, min_size=1, max_size=1),
        st.lists(children, max_size=3).map(PersistentList),
        st.dictionaries(plain_texts, children, max_size=3).map(PersistentMapping),
    )


# Values whose every record is in the fast path's subset.
plain_values = st.recursive(plain_leaves, _plain_containers, max_leaves=30)

# Plus values the fast path must hand to the reference: texts with U+0000 or lone surrogates,
# big integers, NaN, -0.0, 1e16, a list in two places, a shared text (a memo get of an
# immutable, which it takes).
awkward_leaves = st.one_of(
    plain_leaves,
    st.sampled_from(SPECIAL_INTS),
    st.sampled_from(SPECIAL_FLOATS),
    st.sampled_from([math.nan, math.inf, -math.inf, "\x00", "a\ud800b", -(2**39), 2**40]),
)


def _awkward_containers(children):
    shared = ["shared"]
    text = "a text held twice"
    return st.one_of(
        _plain_containers(children),
        st.lists(children, max_size=3).map(lambda items: [*items, shared, shared]),
        st.lists(children, max_size=3).map(lambda items: (*items, text, text)),
        st.dictionaries(st.tuples(st.integers(), st.text(max_size=3)), children, max_size=3),
    )


awkward_values = st.recursive(awkward_leaves, _awkward_containers, max_leaves=25)


def _records(value):
    db, _ = commit_value(value)
    try:
        return list(latest_records(db.storage).values())
    finally:
        db.close()


def _answers(module, data: bytes):
    try:
        encoded = module.encode_record(data)
    except module.TranscodeError as exc:
        return ("TranscodeError", str(exc))
    return (
        encoded.class_name,
        module.json_dumps(encoded.state) if encoded.state is not None else None,
        encoded.refs,
        encoded.exact,
        encoded.reason,
        encoded.record,
    )


@needs_fast
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(plain_values)
def test_plain_records_take_the_fast_path_and_give_the_references_answers(value):
    for data in _records(value):
        scanned = jsonstate_fast.scan(data)
        assert scanned is not None, data
        assert jsonstate_fast.encode(data) == scanned, data  # confirmed by the check
        expected = _answers(PURE, data)
        assert _answers(jsonstate, data) == expected
        # The text the storage writes, without the state parsed.
        lean = jsonstate.encode_record(data, with_state=False)
        assert lean.state is None
        assert (lean.class_name, lean.text, lean.refs, lean.record) == (
            expected[0], expected[1], expected[2], expected[5]
        )
        assert jsonstate.encode_row(data) == expected  # the storage's call


@needs_fast
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(awkward_values)
def test_records_outside_the_subset_give_the_references_answers(value):
    for data in _records(value):
        expected = _answers(PURE, data)
        assert _answers(jsonstate, data) == expected
        # The storage's call: the same, with the JSON as text even where it is an exact copy's.
        class_name, text, refs, exact, reason, record = jsonstate.encode_row(data)
        assert (class_name, refs, exact, reason, record) == expected[:1] + expected[2:]
        assert text == PURE.json_dumps(PURE.encode_record(data).state)


@needs_fast
@given(awkward_values)
def test_a_scanned_record_is_what_the_reference_reads(value):
    """Whatever scan returns is the reference's JSON and refs, even where the check then fails."""
    for data in _records(value):
        scanned = jsonstate_fast.scan(data)
        if scanned is None:
            continue
        reference = PURE.encode_record(data)
        assert scanned[0] == reference.class_name
        assert scanned[1] == PURE.json_dumps(reference.state)
        assert scanned[2] == reference.refs


# -- the check ----------------------------------------------------------------------------


# Plain values without persistent objects, pickled on their own.
loose_values = st.recursive(
    plain_leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(plain_texts, children, max_size=4),
        st.dictionaries(st.integers(min_value=-3, max_value=3), children, max_size=3),
    ),
    max_leaves=20,
)
_HEADER = b"\x80\x03c__main__\nX\n."


class _NamesOnly(pickle.Unpickler):
    def find_class(self, module, name):
        return (module, name)


def _state(record_bytes: bytes):
    """The state of a record as ZODB reads it: one unpickler, two loads (shared memo)."""
    unpickler = _NamesOnly(io.BytesIO(record_bytes))
    unpickler.load()
    return unpickler.load()


@needs_fast
@given(loose_values, loose_values)
def test_the_predicted_record_is_the_references_and_tells_states_apart(a, b):
    """The check compares the record predicted from what was read with the one decoded from the
    JSON. The prediction must be what the reference decoder writes, load to the state read
    (text-keyed dicts in jsonb's order), and differ for different states, or the check would
    confirm anything."""
    record_a, record_b = (_HEADER + pickle.dumps(v, protocol=3) for v in (a, b))
    predicted_a, predicted_b = jsonstate_fast.rebuild(record_a), jsonstate_fast.rebuild(record_b)
    assert predicted_a is not None and predicted_b is not None
    reference = PURE.encode_record(record_a)
    assert predicted_a == PURE.decode_record(reference.class_name, reference.state, jsonb_order=True)
    assert equal_state(_state(predicted_a), _state(record_a), ordered=False)
    if predicted_a == predicted_b:
        assert equal_state(_state(record_a), _state(record_b), ordered=False)
    if equal_state(_state(record_a), _state(record_b), ordered=True):
        assert predicted_a == predicted_b


def test_an_int_the_pickler_writes_shorter_than_the_decoder_is_confirmed_by_value():
    # The pickler writes -2**39 as LONG1 in 5 bytes, the decoder in 6; both load to the same
    # int, and the prediction is written the decoder's way.
    if jsonstate_fast is None:
        pytest.skip("no fast path in this run (PLONE_CONNECTOR_PURE_PYTHON)")
    data = _records(-(2**39))[-1]
    scanned = jsonstate_fast.scan(data)
    assert scanned is not None
    assert scanned[1] == '{"value":-549755813888}'
    assert b"\x8a\x06" in scanned[3] and b"\x8a\x05" in data
    assert jsonstate_fast.encode(data) == scanned
    assert _answers(jsonstate, data) == _answers(PURE, data)


def test_the_check_catches_json_that_does_not_match_the_record():
    """The comparison is not vacuous: JSON that differs from the record in any value, key or
    type decodes to a record other than the predicted one."""
    if jsonstate_fast is None:
        pytest.skip("no fast path in this run (PLONE_CONNECTOR_PURE_PYTHON)")
    data = _records({"a": 1, "b": "x", "c": [1.5, None], "d": (True,)})[-1]
    class_name, text, _refs, predicted = jsonstate_fast.scan(data)
    assert jsonstate_fast.decode(class_name, text, True) == predicted
    for old, new in [('"a":1', '"a":2'), ('"x"', '"y"'), ('"b"', '"e"'), ("1.5", "1.25"), ("null", "false"),
                     ("true", "1"), ('{"@t":[true]}', "[true]"), ("[1.5,null]", "[1.5]")]:
        wrong = text.replace(old, new)
        assert wrong != text
        rebuilt = jsonstate_fast.decode(class_name, wrong, True)
        assert rebuilt is not None and rebuilt != predicted, (old, new)


@pytest.mark.parametrize(
    ("ops", "outcome"),
    [
        (b"}q\x01X\x01\x00\x00\x00aq\x02K\x01s", "taken"),  # the pickler's own form
        (b"}q\x01X\x01\x00\x00\x00aq\x02h\x02s", "taken"),  # a text as key and value (memo get)
        (b"}r\x01\x00\x00\x00X\x01\x00\x00\x00aK\x01s", "declined"),  # LONG_BINPUT, small index
        (b"(K\x01K\x02tq\x01", "taken"),  # MARK TUPLE for two items (not the pickler's, read as is)
        (b"]q\x01h\x01a", "declined"),  # a list holding itself
        (b"}q\x01X\x01\x00\x00\x00a]q\x02h\x02\x86s", "declined"),  # a list in two places
        (b"}q\x01X\x01\x00\x00\x00aq\x02\x8c\x01bs", "declined"),  # a protocol-4 opcode
        (b"}q\x01X\x01\x00\x00\x00aq\x02X\x02\x00\x00\x00\xc3(s", "declined"),  # malformed UTF-8
        (b"}q\x01X\x01\x00\x00\x00aq\x02X\x03\x00\x00\x00\xed\xa0\x80s", "declined"),  # a surrogate
        (b"}q\x01X\x01\x00\x00\x00aq\x02X\x02\x00\x00\x00\xc0\x80s", "declined"),  # overlong UTF-8
        (b"}q\x01X\x01\x00\x00\x00aq\x02X\x01\x00\x00\x00\x00s", "declined"),  # U+0000
        (b"}q\x01X\x01\x00\x00\x00aq\x02G\x7f\xf8\x00\x00\x00\x00\x00\x00s", "declined"),  # NaN
        (b"}q\x01(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00aK\x02u", "rejected"),  # a key twice
    ],
)
def test_hand_made_records(ops, outcome):
    """Taken (read and confirmed), declined (not read) or rejected (read, not confirmed):
    in every case the answers are the reference's."""
    if jsonstate_fast is None:
        pytest.skip("no fast path in this run (PLONE_CONNECTOR_PURE_PYTHON)")
    data = record(ops, klass=b"cm\nC\nq\x00")
    scanned = jsonstate_fast.scan(data)
    if outcome == "declined":
        assert scanned is None
    else:
        assert scanned is not None
        confirmed = jsonstate_fast.encode(data)
        assert (confirmed is not None) == (outcome == "taken")
    if _readable(data):
        assert _answers(jsonstate, data) == _answers(PURE, data)
    else:
        with pytest.raises(jsonstate.TranscodeError):
            jsonstate.encode_record(data)


def _readable(data: bytes) -> bool:
    try:
        PURE.encode_record(data)
    except PURE.TranscodeError:
        return False
    return True


@needs_fast
@given(plain_values, st.data())
def test_truncated_and_mutated_records_never_crash_and_never_disagree(value, data):
    record_bytes = _records(value)[-1]
    cut = data.draw(st.integers(min_value=0, max_value=len(record_bytes)))
    position = data.draw(st.integers(min_value=0, max_value=len(record_bytes) - 1))
    byte = data.draw(st.integers(min_value=0, max_value=255))
    mutated = record_bytes[:position] + bytes((byte,)) + record_bytes[position + 1 :]
    for candidate in (record_bytes[:cut], mutated):
        scanned = jsonstate_fast.scan(candidate)
        if scanned is None:
            continue
        # Whatever it takes, it must read as the reference does.
        assert _answers(jsonstate, candidate) == _answers(PURE, candidate)


# -- the decoder --------------------------------------------------------------------------


@needs_fast
@given(json_values)
def test_the_decoder_writes_the_references_record_or_declines(state):
    text = json.dumps(state)
    for jsonb_order in (False, True):
        try:
            expected = PURE.decode_record("m.C", state, jsonb_order=jsonb_order)
        except PURE.TranscodeError:
            expected = None
        fast = jsonstate_fast.decode("m.C", text, jsonb_order)
        if fast is not None:
            assert fast == expected
        # decode_text is what loads run: the reference's record, or its error.
        if expected is None:
            with pytest.raises(jsonstate.TranscodeError):
                jsonstate.decode_text("m.C", text, jsonb_order)
        else:
            assert jsonstate.decode_text("m.C", text.encode(), jsonb_order) == expected


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',  # json.loads keeps the last: not this subset
        '{"@t": [1, 2], "b": 1}',  # two keys: a plain dict
        '{"@unknown": 1}',
        '{"@ref": "00"}',
        '{"@b": "AP9="}',  # bits in the padding
        '{"@b": "A P8="}',
        '{"x": "\\ud800"}',
        '{"x": "\\u0000"}',
        "[1, 2,]",
        "01",
        '{"x": 1e999}',
        '{"@int": "123456789012345678901234567890"}',
        " [ 1 , { \"b\" : [ ] , \"a\" : { } } ] ",
        '{"@record": {"class": "m.C", "state": 1}}',
        '{"@exact": "x"}',
    ],
)
def test_the_decoder_on_hand_made_texts(text):
    try:
        expected = PURE.decode_record("m.C", json.loads(text), jsonb_order=True)
    except (PURE.TranscodeError, ValueError):
        expected = None
    fast = jsonstate_fast.decode("m.C", text, True) if jsonstate_fast is not None else None
    assert fast is None or fast == expected


@pytest.fixture(scope="module")
def pg(database_url):
    with psycopg.connect(database_url, autocommit=True) as conn:
        yield conn


@needs_fast
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], max_examples=60)
@given(plain_values)
def test_the_checked_record_is_what_a_load_through_jsonb_rebuilds(pg, value):
    """The storage caches ``record`` for its own commits: it must be what a later load from
    PostgreSQL rebuilds from the jsonb column's text (other key order, spacing, numbers)."""
    for data in _records(value):
        encoded = jsonstate.encode_record(data, with_state=False)
        assert encoded.text is not None
        (stored,) = pg.execute("select %s::jsonb::text", (encoded.text,)).fetchone()
        loaded = jsonstate.decode_text(encoded.class_name, stored.encode())
        assert loaded == encoded.record
        assert loaded == PURE.decode_record(encoded.class_name, json.loads(stored))


def test_a_bigger_container_goes_the_fast_path():
    """A container of 2,000 references under int keys (the storage benchmark's)."""
    if jsonstate_fast is None:
        pytest.skip("no fast path in this run (PLONE_CONNECTOR_PURE_PYTHON)")
    db = DB(MappingStorage())
    with db.transaction() as conn:
        conn.root()["c"] = container = PersistentMapping({i: Holder(i) for i in range(2000)})
        container[-1] = "x" * 100_000
    data = latest_records(db.storage)[container._p_oid]
    scanned = jsonstate_fast.scan(data)
    assert scanned is not None and len(scanned[2]) == 2000
    assert jsonstate_fast.encode(data) == scanned
    assert _answers(jsonstate, data) == _answers(PURE, data)
    db.close()


def test_nesting_beyond_the_fast_paths_depth_goes_to_the_reference():
    value = current = []
    for _ in range(100):
        current.append([])
        current = current[0]
    data = _records(value)[-1]
    if jsonstate_fast is not None:
        assert jsonstate_fast.scan(data) is None
    assert _answers(jsonstate, data) == _answers(PURE, data)
