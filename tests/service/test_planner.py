"""The planner is a pure function: SQL text depends on the query's shape only; values are parameters."""

from __future__ import annotations

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


def shapes(value: str, other: str):
    """Queries of fixed shapes, filled with the given values."""
    return [
        {"portal_type": value},
        {"portal_type": [value, other], "sort_on": "modified", "sort_order": "reverse", "b_size": 20},
        {"Subject": {"query": [value, other], "operator": "and"}},
        {"Subject": {"not": [value]}},
        {"portal_type": {"query": [value, other], "range": "min:max", "not": value}},
        {"path": {"query": "/plone/" + value, "depth": 1}, "sort_on": "getObjPositionInParent"},
        {"path": {"query": ["/plone/" + value, "/plone/" + other], "depth": -1}},
        {"path": {"query": "/plone/" + value + "/x", "navtree": 1, "navtree_start": 1}},
        {"UID": value},
    ]


@given(text, text, text, text)
def test_sql_text_depends_only_on_shape(a, b, c, d):
    for q1, q2 in zip(shapes(a, b), shapes(c, d), strict=True):
        p1 = plan_search(q1, SCHEMA, LIMITS, UNRESTRICTED)
        p2 = plan_search(q2, SCHEMA, LIMITS, UNRESTRICTED)
        assert p1.sql == p2.sql
        assert p1.count_sql == p2.count_sql
        assert len(p1.params) == len(p2.params)


@given(text)
def test_values_never_appear_in_sql(value):
    for query in shapes(MARKER + value, value + MARKER):
        plan = plan_search(query, SCHEMA, LIMITS, UNRESTRICTED)
        assert MARKER not in plan.sql
        assert any(MARKER in str(p) for p in plan.params)


def test_security_comes_from_security_not_query():
    restricted = Security(principals=("Anonymous",), effective_at=None)
    plan = plan_search({"portal_type": "Document"}, SCHEMA, LIMITS, restricted)
    assert "o.allowed &&" in plan.sql
    assert ["Anonymous"] in plan.params
    unrestricted = plan_search({"portal_type": "Document"}, SCHEMA, LIMITS, UNRESTRICTED)
    assert "o.allowed" not in unrestricted.sql


def test_effective_filter_added_for_restricted_searches():
    from datetime import UTC, datetime

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
