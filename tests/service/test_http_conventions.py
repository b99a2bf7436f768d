"""HTTP conventions of the public routes on a real service and PostgreSQL: CORS (allow-list,
preflight), caching (ETag from the catalog's state and the caller, 304, Cache-Control, Vary),
and /docs, /redoc and the OpenAPI document working without a network."""

from __future__ import annotations

import uuid

import httpx
import pytest

from catalog_schemas.api import CatalogCreate
from tests.live import start_service
from tests.service.test_api import INDEXES, commit, entry

ALLOWED = "http://allowed.example"
MAX_AGE = 30


@pytest.fixture(scope="module")
def service(database_url):
    live = start_service(database_url, extra_env={"CATALOG_CORS_ORIGINS": f'["{ALLOWED}"]',
                                                  "CATALOG_PUBLIC_MAX_AGE": str(MAX_AGE)})
    yield live
    live.stop()


@pytest.fixture(scope="module")
def catalog(service):
    name = "h-" + uuid.uuid4().hex[:10]
    with service.client() as admin:
        created = admin.post("/catalogs", json=CatalogCreate(id=name, indexes=INDEXES, metadata=["Title"]).model_dump())
        assert created.status_code == 201, created.text
        commit(admin, name, [entry("a", "/plone/a"), entry("b", "/plone/b", allowed=("user:bob",))])
        yield name, created.json()["token"]
        admin.delete(f"/catalogs/{name}")


def anonymous(service) -> httpx.Client:
    return service.client(token=False)


# -- CORS --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/search?catalog=x", "/plone/@search", "/plone/@querystring-search"])
def test_preflight_of_public_routes(service, path):
    with anonymous(service) as client:
        r = client.options(path, headers={"Origin": ALLOWED, "Access-Control-Request-Method": "GET",
                                          "Access-Control-Request-Headers": "authorization"})
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == ALLOWED
    assert "GET" in r.headers["access-control-allow-methods"]
    assert "authorization" in r.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in r.headers
    assert "Origin" in r.headers["vary"]
    assert int(r.headers["access-control-max-age"]) > 0


def test_preflight_from_another_origin_is_refused(service):
    with anonymous(service) as client:
        r = client.options("/search?catalog=x", headers={"Origin": "http://evil.example",
                                                         "Access-Control-Request-Method": "GET"})
    assert r.status_code == 403
    assert r.headers["content-type"] == "application/problem+json"
    assert "access-control-allow-origin" not in r.headers


def test_plain_options_answers_allow(service):
    with anonymous(service) as client:
        r = client.options("/search")
    assert r.status_code == 204 and "GET" in r.headers["allow"]


def test_actual_requests_carry_cors_headers(service, catalog):
    name, _ = catalog
    with anonymous(service) as client:
        allowed = client.get("/search", params={"catalog": name}, headers={"Origin": ALLOWED})
        other = client.get("/search", params={"catalog": name}, headers={"Origin": "http://evil.example"})
        error = client.get("/search", params={"catalog": "no-such"}, headers={"Origin": ALLOWED})
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == ALLOWED
    assert "ETag" in allowed.headers["access-control-expose-headers"]
    assert other.status_code == 200 and "access-control-allow-origin" not in other.headers
    assert "Origin" in other.headers["vary"]
    # Errors too: a browser shows the problem, not an opaque CORS failure.
    assert error.status_code == 404 and error.headers["access-control-allow-origin"] == ALLOWED


def test_connector_routes_get_no_cors(service, catalog):
    name, token = catalog
    with service.client(token=token) as client:
        r = client.options(f"/catalogs/{name}/query", headers={"Origin": ALLOWED, "Access-Control-Request-Method": "POST"})
        q = client.post(f"/catalogs/{name}/query", json={"query": {}}, headers={"Origin": ALLOWED})
    assert "access-control-allow-origin" not in r.headers
    assert q.status_code == 200 and "access-control-allow-origin" not in q.headers


def test_no_cors_by_default(database_url, catalog):
    name, _ = catalog
    live = start_service(database_url)
    try:
        with live.client(token=False) as client:
            pre = client.options("/search", headers={"Origin": ALLOWED, "Access-Control-Request-Method": "GET"})
            get = client.get("/search", params={"catalog": name}, headers={"Origin": ALLOWED})
        assert pre.status_code == 403
        assert get.status_code == 200 and "access-control-allow-origin" not in get.headers
    finally:
        live.stop()


# -- caching -----------------------------------------------------------------------------------------

def test_etag_and_304_until_the_catalog_changes(service, catalog):
    name, _ = catalog
    params = {"catalog": name, "portal_type": "Document"}
    with anonymous(service) as client:
        first = client.get("/search", params=params)
        assert first.status_code == 200
        tag = first.headers["etag"]
        assert tag.startswith('"') and not tag.startswith("W/")
        assert first.headers["cache-control"] == f"public, max-age={MAX_AGE}"
        assert {"Authorization", "Origin"} <= {v.strip() for v in first.headers["vary"].split(",")}

        again = client.get("/search", params=params, headers={"If-None-Match": tag})
        assert again.status_code == 304 and again.content == b""
        assert again.headers["etag"] == tag
        assert client.get("/search", params=params, headers={"If-None-Match": f'"other", W/{tag}'}).status_code == 304
        # Another query is another answer.
        other = client.get("/search", params={**params, "b_size": "1"}, headers={"If-None-Match": tag})
        assert other.status_code == 200 and other.headers["etag"] != tag

        with service.client() as admin:
            commit(admin, name, [entry("c", "/plone/c")])
        changed = client.get("/search", params=params, headers={"If-None-Match": tag})
        assert changed.status_code == 200
        assert changed.headers["etag"] != tag
        assert changed.json()["items_total"] == first.json()["items_total"] + 1


def test_callers_get_their_own_etags(service, catalog):
    name, token = catalog
    with service.client(token=token) as connector:
        bob = connector.post(f"/catalogs/{name}/tokens", json={"principals": ["user:bob", "Anonymous"], "ttl": 600}).json()["token"]
    params = {"catalog": name}
    with anonymous(service) as client:
        public = client.get("/search", params=params)
    with service.client(token=bob) as client:
        private = client.get("/search", params=params)
        assert private.headers["cache-control"] == "private, no-cache"
        assert private.headers["etag"] != public.headers["etag"]
        assert private.json()["items_total"] > public.json()["items_total"]
        # Anonymous's tag is no proof for bob's answer.
        assert client.get("/search", params=params, headers={"If-None-Match": public.headers["etag"]}).status_code == 200
        assert client.get("/search", params=params, headers={"If-None-Match": private.headers["etag"]}).status_code == 304
    with service.client(token="cst1.bad.token") as client:
        assert client.get("/search", params=params, headers={"If-None-Match": "*"}).status_code == 401


# -- docs --------------------------------------------------------------------------------------------

def test_docs_work_offline(service):
    with anonymous(service) as client:
        for page, asset_names in (("/docs", ("swagger-ui-bundle.js", "swagger-ui.css")), ("/redoc", ("redoc.standalone.js",))):
            html = client.get(page)
            assert html.status_code == 200
            assert "cdn." not in html.text and "fonts.googleapis" not in html.text
            for asset in asset_names:
                assert f"/docs/assets/{asset}" in html.text
                served = client.get(f"/docs/assets/{asset}")
                assert served.status_code == 200 and len(served.content) > 100_000


def test_openapi_has_bearer_scheme_and_get_search_parameters(service):
    with anonymous(service) as client:
        schema = client.get("/openapi.json").json()
    assert schema["components"]["securitySchemes"]["bearer"] == {
        "type": "http", "scheme": "bearer", "description": schema["components"]["securitySchemes"]["bearer"]["description"]}
    names = {p["name"] for p in schema["paths"]["/search"]["get"]["parameters"]}
    assert {"catalog", "q", "b_start", "b_size", "metadata", "if-none-match"} <= names
    assert "304" in schema["paths"]["/search"]["get"]["responses"]
