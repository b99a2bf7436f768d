"""The JSON state transcoder against ZODB itself.

Records are written by ZODB's own serializer (real persistent objects committed to a
MappingStorage), transcoded to JSON and back, stored into a second database and loaded
there by ZODB: the loaded states must equal the originals.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import json
import math
import pickle
import struct

import psycopg
import pytest
import pytz
import transaction
from BTrees.IOBTree import IOBTree
from BTrees.OOBTree import OOBTree, OOSet
from DateTime import DateTime
from hypothesis import given
from hypothesis import strategies as st
from persistent import Persistent
from persistent.list import PersistentList
from persistent.mapping import PersistentMapping
from persistent.wref import WeakRef
from ZODB import DB
from ZODB.Connection import TransactionMetaData
from ZODB.MappingStorage import MappingStorage
from ZODB.serialize import referencesf
from ZODB.utils import z64
from zope.interface import Interface, alsoProvides

from plone_connector.storage import jsonstate, jsonstate_pickle
from plone_connector.storage.jsonstate import (
    FORMAT_VERSION,
    TranscodeError,
    decode_record,
    encode_record,
    json_dumps,
)
from plone_connector.storage.jsonstate_tree import load_structure, same_structure


class IMarker(Interface):
    pass


class Holder(Persistent):
    def __init__(self, value=None):
        self.value = value


class Plain:
    """A non-persistent object pickled with NEWOBJ + BUILD."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)


class NewArgs(Persistent):
    """Persistent class with __getnewargs__: references to it are bare oids."""

    def __getnewargs__(self):
        return ()


# -- comparing loaded states --------------------------------------------------------------

_bits = struct.Struct(">d").pack


def equal_state(a, b, *, ordered: bool = True, memo=None) -> bool:
    """Deep equality of two loaded states: strict types, floats by bits, NaN-safe,
    persistent objects by class and oid (they come from different databases)."""
    if memo is None:
        memo = {}
    if id(a) in memo:
        return memo[id(a)] is b
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is float:
        return _bits(a) == _bits(b)
    if ta in (list, tuple, PersistentList):
        memo[id(a)] = b
        items_a = a.data if ta is PersistentList else a
        items_b = b.data if ta is PersistentList else b
        return len(items_a) == len(items_b) and all(
            equal_state(x, y, ordered=ordered, memo=memo) for x, y in zip(items_a, items_b, strict=True)
        )
    if ta in (dict, collections.OrderedDict):
        memo[id(a)] = b
        if len(a) != len(b):
            return False
        if not ordered and ta is dict and all(type(k) is str for k in a):
            return a.keys() == b.keys() and all(
                equal_state(a[k], b[k], ordered=ordered, memo=memo) for k in a
            )
        return all(
            equal_state(ka, kb, ordered=ordered, memo=memo)
            and equal_state(va, vb, ordered=ordered, memo=memo)
            for (ka, va), (kb, vb) in zip(a.items(), b.items(), strict=True)
        )
    if ta in (set, frozenset):
        return sorted(map(repr, a)) == sorted(map(repr, b))
    if ta is decimal.Decimal:
        return str(a) == str(b)
    if ta is DateTime:
        return equal_state(a.__getstate__(), b.__getstate__())
    if ta in (datetime.datetime, datetime.time):
        return a == b and a.fold == b.fold and repr(a.tzinfo) == repr(b.tzinfo)
    if isinstance(a, Persistent):
        return a._p_oid == b._p_oid
    if ta is WeakRef:
        return a.oid == b.oid
    if ta is Plain:
        memo[id(a)] = b
        return equal_state(a.__dict__, b.__dict__, ordered=ordered, memo=memo)
    return a == b


# -- generated object graphs --------------------------------------------------------------

SPECIAL_FLOATS = [0.0, -0.0, 1.0, -1.0, 1e16, -1e16, 1e22, 2.0**53, 1e-7, 5e-324, 1.7976931348623157e308]
SPECIAL_INTS = [2**53 - 1, 2**53, -(2**53), 2**63 - 1, -(2**63), 2**64, 10**40, -(10**40)]
TAG_KEYS = ["@t", "@b", "@s", "@dict", "@ref", "@shared", "@same", "@record", "@exact", "@", "@x", "@@t"]
TIMEZONES = [None, datetime.UTC, datetime.timezone(datetime.timedelta(hours=-5, minutes=-30))]
PYTZ_ZONES = ["Europe/Berlin", "America/New_York", "Asia/Kolkata"]
DATETIME_ZONES = ["UTC", "GMT+1", "US/Eastern", "Europe/Berlin", "Asia/Tokyo"]

ints = st.one_of(st.integers(), st.sampled_from(SPECIAL_INTS))
floats = st.one_of(st.floats(), st.sampled_from(SPECIAL_FLOATS), st.just(math.inf), st.just(-math.inf))
texts = st.one_of(
    st.text(max_size=20),
    st.text(st.sampled_from(["\x00", "a", "@", "é", "\u2028", "\U0001f600", '"', "\\"]), max_size=8),
    st.text(st.characters(exclude_categories=()), max_size=8),  # includes lone surrogates
    st.sampled_from(TAG_KEYS),
)
naive_datetimes = st.datetimes(
    min_value=datetime.datetime(1, 1, 1), max_value=datetime.datetime(9999, 12, 31)
)
datetimes = st.one_of(
    st.builds(lambda d, tz: d.replace(tzinfo=tz), naive_datetimes, st.sampled_from(TIMEZONES)),
    st.builds(
        lambda d, zone: pytz.timezone(zone).localize(d),
        st.datetimes(min_value=datetime.datetime(1900, 1, 1), max_value=datetime.datetime(2100, 1, 1)),
        st.sampled_from(PYTZ_ZONES),
    ),
    naive_datetimes.map(lambda d: d.replace(fold=1)),
)
zope_datetimes = st.one_of(
    st.builds(
        DateTime,
        st.floats(min_value=-2e10, max_value=2e10, allow_nan=False).map(lambda t: round(t, 3)),
        st.sampled_from(DATETIME_ZONES),
    ),
    st.builds(
        lambda d: DateTime(d.strftime("%Y/%m/%d %H:%M:%S")),
        st.datetimes(min_value=datetime.datetime(1000, 1, 1)),
    ),
)
hashables = st.one_of(
    st.none(),
    st.booleans(),
    ints,
    st.floats(allow_nan=False),
    texts,
    st.binary(max_size=16),
    st.dates(),
    st.decimals(allow_nan=False),
)
leaves = st.one_of(
    hashables,
    floats,
    datetimes,
    st.times(timezones=st.sampled_from(TIMEZONES)),
    st.timedeltas(),
    st.decimals(),
    zope_datetimes,
    st.sampled_from([Plain, Holder, int, datetime.datetime, IMarker, OOBTree]),
)


def _with_provides(value):
    holder = Holder(value)
    alsoProvides(holder, IMarker)
    return holder


def _shared(items):
    return [items, items, (items,)]


def _recursive(items):
    items.append(items)
    return items


def containers(children):
    return st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=5).map(tuple),
        st.dictionaries(texts, children, max_size=5),
        st.dictionaries(st.sampled_from(TAG_KEYS), children, min_size=1, max_size=2),
        st.dictionaries(hashables, children, max_size=4),
        st.dictionaries(st.tuples(hashables, hashables), children, max_size=2),
        st.sets(hashables, max_size=5),
        st.frozensets(hashables, max_size=5),
        st.dictionaries(texts, children, max_size=4).map(collections.OrderedDict),
        st.dictionaries(st.text(max_size=8), children, max_size=4).map(lambda d: Plain(**d)),
        st.lists(children, max_size=3).map(_shared),
        st.lists(children, max_size=3).map(_recursive),
        st.builds(lambda shared, a, b: {a: shared, b: shared}, st.lists(children, max_size=2), texts, texts),
        st.dictionaries(st.text(max_size=8), children, max_size=4).map(PersistentMapping),
        st.lists(children, max_size=4).map(PersistentList),
        children.map(Holder),
        children.map(_with_provides),
        children.map(lambda v: [NewArgs(), v]),
        st.dictionaries(st.text(max_size=10), children, max_size=80).map(OOBTree),
        st.dictionaries(st.integers(-(2**31), 2**31 - 1), children, max_size=80).map(IOBTree),
        st.sets(st.text(max_size=6), max_size=80).map(OOSet),
    )


values = st.recursive(leaves, containers, max_leaves=25)


# -- running records through the transcoder -----------------------------------------------


def commit_value(value) -> tuple[DB, Holder]:
    db = DB(MappingStorage())
    conn = db.open()
    conn.root()["value"] = holder = Holder(value)
    transaction.commit()
    return db, holder


def latest_records(storage) -> dict[bytes, bytes]:
    records = {}
    for txn in storage.iterator():
        for record in txn:
            records[record.oid] = record.data
    return records


def transcode(data: bytes) -> bytes:
    encoded = encode_record(data)
    assert encoded.exact is None, (encoded.reason, encoded.state)
    assert encoded.refs == list(dict.fromkeys(referencesf(data)))
    text = json_dumps(encoded.state)
    assert "\\u0000" not in text
    return decode_record(encoded.class_name, json.loads(text))


def copy_transcoded(records: dict[bytes, bytes]) -> DB:
    target = MappingStorage()
    meta = TransactionMetaData()
    target.tpc_begin(meta)
    for oid, data in records.items():
        target.store(oid, z64, transcode(data), "", meta)
    target.tpc_vote(meta)
    target.tpc_finish(meta)
    return DB(target)


def assert_same_database(db1: DB, db2: DB, oids) -> None:
    conn1, conn2 = db1.open(), db2.open()
    for oid in oids:
        obj1, obj2 = conn1.get(oid), conn2.get(oid)
        assert type(obj1) is type(obj2)
        obj1._p_activate()
        obj2._p_activate()
        assert equal_state(obj1.__getstate__(), obj2.__getstate__()), oid
    conn1.close()
    conn2.close()


@given(values)
def test_generated_graphs_load_equal_after_transcoding(value):
    db1, _ = commit_value(value)
    records = latest_records(db1.storage)
    db2 = copy_transcoded(records)
    assert_same_database(db1, db2, records)
    db1.close()
    db2.close()


@given(st.lists(values, max_size=3))
def test_jsonb_normalisation_keeps_states(database_url, value):
    """Through a real jsonb column: key order, numeric forms and duplicates are PostgreSQL's."""
    check_through_jsonb(database_url, value)


def check_through_jsonb(database_url, value):
    db, _ = commit_value(value)
    records = latest_records(db.storage)
    conn = db.open()
    with psycopg.connect(database_url, autocommit=True) as pg:
        pg.execute("create temporary table if not exists s (oid bytea primary key, state jsonb)")
        pg.execute("truncate s")
        encoded = {oid: encode_record(data) for oid, data in records.items()}
        for oid, enc in encoded.items():
            assert enc.exact is None, enc.reason
            pg.execute("insert into s values (%s, %s::jsonb)", (oid, json_dumps(enc.state)))
        for oid, text in pg.execute("select oid, state::text from s").fetchall():
            rebuilt = decode_record(encoded[oid].class_name, json.loads(text))
            # What the write path checked and the process cache holds for a row its own commit
            # wrote: the same bytes.
            assert encoded[oid].record == rebuilt
            original = records[bytes(oid)]
            assert same_structure(load_structure(rebuilt)[1], load_structure(original)[1], ordered=False)
            state1 = conn._reader.getState(original)
            state2 = conn._reader.getState(rebuilt)
            assert equal_state(state1, state2, ordered=False)
    conn.close()
    db.close()


JSONB_EDGES = [
    {"b": 1, "a": 2, "aa": 3, "": 4},
    [1.0, -1.0, 1e16, 1e22, 1e-7, 5e-324, -0.0, 0.0, 123456789.125, 1.7976931348623157e308],
    [2**53 - 1, 2**53, -(2**63), 10**40],
    {"@t": 1},
    {"@dict": [[1, 2]]},
    "\x00\u2028é",
]


@pytest.mark.parametrize("value", JSONB_EDGES, ids=repr)
def test_jsonb_edges(database_url, value):
    check_through_jsonb(database_url, value)


# -- the documented shapes ------------------------------------------------------------------


def encoded_value(value):
    db, holder = commit_value(value)
    data = db.storage.load(holder._p_oid)[0]
    encoded = encode_record(data)
    db.close()
    assert encoded.exact is None, encoded.reason
    assert encoded.class_name == f"{__name__}.Holder"
    return encoded.state["value"]


SHAPES = [
    (None, None),
    (True, True),
    (7, 7),
    (2**53 - 1, 2**53 - 1),
    (2**53, {"@int": "9007199254740992"}),
    (-(2**70), {"@int": str(-(2**70))}),
    (1.5, 1.5),
    (1.0, 1.0),
    (1e16, {"@f": "1e+16"}),
    (-0.0, {"@f": "-0.0"}),
    (math.inf, {"@f": "inf"}),
    (-math.inf, {"@f": "-inf"}),
    (math.nan, {"@f": "nan"}),
    ("text é", "text é"),
    ("a\x00b", {"@s": ["a", 0, "b"]}),
    ("\ud800x", {"@s": [0xD800, "x"]}),
    (b"\x00\xff", {"@b": "AP8="}),
    ((1, "a"), {"@t": [1, "a"]}),
    ([1, [2]], [1, [2]]),
    ({"a": 1}, {"a": 1}),
    ({"@t": 1}, {"@dict": [["@t", 1]]}),
    ({"b": 2, "@t": 1}, {"b": 2, "@t": 1}),
    # Format version 2: keys out of jsonb's order (length, then bytes) record their ranks.
    ({"@t": 1, "b": 2}, {"@t": 1, "b": 2, "@order": [1, 0]}),
    ({"b": 1, "a": 2, "c": 3, "0": 4}, {"b": 1, "a": 2, "c": 3, "0": 4, "@order": [2, 1, 3, 0]}),
    ({"@order": 1, "a": 2}, {"@dict": [["@order", 1], ["a", 2]]}),
    ({1: "x", (2, 3): "y"}, {"@dict": [[1, "x"], [{"@t": [2, 3]}, "y"]]}),
    ({"a\x00": 1}, {"@dict": [[{"@s": ["a", 0]}, 1]]}),
    ({3, 1}, {"@set": [1, 3]}),
    (frozenset(["x"]), {"@frozenset": ["x"]}),
    (datetime.datetime(2024, 5, 6, 7, 8, 9, 10), {"@datetime": "2024-05-06T07:08:09.000010"}),
    (datetime.date(2024, 5, 6), {"@date": "2024-05-06"}),
    (datetime.time(7, 8, 9), {"@time": "07:08:09"}),
    (datetime.timedelta(days=1, seconds=2, microseconds=3), {"@timedelta": [1, 2, 3]}),
    (decimal.Decimal("1.50"), {"@decimal": "1.50"}),
    (
        DateTime("2024/01/02 03:04:05.5 GMT+1"),
        {"@DateTime": {"utc": "2024-01-02T02:04:05.500000Z", "tz": "GMT+1", "naive": False}},
    ),
    (Holder, {"@global": f"{__name__}.Holder"}),
    (
        datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
        {
            "@datetime": [
                "2024-01-01T00:00:00",
                {"@reduce": {"func": "datetime.timezone", "args": [{"@timedelta": [0, 0, 0]}]}},
            ]
        },
    ),
    (Plain(a=1), {"@obj": {"class": f"{__name__}.Plain", "state": {"a": 1}}}),
    (
        collections.OrderedDict([("b", 1), ("a", 2)]),
        {"@reduce": {"func": "collections.OrderedDict", "dictitems": [["b", 1], ["a", 2]]}},
    ),
]


@pytest.mark.parametrize(("value", "expected"), SHAPES, ids=lambda v: repr(v)[:40])
def test_documented_shapes(value, expected):
    assert encoded_value(value) == expected


def test_shared_and_recursive_lists():
    shared = [1]
    rec = []
    rec.append(rec)
    assert encoded_value([shared, shared, rec]) == [
        {"@shared": {"id": 1, "value": [1]}},
        {"@same": 1},
        {"@shared": {"id": 2, "value": [{"@same": 2}]}},
    ]


def test_use_before_definition_after_jsonb_reordering():
    """JSONB may put the @same before its @shared; the decoder writes the definition first."""
    shared = [1]
    db, holder = commit_value({"zz": shared, "b": shared})
    data = db.storage.load(holder._p_oid)[0]
    encoded = encode_record(data)
    inner = encoded.state["value"]
    assert inner == {"zz": {"@shared": {"id": 1, "value": [1]}}, "b": {"@same": 1}, "@order": [1, 0]}
    reordered = {"value": {"b": inner["b"], "zz": inner["zz"]}}  # no order record: jsonb's order
    rebuilt = decode_record(encoded.class_name, reordered)
    state = db.open()._reader.getState(rebuilt)
    assert state["value"]["b"] is state["value"]["zz"] and state["value"]["b"] == [1]
    db.close()


def test_shared_immutables_are_not_tagged():
    now = DateTime("2024/01/02")
    value = encoded_value({"created": now, "modified": now})
    assert value["created"] == value["modified"]
    assert "@DateTime" in value["created"]


def test_persistent_references_and_refs_column():
    db = DB(MappingStorage())
    conn = db.open()
    root = conn.root()
    target, newargs = Holder(1), NewArgs()
    root["h"] = holder = Holder({"p": target, "n": newargs, "w": WeakRef(target), "again": target})
    transaction.commit()
    data = db.storage.load(holder._p_oid)[0]
    encoded = encode_record(data)
    assert encoded.exact is None
    state = encoded.state["value"]
    assert state["p"] == {"@ref": [target._p_oid.hex(), f"{__name__}.Holder"]}
    assert state["n"] == {"@ref": newargs._p_oid.hex()}
    assert state["w"] == {"@wref": target._p_oid.hex()}
    # Weak references are not ordinary references: ZODB's pack does not follow them.
    assert encoded.refs == [target._p_oid, newargs._p_oid]
    assert encoded.refs == list(dict.fromkeys(referencesf(data)))
    db.close()


def test_cross_database_references():
    databases = {}
    db1 = DB(MappingStorage(), databases=databases, database_name="main")
    db2 = DB(MappingStorage(), databases=databases, database_name="other")
    conn1 = db1.open()
    conn2 = conn1.get_connection("other")
    far, far_newargs = Holder(2), NewArgs()
    conn2.root()["far"] = far
    conn2.root()["far_n"] = far_newargs
    transaction.commit()
    conn1.root()["h"] = holder = Holder([far, far_newargs, WeakRef(far)])
    transaction.commit()
    data = db1.storage.load(holder._p_oid)[0]
    encoded = encode_record(data)
    assert encoded.exact is None
    assert encoded.state["value"] == [
        {"@mref": ["other", far._p_oid.hex(), f"{__name__}.Holder"]},
        {"@nref": ["other", far_newargs._p_oid.hex()]},
        {"@wref": [far._p_oid.hex(), "other"]},
    ]
    assert encoded.refs == []  # like referencesf: other databases are not ours to pack
    rebuilt = decode_record(encoded.class_name, json.loads(json_dumps(encoded.state)))
    loaded = conn1._reader.getState(rebuilt)["value"]
    assert loaded[0] is far and loaded[1] is far_newargs and loaded[2]() is far
    db1.close()
    db2.close()


def test_interface_declarations():
    holder = _with_provides(1)
    db, _ = commit_value(holder)
    data = db.storage.load(holder._p_oid)[0]
    encoded = encode_record(data)
    assert encoded.exact is None
    assert encoded.state["__provides__"] == {
        "@reduce": {
            "func": "zope.interface.declarations.Provides",
            "args": [{"@global": f"{__name__}.Holder"}, {"@global": f"{__name__}.IMarker"}],
        }
    }
    db.close()


def test_btree_with_many_keys_splits_into_buckets_and_round_trips():
    tree = OOBTree({f"k{i:04d}": i for i in range(2000)})
    db, _ = commit_value(tree)
    records = latest_records(db.storage)
    classes = {encode_record(data).class_name for data in records.values()}
    assert "BTrees.OOBTree.OOBucket" in classes
    db2 = copy_transcoded(records)
    assert dict(db2.open().root()["value"].value.items()) == dict(tree.items())
    db.close()
    db2.close()


# -- what must go to `exact` ----------------------------------------------------------------


def record(state_pickle_ops: bytes, klass=b"c__main__\nX\n") -> bytes:
    return b"\x80\x03" + klass + b"." + b"\x80\x03" + state_pickle_ops + b"."


def test_order_of_operations_the_format_cannot_keep_goes_to_exact():
    # NEWOBJ, BUILD, then SETITEMS: the pickler never writes this, the format has no form.
    data = record(b"cm\nC\n)\x81}b(K\x01K\x02u")
    encoded = encode_record(data)
    assert encoded.exact == data
    assert encoded.state == {"@exact": encoded.reason}
    assert "order" in encoded.reason


def test_nan_payloads_are_kept_by_bit_pattern():
    for bits in (0x7FF8000000000001, 0xFFF0000000000001, 0x7FF4000000000000):
        data = record(b"G" + struct.pack(">Q", bits))
        encoded = encode_record(data)
        assert encoded.exact is None
        assert encoded.state == {"@f": f"0x{bits:016x}"}
        rebuilt = load_structure(decode_record(encoded.class_name, encoded.state))[1]
        assert struct.pack(">d", rebuilt) == struct.pack(">Q", bits)


def test_integer_too_long_for_text_goes_to_exact():
    data = record(pickle.dumps(10**5000, protocol=3)[2:-1])
    encoded = encode_record(data)
    assert encoded.exact == data and "integer" in encoded.reason


def test_a_transcoder_bug_is_caught_not_stored(monkeypatch):
    """If the encoder lost information, the round-trip check must keep the record exact."""
    monkeypatch.setattr(jsonstate, "_float_json", lambda value: 0.0 if value == 0 else value)
    db, holder = commit_value([-0.0, 1.5])
    data = db.storage.load(holder._p_oid)[0]
    encoded = encode_record(data)
    assert encoded.exact == data and encoded.reason == "round trip differs"
    db.close()


def test_legacy_protocol_1_records_are_represented():
    # Old databases hold copyreg._reconstructor pickles (protocols 0 and 1).
    state = pickle.dumps({"x": Plain(a=(1, 2))}, protocol=1)
    data = b"\x80\x03c" + f"{__name__}\nHolder\n".encode() + b"." + state
    encoded = encode_record(data)
    assert encoded.exact is None, encoded.reason
    assert encoded.state["x"]["@reduce"]["func"] == "copy_reg._reconstructor"  # written with fix_imports
    rebuilt = decode_record(encoded.class_name, encoded.state)
    db = DB(MappingStorage())
    reader = db.open()._reader
    assert equal_state(reader.getState(rebuilt), reader.getState(data))
    db.close()


def test_persistent_class_metadata_uses_record_tag():
    # Format 3 of ZODB.serialize: ((module, name), None) for instances of persistent classes.
    data = (
        b"\x80\x03" + pickle.dumps(((__name__, "Holder"), None), protocol=3)[2:] + pickle.dumps({"a": 1}, 3)
    )
    encoded = encode_record(data)
    assert encoded.exact is None
    assert encoded.class_name == f"{__name__}.Holder"
    assert encoded.state == {
        "@record": {"class": {"@t": [{"@t": [__name__, "Holder"]}, None]}, "state": {"a": 1}}
    }
    assert load_structure(decode_record(encoded.class_name, encoded.state))[1] == {"a": 1}


def test_unreadable_records_raise():
    with pytest.raises(TranscodeError):
        encode_record(b"not a pickle")


def test_unpickling_errors_are_reported_as_themselves():
    # A class name that is not UTF-8: ZODB's referencesf reads past it, our unpickler cannot.
    # The unpickler reads through a peekable input; after the error it still reads from it,
    # which Python reports as a SystemError (with the object's address) unless unwrapped.
    oid = b"\x00" * 7 + b"\x01"
    data = record(b"}X\x01\x00\x00\x00aC\x08" + oid + b"c\x84m\nC\n\x86Qs")
    encoded = encode_record(data)
    assert encoded.exact == data
    assert encoded.reason.startswith("unreadable: UnicodeDecodeError: ")
    assert encoded.refs == [oid]


@pytest.mark.parametrize(
    "state",
    [
        {"@nope": 1},
        {"@b": "!!"},
        {"@ref": 5},
        {"@same": 3},
        {"@exact": "marker"},
        {"x": {"@record": {}}},
        {"@obj": {"args": []}},
        {"@datetime": "not a date"},
        {"@s": ["a", -1]},
    ],
    ids=repr,
)
def test_bad_json_states_raise(state):
    with pytest.raises(TranscodeError):
        decode_record("m.C", state)


def test_json_dumps_refuses_nan():
    with pytest.raises(ValueError):
        json_dumps([math.nan])


def test_format_version():
    assert FORMAT_VERSION == 2


def test_dumps_is_compact_text():
    assert json_dumps({"a": [1, "é"]}) == '{"a":[1,"é"]}'


def test_legacy_inst_and_obj_opcodes_go_to_exact():
    # Python 2 classic instances: OBJ with no arguments may call cls() or cls.__new__(cls),
    # depending on the real class; placeholders cannot tell, so the record stays exact.
    data = b"\x80\x03c__main__\nX\n." + b"(ccollections\nOrderedDict\no."
    encoded = encode_record(data)
    assert encoded.exact == data
    assert "OBJ" in encoded.reason and encoded.state == {"@exact": encoded.reason}


def test_nesting_deeper_than_the_encoder_recurses_goes_to_exact():
    depth = 5000  # ZODB's pickler would not write it, but a record may hold it
    data = record(b"]" * depth + b"a" * (depth - 1))
    encoded = encode_record(data)
    assert encoded.exact == data
    assert "unsupported" in encoded.reason


class OddState(Persistent):
    """A persistent object whose whole state is whatever the test sets."""

    odd_state = None

    def __getstate__(self):
        return self.odd_state


@pytest.mark.parametrize(
    "top", [{"@exact": "x"}, {"@record": {"class": 1, "state": 2}}, ("@t", 1), "@exact"], ids=repr
)
def test_whole_states_that_look_like_tags(monkeypatch, top):
    monkeypatch.setattr(OddState, "odd_state", top)
    obj = OddState()
    db, _ = commit_value(obj)
    data = db.storage.load(obj._p_oid)[0]
    encoded = encode_record(data)
    assert encoded.exact is None
    rebuilt = decode_record(encoded.class_name, json.loads(json_dumps(encoded.state)))
    assert load_structure(rebuilt)[1] == top
    db.close()


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=6)),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=4), children, max_size=3),
        st.builds(lambda tag, body: {tag: body}, st.sampled_from(sorted(jsonstate_pickle._TAGS)), children),
    ),
    max_leaves=12,
)


def reordered_as_jsonb(value):
    """The reference for decode_record(..., jsonb_order=True): every object's keys in jsonb's
    order (shorter first, then by UTF-8 bytes), as a state read back from PostgreSQL has them."""
    if type(value) is dict:
        keys = sorted(value, key=lambda key: (len(key.encode()), key.encode()))
        return {key: reordered_as_jsonb(value[key]) for key in keys}
    if type(value) is list:
        return [reordered_as_jsonb(item) for item in value]
    return value


@given(values)
def test_decoding_in_jsonb_order_is_decoding_the_reordered_state(value):
    db, _ = commit_value(value)
    for data in latest_records(db.storage).values():
        encoded = encode_record(data)
        if encoded.exact is None:
            state = json.loads(json_dumps(encoded.state))
            expected = decode_record(encoded.class_name, reordered_as_jsonb(state))
            assert decode_record(encoded.class_name, state, jsonb_order=True) == expected
    db.close()


@given(json_values)
def test_json_dumps_writes_what_json_dumps_writes(state):
    # json_dumps keeps one C encoder instead of building one per call; same text, same errors.
    def outcome(dumps):
        try:
            return dumps(state)
        except ValueError as error:  # infinities
            return f"ValueError: {error}"

    assert outcome(json_dumps) == outcome(
        lambda value: json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    )


def test_json_dumps_refuses_what_json_dumps_refuses():
    for bad in ([math.inf], {"a": -math.inf}, {1j: 1}, [object()]):
        with pytest.raises((ValueError, TypeError)) as ours:
            json_dumps(bad)
        with pytest.raises(type(ours.value)):
            json.dumps(bad, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


@given(json_values)
def test_any_json_decodes_or_raises_transcode_error(state):
    try:
        data = decode_record("some.module.Class", state)
    except TranscodeError:
        return
    assert data.startswith(b"\x80\x03c")
