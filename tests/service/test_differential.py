"""Differential tests: the service answers every generated query as a real ZCatalog does.

Each hypothesis example is a small Plone-like content tree plus a few queries. The objects go
into a fresh ZCatalog (tests/service/oracle.py) and, in one batch, into a service catalog over
HTTP; every query runs in both and ``compare`` says whether the answers agree. How agreement is
defined, and how to run more cases, is in docs/testing.md.

Set ``DIFFERENTIAL_FAILURES=<dir>`` to have each disagreeing case written there as JSON, ready to
be copied into tests/service/regressions/.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from tests.service.oracle import ServiceCatalog, ZCatalogOracle, compare, service_client_fixture  # noqa: F401
from tests.service.strategies import (
    INDEXES,
    METADATA,
    CatalogObject,
    case_to_json,
    cases,
    query_to_wire,
    recurrence_cases,
    to_wire,
)


@pytest.fixture(scope="module")
def service_catalog(service_client):
    """One service catalog per test module; each case replaces its whole content."""
    catalog = ServiceCatalog(service_client, f"diff-{uuid.uuid4().hex[:12]}", INDEXES, METADATA)
    yield catalog
    catalog.drop()


def _save_failure(objects: list[CatalogObject], query: dict, problem: str) -> None:
    folder = os.environ.get("DIFFERENTIAL_FAILURES")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    data = case_to_json(objects, query, note=problem)
    name = uuid.uuid5(uuid.NAMESPACE_URL, json.dumps(data, sort_keys=True)).hex[:12]
    (Path(folder) / f"case-{name}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False))


def check_case(service_catalog: ServiceCatalog, objects: list[CatalogObject], queries: list[dict]):
    """Load ``objects`` into both catalogs, run every query in both, fail on the first mismatch."""
    oracle = ZCatalogOracle(INDEXES, METADATA)
    for obj in objects:
        oracle.index(obj)
    service_catalog.load([to_wire(obj) for obj in objects])
    paths = {obj.uid: obj.path for obj in objects}
    for query in queries:
        wire = query_to_wire(query)
        status, body = service_catalog.query(wire)
        problem = compare(oracle, query, status, body, paths)
        if problem is not None:
            _save_failure(objects, query, problem)
            note(f"wire query: {json.dumps(wire, ensure_ascii=False)}")
            raise AssertionError(f"query {query!r}: {problem}")


@pytest.mark.slow
@given(case=cases())
def test_service_answers_like_zcatalog(service_catalog, case):
    objects, queries = case
    check_case(service_catalog, objects, queries)


@pytest.mark.slow
@given(case=recurrence_cases())
def test_recurring_events_answer_like_zcatalog(service_catalog, case):
    """Recurring events in zones with summer time, queried at their occurrences."""
    objects, queries = case
    check_case(service_catalog, objects, queries)


@pytest.mark.slow
@given(case=cases(max_objects=30, max_queries=3), data=st.data())
def test_service_pages_like_zcatalog(service_catalog, case, data):
    """Bigger catalogs, every query sorted and paged: pages past the end, sort_limit, ties."""
    objects, queries = case
    paged = []
    for query in queries:
        query = dict(query)
        query.setdefault("sort_on", data.draw(st.sampled_from(["sortable_title", "modified"])))
        query["b_size"] = data.draw(st.integers(1, 10))
        query["b_start"] = data.draw(st.integers(0, 40))
        paged.append(query)
    check_case(service_catalog, objects, paged)
