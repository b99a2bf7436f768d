"""Security across catalogs and against the query: a catalog's credential is worth nothing on
another catalog, and nothing a caller puts into a search widens what it may see.

A real service over HTTP, a real PostgreSQL; the catalogs hold public, private, future and
expired content, so a widened search would show in its results.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import orjson
import pytest

from catalog_schemas.api import IndexDeclaration
from tests.service.test_api import INDEXES, NOW, UNRESTRICTED, entry
from tests.service.test_review_support import commit_batch, get, new_catalog, post

PAST = NOW - timedelta(days=1)
FUTURE = NOW + timedelta(days=1)
# Plone's effective and expires DateIndexes next to the effectiveRange the service filters on:
# a caller may query them, which must only narrow its results.
SCOPE_INDEXES = [*INDEXES, IndexDeclaration(name="effective", type="DateIndex"),
                 IndexDeclaration(name="expires", type="DateIndex")]
EVERYONE = ["private", "public", "expired", "future", "private-expired"]


def content_entry(uid, allowed=("Anonymous",), effective=None, expires=None):
    item = entry(uid, f"/plone/{uid}", allowed=allowed, effective=effective, expires=expires,
                 subjects=["scope"], text="shared secret words")
    item["values"]["effective"] = (effective or PAST - timedelta(days=30)).isoformat()
    if expires is not None:
        item["values"]["expires"] = expires.isoformat()
    return item


CONTENT = [
    content_entry("public", effective=PAST),
    content_entry("private", allowed=["Manager", "user:joe"], effective=PAST),
    content_entry("future", effective=FUTURE),
    content_entry("expired", effective=PAST - timedelta(days=9), expires=PAST),
    content_entry("private-expired", allowed=["Manager"], effective=PAST - timedelta(days=9), expires=PAST),
]


@pytest.fixture(scope="module")
def catalogs(live_service):
    """Two catalogs with the same content: (name, connector token) of each."""
    made = []
    with live_service.client() as admin:
        for _ in range(2):
            name, token = new_catalog(admin, indexes=SCOPE_INDEXES)
            commit_batch(live_service, name, CONTENT)
            made.append((name, token))
    yield made
    with live_service.client() as admin:
        for name, _ in made:
            admin.delete(f"/catalogs/{name}")


def is_problem(response, statuses) -> bool:
    if response.status_code not in statuses:
        return False
    assert response.headers["content-type"] == "application/problem+json", response.text
    body = response.json()
    assert body["status"] == response.status_code and body["title"], body
    return True


def everything(service, name) -> list[str]:
    response = post(service, f"/catalogs/{name}/query", token=None, headers=dict(UNRESTRICTED),
                    json={"query": {"Subject": "scope"}})
    assert response.status_code == 200, response.text
    return sorted(item["uid"] for item in response.json()["items"])


# -- a connector token of one catalog, on another -------------------------------------------------

def _other_catalog_requests(name):
    """(method, url, json) of every route that needs the catalog's own credential."""
    batch = {"batch_id": "cross-" + uuid.uuid4().hex, "entries": [content_entry("planted")]}
    search = {"query": {"Subject": "scope"}}
    return [
        ("POST", f"/catalogs/{name}/query", search),
        ("POST", f"/search?catalog={name}", search),
        ("GET", f"/search?catalog={name}&Subject=scope", None),
        ("POST", f"/catalogs/{name}/batches", batch),
        ("POST", f"/catalogs/{name}/batches?stage=true", batch),
        ("POST", f"/catalogs/{name}/batches/{batch['batch_id']}/commit", None),
        ("POST", f"/catalogs/{name}/batches/{batch['batch_id']}/abort", None),
        ("GET", f"/catalogs/{name}", None),
        ("POST", f"/catalogs/{name}/clear", None),
        ("DELETE", f"/catalogs/{name}", None),
        ("PATCH", f"/catalogs/{name}/schema", {"remove_indexes": ["Subject"]}),
        ("POST", f"/catalogs/{name}/tokens", {"principals": ["Manager"]}),
        ("GET", f"/catalogs/{name}/unique/Subject", None),
        ("GET", f"/catalogs/{name}/objects/private", None),
        ("POST", f"/catalogs/{name}/verify", {"entries": []}),
        ("GET", f"/catalogs/{name}/indexes/missing", None),
        ("POST", f"/catalogs/{name}/indexes/defer", None),
        ("POST", f"/catalogs/{name}/indexes/build", None),
    ]


def _send(service, method, url, body, token, headers=None):
    return httpx.request(method, service.url + url, json=body, timeout=30,
                         headers={"Authorization": f"Bearer {token}", **(headers or {})})


def test_a_connector_token_is_refused_on_another_catalog(live_service, catalogs):
    (_, token_a), (name_b, _) = catalogs
    before = everything(live_service, name_b)
    assert before == sorted(EVERYONE)
    for method, url, body in _other_catalog_requests(name_b):
        for headers in ({}, {**UNRESTRICTED, "X-Catalog-Principals": '["Manager"]'}):
            response = _send(live_service, method, url, body, token_a, headers)
            assert is_problem(response, (401, 403)), (method, url, response.status_code, response.text)
    # Nothing of it reached catalog B: not cleared, dropped, changed or planted into.
    assert everything(live_service, name_b) == before
    with live_service.client() as admin:
        info = admin.get(f"/catalogs/{name_b}").json()
    assert "Subject" in [index["name"] for index in info["indexes"]]
    assert info["objects"] == len(EVERYONE)


def test_a_signed_token_of_one_catalog_is_refused_on_another(live_service, catalogs):
    (name_a, token_a), (name_b, _) = catalogs
    minted = post(live_service, f"/catalogs/{name_a}/tokens", token=token_a,
                  json={"principals": ["Manager"], "show_inactive": True})
    assert minted.status_code == 200, minted.text
    frontend = minted.json()["token"]
    # It works where it was minted ...
    on_a = get(live_service, "/search", token=frontend, params={"catalog": name_a, "Subject": "scope",
                                                                "sort_on": "id"})
    assert on_a.status_code == 200
    # ... and nowhere else.
    for method, url, body in _other_catalog_requests(name_b):
        response = _send(live_service, method, url, body, frontend)
        assert is_problem(response, (401, 403)), (method, url, response.status_code, response.text)


# -- widening the filter from the query -----------------------------------------------------------

LONG_AGO = "1990-01-01T00:00:00+00:00"
FAR_AHEAD = "2090-01-01T00:00:00+00:00"
# Each is one attempt to see more than the caller may: (name, URL parameters or a query).
WIDENING = [
    ("principals index", {"allowedRolesAndUsers": ["Manager", "Anonymous", "user:joe"]}),
    ("principals index, one value", {"allowedRolesAndUsers": "Manager"}),
    ("principals index, options", {"allowedRolesAndUsers": {"query": ["Manager"], "operator": "or"}}),
    ("principals index, old-style option", {"allowedRolesAndUsers": "Manager",
                                            "allowedRolesAndUsers_operator": "or"}),
    ("effective date in the past", {"effectiveRange": LONG_AGO}),
    ("effective date in the future", {"effectiveRange": FAR_AHEAD}),
    ("effective date as a range", {"effectiveRange": {"query": LONG_AGO, "range": "min"}}),
    ("effective date empty", {"effectiveRange": {"query": []}}),
    ("effective date none", {"effectiveRange": None}),
    ("show_inactive", {"show_inactive": True}),
    ("show_inactive text", {"show_inactive": "1"}),
    ("batch ids", {"batch_ids": ["x"]}),
    ("unrestricted", {"unrestricted": True, "X-Catalog-Unrestricted": "1"}),
    ("principals key", {"principals": ["Manager"], "X-Catalog-Principals": '["Manager"]'}),
    ("expired by expires", {"expires": {"query": NOW.isoformat(), "range": "max"}}),
    ("future by effective", {"effective": {"query": NOW.isoformat(), "range": "min"}}),
    ("sort on principals", {"sort_on": "allowedRolesAndUsers"}),
    ("everything under the site", {"path": {"query": "/plone", "depth": -1}}),
]


def _as_url_params(query: dict) -> list[tuple[str, str]]:
    params = []
    for key, value in query.items():
        if isinstance(value, list):
            params += [(key, str(v)) for v in value]
        elif isinstance(value, dict):
            params.append((key, orjson.dumps(value).decode()))
        elif isinstance(value, bool):
            params.append((key, "1" if value else "0"))
        else:
            params.append((key, "" if value is None else str(value)))
    return params


def _searches(service, name, attempt: dict, token):
    """The attempt sent every way a frontend can send a search; yields (how, response)."""
    query = {"Subject": "scope", **attempt}
    # The headers a connector may use; without its credential they must be ignored.
    headers = {"X-Catalog-Unrestricted": "1", "X-Catalog-Principals": '["Manager", "user:joe"]'}
    yield "GET parameters", get(service, "/search", token=token, headers=dict(headers),
                                params=[("catalog", name), *_as_url_params(query)])
    yield "GET q", get(service, "/search", token=token, headers=dict(headers),
                       params={"catalog": name, "q": orjson.dumps(query).decode()})
    yield "POST query", post(service, f"/search?catalog={name}", token=token, headers=dict(headers),
                             json={"query": query, "show_inactive": True})
    yield "POST to the connector's route", post(service, f"/catalogs/{name}/query", token=token,
                                                headers=dict(headers), json={"query": query, "show_inactive": True})


def _uid(item: dict) -> str:
    """An item's uid: ``UID`` in the public contract (/search), ``uid`` on the connector's route."""
    return item["UID"] if "UID" in item else item["uid"]


@pytest.fixture(scope="module")
def frontend_token(live_service, catalogs):
    """A token the connector of catalog A minted for an anonymous visitor."""
    name, token = catalogs[0]
    response = post(live_service, f"/catalogs/{name}/tokens", token=token, json={"principals": ["Anonymous"]})
    assert response.status_code == 200, response.text
    return response.json()["token"]


@pytest.mark.parametrize("caller", ["anonymous", "frontend token"])
def test_nothing_in_a_search_widens_what_a_caller_sees(live_service, catalogs, frontend_token, caller):
    name, _ = catalogs[0]
    token = False if caller == "anonymous" else frontend_token
    assert everything(live_service, name) == sorted(EVERYONE)  # the catalog holds what could leak
    baseline = get(live_service, "/search", token=token, params={"catalog": name, "Subject": "scope"})
    assert baseline.status_code == 200 and [_uid(i) for i in baseline.json()["items"]] == ["public"]
    for label, attempt in WIDENING:
        for how, response in _searches(live_service, name, attempt, token):
            where = f"{label} ({how}): {response.status_code} {response.text[:300]}"
            if response.status_code == 200:
                body = response.json()
                assert {_uid(item) for item in body["items"]} <= {"public"}, where
                assert body["items_total"] <= 1, where
            else:  # refused: a bad query, or a forbidden one
                assert is_problem(response, (400, 403, 422)), where


def test_a_principals_query_is_refused_not_obeyed(live_service, catalogs):
    name, _ = catalogs[0]
    for how, response in _searches(live_service, name, {"allowedRolesAndUsers": "Manager"}, False):
        if how != "POST to the connector's route":
            assert is_problem(response, (403,)), (how, response.status_code, response.text)
