"""Dropping a catalog: 204, then the catalog is gone for every route and from PostgreSQL, and the
other catalogs are as they were."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from tests.live import start_service
from tests.service.test_api import NOW, UNRESTRICTED, entry
from tests.service.test_review_support import commit_batch, get, new_catalog, post

# Every table that holds rows of a catalog, by catalog id (the partition holds its objects).
CATALOG_TABLES = ("catalog_tombstone", "catalog_batch", "catalog_staged", "catalog_lexicon", "catalog_text_stats",
                  "catalog_text_cell", "catalog_inflight")


def fill(service, name, words):
    commit_batch(service, name, [entry(f"{name}-{i}", f"/plone/doc{i}", text=f"{words} number{i}",
                                       subjects=["kept"], effective=NOW) for i in range(5)])
    # Some of every kind of row: a tombstone (an unindexed object) and a staged batch.
    commit_batch(service, name, [{"op": "unindex", "uid": f"{name}-4"}])
    staged = post(service, f"/catalogs/{name}/batches?stage=true", token=None,
                  json={"batch_id": "left-staged-" + uuid.uuid4().hex, "entries": [entry(f"{name}-9", "/plone/d9")]})
    assert staged.status_code == 200, staged.text


def answers(service, name) -> dict:
    """What a catalog answers: its description, and a few queries."""
    info = get(service, f"/catalogs/{name}", token=None).json()
    searches = {}
    for query in ({"Subject": "kept"}, {"SearchableText": "common"}, {"path": "/plone", "sort_on": "id"}):
        response = post(service, f"/catalogs/{name}/query", token=None, headers=dict(UNRESTRICTED),
                        json={"query": query})
        assert response.status_code == 200, response.text
        body = response.json()
        searches[str(query)] = (body["items_total"], [item["uid"] for item in body["items"]])
    return {"objects": info["objects"], "counter": info["counter"], "searches": searches}


def catalog_rows(database_url, catalog_id: int) -> dict:
    """What PostgreSQL holds of a catalog: its row, its partition and that partition's relations
    (indexes, statistics objects), and its rows in every other table."""
    table = f"catalog_object_{catalog_id}"
    with psycopg.connect(database_url) as conn:
        found = {
            "catalog row": conn.execute("select count(*) from catalog where id = %s", (catalog_id,)).fetchone()[0],
            "partition": conn.execute(
                "select count(*) from pg_inherits where inhparent = 'catalog_object'::regclass "
                "and inhrelid::regclass::text = %s", (table,)).fetchone()[0],
            "relations": conn.execute("select count(*) from pg_class where relname = %s or relname like %s",
                                      (table, table + "\\_%")).fetchone()[0],
            "statistics": conn.execute("select count(*) from pg_statistic_ext where stxname like %s",
                                       (table + "\\_%",)).fetchone()[0],
        }
        for name in CATALOG_TABLES:
            found[name] = conn.execute(f"select count(*) from {name} where catalog_id = %s",
                                       (catalog_id,)).fetchone()[0]
    return found


def drop(service, name):
    with service.client() as admin:
        return admin.delete(f"/catalogs/{name}")


def catalog_id(database_url, name) -> int:
    with psycopg.connect(database_url) as conn:
        return conn.execute("select id from catalog where name = %s", (name,)).fetchone()[0]


@pytest.fixture
def three_catalogs(live_service):
    with live_service.client() as admin:
        made = [new_catalog(admin) for _ in range(3)]
    for (name, _), words in zip(made, ("common alpha", "common beta", "gamma"), strict=True):
        fill(live_service, name, words)
    yield made
    with live_service.client() as admin:
        for name, _ in made:
            admin.delete(f"/catalogs/{name}")


def test_drop_removes_the_catalog_and_only_it(live_service, database_url, three_catalogs):
    (dropped, token), *others = three_catalogs
    before = {name: answers(live_service, name) for name, _ in others}
    dropped_id = catalog_id(database_url, dropped)
    held = catalog_rows(database_url, dropped_id)
    # The catalog had rows of every kind that the drop must take away.
    assert all(held[key] for key in ("catalog row", "partition", "relations", "statistics", "catalog_tombstone",
                                     "catalog_batch", "catalog_staged", "catalog_lexicon", "catalog_text_stats",
                                     "catalog_text_cell")), held
    others_held = {name: catalog_rows(database_url, catalog_id(database_url, name)) for name, _ in others}

    response = drop(live_service, dropped)
    assert response.status_code == 204 and response.content == b""

    assert catalog_rows(database_url, dropped_id) == dict.fromkeys(held, 0)
    for credential in (None, token, False):  # the admin, the dropped catalog's connector, anyone
        for response in (
            get(live_service, f"/catalogs/{dropped}", token=credential),
            post(live_service, f"/catalogs/{dropped}/query", token=credential, json={"query": {"Subject": "kept"}}),
            post(live_service, f"/search?catalog={dropped}", token=credential, json={"query": {"Subject": "kept"}}),
            get(live_service, "/search", token=credential, params={"catalog": dropped, "Subject": "kept"}),
            post(live_service, f"/catalogs/{dropped}/batches", token=credential,
                 json={"batch_id": "after-drop", "entries": [entry("x", "/plone/x")]}),
            post(live_service, f"/catalogs/{dropped}/batches?stage=true", token=credential,
                 json={"batch_id": "after-drop", "entries": [entry("x", "/plone/x")]}),
            post(live_service, f"/catalogs/{dropped}/batches/after-drop/commit", token=credential),
            post(live_service, f"/catalogs/{dropped}/clear", token=credential),
            get(live_service, f"/catalogs/{dropped}/unique/Subject", token=credential),
        ):
            assert response.status_code == 404, (credential, response.request.url, response.text)
            assert response.headers["content-type"] == "application/problem+json"
    # A second drop finds nothing.
    assert drop(live_service, dropped).status_code == 404
    # A batch sent after the drop did not bring the catalog back.
    assert catalog_rows(database_url, dropped_id) == dict.fromkeys(held, 0)

    for name, _ in others:
        assert answers(live_service, name) == before[name]
        assert catalog_rows(database_url, catalog_id(database_url, name)) == others_held[name]


def test_a_worker_that_knew_the_catalog_answers_404_after_another_dropped_it(live_service, database_url,
                                                                             three_catalogs):
    """Each worker process caches catalogs; a search reads its cached copy without asking the
    database. Once another worker dropped the catalog, that copy must not answer, nor fail."""
    (dropped, _), (kept, _), _ = three_catalogs
    other_worker = start_service(database_url, admin_token=live_service.admin_token)
    try:
        for name in (dropped, kept):  # the other worker caches both
            assert post(other_worker, f"/search?catalog={name}", json={"query": {"Subject": "kept"}}
                        ).status_code == 200
        kept_before = post(other_worker, f"/catalogs/{kept}/query", token=None, headers=dict(UNRESTRICTED),
                           json={"query": {"Subject": "kept"}}).json()
        assert drop(live_service, dropped).status_code == 204
        for response in (
            post(other_worker, f"/search?catalog={dropped}", json={"query": {"Subject": "kept"}}),
            post(other_worker, f"/catalogs/{dropped}/query", token=None, json={"query": {"Subject": "kept"}}),
            get(other_worker, f"/catalogs/{dropped}", token=None),
            post(other_worker, f"/catalogs/{dropped}/batches", token=None,
                 json={"batch_id": "after-drop", "entries": [entry("x", "/plone/x")]}),
        ):
            assert response.status_code == 404, (response.request.url, response.text)
        assert post(other_worker, f"/catalogs/{kept}/query", token=None, headers=dict(UNRESTRICTED),
                    json={"query": {"Subject": "kept"}}).json() == kept_before
    finally:
        other_worker.stop()
