"""The HTTP API on a real PostgreSQL: catalogs, batches (two-phase, idempotent, versioned),
security decided by the server, bad input answered with problem details."""

from __future__ import annotations

import random
import string
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import orjson
import pytest

from catalog_schemas.api import CatalogCreate, IndexDeclaration

D = IndexDeclaration
INDEXES = [
    D(name="allowedRolesAndUsers", type="KeywordIndex"),
    D(name="portal_type", type="FieldIndex"),
    D(name="Subject", type="KeywordIndex"),
    D(name="path", type="ExtendedPathIndex"),
    D(name="effectiveRange", type="DateRangeIndex", since_field="effective", until_field="expires"),
    D(name="modified", type="DateIndex"),
    D(name="SearchableText", type="ZCTextIndex"),
    D(name="getObjPositionInParent", type="GopipIndex"),
    D(name="id", type="FieldIndex"),
]
UNRESTRICTED = {"X-Catalog-Unrestricted": "1"}
# 3,000 characters that do not compress (so PostgreSQL cannot make them fit a B-tree entry).
RANDOM_TEXT = "".join(random.Random(3).choices(string.ascii_letters + string.digits + "äöü€", k=3000))
NOW = datetime.now(UTC)


def iso(dt):
    return dt.isoformat()


def entry(uid, path, portal_type="Document", allowed=("Anonymous",), effective=None, expires=None,
          subjects=(), text="", version=1, position=0, **meta):
    return {
        "op": "index", "uid": uid, "path": path, "version": version,
        "values": {
            "allowedRolesAndUsers": list(allowed), "portal_type": portal_type, "Subject": list(subjects),
            "effectiveRange": [effective and iso(effective), expires and iso(expires)],
            "modified": iso(NOW), "SearchableText": text, "getObjPositionInParent": position,
            "id": path.rsplit("/", 1)[-1],
        },
        "metadata": {"Title": meta.get("title", uid)},
    }


@pytest.fixture
def admin(live_service):
    with live_service.client() as client:
        yield client


@pytest.fixture
def catalog(admin):
    """A fresh catalog; yields (name, connector token)."""
    name = "t-" + uuid.uuid4().hex[:10]
    spec = CatalogCreate(id=name, indexes=INDEXES, metadata=["Title"])
    response = admin.post("/catalogs", json=spec.model_dump())
    assert response.status_code == 201, response.text
    yield name, response.json()["token"]
    admin.delete(f"/catalogs/{name}")


def query(client, name, q, headers=UNRESTRICTED, **body):
    response = client.post(f"/catalogs/{name}/query", json={"query": q, **body}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def uids(result):
    # /search's public items name the uid UID (a catalog without a UID column: the entry's uid).
    return [item["uid"] if "uid" in item else item["UID"] for item in result["items"]]


def commit(client, name, entries, batch_id=None):
    response = client.post(f"/catalogs/{name}/batches", json={"batch_id": batch_id or uuid.uuid4().hex,
                                                              "entries": entries})
    assert response.status_code == 200, response.text
    return response.json()


# -- catalogs --------------------------------------------------------------------------------------

def test_create_needs_admin(live_service, catalog):
    name, token = catalog
    spec = {"id": "x-" + uuid.uuid4().hex[:8], "indexes": [], "metadata": []}
    with live_service.client(token=token) as connector:
        # A catalog's token is a valid credential, without the right to create catalogs.
        assert connector.post("/catalogs", json=spec).status_code == 403
    with live_service.client(token=False) as anonymous:
        r = anonymous.post("/catalogs", json=spec)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert r.headers["content-type"] == "application/problem+json"
    with live_service.client(token="wrong") as stranger:
        assert stranger.post("/catalogs", json=spec).status_code == 401


def test_duplicate_catalog_conflicts(admin, catalog):
    name, _ = catalog
    r = admin.post("/catalogs", json={"id": name, "indexes": [], "metadata": []})
    assert r.status_code == 409
    assert r.json()["status"] == 409


@pytest.mark.parametrize("body", [
    {"id": "bad id with spaces", "indexes": []},
    {"id": "ok", "indexes": [{"name": "x", "type": "NoSuchIndex"}]},
    {"id": "ok", "indexes": [{"name": "x; drop table catalog", "type": "FieldIndex"}]},
    {"id": "ok", "indexes": [{"name": "r", "type": "DateRangeIndex"}]},
    {"id": "ok", "indexes": [{"name": "a", "type": "FieldIndex"}, {"name": "a", "type": "KeywordIndex"}]},
    {"id": "ok", "indexes": [], "unexpected": 1},
    # Relevance would be ordered by Okapi BM25, not by the cosine measure ZCatalog would use.
    {"id": "ok", "indexes": [{"name": "t", "type": "ZCTextIndex", "index_type": "Cosine Measure"}]},
])
def test_bad_declarations_are_4xx(admin, body):
    r = admin.post("/catalogs", json=body)
    assert 400 <= r.status_code < 500, r.text
    assert r.headers["content-type"] == "application/problem+json"


def test_malformed_json_is_422(admin, catalog):
    name, _ = catalog
    r = admin.post(f"/catalogs/{name}/query", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["title"] == "Invalid request"


def test_catalogs_are_isolated(admin, catalog):
    name, _ = catalog
    other = "t-" + uuid.uuid4().hex[:10]
    assert admin.post("/catalogs", json=CatalogCreate(id=other, indexes=INDEXES, metadata=["Title"]).model_dump()).status_code == 201
    try:
        commit(admin, name, [entry("a", "/plone/a")])
        commit(admin, other, [entry("a", "/plone/a"), entry("b", "/plone/b")])
        assert admin.post(f"/catalogs/{name}/clear").status_code == 200
        assert query(admin, name, {"portal_type": "Document"})["items_total"] == 0
        assert query(admin, other, {"portal_type": "Document"})["items_total"] == 2
    finally:
        admin.delete(f"/catalogs/{other}")


def test_schema_update_adds_and_removes_indexes(admin, catalog):
    name, _ = catalog
    r = admin.patch(f"/catalogs/{name}/schema", json={"indexes": [{"name": "review_state", "type": "FieldIndex"}],
                                                      "remove_indexes": ["Subject"], "metadata": ["Description"]})
    assert r.status_code == 200, r.text
    names = [i["name"] for i in r.json()["indexes"]]
    assert "review_state" in names and "Subject" not in names
    assert "Description" in r.json()["metadata"]
    e = entry("a", "/plone/a")
    e["values"].pop("Subject")
    e["values"]["review_state"] = "published"
    commit(admin, name, [e])
    assert uids(query(admin, name, {"review_state": "published"})) == ["a"]
    bad = admin.post(f"/catalogs/{name}/batches", json={"batch_id": "x", "entries": [entry("b", "/plone/b", subjects=["s"])]})
    assert bad.status_code == 422  # Subject is gone


# -- batches ---------------------------------------------------------------------------------------

def test_same_batch_twice_applies_once(admin, catalog):
    name, _ = catalog
    first = commit(admin, name, [entry("a", "/plone/a")], batch_id="b-1")
    second = commit(admin, name, [entry("a", "/plone/a"), entry("b", "/plone/b")], batch_id="b-1")
    assert second["counter"] == first["counter"]
    assert uids(query(admin, name, {"portal_type": "Document"})) == ["a"]


def test_older_version_never_replaces_newer(admin, catalog):
    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a", portal_type="News Item", version=5)])
    result = commit(admin, name, [entry("a", "/plone/a", portal_type="Document", version=3)])
    assert result["skipped_stale"] == 1
    assert uids(query(admin, name, {"portal_type": "News Item"})) == ["a"]
    commit(admin, name, [{"op": "unindex", "uid": "a", "version": 7}])
    commit(admin, name, [entry("a", "/plone/a", version=6)])  # a late write from before the delete
    assert query(admin, name, {"portal_type": ["Document", "News Item"]})["items_total"] == 0
    commit(admin, name, [entry("a", "/plone/a", version=8)])
    assert query(admin, name, {"portal_type": "Document"})["items_total"] == 1


def test_appends_and_verify_take_the_batch_body_limit(admin, catalog):
    """A rebuild's appends and verify's chunks carry index entries as a batch does: they get the
    batch body limit (CATALOG_MAX_BATCH_BODY_SIZE), not the 1 MiB of other requests (a chunk of a
    thousand entries with their text passes 1 MiB on real sites)."""
    name, _ = catalog
    text = "gartenzwerg " * 500  # 6 KB a document: 200 of them are over 1 MiB
    entries = [entry(f"u{n}", f"/plone/u{n}", text=text) for n in range(200)]
    assert len(orjson.dumps({"entries": entries})) > 1 << 20
    r = admin.post(f"/catalogs/{name}/batches?stage=true", json={"batch_id": "big", "entries": entries[:1]})
    assert r.status_code == 200, r.text
    r = admin.post(f"/catalogs/{name}/batches/big/append", json={"entries": entries[1:] + entries[:1]})
    assert r.status_code == 200, r.text
    assert admin.post(f"/catalogs/{name}/batches/big/commit").json()["state"] == "committed"
    assert query(admin, name, {"portal_type": "Document"}, b_size=1)["items_total"] == 200
    r = admin.post(f"/catalogs/{name}/verify", json={"entries": entries})
    assert r.status_code == 200, r.text
    assert not any(result["missing"] or result["indexes"] for result in r.json()["results"].values())
    # Other requests keep the small limit.
    r = admin.post(f"/catalogs/{name}/query", json={"query": {"SearchableText": text * 200}})
    assert r.status_code == 413 and r.headers["content-type"] == "application/problem+json"


def test_two_phase_batch_visibility(admin, catalog):
    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a")])
    before = query(admin, name, {"portal_type": "Document"})["counter"]
    r = admin.post(f"/catalogs/{name}/batches?stage=true", json={
        "batch_id": "tx-1", "entries": [entry("b", "/plone/b"), {"op": "unindex", "uid": "a"}]})
    assert r.json()["state"] == "staged"
    # Invisible to everyone else, and the counter has not moved.
    others = query(admin, name, {"portal_type": "Document"})
    assert uids(others) == ["a"] and others["counter"] == before
    # Visible to the transaction that staged it.
    assert uids(query(admin, name, {"portal_type": "Document"}, batch_ids=["tx-1"])) == ["b"]
    # Staging again with the same id replaces the staged content.
    admin.post(f"/catalogs/{name}/batches?stage=true", json={
        "batch_id": "tx-1", "entries": [entry("b", "/plone/b"), entry("c", "/plone/c")]})
    assert sorted(uids(query(admin, name, {"portal_type": "Document"}, batch_ids=["tx-1"]))) == ["a", "b", "c"]
    r = admin.post(f"/catalogs/{name}/batches/tx-1/commit")
    assert r.status_code == 200 and r.json()["counter"] == before + 1
    assert sorted(uids(query(admin, name, {"portal_type": "Document"}))) == ["a", "b", "c"]
    # Commit is idempotent.
    assert admin.post(f"/catalogs/{name}/batches/tx-1/commit").json()["counter"] == before + 1
    assert admin.post(f"/catalogs/{name}/batches/tx-1/abort").status_code == 409


def test_aborted_batch_leaves_nothing(admin, catalog):
    name, _ = catalog
    admin.post(f"/catalogs/{name}/batches?stage=true", json={"batch_id": "tx-2", "entries": [entry("z", "/plone/z")]})
    assert admin.post(f"/catalogs/{name}/batches/tx-2/abort").json()["state"] == "aborted"
    assert query(admin, name, {"portal_type": "Document"})["items_total"] == 0
    assert admin.post(f"/catalogs/{name}/batches/tx-2/commit").status_code == 409
    r = admin.post(f"/catalogs/{name}/batches?stage=true", json={"batch_id": "tx-2", "entries": []})
    assert r.status_code == 409
    assert admin.post(f"/catalogs/{name}/batches/never-staged/commit").status_code == 404


def test_appending_to_a_staged_batch(admin, catalog):
    """A staged batch grows by appends; queries naming it see the union, an appended entry
    replacing the staged one of its uid; only a staged batch can grow."""
    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a"), entry("b", "/plone/b", text="old words")])
    r = admin.post(f"/catalogs/{name}/batches?stage=true", json={
        "batch_id": "tx-3", "entries": [entry("c", "/plone/c", text="river"), {"op": "unindex", "uid": "a"}]})
    assert r.status_code == 200
    r = admin.post(f"/catalogs/{name}/batches/tx-3/append", json={"entries": [
        entry("a", "/plone/moved/a"), {"op": "unindex", "uid": "c"}, entry("d", "/plone/d", text="river garden"),
        entry("b", "/plone/b", text="garden")]})
    assert r.status_code == 200 and r.json()["state"] == "staged", r.text
    docs = {"portal_type": "Document"}
    assert uids(query(admin, name, docs)) == ["a", "b"]  # nobody else sees it
    seen = query(admin, name, {**docs, "sort_on": "path"}, batch_ids=["tx-3"])
    assert [item["path"] for item in seen["items"]] == ["/plone/b", "/plone/d", "/plone/moved/a"]
    assert sorted(uids(query(admin, name, {"SearchableText": "garden"}, batch_ids=["tx-3"]))) == ["b", "d"]
    assert uids(query(admin, name, {"SearchableText": "old"}, batch_ids=["tx-3"])) == []
    # A bad entry refuses the append whole: the batch stays as it was.
    r = admin.post(f"/catalogs/{name}/batches/tx-3/append", json={"entries": [
        {"op": "unindex", "uid": "b"}, {**entry("e", "/plone/e"), "values": {"nosuch": 1}}]})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    assert sorted(uids(query(admin, name, docs, batch_ids=["tx-3"]))) == ["a", "b", "d"]
    r = admin.post(f"/catalogs/{name}/batches/tx-3/commit")
    # a, b and d; the unindex of c, which the catalog never held, removes nothing.
    assert r.status_code == 200 and (r.json()["applied"], r.json()["skipped_stale"]) == (3, 0), r.text
    committed = query(admin, name, {**docs, "sort_on": "path"})
    assert [item["path"] for item in committed["items"]] == ["/plone/b", "/plone/d", "/plone/moved/a"]
    assert sorted(uids(query(admin, name, {"SearchableText": "river"}))) == ["d"]
    # Only a staged batch grows, and the refusal says why.
    for batch_id, status, says in (("tx-3", 409, "committed"), ("never-staged", 404, "stage it")):
        r = admin.post(f"/catalogs/{name}/batches/{batch_id}/append", json={"entries": [entry("f", "/plone/f")]})
        assert r.status_code == status and says in r.json()["detail"], r.text
    admin.post(f"/catalogs/{name}/batches/tx-4/abort")
    r = admin.post(f"/catalogs/{name}/batches/tx-4/append", json={"entries": []})
    assert r.status_code == 409 and "aborted" in r.json()["detail"]
    assert sorted(uids(query(admin, name, docs))) == ["a", "b", "d"]


def test_partial_reindex_changes_only_named_indexes(admin, catalog):
    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a", subjects=["x"], title="Old")])
    commit(admin, name, [{"op": "index", "uid": "a", "path": "/plone/a", "idxs": ["portal_type"],
                          "values": {"portal_type": "News Item"}, "metadata": {"Title": "New"}, "version": 2}])
    result = query(admin, name, {"Subject": "x"})
    assert uids(result) == ["a"]
    assert result["items"][0]["metadata"]["Title"] == "New"
    assert uids(query(admin, name, {"portal_type": "News Item"})) == ["a"]


@pytest.mark.parametrize("bad", [
    {"op": "index", "uid": "a", "path": "/plone/a", "values": {"nope": 1}},
    {"op": "index", "uid": "a", "path": "/plone/a", "values": {"modified": "not a date"}},
    {"op": "index", "uid": "a", "path": "/plone/a", "values": {"portal_type": ["a", "list"]}},
    {"op": "index", "uid": "a", "path": "/plone/a", "metadata": {"undeclared": 1}},
    {"op": "index", "uid": "", "path": "/plone/a"},
    {"op": "explode", "uid": "a"},
    # PostgreSQL text and jsonb cannot hold NUL: refused as bad values, wherever it is.
    {"op": "index", "uid": "a", "path": "/plone/a", "values": {"Subject": ["x", "a\x00b"]}},
    {"op": "index", "uid": "a", "path": "/plone/a", "values": {"portal_type": "\x00"}},
    {"op": "index", "uid": "a", "path": "/plone/a", "metadata": {"Title": "a\x00"}},
    {"op": "index", "uid": "a", "path": "/plone/a", "metadata": {"Title": {"k\x00": 1}}},
    {"op": "index", "uid": "a\x00", "path": "/plone/a"},
    {"op": "unindex", "uid": "a\x00"},
    # Longer than a B-tree entry may be (PostgreSQL refused them with a 500 before).
    {"op": "index", "uid": "a", "path": "/plone/a", "values": {"portal_type": RANDOM_TEXT}},
    {"op": "index", "uid": "a", "path": "/plone/" + RANDOM_TEXT[:2100]},
    {"op": "index", "uid": "a", "path": "/plone/a", "values": {"getObjPositionInParent": 2**63}},
])
def test_bad_batches_are_rejected_whole(admin, catalog, bad):
    name, _ = catalog
    commit(admin, name, [entry("keep", "/plone/keep")])
    r = admin.post(f"/catalogs/{name}/batches", json={"batch_id": uuid.uuid4().hex,
                                                      "entries": [entry("new", "/plone/new"), bad]})
    assert 400 <= r.status_code < 500, r.text
    assert uids(query(admin, name, {"portal_type": "Document"})) == ["keep"]



def test_long_words_and_keywords_are_indexed_and_found(admin, catalog):
    name, _ = catalog
    # Words of letters and digits only: one of 3,000 characters (more than a B-tree entry may hold;
    # PostgreSQL refused the lexicon row with a 500 before), one of 900 (still short enough to query).
    rnd = random.Random(4)
    huge, long = ("".join(rnd.choices(string.ascii_lowercase + string.digits, k=n)) for n in (3000, 900))
    commit(admin, name, [entry("long", "/plone/long", text=f"start {huge} {long} end", subjects=[RANDOM_TEXT, long]),
                         entry("short", "/plone/short", text="start end")])
    assert uids(query(admin, name, {"SearchableText": huge[:5] + "*"})) == ["long"]
    assert uids(query(admin, name, {"SearchableText": long})) == ["long"]
    assert uids(query(admin, name, {"SearchableText": f'"{long} end"'})) == ["long"]
    assert uids(query(admin, name, {"Subject": long})) == ["long"]
    assert sorted(uids(query(admin, name, {"SearchableText": "start"}))) == ["long", "short"]


def test_text_that_only_looks_like_a_nul_escape_is_stored(admin, catalog):
    name, _ = catalog
    literal = "back\\u0000slash"  # a backslash, then "u0000": no NUL character
    commit(admin, name, [{**entry("a", "/plone/a"), "metadata": {"Title": literal}}])
    assert query(admin, name, {"portal_type": "Document"})["items"][0]["metadata"]["Title"] == literal

# -- security --------------------------------------------------------------------------------------

@pytest.fixture
def secured(admin, catalog):
    name, token = catalog
    past, future = NOW - timedelta(days=1), NOW + timedelta(days=1)
    commit(admin, name, [
        entry("public", "/plone/public", effective=past),
        entry("private", "/plone/private", allowed=["Manager", "user:joe"]),
        entry("future", "/plone/future", effective=future),
        entry("expired", "/plone/expired", effective=past - timedelta(days=9), expires=past),
    ])
    return name, token


def test_anonymous_sees_published_effective_only(live_service, secured):
    name, _ = secured
    with live_service.client(token=False) as anonymous:
        r = anonymous.get("/search", params={"catalog": name, "portal_type": "Document"})
        assert r.status_code == 200
        assert uids(r.json()) == ["public"]
        # Trying to widen security from the query is refused, not obeyed.
        r = anonymous.post(f"/search?catalog={name}", json={"query": {"allowedRolesAndUsers": ["Manager"]}})
        assert r.status_code == 403
        # Headers only a connector may use are ignored without its credential.
        r = anonymous.post(f"/search?catalog={name}", json={"query": {"portal_type": "Document"},
                                                           "show_inactive": True},
                           headers={"X-Catalog-Principals": '["Manager"]', "X-Catalog-Unrestricted": "1"})
        assert uids(r.json()) == ["public"]


def test_connector_principals_and_inactive(live_service, secured):
    name, token = secured
    with live_service.client(token=token) as connector:
        joe = {"X-Catalog-Principals": '["Anonymous", "user:joe"]'}
        assert sorted(uids(query(connector, name, {"portal_type": "Document"}, headers=joe))) == ["private", "public"]
        everything = query(connector, name, {"portal_type": "Document"}, headers=joe, show_inactive=True)
        assert sorted(uids(everything)) == ["expired", "future", "private", "public"]
        assert query(connector, name, {"portal_type": "Document"}, headers=UNRESTRICTED)["items_total"] == 4


def test_signed_tokens(live_service, secured):
    name, token = secured
    with live_service.client(token=token) as connector:
        minted = connector.post(f"/catalogs/{name}/tokens", json={"principals": ["Anonymous", "user:joe"]}).json()
    with live_service.client(token=minted["token"]) as frontend:
        r = frontend.get("/search", params={"catalog": name, "portal_type": "Document"})
        assert sorted(uids(r.json())) == ["private", "public"]
        r = frontend.post(f"/search?catalog={name}", json={"query": {"portal_type": "Document"}},
                          headers=UNRESTRICTED)
        assert sorted(uids(r.json())) == ["private", "public"]
        assert frontend.post(f"/catalogs/{name}/batches", json={"batch_id": "x", "entries": []}).status_code == 403
    forged = minted["token"][:-4] + ("AAAA" if not minted["token"].endswith("AAAA") else "BBBB")
    with live_service.client(token=forged) as forger:
        assert forger.get("/search", params={"catalog": name, "portal_type": "Document"}).status_code == 401


# -- queries: bad input and data that looks like syntax --------------------------------------------

ODD_IDS = ["with space", "100%", "under_score", "dot.ted", "ünïcödé", "日本語", "a'quote", "semi;colon"]


def test_ids_and_paths_are_data_not_patterns(admin, catalog):
    name, _ = catalog
    entries = [entry(f"u{i}", f"/plone/{odd}", position=i) for i, odd in enumerate(ODD_IDS)]
    entries += [entry(f"c{i}", f"/plone/{odd}/child", position=0) for i, odd in enumerate(ODD_IDS)]
    entries.append(entry("decoy", "/plone/100x/child"))
    entries.append(entry("decoy2", "/plone/underXscore/child"))
    commit(admin, name, entries)
    for i, odd in enumerate(ODD_IDS):
        children = query(admin, name, {"path": {"query": f"/plone/{odd}", "depth": 1}})
        assert uids(children) == [f"c{i}"], odd
        subtree = query(admin, name, {"path": f"/plone/{odd}"})
        assert sorted(uids(subtree)) == sorted([f"u{i}", f"c{i}"]), odd
        assert uids(query(admin, name, {"id": odd})) == [f"u{i}"]


SQLISH = ["'; drop table catalog; --", "%", "_", "\\", "' or '1'='1", "$1", "::jsonb", "\"", "*", "NOT"]


@pytest.mark.parametrize("value", SQLISH)
def test_sql_looking_values_in_every_field(admin, catalog, value):
    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a")])
    for q in ({"portal_type": value}, {"Subject": [value]}, {"id": {"query": value, "not": value}},
              {"path": value}, {"path": {"query": "/plone/" + value, "depth": 1}},
              {"portal_type": {"query": [value], "range": "min"}}):
        r = admin.post(f"/catalogs/{name}/query", json={"query": q}, headers=UNRESTRICTED)
        assert r.status_code in (200, 400), (q, r.text)
    r = admin.post(f"/catalogs/{name}/query", json={"query": {"SearchableText": value}}, headers=UNRESTRICTED)
    assert r.status_code in (200, 400), r.text
    assert uids(query(admin, name, {"portal_type": "Document"})) == ["a"]


@pytest.mark.parametrize("q, status", [
    ({"portal_type": "x", "b_size": 10**7}, 422),
    ({"portal_type": ["x"] * 5000}, 422),
    ({"portal_type": "x", "sort_on": "nope"}, 400),
    ({"portal_type": {"query": "x", "bogus": 1}}, 400),
    ({"SearchableText": "(unbalanced"}, 400),
    ({"modified": {"query": "yesterday-ish", "range": "min"}}, 400),
])
def test_bad_queries_are_problem_details(admin, catalog, q, status):
    name, _ = catalog
    r = admin.post(f"/catalogs/{name}/query", json={"query": q}, headers=UNRESTRICTED)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert r.json()["detail"]


def test_batching_past_the_end(admin, catalog):
    name, _ = catalog
    commit(admin, name, [entry(f"d{i}", f"/plone/d{i}", position=i) for i in range(7)])
    result = query(admin, name, {"path": {"query": "/plone", "depth": 1}, "sort_on": "getObjPositionInParent"},
                   b_start=5, b_size=5)
    assert uids(result) == ["d5", "d6"] and result["items_total"] == 7
    result = query(admin, name, {"path": {"query": "/plone", "depth": 1}}, b_start=50, b_size=5)
    assert result["items"] == [] and result["items_total"] == 7


def test_unknown_catalog_is_404(admin):
    r = admin.post("/catalogs/no-such-catalog/query", json={"query": {}})
    assert r.status_code == 404


# -- operations ------------------------------------------------------------------------------------

def test_health_and_metrics(live_service):
    assert httpx.get(live_service.url + "/healthz").json() == {"status": "ok"}
    assert httpx.get(live_service.url + "/readyz").json() == {"status": "ready"}
    metrics = httpx.get(live_service.url + "/metrics").text
    assert "catalog_http_requests_total" in metrics


def test_openapi_lists_the_api(live_service):
    document = httpx.get(live_service.url + "/openapi.json").json()
    paths = document["paths"]
    for path in ("/catalogs", "/catalogs/{name}/batches", "/catalogs/{name}/query", "/search"):
        assert path in paths
    # The searches read their body and headers themselves (api/deps.read_body); they are still
    # described: the request body's schema (a component) and the credential headers.
    for path in ("/catalogs/{name}/query", "/search"):
        post = paths[path]["post"]
        ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        schema = document["components"]["schemas"][ref.rsplit("/", 1)[-1]]
        assert {"query", "b_start", "b_size", "batch_ids"} <= set(schema["properties"])
        headers = {p["name"] for p in post["parameters"] if p["in"] == "header"}
        assert {"authorization", "x-catalog-principals"} <= headers


@pytest.mark.parametrize("body, loc", [
    ({"query": {}, "b_size": -1}, ["body", "b_size"]),
    ({"query": {}, "bogus": 1}, ["body", "bogus"]),
    ({"query": []}, ["body", "query"]),
])
def test_search_body_errors_name_the_field(admin, catalog, body, loc):
    name, _ = catalog
    for path in (f"/catalogs/{name}/query", f"/search?catalog={name}"):
        r = admin.post(path, json=body)
        assert r.status_code == 422, r.text
        assert r.headers["content-type"] == "application/problem+json"
        assert [e["loc"] for e in r.json()["errors"]] == [loc]


def test_restricted_query_sees_its_own_staged_changes(live_service, catalog):
    """Regression: staged rows had no principals, so restricted queries of the transaction that
    staged them did not see them."""
    name, token = catalog
    with live_service.client(token=token) as connector:
        r = connector.post(f"/catalogs/{name}/batches?stage=true", json={
            "batch_id": "own", "entries": [entry("mine", "/plone/mine", allowed=["user:joe"])]})
        assert r.status_code == 200
        joe = {"X-Catalog-Principals": '["Anonymous", "user:joe"]'}
        assert uids(query(connector, name, {"portal_type": "Document"}, headers=joe, batch_ids=["own"])) == ["mine"]
        anna = {"X-Catalog-Principals": '["Anonymous", "user:anna"]'}
        assert uids(query(connector, name, {"portal_type": "Document"}, headers=anna, batch_ids=["own"])) == []


def test_object_data_for_uids_with_slashes(admin, catalog):
    name, _ = catalog
    commit(admin, name, [entry("/plone/a/b", "/plone/a/b", text="garden river garden")])
    r = admin.get(f"/catalogs/{name}/objects//plone/a/b")
    assert r.status_code == 200, r.text
    assert r.json()["uid"] == "/plone/a/b"
    indexes = r.json()["indexes"]
    assert indexes["portal_type"] == "Document"
    # The stored score cells are not an index (getIndexDataForUID shows this mapping).
    assert indexes["SearchableText"] == ["garden", "river", "garden"]
    assert not [key for key in indexes if "#" in key]


def test_sort_on_path(admin, catalog):
    name, _ = catalog
    commit(admin, name, [entry("b", "/plone/b"), entry("a", "/plone/a"), entry("c", "/plone/a/c")])
    assert uids(query(admin, name, {"portal_type": "Document", "sort_on": "path"})) == ["a", "c", "b"]


def test_after_batch_says_whether_the_answer_is_complete(admin, catalog):
    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a")], batch_id="done")
    assert query(admin, name, {"portal_type": "Document"}, after_batch="done")["complete"] is True
    admin.post(f"/catalogs/{name}/batches?stage=true", json={"batch_id": "pending", "entries": []})
    assert query(admin, name, {"portal_type": "Document"}, after_batch="pending")["complete"] is False
    assert query(admin, name, {"portal_type": "Document"}, after_batch="unknown")["complete"] is False
    assert query(admin, name, {"portal_type": "Document"})["complete"] is True


def test_verify_compares_in_stored_form(admin, catalog):
    name, _ = catalog
    e = entry("a", "/plone/a", subjects=["x"])
    commit(admin, name, [e])
    r = admin.post(f"/catalogs/{name}/verify", json={"entries": [e]})
    assert r.json()["results"]["a"] == {"missing": False, "indexes": [], "metadata": []}
    changed = entry("a", "/plone/a", subjects=["y"], title="Other")
    missing = entry("b", "/plone/b")
    r = admin.post(f"/catalogs/{name}/verify", json={"entries": [changed, missing]})
    assert r.json()["results"]["a"] == {"missing": False, "indexes": ["Subject"], "metadata": ["Title"]}
    assert r.json()["results"]["b"]["missing"] is True


def test_unique_values(admin, catalog):
    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a", subjects=["b", "a"]), entry("b", "/plone/b", portal_type="Folder",
                                                                         subjects=["c"])])
    assert admin.get(f"/catalogs/{name}/unique/portal_type").json()["values"] == ["Document", "Folder"]
    assert admin.get(f"/catalogs/{name}/unique/Subject").json()["values"] == ["a", "b", "c"]
    assert admin.get(f"/catalogs/{name}/unique/SearchableText").status_code == 404
    assert admin.get(f"/catalogs/{name}/unique/nope").status_code == 404


def test_unique_values_with_lengths_and_staged_batches(admin, catalog):
    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a", subjects=["b", "a"]), entry("b", "/plone/b", subjects=["b"]),
                         entry("c", "/plone/c", portal_type="Folder")])
    r = admin.get(f"/catalogs/{name}/unique/Subject", params={"lengths": "true"}).json()
    # ZCatalog's uniqueValues(withLengths=True): objects per value; numObjects: objects with any.
    assert (r["values"], r["lengths"], r["objects"]) == (["a", "b"], [1, 2], 2)
    r = admin.get(f"/catalogs/{name}/unique/portal_type", params={"lengths": "true"}).json()
    assert (r["values"], r["lengths"], r["objects"]) == (["Document", "Folder"], [2, 1], 3)
    admin.post(f"/catalogs/{name}/batches?stage=true", json={
        "batch_id": "tx-unique", "entries": [entry("d", "/plone/d", subjects=["z"]), {"op": "unindex", "uid": "a"}]})
    staged = {"batch_id": "tx-unique", "lengths": "true"}
    r = admin.get(f"/catalogs/{name}/unique/Subject", params=staged).json()
    assert (r["values"], r["lengths"], r["objects"]) == (["b", "z"], [1, 1], 2)
    # Only the batch's own transaction sees it.
    assert admin.get(f"/catalogs/{name}/unique/Subject").json()["values"] == ["a", "b"]
    assert admin.get(f"/catalogs/{name}/unique/Subject").json()["lengths"] is None
    too_many = [("batch_id", f"b{i}") for i in range(17)]
    assert admin.get(f"/catalogs/{name}/unique/Subject", params=too_many).status_code == 422


def test_path_values_and_text_sizes_see_staged_batches(admin, catalog):
    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a", text="red apple"), entry("b", "/plone/f/b", text="red")])
    admin.post(f"/catalogs/{name}/batches?stage=true", json={
        "batch_id": "tx-sizes", "entries": [entry("c", "/plone/g/c", text="green pear"), {"op": "unindex", "uid": "a"}]})
    path = admin.get(f"/catalogs/{name}/unique/path", params={"lengths": "true"}).json()
    # ExtendedPathIndex: None (its terminator, one per object) first, then every component.
    assert (path["values"], path["lengths"], path["objects"]) == (
        [None, "a", "b", "f", "plone"], [2, 1, 1, 1, 2], 2)
    path = admin.get(f"/catalogs/{name}/unique/path", params={"batch_id": "tx-sizes"}).json()
    assert path["values"] == [None, "b", "c", "f", "g", "plone"]
    # A ZCTextIndex's numObjects (distinct words) and indexSize (documents).
    sizes = admin.get(f"/catalogs/{name}/words/SearchableText").json()
    assert (sizes["words"], sizes["documents"]) == (2, 2)
    sizes = admin.get(f"/catalogs/{name}/words/SearchableText", params={"batch_id": "tx-sizes"}).json()
    assert (sizes["words"], sizes["documents"]) == (3, 2)  # red, green, pear
    assert admin.get(f"/catalogs/{name}/words/portal_type").status_code == 404
    # A DateRangeIndex lists no values but holds every object.
    dates = admin.get(f"/catalogs/{name}/unique/effectiveRange", params={"lengths": "true"}).json()
    assert (dates["values"], dates["objects"]) == ([], 2)
    # Values per attribute: a DateRangeIndex's since and until only.
    bounds = admin.get(f"/catalogs/{name}/unique/effectiveRange", params={"attribute": "effective"})
    assert bounds.status_code == 200 and bounds.json()["values"] == []
    wrong = admin.get(f"/catalogs/{name}/unique/portal_type", params={"attribute": "portal_type"})
    assert wrong.status_code == 400 and "DateRangeIndex" in wrong.json()["detail"]


def test_search_get_forms(live_service, admin, catalog):
    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a", subjects=["x", "y"], effective=NOW - timedelta(days=1)),
                         entry("b", "/plone/b", subjects=["y"], effective=NOW - timedelta(days=1))])
    with live_service.client(token=False) as anonymous:
        r = anonymous.get("/search", params=[("catalog", name), ("Subject", "x"), ("Subject", "zzz")])
        assert uids(r.json()) == ["a"]
        r = anonymous.get("/search", params={"catalog": name, "q": '{"Subject": {"query": ["x", "y"], "operator": "and"}}'})
        assert uids(r.json()) == ["a"]
        r = anonymous.get("/search", params={"catalog": name, "q": "[1, 2]"})
        assert r.status_code == 400
        r = anonymous.get("/search", params={"catalog": name, "Subject": "y", "b_size": "x"})
        assert r.status_code == 400
        r = anonymous.get("/search", params={"catalog": name, "Subject": "y", "b_size": 1, "b_start": 1,
                                             "sort_on": "id"})
        assert uids(r.json()) == ["b"] and r.json()["items_total"] == 2


def test_text_query_paged_past_the_end(admin, catalog):
    """Regression: the count of a relevance-ordered page past the end got the score's parameters
    too, and answered 500."""
    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a", text="plone folder")])
    result = query(admin, name, {"SearchableText": "plone AND folder"}, b_start=12, b_size=4)
    assert result["items"] == [] and result["items_total"] == 1


def test_the_query_route_is_the_plain_starlette_route_and_answers_like_the_api(admin, catalog):
    """POST /catalogs/{name}/query is served by a Starlette route matched before FastAPI's (speed);
    its answers and errors are those of the API: problem details, metrics under the route's path.
    The public /search is an ordinary route (it is not the connector's hot path)."""
    from starlette.routing import Match

    from catalog_service.api.search import FAST_ROUTES
    from catalog_service.app import create_app

    app = create_app()
    scope = {"type": "http", "method": "POST", "path": "/catalogs/x/query"}
    assert next(r for r in app.router.routes if r.matches(scope)[0] == Match.FULL) is FAST_ROUTES[0]
    for method in ("GET", "POST"):
        scope = {"type": "http", "method": method, "path": "/search"}
        assert next(r for r in app.router.routes if r.matches(scope)[0] == Match.FULL) not in FAST_ROUTES

    name, _ = catalog
    commit(admin, name, [entry("a", "/plone/a"), entry("b", "/plone/b", portal_type="News Item")])
    assert uids(query(admin, name, {"portal_type": "News Item"})) == ["b"]
    cases = [
        (admin.post(f"/catalogs/{name}/query", content=b"{not json", headers=UNRESTRICTED), 422),
        (admin.post(f"/catalogs/{name}/query", json={"query": {}, "b_size": "x"}, headers=UNRESTRICTED), 422),
        (httpx.post(admin.base_url.join(f"/catalogs/{name}/query"), json={"query": {}},
                    headers={"Authorization": "Bearer not-a-token"}), 401),
        (admin.post("/catalogs/no-such-catalog/query", json={"query": {}}, headers=UNRESTRICTED), 404),
        (admin.get(f"/catalogs/{name}/query"), 405),
    ]
    for response, status in cases:
        assert response.status_code == status, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["status"] == status
    options = admin.options(f"/catalogs/{name}/query")
    assert options.status_code == 405 and options.headers["allow"] == "POST", (options.status_code, options.headers)
    assert options.headers["content-type"] == "application/problem+json"
    assert "post" in admin.get("/openapi.json").json()["paths"]["/catalogs/{name}/query"]
    assert admin.head("/search", params={"catalog": name}).status_code == 405  # as FastAPI's GET route
    assert uids(admin.get("/search", params={"catalog": name, "portal_type": "News Item"},
                          headers=UNRESTRICTED).json()) == ["b"]
    assert uids(admin.post("/search", params={"catalog": name}, json={"query": {"portal_type": "News Item"}},
                           headers=UNRESTRICTED).json()) == ["b"]
    metrics = admin.get("/metrics").text
    assert 'route="/search"' in metrics
    assert 'route="/catalogs/{name}/query"' in metrics, [line for line in metrics.splitlines() if "requests_total{" in line]


def test_search_without_a_catalog_names_the_missing_parameter(live_service):
    with live_service.client() as client:
        for response in (client.get("/search", params={"portal_type": "Document"}),
                         client.post("/search", json={"query": {}})):
            assert response.status_code == 422, response.text
            assert response.headers["content-type"] == "application/problem+json"
            assert [e["loc"] for e in response.json()["errors"]] == [["query", "catalog"]]


def test_searches_skip_fastapis_layers_and_answer_like_them():
    """CatalogApp hands a search straight to its handler (app.py): FastAPI's middleware stack is not
    even built for it, its errors are the same problem details, and a search route with another
    method still goes to FastAPI (405)."""
    import asyncio

    from catalog_service.app import create_app

    async def call(app, method, path, body=b""):
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"x"), (b"content-length", str(len(body)).encode())],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
        messages = [{"type": "http.request", "body": body, "more_body": False}]
        sent = []

        async def receive():
            return messages.pop(0) if messages else {"type": "http.disconnect"}

        async def send(message):
            sent.append(message)

        await app(scope, receive, send)
        return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:])

    async def scenario():
        app = create_app()
        status, headers, body = await call(app, "POST", "/catalogs/x/query", b"{not json")
        assert (status, headers[b"content-type"]) == (422, b"application/problem+json"), body
        assert b'"instance":"/catalogs/x/query"' in body
        status, _, body = await call(app, "POST", "/catalogs/x/query", b"x" * (2 << 20))
        assert status == 413, body
        assert app.middleware_stack is None  # FastAPI's own layers were never needed
        status, headers, _ = await call(app, "GET", "/catalogs/x/query")
        assert status == 405 and b"POST" in headers[b"allow"]
        assert app.middleware_stack is not None

    asyncio.run(scenario())


def test_a_query_held_past_the_statement_timeout_is_503_not_500(database_url):
    """A reader that waits for the catalog's partition longer than CATALOG_STATEMENT_TIMEOUT (a
    large rebuild's commit holds it, decisions/0018: the rebuild benchmark's readers got 500s)
    gets a 503 problem with Retry-After, and the next query after the lock is answered."""
    import psycopg

    from tests.live import start_service

    service = start_service(database_url, extra_env={"CATALOG_STATEMENT_TIMEOUT": "1"})
    try:
        with service.client() as client:
            name = "busy-" + uuid.uuid4().hex[:8]
            spec = CatalogCreate(id=name, indexes=INDEXES, metadata=["Title"])
            assert client.post("/catalogs", json=spec.model_dump()).status_code == 201
            commit(client, name, [entry("a", "/plone/a")])
            table = client.get(f"/catalogs/{name}").json().get("table")
            with psycopg.connect(database_url) as holder:
                holder.execute("select 1")
                if table is None:
                    table = holder.execute("select 'catalog_object_' || id from catalog where name = %s",
                                           (name,)).fetchone()[0]
                holder.execute(f"lock table {table} in access exclusive mode")
                response = client.post(f"/catalogs/{name}/query", json={"query": {"portal_type": "Document"}},
                                       headers=UNRESTRICTED)
                holder.rollback()
            assert response.status_code == 503, response.text
            assert response.headers["content-type"] == "application/problem+json"
            assert response.headers["retry-after"] == "1"
            assert response.json()["title"] == "Catalog busy"
            assert "statement timeout" in response.json()["detail"]
            assert uids(query(client, name, {"portal_type": "Document"})) == ["a"]
            client.delete(f"/catalogs/{name}")
    finally:
        service.stop()


@pytest.mark.parametrize("index_name", ["_", "__", "_1"])
def test_index_names_of_underscores_only_are_names_like_any(admin, index_name):
    """NAME_PATTERN admits "_"; the SQL layer's own check refused it (a 500 found by schemathesis)."""
    name = "t-" + uuid.uuid4().hex[:10]
    response = admin.post("/catalogs", json={"id": name, "indexes": [
        {"name": index_name, "type": "FieldIndex"}, {"name": "allowedRolesAndUsers", "type": "KeywordIndex"}]})
    assert response.status_code == 201, response.text
    try:
        token = response.json()["token"]
        batch = {"batch_id": "b1", "entries": [{"op": "index", "uid": "u1", "path": "/plone/a",
                                                "values": {index_name: "x", "allowedRolesAndUsers": ["Anonymous"]}}]}
        r = admin.post(f"/catalogs/{name}/batches", json=batch, headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200, r.text
        found = admin.post(f"/catalogs/{name}/query", json={"query": {index_name: "x"}},
                           headers={"X-Catalog-Principals": '["Anonymous"]'})
        assert found.status_code == 200 and found.json()["items_total"] == 1, found.text
    finally:
        admin.delete(f"/catalogs/{name}")
