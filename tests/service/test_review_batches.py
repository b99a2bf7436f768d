"""Review: staged batches, their overlay, and races between staging, commit, abort and resolver.

The races are made deterministic with two database connections: the first holds its transaction
open at the interesting point while the second runs into it. Each test is the regression test
of a bug found in review (fixed).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from catalog_schemas.api import Batch, CatalogCreate, IndexDeclaration
from catalog_service.errors import CatalogError
from catalog_service.store import batches
from catalog_service.store.catalogs import CatalogRegistry
from catalog_service.store.database import _init_connection
from catalog_service.store.migrations import migrate
from tests.pg import create_database, drop_database
from tests.service.oracle import CatalogObject, ZCatalogOracle, _Content
from tests.service.test_api import NOW, entry
from tests.service.test_review_support import (
    commit_batch,
    drained_service,
    new_catalog,
    post,
    unrestricted_query,
)

PAST = NOW - timedelta(days=1)


# -- races, on the store ---------------------------------------------------------------------------

@pytest.fixture
def fresh_db():
    dsn, admin = create_database("rv")
    yield dsn
    drop_database(admin, dsn)


async def _connect(dsn):
    import asyncpg

    conn = await asyncpg.connect(dsn)
    await _init_connection(conn)
    return conn


async def _setup(dsn):
    first, second = await _connect(dsn), await _connect(dsn)
    await migrate(first)
    catalog, _ = await CatalogRegistry().create(first, CatalogCreate(
        id="race", indexes=[IndexDeclaration(name="portal_type", type="FieldIndex")]))
    return first, second, catalog


def _batch(batch_id: str, uid: str = "doc") -> Batch:
    return Batch.model_validate({"batch_id": batch_id, "entries": [
        {"op": "index", "uid": uid, "path": f"/plone/{uid}", "values": {"portal_type": "Document"}}]})


async def _stage_in_transaction(conn, catalog, batch):
    async with conn.transaction():
        return await batches.stage(conn, catalog, batch, batches.convert(batch, catalog, 100))


async def _blocked(task, seconds=0.5):
    """Give ``task`` time to run into the other connection's lock; it must still be waiting."""
    await asyncio.sleep(seconds)
    assert not task.done(), "expected the second connection to wait for the first"


def _run_race(dsn, scenario):
    async def run():
        first, second, catalog = await _setup(dsn)
        try:
            await scenario(first, second, catalog)
        finally:
            await first.close()
            await second.close()

    asyncio.run(run())


def test_concurrent_staging_of_one_new_batch_id(fresh_db):
    async def scenario(first, second, catalog):
        batch = _batch("b1")
        transaction = first.transaction()
        await transaction.start()
        await batches.stage(first, catalog, batch, batches.convert(batch, catalog, 100))
        task = asyncio.create_task(_stage_in_transaction(second, catalog, batch))
        await _blocked(task)
        await transaction.commit()
        try:
            assert await task == "staged"
        except CatalogError as exc:  # a named 4xx is a fix too
            assert exc.status < 500

    _run_race(fresh_db, scenario)


def test_abort_racing_a_staging_tells_the_truth(fresh_db):
    async def scenario(first, second, catalog):
        batch = _batch("b2")
        transaction = first.transaction()
        await transaction.start()
        await batches.stage(first, catalog, batch, batches.convert(batch, catalog, 100))

        async def abort():
            async with second.transaction():
                return await batches.abort(second, catalog, "b2")

        task = asyncio.create_task(abort())
        await _blocked(task)
        await transaction.commit()
        try:
            result = await task
        except CatalogError as exc:  # refusing the abort (e.g. 409) is honest too
            assert exc.status < 500
            return
        state = await first.fetchval("select state from catalog_batch where catalog_id = $1 and batch_id = $2",
                                     catalog.id, "b2")
        assert (result.state, state) == ("aborted", "aborted")

    _run_race(fresh_db, scenario)


def test_staging_racing_an_abort_is_409(fresh_db):
    async def scenario(first, second, catalog):
        batch = _batch("b3")
        transaction = first.transaction()
        await transaction.start()
        await batches.abort(first, catalog, "b3")
        task = asyncio.create_task(_stage_in_transaction(second, catalog, batch))
        await _blocked(task)
        await transaction.commit()
        with pytest.raises(CatalogError) as raised:
            await task
        assert raised.value.status == 409

    _run_race(fresh_db, scenario)


def test_resolver_skips_a_batch_the_client_commits_meanwhile(fresh_db):
    async def scenario(first, second, catalog):
        for batch_id in ("client-commits", "crashed"):
            batch = _batch(batch_id, uid=batch_id)
            await _stage_in_transaction(first, catalog, batch)
        transaction = first.transaction()
        await transaction.start()
        await batches.commit(first, catalog, "client-commits")  # holds the batch row's lock
        task = asyncio.create_task(batches.resolve_expired(second, 0))
        await _blocked(task)
        await transaction.commit()
        resolved = await task
        assert ("race", "crashed", "aborted") in resolved
        state = await first.fetchval("select state from catalog_batch where catalog_id = $1 and batch_id = $2",
                                     catalog.id, "client-commits")
        assert state == "committed"

    _run_race(fresh_db, scenario)


def test_two_commits_of_one_batch_apply_it_once(fresh_db):
    async def scenario(first, second, catalog):
        await _stage_in_transaction(first, catalog, _batch("b5", uid="once"))
        before = await first.fetchval("select counter from catalog where id = $1", catalog.id)
        transaction = first.transaction()
        await transaction.start()
        mine = await batches.commit(first, catalog, "b5")

        async def commit_again():
            async with second.transaction():
                return await batches.commit(second, catalog, "b5")

        task = asyncio.create_task(commit_again())
        await _blocked(task)
        await transaction.commit()
        theirs = await task
        assert (mine.state, theirs.state) == ("committed", "committed")
        assert (mine.applied, theirs.applied) == (1, 1)  # the second reports the first's outcome
        assert await first.fetchval("select counter from catalog where id = $1", catalog.id) == before + 1
        assert await first.fetchval(f"select count(*) from {catalog.table}") == 1

    _run_race(fresh_db, scenario)


# -- overlay and partial reindex, over HTTP ------------------------------------------------------------

@pytest.fixture(scope="module")
def service(database_url):
    with drained_service(database_url) as service:
        yield service


@pytest.fixture
def name(service):
    with service.client() as admin:
        name, _ = new_catalog(admin)
    return name


def test_staged_clear_batch_overlay_matches_its_commit(service, name):
    commit_batch(service, name, [entry("old", "/plone/old")])
    staged = post(service, f"/catalogs/{name}/batches?stage=true", token=None,
                  json={"batch_id": "clear", "clear": True, "entries": [entry("new", "/plone/new")]})
    assert staged.status_code == 200, staged.text
    overlay = unrestricted_query(service, name, {"portal_type": "Document"}, batch_ids=["clear"])
    assert post(service, f"/catalogs/{name}/batches/clear/commit", token=None).status_code == 200
    committed = unrestricted_query(service, name, {"portal_type": "Document"})
    assert committed == ["new"]
    assert overlay == committed


def test_partial_text_reindex_without_text_keeps_words(service, name):
    oracle = ZCatalogOracle([IndexDeclaration(name="SearchableText", type="ZCTextIndex"),
                             IndexDeclaration(name="portal_type", type="FieldIndex")])
    oracle.index(CatalogObject("doc", "/plone/doc", {"SearchableText": "hello world", "portal_type": "Document"}))
    # Reindex only SearchableText of an object that now has no text (the attribute is None).
    oracle.catalog.catalog_object(_Content(CatalogObject("doc", "/plone/doc", {"SearchableText": None})),
                                  uid="/plone/doc", idxs=["SearchableText"])
    expected = oracle.search({"SearchableText": "hello"})
    assert expected == ["doc"]

    commit_batch(service, name, [entry("doc", "/plone/doc", text="hello world", version=1)])
    commit_batch(service, name, [{"op": "index", "uid": "doc", "path": "/plone/doc", "version": 2,
                                  "values": {"SearchableText": None}, "idxs": ["SearchableText"]}])
    assert unrestricted_query(service, name, {"SearchableText": "hello"}) == expected


def test_review_helpers_reach_the_service(service, name):
    # Keeps the fixtures above honest: a plain commit and query work on the private service.
    commit_batch(service, name, [entry("x", "/plone/x", effective=PAST)])
    assert unrestricted_query(service, name, {"portal_type": "Document"}) == ["x"]
    anonymous = post(service, f"/search?catalog={name}", json={"query": {"portal_type": "Document"}})
    assert [i["UID"] for i in anonymous.json()["items"]] == ["x"]  # the public contract (docs/api.md)


def test_one_shot_of_an_id_staged_meanwhile_leaves_no_staged_rows(fresh_db):
    """A one-shot batch looks for a staging of its id (one_shot_rows), finds none and goes through
    its temporary table; another connection stages the same id before the one-shot's stage. The
    one-shot's rows win and the other staging's rows must not stay behind in catalog_staged."""
    async def scenario(first, second, catalog):
        mine, theirs = _batch("b9", uid="mine"), _batch("b9", uid="theirs")
        transaction = first.transaction()
        await transaction.start()
        rows = await batches.one_shot_rows(first, catalog, "b9")
        assert rows == batches.ONE_SHOT
        assert await _stage_in_transaction(second, catalog, theirs) == "staged"
        await batches.stage(first, catalog, mine, batches.convert(mine, catalog, 100), rows)
        result = await batches.commit(first, catalog, "b9", rows)
        await transaction.commit()
        assert (result.state, result.applied) == ("committed", 1)
        assert await first.fetchval("select count(*) from catalog_staged where batch_id = 'b9'") == 0
        assert [r["uid"] for r in await first.fetch(f"select uid from {catalog.table}")] == ["mine"]

    _run_race(fresh_db, scenario)
