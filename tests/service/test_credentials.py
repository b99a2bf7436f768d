"""Credentials as an operator meets them: 401 with ``WWW-Authenticate`` for a missing, malformed or
unknown credential, 403 for a valid one without the right; catalog tokens issued, rotated with a
grace period, and good for installing the connector (``POST /catalogs`` of its own catalog: 409)."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from catalog_schemas.api import CatalogCreate, IndexDeclaration

SPEC = {"indexes": [IndexDeclaration(name="portal_type", type="FieldIndex").model_dump(),
                    IndexDeclaration(name="allowedRolesAndUsers", type="KeywordIndex").model_dump()],
        "metadata": ["Title"]}
ENTRY = {"op": "index", "uid": "a", "path": "/plone/a", "version": 1,
         "values": {"portal_type": "Document", "allowedRolesAndUsers": ["Anonymous"]}, "metadata": {"Title": "A"}}


@pytest.fixture
def catalog(live_service):
    name = "cred-" + uuid.uuid4().hex[:10]
    with live_service.client() as admin:
        response = admin.post("/catalogs", json=CatalogCreate(id=name, **SPEC).model_dump())
        assert response.status_code == 201, response.text
        token = response.json()["token"]
        assert admin.post(f"/catalogs/{name}/batches", json={"batch_id": "b1", "entries": [ENTRY]}).status_code == 200
        yield name, token
        admin.delete(f"/catalogs/{name}")


def call(live_service, method, path, authorization=None, **kw):
    headers = {} if authorization is None else {"Authorization": authorization}
    return httpx.request(method, live_service.url + path, headers=headers, timeout=30, **kw)


def assert_401(response):
    assert response.status_code == 401, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["status"] == 401


def assert_403(response):
    assert response.status_code == 403, (response.status_code, response.text)
    assert response.headers["content-type"] == "application/problem+json"
    assert "www-authenticate" not in response.headers


def test_missing_credential_is_401_with_www_authenticate(live_service, catalog):
    name, _ = catalog
    assert_401(call(live_service, "GET", f"/catalogs/{name}"))
    assert_401(call(live_service, "POST", f"/catalogs/{name}/batches", json={"batch_id": "x", "entries": []}))
    assert_401(call(live_service, "POST", "/catalogs", json={"id": "nobody-" + uuid.uuid4().hex[:6], **SPEC}))
    assert_401(call(live_service, "DELETE", f"/catalogs/{name}"))
    assert_401(call(live_service, "POST", f"/catalogs/{name}/tokens", json={"principals": ["Anonymous"]}))


@pytest.mark.parametrize("authorization", ["{token}", "Basic {token}", "Bearer", "Token {token}", "Bearer{token}"])
def test_malformed_authorization_is_401_never_anonymous(live_service, catalog, authorization):
    name, token = catalog
    header = authorization.format(token=token)
    assert_401(call(live_service, "GET", f"/catalogs/{name}", header))
    assert_401(call(live_service, "POST", f"/catalogs/{name}/query", header, json={"query": {}}))
    # The public searches too: a broken header is a client's mistake, not a request to be Anonymous.
    assert_401(call(live_service, "GET", "/search", header, params={"catalog": name, "portal_type": "Document"}))
    assert_401(call(live_service, "POST", f"/search?catalog={name}", header, json={"query": {}}))
    # Without the header, the same search is Anonymous's.
    anonymous = call(live_service, "GET", "/search", params={"catalog": name, "portal_type": "Document"})
    assert anonymous.status_code == 200 and anonymous.json()["items_total"] == 1


def test_unknown_credential_is_401(live_service, catalog):
    name, _ = catalog
    assert_401(call(live_service, "GET", f"/catalogs/{name}", "Bearer not-a-token"))
    assert_401(call(live_service, "GET", "/search", "Bearer not-a-token", params={"catalog": name}))
    assert_401(call(live_service, "POST", "/catalogs", "Bearer not-a-token",
                    json={"id": "nobody-" + uuid.uuid4().hex[:6], **SPEC}))
    assert_401(call(live_service, "DELETE", f"/catalogs/{name}", "Bearer not-a-token"))


def test_valid_credential_without_the_right_is_403(live_service, catalog):
    name, token = catalog
    # A catalog token on the admin routes: a credential the service knows, without the right.
    assert_403(call(live_service, "POST", "/catalogs", f"Bearer {token}",
                    json={"id": "other-" + uuid.uuid4().hex[:6], **SPEC}))
    assert_403(call(live_service, "DELETE", f"/catalogs/{name}", f"Bearer {token}"))
    with live_service.client() as admin:
        other = "cred-" + uuid.uuid4().hex[:10]
        assert admin.post("/catalogs", json={"id": other, **SPEC}).status_code == 201
        try:
            assert_403(call(live_service, "DELETE", f"/catalogs/{other}", f"Bearer {token}"))
        finally:
            admin.delete(f"/catalogs/{other}")
    # A frontend's signed token on a connector's route.
    minted = call(live_service, "POST", f"/catalogs/{name}/tokens", f"Bearer {token}",
                  json={"principals": ["Anonymous"]}).json()["token"]
    assert_403(call(live_service, "POST", f"/catalogs/{name}/batches", f"Bearer {minted}",
                    json={"batch_id": "x", "entries": []}))
    assert_403(call(live_service, "DELETE", f"/catalogs/{name}", f"Bearer {minted}"))
    assert_403(call(live_service, "POST", f"/catalogs/{name}/token", f"Bearer {minted}"))


def test_creating_its_own_catalog_with_a_catalog_token_is_a_conflict(live_service, catalog):
    """What the connector's install does: POST /catalogs, and on 409 update the schema."""
    name, token = catalog
    response = call(live_service, "POST", "/catalogs", f"Bearer {token}", json={"id": name, **SPEC})
    assert response.status_code == 409, response.text
    update = {"indexes": [IndexDeclaration(name="Subject", type="KeywordIndex").model_dump()], "metadata": []}
    response = call(live_service, "PATCH", f"/catalogs/{name}/schema", f"Bearer {token}", json=update)
    assert response.status_code == 200, response.text
    assert "Subject" in [d["name"] for d in response.json()["indexes"]]


def test_rotation_keeps_the_old_token_for_the_grace_period(live_service, catalog):
    name, old = catalog
    minted = call(live_service, "POST", f"/catalogs/{name}/tokens", f"Bearer {old}",
                  json={"principals": ["Anonymous"]}).json()["token"]
    # The connector may rotate its own token; the admin may too (below).
    response = call(live_service, "POST", f"/catalogs/{name}/token?grace=2", f"Bearer {old}")
    assert response.status_code == 200, response.text
    new = response.json()["token"]
    assert new != old and response.json()["previous_valid_until"]
    for token in (old, new):
        assert call(live_service, "GET", f"/catalogs/{name}", f"Bearer {token}").status_code == 200
        assert call(live_service, "POST", f"/catalogs/{name}/query", f"Bearer {token}",
                    json={"query": {}}).status_code == 200
    assert call(live_service, "GET", "/search", f"Bearer {minted}", params={"catalog": name}).status_code == 200
    time.sleep(2.2)
    assert_401(call(live_service, "GET", f"/catalogs/{name}", f"Bearer {old}"))
    assert_401(call(live_service, "POST", f"/catalogs/{name}/query", f"Bearer {old}", json={"query": {}}))
    assert_401(call(live_service, "GET", "/search", f"Bearer {minted}", params={"catalog": name}))
    assert call(live_service, "GET", f"/catalogs/{name}", f"Bearer {new}").status_code == 200
    # Without grace, the old token ends at once.
    with live_service.client() as admin:
        newest = admin.post(f"/catalogs/{name}/token", params={"grace": 0}).json()
    assert newest["previous_valid_until"] is None
    assert_401(call(live_service, "GET", f"/catalogs/{name}", f"Bearer {new}"))
    assert call(live_service, "GET", f"/catalogs/{name}", f"Bearer {newest['token']}").status_code == 200


def test_rotation_is_seen_by_a_search_of_a_cached_catalog(live_service, catalog):
    """The search routes keep catalogs cached: a rotated token is known at once all the same."""
    name, old = catalog
    assert call(live_service, "POST", f"/catalogs/{name}/query", f"Bearer {old}", json={"query": {}}).status_code == 200
    with live_service.client() as admin:
        new = admin.post(f"/catalogs/{name}/token", params={"grace": 0}).json()["token"]
    assert call(live_service, "POST", f"/catalogs/{name}/query", f"Bearer {new}", json={"query": {}}).status_code == 200
    assert_401(call(live_service, "POST", f"/catalogs/{name}/query", f"Bearer {old}", json={"query": {}}))


def test_rotation_of_a_missing_catalog_is_404(live_service):
    with live_service.client() as admin:
        assert admin.post("/catalogs/no-such-catalog/token").status_code == 404
        assert admin.post("/catalogs/no-such-catalog/token", params={"grace": -1}).status_code == 422
