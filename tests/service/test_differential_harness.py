"""The differential harness itself, checked without the service.

A comparison that always says "agree" would make the differential tests worthless, so these
tests feed ``compare`` answers from a second ZCatalog (same objects, catalogued in a different
order, so record ids and tie order differ: it must agree) and deliberately wrong answers (it must
disagree).
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from tests.service.oracle import OracleError, ZCatalogOracle, _is_proper_page, compare, sort_names
from tests.service.strategies import (
    INDEXES,
    METADATA,
    case_from_json,
    case_to_json,
    cases,
    query_to_wire,
    to_wire,
)


def _catalog(objects):
    oracle = ZCatalogOracle(INDEXES, METADATA)
    for obj in objects:
        oracle.index(obj)
    return oracle


def _answer(oracle, query):
    """What a perfect service would send: ZCatalog's own answer as HTTP status and body."""
    try:
        result = oracle.run(query)
    except OracleError:
        return 400, {"title": "Bad query", "status": 400}
    paths = {uid: path for path, uid in oracle._uid_by_path.items()}
    items = [{"uid": uid, "path": paths[uid], "rid": 0} for uid in result.uids]
    return 200, {"items_total": result.actual_result_count, "items": items}


@given(case=cases(), data=st.data())
def test_a_second_zcatalog_agrees_with_the_first(case, data):
    objects, queries = case
    oracle = _catalog(objects)
    shuffled = _catalog(data.draw(st.permutations(objects)))
    paths = {obj.uid: obj.path for obj in objects}
    for query in queries:
        status, body = _answer(shuffled, query)
        assert compare(oracle, query, status, body, paths) is None, query


@given(case=cases(), data=st.data())
def test_wrong_answers_are_caught(case, data):
    objects, queries = case
    oracle = _catalog(objects)
    paths = {obj.uid: obj.path for obj in objects}
    for query in queries:
        status, body = _answer(oracle, query)
        if status != 200:
            assert compare(oracle, query, 500, {"title": "boom"}, paths) is not None
            # Unless another of ZCatalog's sort algorithms answers this query with nothing.
            if all(isinstance(o, OracleError) or o.uids for o in oracle.outcomes(query)):
                assert compare(oracle, query, 200, {"items_total": 0, "items": []}, paths) is not None
            continue
        wrong_total = dict(body, items_total=body["items_total"] + 1)
        assert compare(oracle, query, 200, wrong_total, paths) is not None
        assert compare(oracle, query, 500, {"title": "boom"}, paths) is not None
        items = body["items"]
        if items:
            dropped = dict(body, items=items[1:])
            # Unless dropping makes it the right slice where ZCatalog's own page is shifted.
            if not _is_proper_page(oracle, query, dropped):
                assert compare(oracle, query, 200, dropped, paths) is not None
            assert compare(oracle, query, 200, dict(body, items=items + items[:1]), paths) is not None
        if len(items) > 1 and sort_names(query):
            keys = [oracle.sort_key(item["uid"], sort_names(query)) for item in items]
            if keys[0] != keys[-1]:
                reversed_body = dict(body, items=items[::-1])
                assert compare(oracle, query, 200, reversed_body, paths) is not None
        found = {item["uid"] for item in items}
        outsiders = [obj for obj in objects if obj.uid not in found]
        if items and outsiders and "b_size" not in query and "sort_limit" not in query:
            other = data.draw(st.sampled_from(outsiders))
            swapped = [{"uid": other.uid, "path": other.path, "rid": 0}] + items[1:]
            answers = oracle.outcomes(query)
            # Only when no accepted variant of ZCatalog's answer contains the outsider.
            if all(other.uid not in getattr(answer, "uids", ()) for answer in answers):
                assert compare(oracle, query, 200, dict(body, items=swapped), paths) is not None


@given(case=cases())
def test_cases_round_trip_through_json(case):
    objects, queries = case
    oracle = _catalog(objects)
    for query in queries:
        text = json.dumps(case_to_json(objects, query), ensure_ascii=False)
        replayed_objects, replayed_query = case_from_json(json.loads(text))
        assert replayed_query == query
        replayed = _catalog(replayed_objects)
        assert [str(o.attrs) for o in replayed_objects] == [str(o.attrs) for o in objects]
        try:
            expected = oracle.run(query).uids
        except OracleError as exc:
            expected = type(exc.original)
        try:
            got = replayed.run(replayed_query).uids
        except OracleError as exc:
            got = type(exc.original)
        assert got == expected
        # The wire form must be plain JSON.
        json.dumps([to_wire(obj) for obj in objects])
        json.dumps(query_to_wire(query))
