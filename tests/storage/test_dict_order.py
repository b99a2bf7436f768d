"""Dict key order and tuples that refer to themselves survive JsonbStorage as they survive
FileStorage (issue 22, item 4; state format version 2).

Before format version 2 a dict came back in jsonb's key order (`{'b': 1, 'a': 2, 'c': 3, '0': 4}`
as `{'0': 4, 'a': 2, 'b': 1, 'c': 3}`), and a tuple inside a list inside itself came back as two
tuples (`t[0][0] is t` false). The oracle is FileStorage: the same values are committed to both
and read back, JsonbStorage's from a cold storage (from PostgreSQL, not from the process cache).
"""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path

import psycopg
import pytest
import ZODB
import ZODB.FileStorage
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from persistent import Persistent
from persistent.mapping import PersistentMapping

from plone_connector.storage import JsonbStorage, jsonstate, transcoder

try:
    from plone_connector.storage import jsonstate_fast
except ImportError:  # a pure build
    jsonstate_fast = None


class Item(Persistent):
    """Content whose attributes are set in a given order (its __dict__ is the state)."""

    def __init__(self, attributes=()):
        for name, value in attributes:
            setattr(self, name, value)


def _shape(value, numbers=None):
    """The value as nested lists: dicts as their (key, value) pairs in order, containers numbered
    by identity at first sight, so equal shapes mean equal order and equal sharing."""
    numbers = {} if numbers is None else numbers
    if isinstance(value, Persistent):
        value = value.__getstate__()
        if type(value) is dict and "data" in value and len(value) == 1:  # PersistentMapping
            value = value["data"]
    kind = type(value)
    if kind in (list, dict) or (kind is tuple and value):
        if id(value) in numbers:
            return ("same", numbers[id(value)])
        numbers[id(value)] = len(numbers)
        if kind is dict:
            return ("dict", [(_shape(k, numbers), _shape(v, numbers)) for k, v in value.items()])
        return (kind.__name__, [_shape(item, numbers) for item in value])
    return (kind.__name__, value)


def _through(storage, values: dict, reopen) -> dict:
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            for key, value in values.items():
                conn.root()[key] = value
    finally:
        db.close()
    db = ZODB.DB(reopen())
    try:
        conn = db.open()
        shapes = {key: _shape(conn.root()[key]) for key in values}
        conn.close()
    finally:
        db.close()
    return shapes


def _both(values_factory, storage_dsn):
    """Shapes after FileStorage, after JsonbStorage (each gets its own fresh copy of the values)."""
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "Data.fs")
        expected = _through(ZODB.FileStorage.FileStorage(path), values_factory(), lambda: ZODB.FileStorage.FileStorage(path))
    storage = JsonbStorage(storage_dsn, listen=False)
    storage.cleanup()
    got = _through(storage, values_factory(), lambda: JsonbStorage(storage_dsn, listen=False))
    return expected, got


def _cycle():
    cycle = []
    t = (cycle,)
    cycle.append(t)
    return t


def test_the_issues_examples_load_as_from_filestorage(storage_dsn):
    def values():
        return {
            "dict": PersistentMapping(plain={"b": 1, "a": 2, "c": 3, "0": 4}),
            "item": Item([("title", "T"), ("id", "i")]),
            "cycle": PersistentMapping(t=_cycle()),
        }

    expected, got = _both(values, storage_dsn)
    assert got == expected
    db = ZODB.DB(JsonbStorage(storage_dsn, listen=False))
    try:
        conn = db.open()
        root = conn.root()
        assert list(root["dict"]["plain"]) == ["b", "a", "c", "0"]
        root["item"]._p_activate()
        assert list(root["item"].__dict__) == ["title", "id"]
        t = root["cycle"]["t"]
        assert t[0][0] is t
        conn.close()
    finally:
        db.close()


keys = st.lists(
    st.one_of(st.text(max_size=6), st.sampled_from(["@order", "@t", "id", "title", "é", "aa", "b"])),
    unique=True,
    max_size=6,
)
scalars = st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=4), st.floats(allow_nan=False))


def _dicts(inner):
    return st.builds(lambda names, items: dict(zip(names, items, strict=False)), keys, st.lists(inner, min_size=6, max_size=6))


values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner), _dicts(inner)),
    max_leaves=16,
)


def _with_cycle(value, kind: int):
    """``value`` and, by kind, a tuple that refers to itself through a list or a dict."""
    if kind == 0:
        return value
    holder = [] if kind == 1 else {}
    t = (holder, value)  # value only here: a tuple used twice otherwise loads as two (by design)
    if kind == 1:
        holder.append(t)
    else:
        holder["z"] = t
        holder["a"] = 1
    return [t, [holder]]


@pytest.mark.slow
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    plain=values,
    mapping=_dicts(values),
    attributes=st.lists(st.tuples(st.sampled_from(["title", "id", "zz", "a", "description", "_p"]), values), max_size=5),
    cycle=st.integers(0, 2),
)
def test_same_order_and_sharing_as_filestorage(plain, mapping, attributes, cycle, storage_dsn):
    """Generated dicts in random key order, nested, as PersistentMapping data and as an
    instance's __dict__, with and without a tuple inside itself."""
    names = dict(attributes)  # setattr twice keeps the first position

    def factory():  # fresh objects for each storage
        return {
            "plain": PersistentMapping(v=_with_cycle(copy.deepcopy(plain), cycle)),
            "mapping": PersistentMapping(copy.deepcopy(mapping)),
            "item": Item(copy.deepcopy(list(names.items()))),
        }

    expected, got = _both(factory, storage_dsn)
    assert got == expected


def test_version_1_rows_read_as_version_1_wrote_them(fresh_dsn):
    """Migration 1 -> 2: a version-1 row with a user dict key "@order" is written again (in
    version 2) so that it loads as before; other version-1 rows load as they did."""
    storage = JsonbStorage(fresh_dsn, listen=False)
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        conn.root()["x"] = first = PersistentMapping(a=1)
        conn.root()["y"] = second = PersistentMapping(b=2)
    oids = first._p_oid, second._p_oid
    db.close()
    user = {"data": {"@order": [1, 0], "a": 1, "bb": 2}}  # as version 1 wrote {"@order": .., ...}
    other = {"data": {"zz": 1, "a": 2}}  # version 1: loads in jsonb's order ("a", "zz")
    with psycopg.connect(fresh_dsn, autocommit=True) as conn:
        for oid, state in zip(oids, (user, other), strict=True):
            conn.execute(
                "update zodb_object_state set state = %s::jsonb where zoid = %s",
                (json.dumps(state), int.from_bytes(oid, "big")),
            )
        conn.execute("update zodb_commit set state_format = 1")
    db = ZODB.DB(JsonbStorage(fresh_dsn, listen=False))
    try:
        conn = db.open()
        x, y = conn.get(oids[0]), conn.get(oids[1])
        assert dict(x.data) == {"@order": [1, 0], "a": 1, "bb": 2}
        assert list(x.data) == ["a", "bb", "@order"]  # jsonb's order, as version 1 loaded it
        assert list(y.data) == ["a", "zz"]
        conn.close()
    finally:
        db.close()
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("select state_format from zodb_commit").fetchone()[0] == jsonstate.FORMAT_VERSION
        state = conn.execute(
            "select state from zodb_object_state where zoid = %s", (int.from_bytes(oids[0], "big"),)
        ).fetchone()[0]
    assert "@dict" in state["data"]


@pytest.mark.skipif(jsonstate_fast is None, reason="no fast path in this build")
@settings(max_examples=300, deadline=None)
@given(value=_dicts(values))
def test_fast_path_and_reference_agree_on_key_orders(value):
    """The compiled fast path writes the reference's JSON (order records included) and decodes
    it to the reference's record, in both key orders."""
    import io

    import zodbpickle.pickle as pickle

    pure = transcoder.load_pure()["jsonstate"]
    out = io.BytesIO()
    pickler = pickle.Pickler(out, 3)
    pickler.dump(PersistentMapping)
    pickler.dump({"data": value})
    data = out.getvalue()
    reference = pure.encode_record(data)
    fast = jsonstate_fast.encode(data)
    if fast is not None:
        assert fast[1] == pure.json_dumps(reference.state)
        assert fast[3] == reference.record
    text = pure.json_dumps(reference.state)
    for jsonb_order in (False, True):
        answer = jsonstate_fast.decode(reference.class_name, text, jsonb_order)
        if answer is not None:
            assert answer == pure.decode_record(reference.class_name, json.loads(text), jsonb_order)
