"""Schema updates a transaction may send before it commits (``only_add``), removals that are
harmless when repeated, and clear batches that remove only what is older than their version, so
that one committed late (by a resolver) keeps newer changes. On a real PostgreSQL, on the store
and over HTTP."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from catalog_schemas.api import Batch, CatalogCreate, IndexDeclaration, SchemaUpdate
from catalog_service.store import batches
from catalog_service.store.catalogs import CatalogRegistry
from tests.service.test_api import INDEXES, UNRESTRICTED, entry
from tests.service.test_store import connect
from tests.service.test_text_cells import _counts, migrated_database

D = IndexDeclaration


@pytest.fixture(scope="module")
def db():
    yield from migrated_database("sc")


def run(dsn, work):
    async def go():
        conn = await connect(dsn)
        try:
            return await work(conn, CatalogRegistry())
        finally:
            await conn.close()

    return asyncio.run(go())


async def _catalog(conn, registry, *indexes: IndexDeclaration, metadata=("Title",)):
    spec = CatalogCreate(id="c-" + uuid.uuid4().hex[:10], indexes=list(indexes), metadata=list(metadata))
    catalog, _ = await registry.create(conn, spec)
    return catalog


async def _commit(conn, catalog, entries, clear=False, version=None, batch_id=None):
    batch = Batch.model_validate({"batch_id": batch_id or uuid.uuid4().hex, "entries": entries, "clear": clear,
                                  "version": version})
    changes = batches.convert(batch, catalog, 1000)
    async with conn.transaction():
        await batches.stage(conn, catalog, batch, changes)
        return await batches.commit(conn, catalog, batch.batch_id)


def _index(uid, version, text=None, portal_type="Document", **values):
    values = {"portal_type": portal_type, **values}
    if text is not None:
        values["SearchableText"] = text
    return {"op": "index", "uid": uid, "path": f"/plone/{uid}", "version": version, "values": values,
            "metadata": {"Title": uid}}


async def _rows(conn, catalog) -> dict[str, tuple[int, str]]:
    return {r["uid"]: (r["version"], r["portal_type"]) for r in await conn.fetch(
        f"select uid, version, idx->>'portal_type' as portal_type from {catalog.table}")}


async def _tombstones(conn, catalog) -> dict[str, int]:
    return {r["uid"]: r["version"] for r in await conn.fetch(
        "select uid, version from catalog_tombstone where catalog_id = $1", catalog.id)}


# -- only_add ----------------------------------------------------------------------------------------

def test_only_add_adds_and_leaves_removals_and_changes_of_indexes_with_values_out(db):
    async def work(conn, registry):
        catalog = await _catalog(conn, registry, D(name="portal_type", type="FieldIndex"),
                                 D(name="rank", type="FieldIndex"), D(name="SearchableText", type="ZCTextIndex"))
        await _commit(conn, catalog, [_index("a", 1, "garden", rank="3")])
        update = SchemaUpdate(
            only_add=True,
            indexes=[D(name="portal_type", type="FieldIndex"),
                     D(name="rank", type="FieldIndex", value_type="number"),  # holds values: left out
                     D(name="review_state", type="FieldIndex")],  # new
            metadata=["Description"],
            remove_indexes=["SearchableText"], remove_metadata=["Title"])
        updated = await registry.update_schema(conn, catalog, update)
        assert [d.name for d in updated.declarations] == ["portal_type", "rank", "SearchableText", "review_state"]
        assert updated.schema.indexes["rank"].decl.value_type == "text"
        assert updated.metadata == ("Title", "Description")
        assert updated.schema_rev == catalog.schema_rev + 1
        row = await conn.fetchrow(f"select idx->>'rank' as rank, text ? 'SearchableText' as text, "
                                  f"meta->>'Title' as title from {catalog.table}")
        assert (row["rank"], row["text"], row["title"]) == ("3", True, "a")  # nothing dropped
        # The whole update, once the transaction committed, removes and replaces.
        final = await registry.update_schema(conn, updated, update.model_copy(update={"only_add": False}))
        assert [d.name for d in final.declarations] == ["portal_type", "rank", "review_state"]
        assert final.schema.indexes["rank"].decl.value_type == "number"
        assert final.metadata == ("Description",)
        row = await conn.fetchrow(f"select idx, text, meta from {catalog.table}")
        assert [json.loads(row[k]) for k in ("idx", "text", "meta")] == [{"portal_type": "Document"}, {}, {}]

    run(db, work)


def test_only_add_types_an_index_that_holds_no_values(db):
    """A Field/Keyword index is declared text until its first value types it (the connector's
    _settle_value_types); the entries of that transaction need the typed declaration staged."""
    async def work(conn, registry):
        catalog = await _catalog(conn, registry, D(name="portal_type", type="FieldIndex"),
                                 D(name="priority", type="FieldIndex"))
        await _commit(conn, catalog, [_index("a", 1)])  # no value for priority
        typed = D(name="priority", type="FieldIndex", value_type="number")
        updated = await registry.update_schema(conn, catalog, SchemaUpdate(only_add=True, indexes=[typed]))
        assert updated.schema.indexes["priority"].decl == typed
        result = await _commit(conn, updated, [_index("b", 2, priority=5)])
        assert result.applied == 1

    run(db, work)


def test_an_update_that_changes_nothing_keeps_the_schema_revision(db):
    async def work(conn, registry):
        catalog = await _catalog(conn, registry, D(name="portal_type", type="FieldIndex"))
        same = SchemaUpdate(indexes=list(catalog.declarations), metadata=["Title"])
        for update in (same, same.model_copy(update={"only_add": True}),
                       SchemaUpdate(only_add=True, remove_indexes=["portal_type"], remove_metadata=["Title"])):
            assert (await registry.update_schema(conn, catalog, update)).schema_rev == catalog.schema_rev
        assert await conn.fetchval("select schema_rev from catalog where id = $1", catalog.id) == catalog.schema_rev

    run(db, work)


def test_removing_what_the_catalog_lacks_is_harmless_and_drops_leftovers(db):
    async def work(conn, registry):
        catalog = await _catalog(conn, registry, D(name="portal_type", type="FieldIndex"))
        await _commit(conn, catalog, [_index("a", 1)])
        # Leftovers of an index and a column removed before (as a batch staged against the older
        # schema could leave them).
        await conn.execute(f"update {catalog.table} set idx = idx || '{{\"gone\": 1}}', "
                           f"meta = meta || '{{\"Gone\": 2}}'")
        update = SchemaUpdate(remove_indexes=["gone"], remove_metadata=["Gone"])
        updated = await registry.update_schema(conn, catalog, update)
        assert [d.name for d in updated.declarations] == ["portal_type"] and updated.metadata == ("Title",)
        row = await conn.fetchrow(f"select idx, meta from {catalog.table}")
        assert [json.loads(row[k]) for k in ("idx", "meta")] == [{"portal_type": "Document"}, {"Title": "a"}]
        again = await registry.update_schema(conn, updated, update)  # a retry
        assert again.declarations == updated.declarations

    run(db, work)


def test_an_index_removed_and_declared_in_one_update_is_replaced(db):
    async def work(conn, registry):
        catalog = await _catalog(conn, registry, D(name="portal_type", type="FieldIndex"))
        await _commit(conn, catalog, [_index("a", 1)])
        decl = D(name="portal_type", type="FieldIndex")
        updated = await registry.update_schema(conn, catalog, SchemaUpdate(indexes=[decl], remove_indexes=["portal_type"]))
        assert updated.declarations == (decl,)
        assert json.loads(await conn.fetchval(f"select idx from {catalog.table}")) == {}
        names = await conn.fetchval("select count(*) from pg_indexes where tablename = $1 and indexdef like $2",
                                    catalog.table, "%portal_type%")
        assert names > 0  # its SQL indexes made again

    run(db, work)


def test_a_schema_update_on_a_stale_catalog_keeps_the_newer_change(db):
    """Two updates decided on the same loaded catalog: the second one keeps what the first added."""
    async def work(conn, registry):
        catalog = await _catalog(conn, registry, D(name="portal_type", type="FieldIndex"))
        await registry.update_schema(conn, catalog, SchemaUpdate(indexes=[D(name="one", type="FieldIndex")],
                                                                 metadata=["First"]))
        updated = await registry.update_schema(conn, catalog, SchemaUpdate(
            only_add=True, indexes=[D(name="two", type="FieldIndex")], metadata=["Second"]))
        assert [d.name for d in updated.declarations] == ["portal_type", "one", "two"]
        assert updated.metadata == ("Title", "First", "Second")

    run(db, work)


# -- versioned clear ---------------------------------------------------------------------------------

def test_a_versioned_clear_keeps_newer_rows_and_tombstones(db):
    async def work(conn, registry):
        catalog = await _catalog(conn, registry, D(name="portal_type", type="FieldIndex"),
                                 D(name="SearchableText", type="ZCTextIndex"))
        await _commit(conn, catalog, [_index("old", 5, "garden old"), _index("same", 10, "garden same"),
                                      _index("newer", 20, "garden newer", portal_type="News Item"),
                                      _index("dead", 5), _index("deleted-later", 5)])
        await _commit(conn, catalog, [{"op": "unindex", "uid": "dead", "version": 6},
                                      {"op": "unindex", "uid": "deleted-later", "version": 20}])
        assert await _tombstones(conn, catalog) == {"dead": 6, "deleted-later": 20}
        # The rebuild read a snapshot of version 10: it saw "old" and "dead" gone, not what the
        # transactions of versions above 10 did (they committed after it, in ZODB).
        result = await _commit(conn, catalog, [_index("old", 10, "river"), _index("newer", 10, "river"),
                                               _index("deleted-later", 10, "river"), _index("fresh", 10, "river")],
                               clear=True, version=10)
        assert await _rows(conn, catalog) == {
            "old": (10, "Document"), "fresh": (10, "Document"),
            "same": (10, "Document"),  # of the clear's version: not older, kept
            "newer": (20, "News Item")}  # newer: kept, and the rebuild's older entry skipped
        assert await _tombstones(conn, catalog) == {"deleted-later": 20}  # stops the rebuild's entry
        assert (result.applied, result.skipped_stale) == (2, 2)
        kept, recount = await _counts(conn, catalog)
        assert kept == recount and kept
        words = {r["word"]: r["df"] for r in await conn.fetch(
            "select word, df from catalog_lexicon where catalog_id = $1", catalog.id)}
        assert words == {"garden": 2, "same": 1, "newer": 1, "river": 2}

    run(db, work)


def test_a_clear_without_a_version_removes_everything(db):
    async def work(conn, registry):
        catalog = await _catalog(conn, registry, D(name="portal_type", type="FieldIndex"),
                                 D(name="SearchableText", type="ZCTextIndex"))
        await _commit(conn, catalog, [_index("a", 50, "garden"), {"op": "unindex", "uid": "b", "version": 50}])
        await _commit(conn, catalog, [_index("c", 1, "river")], clear=True)
        assert await _rows(conn, catalog) == {"c": (1, "Document")}
        assert await _tombstones(conn, catalog) == {}
        kept, recount = await _counts(conn, catalog)
        assert kept == recount

    run(db, work)


def test_a_staged_versioned_clear_is_resolved_late_without_losing_newer_changes(db):
    """The resolver's commit (store/batches.py resolve_expired) of a clear a crash left staged."""
    async def work(conn, registry):
        catalog = await _catalog(conn, registry, D(name="portal_type", type="FieldIndex"),
                                 D(name="SearchableText", type="ZCTextIndex"))
        await _commit(conn, catalog, [_index("y", 3, "old")])
        clear = Batch.model_validate({"batch_id": "rebuild", "clear": True, "version": 7,
                                      "entries": [_index("y", 7, "rebuilt")]})
        async with conn.transaction():
            await batches.stage(conn, catalog, clear, batches.convert(clear, catalog, 10))
        await _commit(conn, catalog, [_index("y", 9, "edited", portal_type="News Item")])
        await conn.execute("insert into catalog_txn_outcome (batch_id) values ('rebuild')")
        await conn.execute("update catalog_batch set created = now() - interval '1 hour' where batch_id = 'rebuild'")
        outcomes = await batches.resolve_expired(conn, 60)
        assert (catalog.name, "rebuild", "committed") in outcomes
        assert await _rows(conn, catalog) == {"y": (9, "News Item")}
        kept, recount = await _counts(conn, catalog)
        assert kept == recount

    run(db, work)


# -- over HTTP ---------------------------------------------------------------------------------------

@pytest.fixture
def admin(live_service):
    with live_service.client() as client:
        yield client


@pytest.fixture
def catalog(admin):
    name = "t-" + uuid.uuid4().hex[:10]
    response = admin.post("/catalogs", json=CatalogCreate(id=name, indexes=INDEXES, metadata=["Title"]).model_dump())
    assert response.status_code == 201, response.text
    yield name
    admin.delete(f"/catalogs/{name}")


def _uids(admin, name, query, **body):
    response = admin.post(f"/catalogs/{name}/query", json={"query": query, **body}, headers=UNRESTRICTED)
    assert response.status_code == 200, response.text
    return sorted(item["uid"] for item in response.json()["items"])


def test_schema_patch_with_only_add_and_removals_of_unknown_names(admin, catalog):
    r = admin.patch(f"/catalogs/{catalog}/schema", json={
        "only_add": True, "indexes": [{"name": "review_state", "type": "FieldIndex"}],
        "remove_indexes": ["Subject"], "remove_metadata": ["Title"], "metadata": ["Description"]})
    assert r.status_code == 200, r.text
    names = [i["name"] for i in r.json()["indexes"]]
    assert "review_state" in names and "Subject" in names
    assert r.json()["metadata"] == ["Title", "Description"]
    r = admin.patch(f"/catalogs/{catalog}/schema", json={"remove_indexes": ["no_such", "no such; drop", "x\n"],
                                                         "remove_metadata": ["Nope"]})
    assert r.status_code == 200, r.text
    assert [i["name"] for i in r.json()["indexes"]] == names


def test_staged_versioned_clear_overlay_shows_newer_rows_as_its_commit_keeps_them(admin, catalog):
    def commit(entries, **body):
        r = admin.post(f"/catalogs/{catalog}/batches", json={"batch_id": uuid.uuid4().hex, "entries": entries, **body})
        assert r.status_code == 200, r.text

    commit([entry("old", "/plone/old", version=5), entry("newer", "/plone/newer", version=20)])
    r = admin.post(f"/catalogs/{catalog}/batches?stage=true", json={
        "batch_id": "rebuild", "clear": True, "version": 10, "entries": [entry("fresh", "/plone/fresh", version=10)]})
    assert r.status_code == 200, r.text
    overlay = _uids(admin, catalog, {"portal_type": "Document"}, batch_ids=["rebuild"])
    assert overlay == ["fresh", "newer"]
    assert admin.post(f"/catalogs/{catalog}/batches/rebuild/commit").status_code == 200
    assert _uids(admin, catalog, {"portal_type": "Document"}) == overlay
