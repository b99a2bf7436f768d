"""Differential: random histories of ZODB transactions give the same states as FileStorage."""

from __future__ import annotations

import math
import tempfile
import time
from pathlib import Path

import pytest
import transaction
import ZODB
import ZODB.FileStorage
from BTrees.OOBTree import OOBTree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from persistent.list import PersistentList
from persistent.mapping import PersistentMapping

from plone_connector.storage import JsonbStorage

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
        st.frozensets(st.integers(), max_size=3),
    ),
    max_leaves=12,
)
keys = st.integers(min_value=0, max_value=5)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("set"), keys, values),
        st.tuples(st.just("new"), keys, st.sampled_from(["mapping", "list", "tree"])),
        st.tuples(st.just("nest"), keys, keys),
        st.tuples(st.just("del"), keys),
        st.tuples(st.just("commit")),
        st.tuples(st.just("abort")),
        st.tuples(st.just("pack")),
    ),
    max_size=25,
)


def _apply(root, tm, db, operation):
    kind = operation[0]
    if kind == "set":
        target = root.get(f"obj{operation[1]}")
        if isinstance(target, PersistentList):
            target.append(operation[2])
        elif target is not None:
            target[f"k{len(target)}"] = operation[2]
        else:
            root[f"value{operation[1]}"] = operation[2]
    elif kind == "new":
        factory = {"mapping": PersistentMapping, "list": PersistentList, "tree": OOBTree}[operation[2]]
        root[f"obj{operation[1]}"] = factory()
    elif kind == "nest":
        outer, inner = root.get(f"obj{operation[1]}"), root.get(f"obj{operation[2]}")
        if isinstance(outer, PersistentMapping) and inner is not None and inner is not outer:
            outer["child"] = inner
    elif kind == "del":
        root.pop(f"obj{operation[1]}", None)
    elif kind == "commit":
        tm.commit()
    elif kind == "abort":
        tm.abort()
    elif kind == "pack":
        tm.commit()
        db.pack(time.time())


def _plain(value, seen=None):
    """A structure comparable across databases (persistent objects by content)."""
    seen = seen if seen is not None else set()
    if isinstance(value, PersistentMapping | OOBTree):
        if id(value) in seen:
            return "<cycle>"
        seen = seen | {id(value)}
        return ("map", sorted((k, _plain(v, seen)) for k, v in value.items()))
    if isinstance(value, PersistentList):
        return ("list", [_plain(v, seen) for v in value])
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value


def _run(db, history):
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    for operation in history:
        _apply(conn.root(), tm, db, operation)
    tm.commit()
    conn.close()
    fresh = db.open(transaction.TransactionManager())
    state = {key: _plain(value) for key, value in fresh.root().items()}
    fresh.close()
    return state


@pytest.mark.slow
@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(history=operations)
def test_same_states_as_filestorage(history, storage_dsn):
    with tempfile.TemporaryDirectory() as folder:
        oracle = ZODB.DB(ZODB.FileStorage.FileStorage(str(Path(folder) / "Data.fs")))
        try:
            expected = _run(oracle, history)
        finally:
            oracle.close()
    storage = JsonbStorage(storage_dsn, listen=False)
    storage.cleanup()
    db = ZODB.DB(storage)
    try:
        assert _run(db, history) == expected
    finally:
        db.close()
    # Read back by another process (cold caches): still the same.
    db = ZODB.DB(JsonbStorage(storage_dsn, listen=False))
    try:
        conn = db.open()
        assert {key: _plain(value) for key, value in conn.root().items()} == expected
        conn.close()
    finally:
        db.close()
