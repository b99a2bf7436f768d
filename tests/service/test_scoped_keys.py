"""Scoped API keys: created, listed, revoked and expiring through the admin API and the command
line; refused where they have no right (401 for unknown, forged, revoked, expired keys and keys of
another catalog, 403 for the connector's and the admin's routes); their searches never leave the
key's filter or principals, whatever the request's headers say (docs/decisions/0020)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from catalog_schemas.api import CatalogCreate
from tests.service.test_api import INDEXES, NOW, entry
from tests.service.test_credentials import assert_401, assert_403
from tests.service.test_review_support import commit_batch

PAST = NOW - timedelta(days=1)
FUTURE = NOW + timedelta(days=30)
NEWS_FILTER = {"path": "/plone/news", "portal_type": ["News Item", "Document"]}


def new_catalog(admin) -> tuple[str, str]:
    name = "k-" + uuid.uuid4().hex[:10]
    spec = CatalogCreate(id=name, indexes=INDEXES, metadata=["Title"], settings={"site_path": "/plone"})
    response = admin.post("/catalogs", json=spec.model_dump())
    assert response.status_code == 201, response.text
    return name, response.json()["token"]


CONTENT = [
    entry("news-item", "/plone/news/item", portal_type="News Item", effective=PAST, subjects=["a"]),
    entry("news-doc", "/plone/news/doc", effective=PAST, subjects=["b"]),
    entry("news-event", "/plone/news/event", portal_type="Event", effective=PAST),
    entry("news-private", "/plone/news/private", allowed=["Manager"], effective=PAST),
    entry("news-future", "/plone/news/future", effective=FUTURE),
    entry("newsroom-doc", "/plone/newsroom/doc", effective=PAST),
    entry("events-doc", "/plone/events/doc", effective=PAST),
]


@pytest.fixture(scope="module")
def catalogs(live_service):
    """Two catalogs with the same content: (name, connector token) each."""
    with live_service.client() as admin:
        made = [new_catalog(admin) for _ in range(2)]
        for name, _ in made:
            commit_batch(live_service, name, CONTENT)
        yield made
        for name, _ in made:
            admin.delete(f"/catalogs/{name}")


def create_key(live_service, catalog, token=None, **spec):
    spec.setdefault("name", "test key")
    with live_service.client(token) as client:
        return client.post(f"/catalogs/{catalog}/keys", json=spec)


def new_key(live_service, catalog, **spec) -> dict:
    response = create_key(live_service, catalog, **spec)
    assert response.status_code == 201, response.text
    return response.json()


def search(live_service, name, key, query=None, headers=None, **params):
    sent = {"Authorization": f"Bearer {key}"} if key else {}
    sent.update(headers or {})
    return httpx.post(f"{live_service.url}/search", params={"catalog": name, **params}, headers=sent,
                      json={"query": query or {}, "b_size": 100}, timeout=30)


def found(response) -> list[str]:
    assert response.status_code == 200, response.text
    return sorted(item["path"] for item in response.json()["items"])


def test_key_lifecycle_through_the_api(live_service, catalogs):
    name, _ = catalogs[0]
    created = new_key(live_service, name, name="static site", filter=NEWS_FILTER)
    key = created["key"]
    response = create_key(live_service, name, name="no-store check", filter=NEWS_FILTER)
    assert response.headers["cache-control"] == "no-store"  # the secret, shown once
    assert key.startswith("csk1." + created["id"] + ".")
    assert created["catalog"] == name and created["filter"] == NEWS_FILTER
    assert created["principals"] == ["Anonymous"] and created["active"] and created["revoked"] is None
    assert created["expires"] is None
    # The filter's objects that Anonymous may see now: not the Event, the private or future ones,
    # nothing of /plone/newsroom (a path is a path, not a prefix).
    assert found(search(live_service, name, key)) == ["/news/doc", "/news/item"]
    with live_service.client() as admin:
        listed = admin.get(f"/catalogs/{name}/keys")
    assert listed.status_code == 200
    assert key.split(".")[2] not in listed.text  # never the secret
    mine = [k for k in listed.json()["keys"] if k["id"] == created["id"]]
    assert len(mine) == 1 and "key" not in mine[0] and mine[0]["name"] == "static site" and mine[0]["active"]
    with live_service.client() as admin:
        revoked = admin.delete(f"/catalogs/{name}/keys/{created['id']}")
        assert revoked.status_code == 200 and revoked.json()["revoked"] and not revoked.json()["active"]
        # Again: the same answer, the first time kept.
        again = admin.delete(f"/catalogs/{name}/keys/{created['id']}")
        assert again.json()["revoked"] == revoked.json()["revoked"]
        assert admin.delete(f"/catalogs/{name}/keys/0123456789abcdef").status_code == 404
        listed = admin.get(f"/catalogs/{name}/keys").json()["keys"]
    assert [k["active"] for k in listed if k["id"] == created["id"]] == [False]
    refused = search(live_service, name, key)
    assert_401(refused)
    assert "revoked" in refused.json()["detail"]


def test_key_expires(live_service, catalogs):
    name, _ = catalogs[0]
    key = new_key(live_service, name, filter=NEWS_FILTER, ttl=2)
    assert datetime.fromisoformat(key["expires"]) <= datetime.now(UTC) + timedelta(seconds=3)
    assert found(search(live_service, name, key["key"])) == ["/news/doc", "/news/item"]
    time.sleep(2.5)
    refused = search(live_service, name, key["key"])
    assert_401(refused)
    assert "expired" in refused.json()["detail"]
    with live_service.client() as admin:
        listed = admin.get(f"/catalogs/{name}/keys").json()["keys"]
    assert [k["active"] for k in listed if k["id"] == key["id"]] == [False]
    at = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert datetime.fromisoformat(new_key(live_service, name, expires=at)["expires"]) == datetime.fromisoformat(at)


@pytest.mark.parametrize("spec, status, named", [
    ({"filter": {"nosuchindex": "x"}}, 400, "nosuchindex"),
    ({"filter": {"SearchableText": "news"}}, 400, "text index"),
    ({"filter": {"allowedRolesAndUsers": ["Manager"]}}, 400, "principals"),
    ({"filter": {"sort_on": "id"}}, 400, "sort_on"),
    ({"filter": {"b_size": 1}}, 400, "b_size"),
    ({"filter": {"portal_type": {"query": "Document", "bogus": 1}}}, 400, "bogus"),
    ({"filter": {"path": {"query": "/plone/news", "depth": "deep"}}}, 400, "depth"),
    # Empty conditions ZCatalog ignores: the key would see the whole catalog (review of stop 29).
    ({"filter": {"Subject": {"query": [], "operator": "and"}}}, 400, "no value"),
    ({"filter": {"portal_type": []}}, 400, "no value"),
    ({"filter": {"modified": {"query": [None], "range": "min"}}}, 400, "no value"),
    ({"filter": {"portal_type": None}}, 400, "no value"),
    ({"filter": {"getObjPositionInParent": 2 ** 70}}, 400, "filter"),
    ({"expires": "2001-01-01T00:00:00+00:00"}, 400, "past"),
    ({"expires": "2999-01-01T00:00:00+00:00", "ttl": 60}, 400, "not both"),
    ({"expires": "2999-01-01T00:00:00"}, 422, "timezone"),
    ({"principals": []}, 422, "principals"),
    ({"ttl": 0}, 422, "ttl"),
    ({"name": ""}, 422, "name"),
    ({"unknown": 1}, 422, "unknown"),
])
def test_invalid_keys_are_refused_naming_the_problem(live_service, catalogs, spec, status, named):
    name, _ = catalogs[0]
    response = create_key(live_service, name, **spec)
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert named in response.text


def test_only_the_admin_manages_keys(live_service, catalogs):
    name, token = catalogs[0]
    key = new_key(live_service, name)
    with live_service.client() as admin:
        user_token = admin.post(f"/catalogs/{name}/tokens", json={"principals": ["Anonymous"]}).json()["token"]
    for credential in (token, key["key"], user_token):
        headers = {"Authorization": f"Bearer {credential}"}
        assert_403(httpx.post(f"{live_service.url}/catalogs/{name}/keys", json={"name": "x"}, headers=headers))
        assert_403(httpx.get(f"{live_service.url}/catalogs/{name}/keys", headers=headers))
        assert_403(httpx.delete(f"{live_service.url}/catalogs/{name}/keys/{key['id']}", headers=headers))
    assert_401(httpx.post(f"{live_service.url}/catalogs/{name}/keys", json={"name": "x"}))
    assert_401(httpx.get(f"{live_service.url}/catalogs/{name}/keys"))


def test_keys_are_refused_on_the_connectors_and_admins_routes(live_service, catalogs):
    name, _ = catalogs[0]
    key = new_key(live_service, name, filter=NEWS_FILTER)["key"]
    headers = {"Authorization": f"Bearer {key}"}
    url = f"{live_service.url}/catalogs/{name}"
    batch = {"batch_id": uuid.uuid4().hex, "entries": [entry("new", "/plone/news/new")]}
    for response in (
        httpx.post(f"{url}/batches", json=batch, headers=headers),
        httpx.post(f"{url}/batches?stage=true", json=batch, headers=headers),
        httpx.patch(f"{url}/schema", json={"remove_indexes": ["portal_type"]}, headers=headers),
        httpx.patch(f"{url}/settings", json={"site_path": "/elsewhere"}, headers=headers),
        httpx.post(f"{url}/clear", headers=headers),
        httpx.post(f"{url}/tokens", json={"principals": ["Manager"]}, headers=headers),
        httpx.post(f"{url}/token", headers=headers),
        httpx.get(url, headers=headers),
        httpx.get(f"{url}/unique/portal_type", headers=headers),
        httpx.get(f"{url}/objects/news-private", headers=headers),
        httpx.delete(url, headers=headers),
        httpx.post(f"{live_service.url}/catalogs", json={"id": "k-" + uuid.uuid4().hex[:8]}, headers=headers),
    ):
        assert_403(response)
    # Nothing of it happened.
    with live_service.client() as admin:
        assert admin.get(f"/catalogs/{name}").json()["objects"] == len(CONTENT)


def test_forged_and_other_catalogs_keys_are_401(live_service, catalogs):
    (name, _), (other, _) = catalogs
    key = new_key(live_service, name, filter=NEWS_FILTER)["key"]
    prefix, key_id, secret = key.split(".")
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    for forged in (f"{prefix}.{key_id}.{flipped}", f"{prefix}.{key_id}.", f"{prefix}.{key_id}",
                   f"{prefix}.0123456789abcdef.{secret}", f"{prefix}..{secret}", f"{key}.x"):
        assert_401(search(live_service, name, forged))
    # Catalog B does not know catalog A's key: on every public route.
    assert_401(search(live_service, other, key))
    headers = {"Authorization": f"Bearer {key}"}
    assert_401(httpx.get(f"{live_service.url}/{other}/@search", headers=headers))
    assert_401(httpx.post(f"{live_service.url}/{other}/@querystring-search", headers=headers, json={"query": [
        {"i": "portal_type", "o": "plone.app.querystring.operation.selection.any", "v": ["Document"]}]}))
    assert_401(httpx.post(f"{live_service.url}/catalogs/{other}/query", headers=headers, json={"query": {}}))


def test_headers_and_query_options_cannot_widen_a_key(live_service, catalogs):
    name, _ = catalogs[0]
    key = new_key(live_service, name, filter=NEWS_FILTER)["key"]
    expected = ["/news/doc", "/news/item"]
    for headers in ({"X-Catalog-Unrestricted": "1"}, {"X-Catalog-Principals": '["Manager", "Anonymous"]'},
                    {"X-Catalog-Unrestricted": "1", "X-Catalog-Principals": '["Manager"]'}):
        assert found(search(live_service, name, key, headers=headers)) == expected
    response = httpx.post(f"{live_service.url}/search", params={"catalog": name},
                          headers={"Authorization": f"Bearer {key}"},
                          json={"query": {}, "show_inactive": True, "b_size": 100})
    assert found(response) == expected
    assert_403(search(live_service, name, key, {"allowedRolesAndUsers": ["Manager"]}))
    assert_403(httpx.post(f"{live_service.url}/search", params={"catalog": name},
                          headers={"Authorization": f"Bearer {key}"}, json={"query": {}, "batch_ids": ["x"]}))
    # The connector's own search route keeps the key's scope too.
    response = httpx.post(f"{live_service.url}/catalogs/{name}/query", json={"query": {}},
                          headers={"Authorization": f"Bearer {key}", "X-Catalog-Unrestricted": "1"})
    assert response.status_code == 200
    assert sorted(item["path"] for item in response.json()["items"]) == ["/plone/news/doc", "/plone/news/item"]


def test_principals_beyond_anonymous_only_when_given(live_service, catalogs):
    name, _ = catalogs[0]
    manager = new_key(live_service, name, filter=NEWS_FILTER, principals=["Anonymous", "Manager"])
    assert manager["principals"] == ["Anonymous", "Manager"]
    # The private document is in the filter; the future one still is not effective yet.
    assert found(search(live_service, name, manager["key"])) == ["/news/doc", "/news/item", "/news/private"]


def test_a_filter_the_catalog_can_no_longer_apply_refuses_the_search(live_service):
    with live_service.client() as admin:
        name, _ = new_catalog(admin)
        try:
            commit_batch(live_service, name, CONTENT)
            key = new_key(live_service, name, filter={"portal_type": "News Item"})["key"]
            assert found(search(live_service, name, key)) == ["/news/item"]
            assert admin.patch(f"/catalogs/{name}/schema", json={"remove_indexes": ["portal_type"]}).status_code == 200
            response = search(live_service, name, key)
            assert_403(response)
            assert "portal_type" in response.json()["detail"]
        finally:
            admin.delete(f"/catalogs/{name}")


def test_etag_revalidation_refuses_a_revoked_key(live_service, catalogs):
    name, _ = catalogs[0]
    created = new_key(live_service, name, filter=NEWS_FILTER)
    headers = {"Authorization": f"Bearer {created['key']}"}
    first = httpx.get(f"{live_service.url}/search", params={"catalog": name}, headers=headers)
    assert first.status_code == 200 and first.headers["cache-control"] == "private, no-cache"
    tag = first.headers["etag"]
    again = httpx.get(f"{live_service.url}/search", params={"catalog": name},
                      headers={**headers, "If-None-Match": tag})
    assert again.status_code == 304
    with live_service.client() as admin:
        assert admin.delete(f"/catalogs/{name}/keys/{created['id']}").status_code == 200
    assert_401(httpx.get(f"{live_service.url}/search", params={"catalog": name},
                         headers={**headers, "If-None-Match": tag}))


def cli(database_url, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env["DATABASE_URL"] = database_url
    return subprocess.run([sys.executable, "-m", "catalog_service.cli", "keys", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_key_lifecycle_through_the_command_line(live_service, database_url, catalogs):
    name, _ = catalogs[0]
    made = cli(database_url, "create", name, "--name", "from the shell", "--filter", json.dumps(NEWS_FILTER))
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    described = json.loads(made.stderr.strip().splitlines()[-1])
    assert key.startswith(f"csk1.{described['id']}.") and key.split(".")[2] not in made.stderr
    assert described["filter"] == NEWS_FILTER and described["principals"] == ["Anonymous"]
    # The running service knows it at once.
    assert found(search(live_service, name, key)) == ["/news/doc", "/news/item"]
    listed = cli(database_url, "list", name)
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert described["id"] in [r["id"] for r in rows] and key.split(".")[2] not in listed.stdout
    revoked = cli(database_url, "revoke", name, described["id"])
    assert revoked.returncode == 0, revoked.stderr
    assert json.loads(revoked.stdout)["revoked"]
    assert_401(search(live_service, name, key))
    # What the operator can fix: one line, non-zero.
    for args, message in ((("create", name, "--name", "x", "--filter", '{"nosuchindex": 1}'), "nosuchindex"),
                          (("create", name, "--name", "x", "--ttl", "0"), "ttl"),
                          (("create", "no-such-catalog", "--name", "x"), "no catalog"),
                          (("revoke", name, "0123456789abcdef"), "no key")):
        failed = cli(database_url, *args)
        assert failed.returncode == 1, failed.stderr
        assert failed.stderr.count("\n") == 1 and message in failed.stderr, failed.stderr
    with_ttl = cli(database_url, "create", name, "--name", "short", "--ttl", "1")
    assert with_ttl.returncode == 0, with_ttl.stderr
    time.sleep(1.5)
    assert_401(search(live_service, name, with_ttl.stdout.strip()))


def test_answers_do_not_depend_on_objects_outside_the_filter(live_service):
    """A `not` alone finds "everything but" only where some object holds the value (UnIndex),
    else everything with a value: an object outside the filter must not decide which."""
    with live_service.client() as admin:
        name, _ = new_catalog(admin)
        try:
            commit_batch(live_service, name, [
                entry("in-plain", "/plone/in/plain", effective=PAST),
                entry("in-tagged", "/plone/in/tagged", effective=PAST, subjects=["x"]),
                entry("out-secret", "/plone/out/secret", effective=PAST, subjects=["secret"]),
            ])
            key = new_key(live_service, name, filter={"path": "/plone/in"})["key"]
            held_outside = found(search(live_service, name, key, {"Subject": {"not": "secret"}}))
            held_nowhere = found(search(live_service, name, key, {"Subject": {"not": "never-held"}}))
            assert held_outside == held_nowhere == ["/in/tagged"]
            # Without the key, the object outside counts (as in ZCatalog).
            assert found(search(live_service, name, None, {"Subject": {"not": "secret"}})) == [
                "/in/plain", "/in/tagged"]
        finally:
            admin.delete(f"/catalogs/{name}")


def test_a_revocation_holds_at_once_in_every_service_process(live_service, database_url, catalogs):
    """Two service processes on one database: the other one has the catalog, and the key, loaded
    when the first revokes it; its next search is refused all the same."""
    from tests.live import start_service

    name, _ = catalogs[0]
    other = start_service(database_url)
    try:
        created = new_key(live_service, name, filter=NEWS_FILTER)
        assert found(search(other, name, created["key"])) == ["/news/doc", "/news/item"]
        with live_service.client() as admin:
            assert admin.delete(f"/catalogs/{name}/keys/{created['id']}").status_code == 200
        assert_401(search(other, name, created["key"]))
        # And a key made through the first is known to the second at once.
        fresh = new_key(live_service, name, filter=NEWS_FILTER)
        assert found(search(other, name, fresh["key"])) == ["/news/doc", "/news/item"]
    finally:
        other.stop()
