"""Records whose JSON would be far larger than themselves are kept exact (state_format.md §8).

JSON has no form for an immutable value used twice: the pickle's memo get of a tuple or a text
is written out again at each use. Nested, that doubles per level: a record of a few hundred
bytes described a JSON state of 2**40 tuples, and encoding it never ended (found in a review,
stop 19). Both the reference and the compiled fast path stop at the expansion budget.
"""

from __future__ import annotations

import pickle
import time

import pytest
from ZODB import DB

from plone_connector.storage import jsonstate
from tests.storage.test_jsonstate import Holder, commit_value, record
from tests.storage.test_transcoder_fast import PURE, _answers

KLASS = b"cm\nC\nq\x00"


def nested_shared_tuples(levels: int):
    value = ("leaf",)
    for _ in range(levels):
        value = (value, value)  # the pickler writes the second use as a memo get
    return value


def state_record(value) -> bytes:
    return record(pickle.dumps(value, protocol=3)[2:-1], klass=KLASS)


@pytest.mark.parametrize("module", [PURE, jsonstate], ids=["reference", "compiled"])
def test_nested_shared_tuples_are_kept_exact_not_expanded(module):
    data = state_record(nested_shared_tuples(40))
    assert len(data) < 400
    start = time.process_time()
    encoded = module.encode_record(data)
    # Not a speed test: without the budget this call does not return at all (2**40 tuples).
    assert time.process_time() - start < 60
    assert encoded.exact == data
    assert encoded.reason == f"unsupported: {jsonstate._EXPANDS}"
    assert encoded.state == {"@exact": encoded.reason}


@pytest.mark.parametrize("module", [PURE, jsonstate], ids=["reference", "compiled"])
def test_a_long_text_repeated_from_the_memo_is_kept_exact(module):
    text = "x" * 100_000
    data = state_record([text] * 2_000)  # 100 kB of text, 2,000 uses: 200 MB of JSON
    encoded = module.encode_record(data)
    assert encoded.exact == data and jsonstate._EXPANDS in encoded.reason


@pytest.mark.parametrize(
    "value",
    [
        nested_shared_tuples(6),  # 64 leaves from 7 tuples: far within the budget
        [("Manager", "Owner")] * 500,  # one roles tuple in many places
        [{"title": "a" * 300, "description": "b"}] * 3,  # dicts are mutable: @shared, not repeated
        [{"title": str(i), "description": "d"} for i in range(2_000)],  # interned keys repeated
        ["y" * 300] * 20,
    ],
    ids=["shallow-tuples", "roles", "shared-dict", "many-dicts", "text-20-times"],
)
def test_ordinary_repeats_stay_json_and_both_paths_agree(value):
    data = state_record(value)
    answers = _answers(jsonstate, data)
    assert answers == _answers(PURE, data)
    assert answers[3] is None, answers[4]  # no exact copy


def test_the_storage_keeps_and_loads_an_expanding_record(storage, storage_dsn):
    from plone_connector.storage import JsonbStorage

    db = DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()["tuples"] = holder = Holder(nested_shared_tuples(40))
        oid = holder._p_oid
        assert storage.exact_copy_counts().get("unsupported") == 1
    finally:
        db.close()
    other = DB(JsonbStorage(storage_dsn))  # another process's view: read from the database
    try:
        with other.transaction() as conn:
            loaded = conn.get(oid).value
            # Equal, and still shared: the exact pickle keeps the memo.
            assert loaded[0] is loaded[1] and loaded[0][0] is loaded[0][1]
            depth = 0
            while len(loaded) == 2:
                loaded, depth = loaded[0], depth + 1
            assert depth == 40 and loaded == ("leaf",)
    finally:
        other.close()


def test_commit_value_helper_still_transcodes_plain_values():
    # The budget is per record and generous: a plain value of many containers stays JSON.
    db, holder = commit_value([[i, (i, str(i))] for i in range(5_000)])
    try:
        data = db.storage.load(holder._p_oid)[0]
        encoded = jsonstate.encode_record(data)
        assert encoded.exact is None
    finally:
        db.close()
