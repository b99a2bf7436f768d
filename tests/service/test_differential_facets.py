"""Differential test of facet counts: per user, every count the service answers is what a real
ZCatalog counts for the query with ``index=value`` in place of its own condition on the index,
with the user's principals and the effective date added as Plone's catalog tool adds them.

Each hypothesis example is a content tree (tests/service/strategies.py) whose objects get
``allowedRolesAndUsers`` lists (some private to a manager or to one user) and effective and
expiry dates around now (some expired, some not yet effective), a few queries, and a few facets
with limits and orders. The objects go into a ZCatalog (tests/service/oracle.py) and into a
service catalog; each query runs through the service as Anonymous (``/search`` without a
credential) and as two logged-in users (the connector's principals header), and the oracle
counts every value of every faceted index (each keyword of a KeywordIndex) with the same
principals. The service's list must be ZCatalog's values with a count above zero, most frequent
first (or in value order), cut to the limit, and ``distinct`` their number.

The oracle for a user holds only the objects that user may see (found by ZCatalog itself with
the user's principals and the effective date): the service answers the queries whose ZCatalog
answer depends on other objects (a ``not`` alone, ``and`` over a range, ...) over the visible
ones, by design (docs/decisions/0003), and so must its counts.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import orjson
import pytest
from DateTime import DateTime
from hypothesis import given, note
from hypothesis import strategies as st

from catalog_schemas.api import IndexDeclaration
from tests.service.oracle import (  # noqa: F401
    PAGING_KEYS,
    OracleError,
    ServiceCatalog,
    ZCatalogOracle,
    service_client_fixture,
    sort_names,
)
from tests.service.strategies import INDEXES, METADATA, plone_objects, queries, query_to_wire, to_wire

FACET_INDEXES = [*INDEXES, IndexDeclaration(name="allowedRolesAndUsers", type="KeywordIndex")]
FACETABLE = ["portal_type", "review_state", "Subject", "is_folderish", "exclude_from_nav", "getId",
             "sortable_title", "UID"]
USERS = {
    "anonymous": ["Anonymous"],
    "member": ["Anonymous", "Authenticated", "Member", "user:bob"],
    "manager": ["Anonymous", "Authenticated", "Manager", "user:admin"],
}
ALLOWED = [["Anonymous"], ["Anonymous"], ["Manager", "Owner", "user:admin"], ["Member", "Reviewer"],
           ["Manager", "user:bob"], ["Authenticated"]]


@pytest.fixture(scope="module")
def service_catalog(service_client):
    catalog = ServiceCatalog(service_client, f"facet-{uuid.uuid4().hex[:12]}", FACET_INDEXES, METADATA)
    yield catalog
    catalog.drop()


NOW = DateTime()


def around_now(days: int) -> DateTime:
    """A date ``days`` from the start of the test run (fixed, so that hypothesis replays a case
    with the same values; the cases' dates are days from any moment of the run)."""
    return NOW + days


@st.composite
def facet_cases(draw):
    objects = draw(plone_objects(max_size=12))
    for obj in objects:
        obj.attrs["allowedRolesAndUsers"] = draw(st.sampled_from(ALLOWED))
        # Dates around now, so that some objects are expired or not yet effective for the users.
        for name in ("effective", "expires"):
            if draw(st.integers(0, 2)) == 0:
                obj.attrs[name] = around_now(draw(st.sampled_from([-30, -1, 2, 40])))
    found = []
    for query in draw(st.lists(queries(objects), min_size=1, max_size=3)):
        # Plone's catalog tool replaces a query's effectiveRange with now for these users; the
        # service adds its own, so the query's would mean another thing on each side.
        query.pop("effectiveRange", None)
        facets = []
        for name in draw(st.lists(st.sampled_from(FACETABLE), min_size=1, max_size=3, unique=True)):
            shape = draw(st.integers(0, 3))
            if shape == 0:
                facets.append(name)
            else:
                facets.append({"index": name, "limit": draw(st.integers(0, 4)),
                               "sort": draw(st.sampled_from(["count", "value"]))})
        found.append((query, facets))
    return objects, found


def candidates(objects, name: str) -> list[Any]:
    """Every value the objects hold for index ``name`` (each keyword of a list)."""
    if name in ("is_folderish", "exclude_from_nav"):
        return [False, True]
    values = set()
    for obj in objects:
        value = obj.attrs.get(name)
        for item in value if isinstance(value, list) else [value]:
            if item is not None:
                values.add(item)
    return sorted(values, key=repr)


def without_index(query: dict, name: str) -> dict:
    return {key: value for key, value in query.items() if key != name and key not in PAGING_KEYS}


def visible_oracle(oracle: ZCatalogOracle, objects, principals) -> ZCatalogOracle:
    """A ZCatalog of the objects a user with ``principals`` sees now, as ZCatalog finds them."""
    seen = set(oracle.search({"allowedRolesAndUsers": principals, "effectiveRange": DateTime()}))
    visible = ZCatalogOracle(FACET_INDEXES, METADATA)
    for obj in objects:
        if obj.uid in seen:
            visible.index(obj)
    return visible


def run_sorted(oracle, query: dict):
    """ZCatalog's answer to ``query``. With ``sort_on``, when ZCatalog iterated the sort index (a
    large result over few sort keys) and raised IndexError for mixed sort orders
    (oracle.outcomes), the answer of its other sort algorithm (a huge ``sort_limit``): one
    algorithm's crash, which another catalog's sizes avoid, is not an answer to compare."""
    try:
        return oracle.run(query)
    except OracleError as exc:
        if not (sort_names(query) and isinstance(exc.original, IndexError)):
            raise
        return oracle.run({**query, "sort_limit": 10**9})


def zcatalog_counts(oracle, objects, query, name, principals) -> list[dict[Any, int]] | OracleError:
    """Per value of ``name``, what ZCatalog counts for ``dict(query, name=value)`` as the user;
    with ``sort_on``, once as ``actual_result_count`` and once as the objects it returns (they can
    differ for objects lacking a sort key: oracle.compare accepts both for totals too)."""
    variants: list[dict[Any, int]] = [{}, {}]
    for value in candidates(objects, name):
        asked = {**without_index(query, name), name: value, "allowedRolesAndUsers": principals,
                 "effectiveRange": DateTime()}
        try:
            result = run_sorted(oracle, asked)
            returned = len(oracle.run({**asked, "sort_limit": 10**9}).uids) if sort_names(query) else None
        except OracleError as exc:
            return exc
        variants[0][value] = result.actual_result_count
        variants[1][value] = result.actual_result_count if returned is None else returned
    return variants


def expected_list(counts: dict[Any, int], limit: int, order: str) -> tuple[list[dict], int]:
    found = [(value, count) for value, count in counts.items() if count > 0]
    if order == "count":
        found.sort(key=lambda pair: (-pair[1], pair[0]))
    else:
        found.sort(key=lambda pair: pair[0])
    return [{"value": value, "count": count} for value, count in found[:limit]], len(found)


def ask(service_catalog, anonymous, query, facets, user) -> tuple[int, Any]:
    body = {"query": query_to_wire(query, FACET_INDEXES), "facets": facets}
    if user == "anonymous":
        response = anonymous.post("/search", params={"catalog": service_catalog.id}, json=body)
    else:
        response = service_catalog.client.post(f"/catalogs/{service_catalog.id}/query", json=body,
                                               headers={"X-Catalog-Principals": json.dumps(USERS[user])})
    try:
        return response.status_code, response.json()
    except ValueError:
        return response.status_code, response.text


@pytest.fixture(scope="module")
def anonymous(live_service):
    with live_service.client(token=False) as client:
        yield client


@pytest.mark.slow
@given(case=facet_cases())
def test_facet_counts_are_zcatalogs_per_user(service_catalog, anonymous, case):
    objects, asked = case
    oracle = ZCatalogOracle(FACET_INDEXES, METADATA)
    for obj in objects:
        oracle.index(obj)
    service_catalog.load([to_wire(obj, FACET_INDEXES) for obj in objects])
    oracles = {user: visible_oracle(oracle, objects, principals) for user, principals in USERS.items()}
    for query, facets in asked:
        for user, principals in USERS.items():
            seen = oracles[user]
            status, body = ask(service_catalog, anonymous, query, facets, user)
            note(f"{user}: {query!r} facets {facets!r} -> {status} {orjson.dumps(body)[:2000]!r}")
            expected = {}
            raised = None
            for facet in facets:
                name = facet if isinstance(facet, str) else facet["index"]
                counts = zcatalog_counts(seen, objects, query, name, principals)
                if isinstance(counts, OracleError):
                    raised = counts
                    break
                expected[name] = counts
            if raised is None:
                unpaged = {**{k: v for k, v in query.items() if k not in PAGING_KEYS},
                           "allowedRolesAndUsers": principals, "effectiveRange": DateTime()}
                try:
                    run_sorted(seen, unpaged)
                except OracleError as exc:
                    raised = exc
            if raised is not None:
                assert 400 <= status < 500, f"ZCatalog raises {raised}, the service answered {status}: {body}"
                continue
            if user == "anonymous" and status == 400 and body.get("title") == "Invalid parameter" \
                    and body.get("parameter") in query:
                # The public route types each value by its index and refuses one that does not
                # fit (docs/api.md, "Values typed per index": '' for a GopipIndex), where ZCatalog
                # compares whatever it is given; the connector's route below answers as ZCatalog.
                continue
            if user == "anonymous" and status == 422 and body.get("title") == "Limit exceeded":
                # The public route bounds the cost of a search without the service credential
                # (docs/api.md, "Cost bounds of public searches"); the connector's route does not.
                continue
            assert status == 200, f"the service answered {status}: {body}"
            assert list(body["facets"]) == list(expected)
            for facet in facets:
                name, limit, order = ((facet, 100, "count") if isinstance(facet, str)
                                      else (facet["index"], facet["limit"], facet["sort"]))
                got = body["facets"][name]
                answers = [expected_list(counts, limit, order) for counts in expected[name]]
                assert (got["values"], got["distinct"]) in answers, (
                    f"facet {name} for {user}: service {got}, ZCatalog {answers[0]} (counts {expected[name][0]})")
