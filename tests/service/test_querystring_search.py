"""``/{catalog}/@querystring-search`` on a real service and PostgreSQL: plone.restapi's request
(POST body, GET ``query`` JSON, batching from the body or the URL), its answer (limit caps
items_total, batching links), the context form, the caller's principals from the credential,
"today" in the catalog's zone, HTTP caching of the GET forms, and the errors. The comparison
with plone.restapi on a real Plone site is tests/connector/test_restapi_querystring.py."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import quote
from zoneinfo import ZoneInfo

import orjson
import pytest

from catalog_service import demo

P = "plone.app.querystring.operation."
PUBLIC_URL = "https://www.example.org"
BASE = datetime(2025, 1, 1, 12, tzinfo=UTC)
NOW = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
TZ_HOURS = range(-48, 49)


def entry(path, portal_type="Document", title=None, state="published", creator="admin", created=BASE,
          subjects=(), expires=None, position=0, effective=None):
    oid = path.rsplit("/", 1)[-1]
    title = title or oid
    uid = uuid.uuid5(uuid.NAMESPACE_URL, path).hex
    effective = (effective or created) if state == "published" else None
    allowed = ["Anonymous"] if state == "published" else ["Manager", "Owner", f"user:{creator}"]
    values = {
        "allowedRolesAndUsers": allowed, "Creator": creator, "Date": created.isoformat(),
        "Description": "", "SearchableText": f"{oid} {title}", "Subject": list(subjects), "Title": title,
        "Type": portal_type, "UID": uid, "created": created.isoformat(),
        "effective": effective and effective.isoformat(),
        "effectiveRange": [effective and effective.isoformat(), expires and expires.isoformat()],
        "exclude_from_nav": False, "expires": expires and expires.isoformat(), "getId": oid,
        "getObjPositionInParent": position, "id": oid, "is_default_page": False,
        "is_folderish": portal_type == "Folder", "meta_type": "Dexterity Item", "modified": created.isoformat(),
        "object_provides": [], "path": path, "portal_type": portal_type, "review_state": state,
        "sortable_title": title.lower(), "total_comments": 0,
    }
    metadata = demo.plone_metadata(values, created, created, effective, expires)
    return {"op": "index", "uid": uid, "path": path, "values": values, "metadata": metadata, "version": 1}


CONTENT = [
    entry("/plone", "Plone Site", "Site"),
    entry("/plone/news", "Folder", "News"),
    entry("/plone/news/a", "News Item", "Alpha news", subjects=("red",), creator="alice", position=0),
    entry("/plone/news/b", "News Item", "Beta news", state="private", creator="bob", position=1),
    entry("/plone/news/c", "News Item", "Gamma news", expires=BASE + timedelta(days=1), position=2),
    entry("/plone/docs", "Folder", "Docs", position=1),
    *[entry(f"/plone/docs/d{i}", title=f"Doc {i}", created=BASE + timedelta(hours=i), position=i,
            creator="bob" if i == 2 else "admin", subjects=("red",) if i % 2 else ("blue",))
      for i in range(1, 6)],
    entry("/plone/docs/sub", "Folder", "Sub", position=6),
    entry("/plone/docs/sub/e", title="Deep e"),
    entry("/plone/tz", "Folder", "Zones", position=2),
    *[entry(f"/plone/tz/h{hours + 48}", title=f"h{hours + 48:03d}", created=NOW + timedelta(hours=hours),
            effective=BASE)
      for hours in TZ_HOURS],
]
UID = {e["path"]: e["uid"] for e in CONTENT}


@pytest.fixture(scope="module")
def site(live_service):
    name = "qss-" + uuid.uuid4().hex[:8]
    with live_service.client() as admin:
        spec = demo.plone_catalog(name, public_url=PUBLIC_URL)
        assert admin.post("/catalogs", json=spec.model_dump(mode="json")).status_code == 201
        r = admin.post(f"/catalogs/{name}/batches", json={"batch_id": "load", "entries": CONTENT})
        assert r.status_code == 200, r.text
        tokens = {
            "bob": admin.post(f"/catalogs/{name}/tokens", json={
                "principals": ["user:bob", "Member", "Authenticated", "Anonymous"]}).json()["token"],
            "manager": admin.post(f"/catalogs/{name}/tokens", json={
                "principals": ["user:boss", "Manager", "Authenticated", "Anonymous"],
                "show_inactive": True}).json()["token"],
        }
    yield name, tokens
    with live_service.client() as admin:
        admin.delete(f"/catalogs/{name}")


@pytest.fixture
def anonymous(live_service):
    with live_service.client(token=False) as client:
        yield client


def criteria(*rows):
    return [{"i": i, "o": P + o, "v": v} for i, o, v in rows]


def paths(answer) -> list[str]:
    return [item["@id"].removeprefix(PUBLIC_URL) for item in answer["items"]]


def post(client, name, body, context="", params=None, status=200):
    where = f"/{name}/{context}/@querystring-search" if context else f"/{name}/@querystring-search"
    r = client.post(where, content=orjson.dumps(body), params=params,
                    headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    return r.json()


DOCS = criteria(("portal_type", "selection.any", ["Document"]), ("path", "string.absolutePath", "/docs::1"))


def test_answer_shape(anonymous, site, live_service):
    name, _ = site
    answer = post(anonymous, name, {"query": DOCS, "sort_on": "sortable_title"})
    assert answer["@id"] == f"{live_service.url}/{name}/@querystring-search"
    assert answer["items_total"] == 5 and "batching" not in answer
    assert paths(answer) == [f"/docs/d{i}" for i in range(1, 6)]
    assert set(answer["items"][0]) == {"@id", "@type", "title", "description", "review_state", "type_title"}
    assert answer["items"][0]["type_title"] == "Page" and answer["items"][0]["title"] == "Doc 1"


def test_sort_order_is_descending_or_ascending(anonymous, site):
    name, _ = site
    ascending = paths(post(anonymous, name, {"query": DOCS, "sort_on": "created"}))
    assert paths(post(anonymous, name, {"query": DOCS, "sort_on": "created", "sort_order": "descending"})) \
        == ascending[::-1]
    # plone.restapi: anything but "descending" is ascending, "reverse" too.
    for order in ("reverse", "ascending", "x"):
        assert paths(post(anonymous, name, {"query": DOCS, "sort_on": "created", "sort_order": order})) == ascending


def test_limit_caps_the_total_and_the_pages(anonymous, site, live_service):
    name, _ = site
    answer = post(anonymous, name, {"query": DOCS, "sort_on": "sortable_title", "limit": 3, "b_size": 2})
    assert answer["items_total"] == 3
    assert paths(answer) == ["/docs/d1", "/docs/d2"]
    url = f"{live_service.url}/{name}/@querystring-search"
    assert answer["batching"] == {"@id": url, "first": f"{url}?b_start=0", "last": f"{url}?b_start=2",
                                  "next": f"{url}?b_start=2"}
    second = post(anonymous, name, {"query": DOCS, "sort_on": "sortable_title", "limit": 3, "b_size": 2,
                                    "b_start": 2})
    assert paths(second) == ["/docs/d3"] and second["batching"]["prev"] == f"{url}?b_start=0"
    # A limit larger than the result: the whole result; 0 is no limit, as in Plone.
    assert post(anonymous, name, {"query": DOCS, "limit": 50})["items_total"] == 5
    assert post(anonymous, name, {"query": DOCS, "limit": "0"})["items_total"] == 5
    beyond = post(anonymous, name, {"query": DOCS, "sort_on": "sortable_title", "limit": 3, "b_start": 3})
    assert beyond["items_total"] == 3 and beyond["items"] == []


def test_batching_from_the_body_or_the_url(anonymous, site):
    name, _ = site
    body = {"query": DOCS, "sort_on": "sortable_title", "b_size": 2}
    assert paths(post(anonymous, name, {**body, "b_start": 2})) == ["/docs/d3", "/docs/d4"]
    # A batching link names b_start in the URL; the body's own value comes first unless it is 0.
    assert paths(post(anonymous, name, body, params={"b_start": "4"})) == ["/docs/d5"]
    assert paths(post(anonymous, name, {**body, "b_start": 2}, params={"b_start": "4"})) == ["/docs/d3", "/docs/d4"]
    assert len(post(anonymous, name, {"query": DOCS, "b_size": 0})["items"]) == 5  # 0: the default 25
    answer = post(anonymous, name, {"query": DOCS, "sort_on": "sortable_title", "metadata_fields": ["UID", "Subject"]})
    assert answer["items"][0]["UID"] == UID["/plone/docs/d1"] and answer["items"][0]["Subject"] == ["red"]
    # metadata_fields in the URL come before the body's.
    answer = post(anonymous, name, {"query": DOCS, "metadata_fields": "UID"}, params={"metadata_fields": "created"})
    assert "created" in answer["items"][0] and "UID" not in answer["items"][0]


def test_context_paths_and_the_context_left_out(anonymous, site, live_service):
    name, _ = site
    here = criteria(("path", "string.relativePath", "."))
    answer = post(anonymous, name, {"query": here, "sort_on": "sortable_title"}, context="docs")
    assert answer["@id"] == f"{live_service.url}/{name}/docs/@querystring-search"
    # The subtree of /docs, without /docs itself (plone.restapi's custom_query).
    assert paths(answer) == ["/docs/sub/e", "/docs/d1", "/docs/d2", "/docs/d3", "/docs/d4", "/docs/d5", "/docs/sub"]
    children = criteria(("path", "string.relativePath", "..::1"))
    answer = post(anonymous, name, {"query": children, "sort_on": "getObjPositionInParent"}, context="docs/sub")
    assert paths(answer) == [f"/docs/d{i}" for i in range(1, 6)]  # /docs/sub is the context
    sibling = criteria(("path", "string.relativePath", "../../news::1"))
    # c has expired: Anonymous does not see it.
    assert paths(post(anonymous, name, {"query": sibling, "sort_on": "sortable_title"}, context="docs/d1")) \
        == ["/news/a"]
    # At the site root, nothing is left out.
    root = post(anonymous, name, {"query": criteria(("path", "string.absolutePath", "/::0"))})
    assert paths(root) == [""]
    with live_service.client(token=False) as client:
        missing = client.post(f"/{name}/docs/nothing/@querystring-search", json={"query": here})
        assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
        # A context the caller may not see is no context for them.
        assert client.post(f"/{name}/news/b/@querystring-search", json={"query": here}).status_code == 404


def test_uid_paths_and_references(anonymous, site, live_service):
    name, tokens = site
    by_uid = criteria(("path", "string.absolutePath", UID["/plone/news"] + "::1"))
    assert paths(post(anonymous, name, {"query": by_uid, "sort_on": "sortable_title"})) == ["/news/a"]
    reference = criteria(("UID", "reference.is", "/news/a"))
    assert paths(post(anonymous, name, {"query": reference})) == ["/news/a"]
    # The UID at a path is looked up with the caller's rights: b is bob's. For Anonymous the
    # criterion finds no UID and adds nothing, as in Plone.
    private = criteria(("UID", "reference.is", "/news/b"))
    everything = post(anonymous, name, {"query": criteria(("path", "string.absolutePath", "/"))})
    assert post(anonymous, name, {"query": private})["items_total"] == everything["items_total"]
    with live_service.client(token=tokens["bob"]) as bob:
        assert paths(post(bob, name, {"query": private})) == ["/news/b"]


def test_principals_come_from_the_credential(site, live_service):
    name, tokens = site
    mine = criteria(("Creator", "string.currentUser", None), ("path", "string.absolutePath", "/"))
    with live_service.client(token=tokens["bob"]) as bob:
        assert sorted(paths(post(bob, name, {"query": mine}))) == ["/docs/d2", "/news/b"]
        # Principals named in the request are not the caller's.
        r = bob.post(f"/{name}/@querystring-search", headers={"X-Catalog-Principals": '["user:alice"]'},
                     json={"query": mine})
        assert sorted(paths(r.json())) == ["/docs/d2", "/news/b"]
        forged = criteria(("allowedRolesAndUsers", "selection.any", ["Manager"]))
        assert bob.post(f"/{name}/@querystring-search", json={"query": forged}).status_code == 403
    with live_service.client(token=False) as anonymous:
        # Anonymous has no id: Plone queries Creator None, which ZCatalog's FieldIndex matches with nothing.
        assert post(anonymous, name, {"query": mine})["items_total"] == 0
    inactive = criteria(("show_inactive", "string.showInactive", ["Manager"]),
                        ("path", "string.absolutePath", "/news"))
    with live_service.client(token=False) as anonymous:
        assert "/news/c" not in paths(post(anonymous, name, {"query": inactive}))  # expired
    with live_service.client(token=tokens["manager"]) as manager:
        assert "/news/c" in paths(post(manager, name, {"query": inactive}))
        plain = criteria(("path", "string.absolutePath", "/news"))
        assert "/news/c" not in paths(post(manager, name, {"query": plain}))  # no criterion asks for it


def _today_in(zone: str) -> list[str]:
    tz = ZoneInfo(zone)
    today = datetime.now(UTC).astimezone(tz).date()
    return sorted(f"/tz/h{hours + 48}" for hours in TZ_HOURS
                  if (NOW + timedelta(hours=hours)).astimezone(tz).date() == today)


def test_today_is_the_catalogs_zones(anonymous, site, live_service):
    name, _ = site
    today = criteria(("created", "date.today", None), ("path", "string.absolutePath", "/tz::1"))
    seen = {}
    with live_service.client() as admin:
        try:
            for zone in ("UTC", "Pacific/Kiritimati", "Etc/GMT+12", "Asia/Kolkata"):
                assert admin.patch(f"/catalogs/{name}/settings", json={"timezone": zone}).status_code == 200
                seen[zone] = sorted(paths(post(anonymous, name, {"query": today, "b_size": 100})))
                assert seen[zone] == _today_in(zone), (zone, set(seen[zone]) ^ set(_today_in(zone)))
                assert len(seen[zone]) in (24, 25)
        finally:
            admin.patch(f"/catalogs/{name}/settings", json={"timezone": None})
        # 26 hours apart: their days never begin at the same instant.
        assert seen["Pacific/Kiritimati"] != seen["Etc/GMT+12"]
        r = admin.patch(f"/catalogs/{name}/settings", json={"timezone": "Mars/Olympus"})
        assert r.status_code == 400 and "timezone" in r.text
        assert admin.get(f"/catalogs/{name}/settings").json()["timezone"] == "UTC"


def test_get_form_with_etag(anonymous, site, live_service):
    name, _ = site
    body = {"query": DOCS, "sort_on": "sortable_title", "b_size": 2}
    text = orjson.dumps(body).decode()
    r = anonymous.get(f"/{name}/@querystring-search", params={"query": text})
    assert r.status_code == 200, r.text
    assert paths(r.json()) == ["/docs/d1", "/docs/d2"] and r.json()["items_total"] == 5
    url = f"{live_service.url}/{name}/@querystring-search"
    assert r.json()["@id"] == f"{url}?query={quote(text, safe='')}"
    assert r.json()["batching"]["next"] == f"{url}?b_start=2&query={quote(text, safe='')}"
    tag = r.headers["etag"]
    assert r.headers["cache-control"].startswith("public") and "Authorization" in r.headers["vary"]
    again = anonymous.get(f"/{name}/@querystring-search", params={"query": text}, headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.headers["etag"] == tag
    # The next page's link works with GET too (plone.restapi reads only the JSON's b_start).
    following = anonymous.get(r.json()["batching"]["next"])
    assert paths(following.json()) == ["/docs/d3", "/docs/d4"]
    # The context form, and the catalog's next state: a new tag.
    here = anonymous.get(f"/{name}/docs/@querystring-search",
                         params={"query": orjson.dumps({"query": criteria(("path", "string.relativePath", ".::1"))}).decode()})
    assert here.status_code == 200, here.text
    assert here.json()["items_total"] == 6
    with live_service.client() as admin:
        admin.post(f"/catalogs/{name}/batches", json={"batch_id": uuid.uuid4().hex,
                                                      "entries": [entry("/plone/docs/d1", title="Doc 1")]})
    changed = anonymous.get(f"/{name}/@querystring-search", params={"query": text}, headers={"If-None-Match": tag})
    assert changed.status_code == 200 and changed.headers["etag"] != tag


def test_restapi_search_get_has_an_etag(anonymous, site):
    name, _ = site
    r = anonymous.get(f"/{name}/@search", params={"portal_type": "Document"})
    assert r.status_code == 200 and r.headers["etag"]
    again = anonymous.get(f"/{name}/@search", params={"portal_type": "Document"},
                          headers={"If-None-Match": r.headers["etag"]})
    assert again.status_code == 304
    other = anonymous.get(f"/{name}/@search", params={"portal_type": "News Item"},
                          headers={"If-None-Match": r.headers["etag"]})
    assert other.status_code == 200 and other.headers["etag"] != r.headers["etag"]


@pytest.mark.parametrize(("body", "where"), [
    ({}, "query"),
    ({"query": []}, "query"),
    ({"query": DOCS, "fullobjects": True}, "fullobjects"),
    ({"query": DOCS, "fullobjects": "1"}, "fullobjects"),
    ({"query": DOCS, "fullobjects": "maybe"}, "fullobjects"),
    ({"query": DOCS, "b_size": "ten"}, "b_size"),
    ({"query": DOCS, "b_start": -1}, "b_start"),
    ({"query": DOCS, "b_size": 100000}, "b_size"),
    ({"query": DOCS, "limit": "x"}, "limit"),
    ({"query": DOCS, "limit": -2}, "limit"),
    ({"query": DOCS, "metadata_fields": ["nosuch"]}, "metadata_fields"),
    ({"query": [{"i": "portal_type", "o": "no.such.operation", "v": "x"}]}, "operation"),
    ({"query": "portal_type=Document"}, None),
])
def test_bad_requests_are_problems(anonymous, site, body, where):
    name, _ = site
    r = anonymous.post(f"/{name}/@querystring-search", json=body)
    assert r.status_code == 400, r.text
    assert r.headers["content-type"] == "application/problem+json"
    if where is not None:
        problem = r.json()
        assert where in (problem.get("parameter") or problem.get("operation") and "operation" or problem["detail"])


def test_bad_bodies_and_parameters(anonymous, site):
    name, _ = site
    assert anonymous.post(f"/{name}/@querystring-search", content=b"{nope").status_code == 400
    assert anonymous.post(f"/{name}/@querystring-search", content=b"[1]").status_code == 400
    assert anonymous.get(f"/{name}/@querystring-search", params={"query": "{nope"}).status_code == 400
    assert anonymous.get(f"/{name}/@querystring-search", params={"query": orjson.dumps({"query": DOCS}).decode(),
                                                                  "foo": "1"}).status_code == 400
    # fullobjects false is no full objects; keys plone.restapi does not read are ignored (Volto
    # sends its block's data along).
    answer = post(anonymous, name, {"query": DOCS, "fullobjects": False, "block": "b1", "@type": "listing"})
    assert answer["items_total"] == 5
    assert anonymous.post("/nosuchcatalog/@querystring-search", json={"query": DOCS}).status_code == 404
