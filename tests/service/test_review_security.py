"""Review: what a caller without the connector's credential can learn or cost the service.

Each test here demonstrates a bug found in review and is marked xfail(strict=True) until it is
fixed; the reason names the bug.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from catalog_service.indexes import make_index
from catalog_service.planner.plan import CatalogSchema, Limits, Security, plan_search
from tests.service.test_api import INDEXES, NOW, entry
from tests.service.test_review_support import commit_batch, drained_service, get, new_catalog, post

PAST = NOW - timedelta(days=1)


@pytest.fixture(scope="module")
def service(database_url):
    with drained_service(database_url) as service:
        yield service


@pytest.fixture(scope="module")
def secret_catalog(service):
    """One public document and one private document whose words and subject are secrets."""
    with service.client() as admin:
        name, _ = new_catalog(admin)
    commit_batch(service, name, [
        entry("public", "/plone/public", effective=PAST, text="hello world"),
        entry("private", "/plone/private", allowed=["Manager"], effective=PAST, text="merger acquisition",
              subjects=["layoffs"]),
    ])
    return name


def anonymous_search(service, name, query):
    response = post(service, f"/search?catalog={name}", json={"query": query})
    items = [item["uid"] for item in response.json().get("items", [])] if response.status_code == 200 else None
    return response.status_code, items


@pytest.mark.xfail(strict=True, reason="an invalid index query is refused (400) or answered empty (200) "
                   "depending on whether the indexes before it matched anything, checked without the "
                   "security filter: anonymous callers learn which words private documents hold")
def test_invalid_query_answer_does_not_depend_on_private_content(service, secret_catalog):
    # SearchableText is applied first, the invalid Subject operator raises only "if something was
    # found so far" (store/search.py precheck) - and that precheck does not filter by principals.
    bad = {"query": "x", "operator": "bogus"}
    in_private_doc = anonymous_search(service, secret_catalog, {"SearchableText": "merger", "Subject": bad})
    in_no_doc = anonymous_search(service, secret_catalog, {"SearchableText": "nosuchword", "Subject": bad})
    assert in_private_doc == in_no_doc


@pytest.mark.xfail(strict=True, reason="a 'not'-only UnIndex query probes the whole catalog, private "
                   "objects included, and its answer to anonymous callers changes with them")
def test_not_query_answer_does_not_depend_on_private_values(service, secret_catalog):
    # 'public' has no Subject. With a 'not' on its own, UnIndex returns "everything but those" if
    # some object holds the value, else "everything with a value": whether the private document
    # holds the subject decides whether anonymous callers see 'public'.
    held_by_private = anonymous_search(service, secret_catalog, {"Subject": {"not": "layoffs"}})
    held_by_none = anonymous_search(service, secret_catalog, {"Subject": {"not": "no-such-subject"}})
    assert held_by_private == held_by_none


@pytest.mark.xfail(strict=True, reason="QUERIES.labels(name) is incremented before the catalog is "
                   "looked up: any anonymous caller adds a metric series per made-up catalog name "
                   "(unbounded memory) and /metrics lists them")
def test_unknown_catalog_names_do_not_become_metric_labels(service):
    made_up = "nosuch-" + uuid.uuid4().hex[:12]
    assert get(service, "/search", params={"catalog": made_up, "portal_type": "x"}).status_code == 404
    assert made_up not in get(service, "/metrics").text


@pytest.mark.xfail(strict=True, reason="no cap on request bodies: anonymous /search accepts and parses "
                   "a body of any size (max_body_size is not set)")
def test_search_body_size_is_capped(service, secret_catalog):
    # 8 MiB is far beyond any ZCatalog query; the values sit under a key that is no index, so
    # no per-value limit applies.
    body = {"query": {"portal_type": "Document", "not_an_index": ["x" * 1024] * 8192}}
    response = post(service, f"/search?catalog={secret_catalog}", json=body)
    assert response.status_code in (413, 422), response.status_code


@pytest.mark.xfail(strict=True, reason="navtree_start far below zero makes the planner build one path per "
                   "level down to it (ExtendedPathIndex's range(len(comps), navtree_start - 1, -1)): an "
                   "anonymous query with navtree_start=-10**9 allocates a billion strings")
def test_negative_navtree_start_is_bounded():
    schema = CatalogSchema(catalog_id=1, table="catalog_object_1",
                           indexes={d.name: make_index(d) for d in INDEXES})
    limits = Limits()
    query = {"path": {"query": "/plone/a", "navtree": 1, "navtree_start": -200_000}}
    try:
        plan = plan_search(query, schema, limits, Security(principals=("Anonymous",), effective_at=None))
    except Exception as exc:  # refusing it with a 4xx error is a fix too
        assert getattr(exc, "status", 500) < 500
        return
    longest = max((len(p) for p in plan.params if isinstance(p, list)), default=0)
    assert longest <= limits.max_list_length
