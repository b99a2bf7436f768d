"""The facet planner is pure too: its SQL text depends on the query's shape and the facets asked,
never on values (tests/service/test_planner.py's shapes, with facets on every facetable index)."""

from __future__ import annotations

import pytest
from hypothesis import given

from catalog_schemas.api import FacetRequest
from catalog_service.errors import LimitExceeded, QueryError
from catalog_service.planner.facets import parse_facets, plan_facets
from catalog_service.planner.plan import UNRESTRICTED, Security
from catalog_service.planner.sql import Params
from tests.service.test_planner import LIMITS, MARKER, SCHEMA, fillings, moments, principals, shapes, text

FACETS = parse_facets(["portal_type", FacetRequest(index="Subject", limit=5, sort="value"), "is_folderish", "UID",
                       "total_comments"], SCHEMA, LIMITS)


@given(fillings(), fillings(), principals, principals, moments, moments)
def test_facet_sql_depends_only_on_shape(f1, f2, who1, who2, now1, now2):
    for q1, q2 in zip(shapes(f1), shapes(f2), strict=True):
        try:
            p1 = plan_facets(q1, SCHEMA, LIMITS, Security(principals=tuple(who1), effective_at=now1), FACETS)
        except QueryError:
            with pytest.raises(QueryError):
                plan_facets(q2, SCHEMA, LIMITS, Security(principals=tuple(who2), effective_at=now2), FACETS)
            continue
        p2 = plan_facets(q2, SCHEMA, LIMITS, Security(principals=tuple(who2), effective_at=now2), FACETS)
        assert p1.sql == p2.sql
        assert len(p1.params) == len(p2.params)


@given(text)
def test_values_never_appear_in_facet_sql(value):
    marked = {"value": MARKER + value, "other": value + MARKER, "word": "garden", "word2": "tools",
              "date": "2020-01-01T00:00:00+00:00", "date2": "2021-01-01T00:00:00+00:00", "number": 1,
              "number2": 2, "flag": True, "position": 1}
    for query in shapes(marked):
        try:
            plan = plan_facets(query, SCHEMA, LIMITS, UNRESTRICTED, FACETS)
        except QueryError:
            continue
        assert MARKER not in plan.sql


def test_parameters_follow_another_statements():
    """Planned into a statement that already has parameters, the facets' come after them."""
    params = Params()
    params.add("page value", "text")
    plan = plan_facets({"portal_type": "Document"}, SCHEMA, LIMITS, UNRESTRICTED, FACETS, params=params)
    assert plan.params[0] == "page value"
    assert "$1::" not in plan.sql and "$2::" in plan.sql


def test_a_queried_index_is_counted_on_its_own_rows():
    alone = plan_facets({"Subject": "a"}, SCHEMA, LIMITS, UNRESTRICTED, parse_facets(["portal_type"], SCHEMA, LIMITS))
    disjunctive = plan_facets({"Subject": "a"}, SCHEMA, LIMITS, UNRESTRICTED, parse_facets(["Subject"], SCHEMA, LIMITS))
    assert " fr0 " not in alone.sql and "fr0 as materialized (" in disjunctive.sql
    # One facet on a queried index: the result's rows are picked from its wider rows (one scan).
    assert "fm as materialized (select 1 as one from fr0 where sel)" in disjunctive.sql
    # Two: each counts the query without its own index, the result its own rows.
    both = plan_facets({"Subject": "a", "portal_type": "Document"}, SCHEMA, LIMITS, UNRESTRICTED,
                       parse_facets(["Subject", "portal_type"], SCHEMA, LIMITS))
    assert "fr0 as (" in both.sql and "fr1 as (" in both.sql and " where sel" not in both.sql


@pytest.mark.parametrize("facets, error", [
    (["nope"], QueryError), (["modified"], QueryError), (["start"], QueryError),
    (["allowedRolesAndUsers"], QueryError), (["UID", "UID"], QueryError),
    ([FacetRequest(index="UID", limit=1000)] * 1 + ["x"] * 16, LimitExceeded),
])
def test_bad_facets(facets, error):
    with pytest.raises(error):
        parse_facets(facets, SCHEMA, LIMITS)


def test_facet_limit_beyond_the_service_maximum():
    from dataclasses import replace
    with pytest.raises(LimitExceeded):
        parse_facets([FacetRequest(index="UID", limit=1000)], SCHEMA, replace(LIMITS, max_facet_values=10))
