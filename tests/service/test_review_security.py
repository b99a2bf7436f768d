"""Review: what a caller without the connector's credential can learn or cost the service.

Each test here is the regression test of a bug found in review (all fixed).
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
    items = [item.get("uid", item.get("UID")) for item in response.json().get("items", [])] if response.status_code == 200 else None
    return response.status_code, items


def test_invalid_query_answer_does_not_depend_on_private_content(service, secret_catalog):
    # SearchableText is applied first, the invalid Subject operator raises only "if something was
    # found so far" (store/search.py precheck) - and that precheck does not filter by principals.
    bad = {"query": "x", "operator": "bogus"}
    in_private_doc = anonymous_search(service, secret_catalog, {"SearchableText": "merger", "Subject": bad})
    in_no_doc = anonymous_search(service, secret_catalog, {"SearchableText": "nosuchword", "Subject": bad})
    assert in_private_doc == in_no_doc


def test_not_query_answer_does_not_depend_on_private_values(service, secret_catalog):
    # 'public' has no Subject. With a 'not' on its own, UnIndex returns "everything but those" if
    # some object holds the value, else "everything with a value": whether the private document
    # holds the subject decides whether anonymous callers see 'public'.
    held_by_private = anonymous_search(service, secret_catalog, {"Subject": {"not": "layoffs"}})
    held_by_none = anonymous_search(service, secret_catalog, {"Subject": {"not": "no-such-subject"}})
    assert held_by_private == held_by_none


def test_unknown_catalog_names_do_not_become_metric_labels(service):
    made_up = "nosuch-" + uuid.uuid4().hex[:12]
    assert get(service, "/search", params={"catalog": made_up, "portal_type": "x"}).status_code == 404
    assert made_up not in get(service, "/metrics").text


def _search_path(route: str, catalog: str) -> str:
    # The frontends' route and the connector's (a plain Starlette route, api/search.py).
    return f"/search?catalog={catalog}" if route == "search" else f"/catalogs/{catalog}/query"


@pytest.mark.parametrize("route", ["search", "query"])
def test_search_body_size_is_capped(service, secret_catalog, route):
    # 8 MiB is far beyond any ZCatalog query; the values sit under a key that is no index, so
    # no per-value limit applies.
    body = {"query": {"portal_type": "Document", "not_an_index": ["x" * 1024] * 8192}}
    response = post(service, _search_path(route, secret_catalog), json=body)
    assert response.status_code == 413, response.status_code
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == 413


@pytest.mark.parametrize("route", ["search", "query"])
def test_chunked_search_body_is_capped_while_it_arrives(service, secret_catalog, route):
    # No Content-Length: the service counts what arrives and stops before parsing.
    def chunks():
        yield b'{"query": {"portal_type": "Document", "not_an_index": ["'
        for _ in range(2048):
            yield b"x" * 1024
        yield b'"]}}'

    response = post(service, _search_path(route, secret_catalog), content=chunks(),
                    headers={"Content-Type": "application/json"})
    assert response.status_code == 413, response.text
    assert response.json()["status"] == 413
    # A query of ordinary size still works.
    assert anonymous_search(service, secret_catalog, {"SearchableText": "hello"}) == (200, ["public"])


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
