"""The planner is a pure function: SQL text depends on the query's shape only; values are parameters."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog_schemas.api import IndexDeclaration
from catalog_service.errors import LimitExceeded, QueryError
from catalog_service.indexes import make_index
from catalog_service.planner.plan import UNRESTRICTED, CatalogSchema, Limits, Security, plan_search

DECLS = [
    IndexDeclaration(name="portal_type", type="FieldIndex"),
    IndexDeclaration(name="Subject", type="KeywordIndex"),
    IndexDeclaration(name="modified", type="DateIndex"),
    IndexDeclaration(name="effectiveRange", type="DateRangeIndex", since_field="effective", until_field="expires"),
    IndexDeclaration(name="path", type="ExtendedPathIndex"),
    IndexDeclaration(name="SearchableText", type="ZCTextIndex"),
    IndexDeclaration(name="is_folderish", type="BooleanIndex"),
    IndexDeclaration(name="UID", type="UUIDIndex"),
    IndexDeclaration(name="getObjPositionInParent", type="GopipIndex"),
    IndexDeclaration(name="start", type="DateRecurringIndex"),
    IndexDeclaration(name="total_comments", type="FieldIndex", value_type="number"),
    IndexDeclaration(name="allowedRolesAndUsers", type="KeywordIndex"),
]
SCHEMA = CatalogSchema(catalog_id=7, table="catalog_object_7", indexes={d.name: make_index(d) for d in DECLS})
LIMITS = Limits()

text = st.text(min_size=1, max_size=30).filter(lambda s: s.strip() and "\x00" not in s)
MARKER = "'; drop table catalog; --"
# Words of a text query: letters only, so that every value parses to the same query tree (no
# operators, no punctuation that would split a word into a phrase).
words = st.text("abcdefghijklmnopqrstuvwxyzäöüé", min_size=2, max_size=12).filter(
    lambda w: w not in ("and", "or", "not"))
# Dates well inside every date index's range (a DateRangeIndex treats a date past its ceiling as
# an open end, which is another shape).
dates = st.datetimes(datetime(2000, 1, 1), datetime(2035, 12, 31), timezones=st.just(UTC)).map(
    lambda d: d.isoformat())
# Positive: a falsy upper bound of a range means "no upper bound" in ZCatalog, another shape.
numbers = st.integers(1, 2**40)


@st.composite
def fillings(draw):
    """The values one set of shapes is filled with."""
    return {
        "value": draw(text), "other": draw(text),
        "word": draw(words), "word2": draw(words),
        "date": draw(dates), "date2": draw(dates),
        "number": draw(numbers), "number2": draw(numbers),
        "flag": draw(st.booleans()),
        "position": draw(st.integers(-5, 10**6)),
    }


def shapes(f: dict):
    """Queries of fixed shapes, filled with the values of ``f`` (see ``fillings``)."""
    value, other = f["value"], f["other"]
    word, word2 = f["word"], f["word2"]
    date, date2 = f["date"], f["date2"]
    return [
        # FieldIndex, KeywordIndex, UUIDIndex, ExtendedPathIndex
        {"portal_type": value},
        {"portal_type": [value, other], "sort_on": "modified", "sort_order": "reverse", "b_size": 20},
        {"Subject": {"query": [value, other], "operator": "and"}},
        {"Subject": {"not": [value]}},
        {"portal_type": {"query": [value, other], "range": "min:max", "not": value}},
        {"path": {"query": "/plone/" + value, "depth": 1}, "sort_on": "getObjPositionInParent"},
        {"path": {"query": ["/plone/" + value, "/plone/" + other], "depth": -1}},
        {"path": {"query": "/plone/" + value + "/x", "navtree": 1, "navtree_start": 1}},
        {"UID": value},
        # FieldIndex of numbers
        {"total_comments": {"query": [f["number"], f["number2"]], "range": "min:max"}},
        {"total_comments": {"query": f["number"], "range": "max"}, "sort_on": "total_comments"},
        # ZCTextIndex: a word, boolean operators, a phrase, a glob; relevance order, then sorted
        {"SearchableText": word},
        {"SearchableText": word, "b_size": 10, "b_start": 5},
        {"SearchableText": f"{word} AND {word2}"},
        {"SearchableText": f"{word} OR {word2}", "portal_type": value},
        {"SearchableText": f"{word} AND NOT {word2}"},
        {"SearchableText": f'"{word} {word2}"'},
        {"SearchableText": f"{word}*"},
        {"SearchableText": f"{word}*", "sort_on": "modified", "b_size": 5},
        # DateIndex: one date, and ranges
        {"modified": date},
        {"modified": {"query": date, "range": "min"}},
        {"modified": {"query": date, "range": "max"}, "sort_on": "modified", "sort_order": "reverse"},
        {"modified": {"query": [date, date2], "range": "min:max"}},
        # DateRangeIndex (effectiveRange): a date it covers
        {"effectiveRange": date},
        {"effectiveRange": date, "portal_type": value, "sort_on": "modified"},
        # DateRecurringIndex: an occurrence, and occurrences in ranges
        {"start": date},
        {"start": {"query": date, "range": "min"}, "sort_on": "start"},
        {"start": {"query": [date, date2], "range": "min:max"}},
        # BooleanIndex
        {"is_folderish": f["flag"]},
        {"is_folderish": {"query": f["flag"]}, "sort_on": "getObjPositionInParent"},
        # GopipIndex answers no query; it sorts
        {"getObjPositionInParent": f["position"]},
    ]


def same_sql(p1, p2):
    assert p1.sql == p2.sql
    assert p1.count_sql == p2.count_sql
    assert p1.plain_sql == p2.plain_sql
    assert len(p1.params) == len(p2.params)


@given(fillings(), fillings())
def test_sql_text_depends_only_on_shape(f1, f2):
    for q1, q2 in zip(shapes(f1), shapes(f2), strict=True):
        same_sql(plan_search(q1, SCHEMA, LIMITS, UNRESTRICTED), plan_search(q2, SCHEMA, LIMITS, UNRESTRICTED))


principals = st.lists(st.text(min_size=1, max_size=20).filter(lambda s: "\x00" not in s), min_size=1, max_size=5)
moments = st.datetimes(datetime(2000, 1, 1), datetime(2035, 1, 1), timezones=st.just(UTC))


@given(fillings(), fillings(), principals, principals, moments, moments)
def test_restricted_sql_text_depends_only_on_shape(f1, f2, who1, who2, now1, now2):
    # The caller's principals and the moment of the effective-date filter are values too.
    for q1, q2 in zip(shapes(f1), shapes(f2), strict=True):
        same_sql(plan_search(q1, SCHEMA, LIMITS, Security(principals=tuple(who1), effective_at=now1)),
                 plan_search(q2, SCHEMA, LIMITS, Security(principals=tuple(who2), effective_at=now2)))


@given(text)
def test_values_never_appear_in_sql(value):
    marked = {"value": MARKER + value, "other": value + MARKER}
    for query in shapes({**FILLING, **marked})[:9]:  # the shapes that hold `value` and `other`
        plan = plan_search(query, SCHEMA, LIMITS, UNRESTRICTED)
        assert MARKER not in plan.sql
        assert any(MARKER in str(p) for p in plan.params)


# Values that cannot appear in SQL by chance (the statements hold small numbers, "true", "min").
FILLING = {"value": "v", "other": "o", "word": "qzwordone", "word2": "qzwordtwo",
           "date": "2024-03-05T06:07:00+00:00", "date2": "2031-11-12T13:14:00+00:00",
           "number": 987654321, "number2": 876543219, "flag": True, "position": 765432198}


def test_values_of_every_shape_are_parameters():
    for query in shapes(FILLING):
        plan = plan_search(query, SCHEMA, LIMITS, UNRESTRICTED)
        for value in ("qzwordone", "qzwordtwo", "987654321", "876543219", "765432198", "2024", "2031"):
            assert value not in plan.sql and value not in plan.count_sql, (query, value)


def test_security_comes_from_security_not_query():
    restricted = Security(principals=("Anonymous",), effective_at=None)
    plan = plan_search({"portal_type": "Document"}, SCHEMA, LIMITS, restricted)
    assert "o.allowed &&" in plan.sql
    assert ["Anonymous"] in plan.params
    unrestricted = plan_search({"portal_type": "Document"}, SCHEMA, LIMITS, UNRESTRICTED)
    assert "o.allowed" not in unrestricted.sql


def test_effective_filter_added_for_restricted_searches():
    security = Security(principals=("Anonymous",), effective_at=datetime(2024, 1, 1, tzinfo=UTC))
    plan = plan_search({"portal_type": "Document"}, SCHEMA, LIMITS, security)
    assert "effectiveRange" in plan.sql


def test_empty_query_is_empty_unless_security_applies():
    assert plan_search({}, SCHEMA, LIMITS, UNRESTRICTED).empty
    assert plan_search({"no_such_index": 1}, SCHEMA, LIMITS, UNRESTRICTED).empty
    assert not plan_search({}, SCHEMA, LIMITS, Security(principals=("Anonymous",), effective_at=None)).empty


@pytest.mark.parametrize("query, error", [
    ({"portal_type": {"query": "x", "operator": "and"}}, QueryError),  # FieldIndex has no operator
    ({"portal_type": {"query": "x", "depth": 1}}, QueryError),
    ({"Subject": {"query": "x", "operator": "xor"}}, QueryError),
    ({"portal_type": "x", "sort_on": "nope"}, QueryError),
    ({"portal_type": "x", "sort_on": "SearchableText"}, QueryError),
    ({"portal_type": "x", "sort_on": "getObjPositionInParent", "b_size": 0}, QueryError),
    ({"portal_type": "x", "b_size": 10**6}, LimitExceeded),
    ({"portal_type": "x", "b_start": -1}, QueryError),
    ({"portal_type": "x", "b_size": "many"}, QueryError),
    ({"portal_type": ["x"] * 5000}, LimitExceeded),
    ({"SearchableText": "x" * 5000}, LimitExceeded),
    ({"SearchableText": "AND"}, QueryError),
    ({"effectiveRange": {"query": "2024-01-01", "range": "min"}}, QueryError),
    ({"modified": {"query": "not a date", "range": "min"}}, QueryError),
    ({"modified": {"query": [], "range": "min"}}, QueryError),
    ({"path": {"query": 5}}, QueryError),
])
def test_bad_queries_raise_named_errors(query, error):
    with pytest.raises(error):
        plan_search(query, SCHEMA, LIMITS, UNRESTRICTED)


def test_sort_orders_follow_zcatalog():
    plan = plan_search({"portal_type": "x", "sort_on": ["modified", "portal_type"],
                        "sort_order": ["reverse"]}, SCHEMA, LIMITS, UNRESTRICTED)
    order = plan.sql.split("order by")[1]
    # One order applies to every key; ties broken by rid in the first key's direction.
    assert order.count(" desc") == 3
    plan = plan_search({"portal_type": "x", "sort_on": ["modified", "portal_type"],
                        "sort_order": ["reverse", "ascending"]}, SCHEMA, LIMITS, UNRESTRICTED)
    order = plan.sql.split("order by")[1]
    assert order.count(" desc") == 2 and order.count(" asc") == 1


def test_sort_limit_sets_page_size_without_b_size():
    plan = plan_search({"portal_type": "x", "sort_on": "modified", "sort_limit": 7}, SCHEMA, LIMITS, UNRESTRICTED)
    assert plan.b_size == 7
    plan = plan_search({"portal_type": "x", "sort_on": "modified", "sort_limit": 7, "b_size": 3},
                       SCHEMA, LIMITS, UNRESTRICTED)
    assert plan.b_size == 3
