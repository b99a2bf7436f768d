"""A record the round-trip check accepts (``exact`` is None) must load, after the JSONB round
trip, to the state the original record loads to (found in a review, stop 19; failed before the
fix, which keeps such records exact: "shared value reordered by jsonb").

JSONB reorders object members (shorter keys first). When that puts a ``@same`` before its
``@shared``, the decoder writes the definition at the first use, so the shared object is
constructed (NEWOBJ) and built (BUILD) at another point of the pickle than in the original.
The check compares neutral structures, in which objects hash by identity and BUILD is only
recorded, so it cannot see that a dict key is now hashed before its state is set. In the
original pickle below the dict ``zzzz`` comes first: its key object is complete when it is
inserted. After JSONB's reordering the object under ``a`` comes first, its state refers back
to the dict, and the dict is filled while the object is still empty.
"""

from __future__ import annotations

import json

import transaction
from persistent import Persistent
from ZODB import DB
from ZODB.MappingStorage import MappingStorage

from plone_connector.storage import jsonstate
from plone_connector.storage.jsonstate_pickle import jsonb_key


class Holder(Persistent):
    def __init__(self, value=None):
        self.value = value


class Keyed:
    """A value object hashed by its state, as dataclasses(frozen=True) and many others are."""

    def __init__(self, key):
        self.key = key

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, Keyed) and other.key == self.key


class KeyedWithDefault(Keyed):
    """The same with a class-level default: nothing raises, the dict is silently wrong."""

    key = ""


def _through_jsonb(value):
    """(original record, record a load returns after the JSONB round trip, encode_row answer)."""
    db = DB(MappingStorage())
    conn = db.open()
    conn.root()["holder"] = holder = Holder(value)
    transaction.commit()
    data = db.storage.load(holder._p_oid)[0]
    row = jsonstate.encode_row(data)
    class_name, text, _refs, exact, _reason, _record = row

    def reorder(node):  # what a jsonb column gives back: members shorter key first, then bytes
        if type(node) is dict:
            return {key: reorder(node[key]) for key in sorted(node, key=jsonb_key)}
        if type(node) is list:
            return [reorder(item) for item in node]
        return node

    loaded = json.dumps(reorder(json.loads(text)), ensure_ascii=False, separators=(",", ":"))
    rebuilt = jsonstate.decode_text(class_name, loaded) if exact is None else exact
    return db, conn, data, rebuilt


def test_cycle_through_a_dict_key_raising_hash():
    item = Keyed("x")
    table = {item: 1}
    item.back = table  # a cycle: the key's state refers to the dict it is a key of
    db, conn, original, rebuilt = _through_jsonb({"zzzz": table, "a": item})
    try:
        state = conn._reader.getState(original)["value"]
        assert state["a"] in state["zzzz"]
        # Either kept exact, or loads to the same state.
        state2 = conn._reader.getState(rebuilt)["value"]  # raises: 'Keyed' object has no attribute 'key'
        assert state2["a"] in state2["zzzz"]
    finally:
        conn.close()
        db.close()


def test_cycle_through_a_dict_key_silently_misplaced():
    item = KeyedWithDefault("x")
    table = {item: 1}
    item.back = table
    db, conn, original, rebuilt = _through_jsonb({"zzzz": table, "a": item})
    try:
        state = conn._reader.getState(original)["value"]
        # Looked up with an equal key (not the stored object: CPython tries identity first).
        assert state["zzzz"].get(KeyedWithDefault("x")) == 1
        state2 = conn._reader.getState(rebuilt)["value"]
        # Loads without error, but the key sits under hash(""): the lookup misses.
        assert state2["zzzz"].get(KeyedWithDefault("x")) == 1
    finally:
        conn.close()
        db.close()


def test_a_reordered_shared_object_outside_a_cycle_stays_json():
    """Only a cycle lets code see a half-built object: a shared object moved by jsonb's order
    without one keeps its JSON form (the check's usual answer)."""
    item = Keyed("x")
    db, conn, original, rebuilt = _through_jsonb({"zzzz": [item], "a": item})
    try:
        data = db.storage.load(conn.root()["holder"]._p_oid)[0]
        encoded = jsonstate.encode_record(data)
        assert encoded.exact is None, encoded.reason
        state = conn._reader.getState(rebuilt)["value"]
        assert state["a"] is state["zzzz"][0] and state["a"].key == "x"
    finally:
        conn.close()
        db.close()


def test_the_cycle_keeps_its_order_in_json():
    """Format version 2 records the dict's order ("@order"), so jsonb's order no longer moves
    the definition: the record stays JSON and loads right. The same JSON without the order
    record (as version 1 wrote it) is still recognised as reordered by the decoder."""
    item = Keyed("x")
    table = {item: 1}
    item.back = table
    db, conn, original, rebuilt = _through_jsonb({"zzzz": table, "a": item})
    try:
        encoded = jsonstate.encode_record(original)
        assert encoded.exact is None, encoded.reason
        assert encoded.state["value"]["@order"] == [1, 0]
        state = conn._reader.getState(rebuilt)["value"]
        assert state["a"] in state["zzzz"] and list(state) == ["zzzz", "a"]
        unordered = {"value": {key: item for key, item in encoded.state["value"].items() if key != "@order"}}
        hoisted = []
        jsonstate.decode_record(encoded.class_name, unordered, jsonb_order=True, hoisted=hoisted)
        assert hoisted == [True]
    finally:
        conn.close()
        db.close()


def test_a_cycle_wholly_inside_a_reordered_shared_value_stays_json():
    """A cycle that does not cross the move (a list holding itself, inside the moved value) is
    built in the same order as before: JSON, not exact (found by the generated graphs)."""
    from tests.storage.test_jsonstate import Plain

    inner = []
    inner.append(inner)
    shared = [Plain(**{"": inner})]
    db, conn, original, rebuilt = _through_jsonb({"0": shared, "": shared})
    try:
        encoded = jsonstate.encode_record(original)
        assert encoded.exact is None, encoded.reason
        state = conn._reader.getState(rebuilt)["value"]
        assert state["0"] is state[""]
    finally:
        conn.close()
        db.close()
