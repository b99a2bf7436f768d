"""Bulk loads with deferred indexes (docs/decisions/0010): a catalog's secondary SQL indexes are
dropped, batches go on, queries answer the same (by scanning), and the build brings back exactly
the indexes the catalog had."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import uuid

import httpx
import psycopg
import pytest

from catalog_service import demo

FOLDER = demo.folder_path(3, 600)
QUERIES = [
    {"path": {"query": FOLDER, "depth": 1}, "portal_type": ["Document", "News Item", "Event"],
     "sort_on": "getObjPositionInParent"},
    {"path": {"query": FOLDER + "/x", "navtree": 1}, "sort_on": "getObjPositionInParent"},
    {"portal_type": ["News Item", "Event"], "modified": {"query": "2022-01-01T00:00:00+00:00", "range": "min"},
     "sort_on": "modified", "sort_order": "reverse"},
    {"SearchableText": "garden"},
    {"SearchableText": "river OR café", "sort_on": "sortable_title"},
    {"Subject": {"query": ["plone", "zope"], "operator": "and"}},
    {"review_state": "private", "Creator": "søren", "sort_on": "created"},
    {"start": {"query": "2021-06-01T00:00:00+00:00", "range": "min"}, "sort_on": "start"},
    {"getId": "document-77"},
]


def answers(client: httpx.Client, name: str) -> list:
    found = []
    for query in QUERIES:
        r = client.post(f"/catalogs/{name}/query", json={"query": query, "b_size": 50, "metadata": ["Title"]},
                        headers={"X-Catalog-Principals": '["Anonymous", "Manager"]'})
        assert r.status_code == 200, r.text
        body = r.json()
        found.append((body["items_total"], [(i["uid"], i["metadata"]) for i in body["items"]]))
    return found


def index_definitions(database_url: str, name: str) -> dict[str, str]:
    with psycopg.connect(database_url) as conn:
        table = conn.execute("select 'catalog_object_' || id from catalog where name = %s", (name,)).fetchone()[0]
        return dict(conn.execute("select indexname, indexdef from pg_indexes where tablename = %s",
                                 (table,)).fetchall())


def post_batches(client: httpx.Client, name: str, entries: list, prefix: str, size: int = 200) -> None:
    for start in range(0, len(entries), size):
        r = client.post(f"/catalogs/{name}/batches",
                        json={"batch_id": f"{prefix}-{start}", "entries": entries[start:start + size]})
        assert r.status_code == 200, r.text


@pytest.fixture
def loaded(live_service):
    name = "bulk-" + uuid.uuid4().hex[:8]
    with live_service.client() as admin:
        r = admin.post("/catalogs", json=demo.plone_catalog(name).model_dump(mode="json"))
        assert r.status_code == 201, r.text
        yield admin, name
        admin.delete(f"/catalogs/{name}")


def test_deferred_indexes_answer_the_same_and_build_back(live_service, loaded):
    admin, name = loaded
    entries = list(demo.objects(600, seed=7))
    post_batches(admin, name, entries[:300], "first")
    indexes = index_definitions(live_service.database_url, name)
    assert len(indexes) > 20  # the keys, path and parent, and the declared indexes' own

    r = admin.post(f"/catalogs/{name}/indexes/defer")
    assert r.status_code == 200, r.text
    deferred = r.json()["deferred"]
    left = index_definitions(live_service.database_url, name)
    assert sorted(left) == sorted(set(indexes) - set(deferred))
    assert len(left) == 2  # uid (the conflict target of every upsert) and rid
    assert sorted(admin.get(f"/catalogs/{name}/indexes/missing").json()["missing"]) == sorted(deferred)

    # The rest of the load, updates of the first part and an unindex, with no index to maintain.
    post_batches(admin, name, entries[300:], "second")
    post_batches(admin, name, [{**e, "version": 2, "values": {**e["values"], "review_state": "private"}}
                               for e in entries[:50]], "again")
    r = admin.post(f"/catalogs/{name}/batches", json={"batch_id": "gone", "entries": [
        {"op": "unindex", "uid": entries[60]["uid"], "version": 5}]})
    assert r.status_code == 200, r.text
    scanned = answers(admin, name)
    assert any(total for total, _ in scanned)

    r = admin.post(f"/catalogs/{name}/indexes/build")
    assert r.status_code == 200, r.text
    assert sorted(r.json()["built"]) == sorted(deferred)
    assert index_definitions(live_service.database_url, name) == indexes
    assert admin.get(f"/catalogs/{name}/indexes/missing").json()["missing"] == []
    assert answers(admin, name) == scanned

    # A second build has nothing to do; a second defer after the build drops the same set again.
    assert admin.post(f"/catalogs/{name}/indexes/build").json()["built"] == []
    assert sorted(admin.post(f"/catalogs/{name}/indexes/defer").json()["deferred"]) == sorted(deferred)
    assert admin.post(f"/catalogs/{name}/indexes/defer").json()["deferred"] == []


def test_the_same_catalog_loaded_both_ways_answers_the_same(live_service, loaded):
    admin, name = loaded
    other = name + "-b"
    r = admin.post("/catalogs", json=demo.plone_catalog(other).model_dump(mode="json"))
    assert r.status_code == 201, r.text
    try:
        entries = list(demo.objects(600, seed=11))
        post_batches(admin, name, entries, "kept")
        assert admin.post(f"/catalogs/{other}/indexes/defer").status_code == 200
        post_batches(admin, other, entries, "deferred")
        assert admin.post(f"/catalogs/{other}/indexes/build").status_code == 200
        assert answers(admin, other) == answers(admin, name)
    finally:
        admin.delete(f"/catalogs/{other}")


def test_index_routes_need_the_catalogs_credential(live_service, loaded):
    _, name = loaded
    with live_service.client(token=False) as anonymous:
        for method, path in (("post", "defer"), ("post", "build"), ("get", "missing")):
            r = getattr(anonymous, method)(f"/catalogs/{name}/indexes/{path}")
            assert r.status_code in (401, 403), (path, r.status_code)
            assert r.headers["content-type"].startswith("application/problem+json")
    with live_service.client() as admin:
        assert admin.post("/catalogs/no-such-catalog/indexes/defer").status_code == 404
    assert len(index_definitions(live_service.database_url, name)) > 20  # nothing was dropped


def run_cli(database_url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "catalog_service.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "DATABASE_URL": database_url}, timeout=120)


def test_operators_defer_and_build_from_the_command_line(live_service, loaded):
    admin, name = loaded
    post_batches(admin, name, list(demo.objects(300, seed=5)), "cli")
    indexes = index_definitions(live_service.database_url, name)
    before = answers(admin, name)

    assert run_cli(live_service.database_url, "indexes", "missing", name).stdout == ""
    deferred = run_cli(live_service.database_url, "indexes", "defer", name)
    assert deferred.returncode == 0, deferred.stderr
    assert f"{len(indexes) - 2} indexes of {name!r} deferred" in deferred.stdout
    missing = run_cli(live_service.database_url, "indexes", "missing", name).stdout.split()
    assert sorted(missing) == sorted(set(indexes) - set(index_definitions(live_service.database_url, name)))

    built = run_cli(live_service.database_url, "indexes", "build", name)
    assert built.returncode == 0, built.stderr
    assert built.stderr.count(": built ") == len(missing)  # a progress line per index
    assert index_definitions(live_service.database_url, name) == indexes
    assert answers(admin, name) == before

    unknown = run_cli(live_service.database_url, "indexes", "build", "no-such-catalog")
    assert unknown.returncode == 1 and "no catalog" in unknown.stderr


def test_a_large_demo_loads_with_its_indexes_deferred(live_service, monkeypatch, caplog):
    from catalog_service import cli

    names = ["demo-" + uuid.uuid4().hex[:8] for _ in range(2)]
    caplog.set_level(logging.INFO, logger="catalog_service.store.catalogs")
    monkeypatch.setattr(cli, "DEFER_INDEXES_FROM", 500)  # the first loads as a large one, the second not
    asyncio.run(cli.load_demo(live_service.database_url, names[0], 600, chunk=200, quiet=True))
    monkeypatch.setattr(cli, "DEFER_INDEXES_FROM", 10**9)
    asyncio.run(cli.load_demo(live_service.database_url, names[1], 600, chunk=200, quiet=True))
    deferrals = [r.getMessage() for r in caplog.records if "deferred until built" in r.getMessage()]
    assert len(deferrals) == 1 and names[0] in deferrals[0]
    with live_service.client() as admin:
        try:
            assert admin.get(f"/catalogs/{names[0]}/indexes/missing").json()["missing"] == []
            assert (sorted(index_definitions(live_service.database_url, names[0]).values())
                    == sorted(d.replace(names_table(live_service.database_url, names[1]),
                                        names_table(live_service.database_url, names[0]))
                              for d in index_definitions(live_service.database_url, names[1]).values()))
            assert answers(admin, names[0]) == answers(admin, names[1])
        finally:
            for name in names:
                admin.delete(f"/catalogs/{name}")


def names_table(database_url: str, name: str) -> str:
    with psycopg.connect(database_url) as conn:
        return conn.execute("select 'catalog_object_' || id from catalog where name = %s", (name,)).fetchone()[0]
