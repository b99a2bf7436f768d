"""Batch commits of one catalog run side by side (docs/decisions/0009).

A commit claims its objects in ``catalog_inflight`` (uid order), applies its rows and statistics,
and takes the catalog's counter row last. These tests hold one connection's transaction open at
the interesting point and check what a second connection may do meanwhile, then let many
connections commit overlapping batches at once and compare the outcome with what the versions
alone decide.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from catalog_schemas.api import Batch, IndexDeclaration, SchemaUpdate
from catalog_service.errors import CatalogError
from catalog_service.store import batches
from catalog_service.store.catalogs import CatalogRegistry
from tests.service import test_text_cells
from tests.service.test_store import connect
from tests.service.test_text_cells import _catalog, _counts, _text

# A migrated database for this module (module-scoped: one per module that uses the fixture).
db = test_text_cells.db


def _run(dsn, scenario, connections=3):
    async def go():
        conns = [await connect(dsn) for _ in range(connections)]
        try:
            await scenario(*conns)
        finally:
            for conn in conns:
                await conn.close()

    asyncio.run(go())


def _batch(batch_id: str, *changes: dict) -> Batch:
    return Batch.model_validate({"batch_id": batch_id, "entries": list(changes)})


def _index(uid: str, version: int, text: str | None = None) -> dict:
    values = {"portal_type": "Document"} if text is None else {"portal_type": "Document", "SearchableText": text}
    return {"op": "index", "uid": uid, "path": f"/plone/{uid}", "version": version, "values": values}


def _unindex(uid: str, version: int) -> dict:
    return {"op": "unindex", "uid": uid, "version": version}


async def _open_commit(conn, catalog, batch: Batch):
    """Stage and commit ``batch`` in a transaction left open; returns the transaction."""
    transaction = conn.transaction()
    await transaction.start()
    await batches.apply_one_shot(conn, catalog, batch, batches.convert(batch, catalog, 10_000))
    return transaction


async def _commit(conn, catalog, batch: Batch):
    async with conn.transaction():
        return await batches.apply_one_shot(conn, catalog, batch, batches.convert(batch, catalog, 10_000))


async def _waiting_on(observer, conn) -> str | None:
    """The statement ``conn``'s backend waits in on a lock, or None if it does not wait."""
    pid = conn.get_server_pid()
    for _ in range(100):
        row = await observer.fetchrow("select wait_event_type, query from pg_stat_activity where pid = $1", pid)
        if row["wait_event_type"] == "Lock":
            return row["query"]
        await asyncio.sleep(0.02)
    return None


def test_commits_of_other_objects_apply_their_rows_meanwhile(db):
    """The second commit writes its rows while the first is still open, and waits only for the
    counter row at its very end; both land, the counter moves once per commit."""
    async def scenario(first, second, observer):
        catalog = await _catalog(first, "side-by-side", portal_type="FieldIndex")
        before = await observer.fetchval("select counter from catalog where id = $1", catalog.id)
        transaction = await _open_commit(first, catalog, _batch("a", _index("a", 1)))
        task = asyncio.create_task(_commit(second, catalog, _batch("b", _index("b", 1))))
        waits_in = await _waiting_on(observer, second)
        # Its last statement: the claims and staged rows let go, then the counter row, the one lock
        # another commit of other objects holds.
        assert waits_in is not None and waits_in.endswith(
            "update catalog set counter = counter + 1 where id = $1 returning counter"), waits_in
        assert not task.done()
        await transaction.commit()
        result = await task
        assert result.counter == before + 2
        assert {r["uid"] for r in await observer.fetch(f"select uid from {catalog.table}")} == {"a", "b"}
        assert await observer.fetchval("select count(*) from catalog_inflight") == 0

    _run(db, scenario)


@pytest.mark.parametrize("first_change, second_change, present", [
    # A new object indexed (v3) and removed (v5) by two commits at once: the removal must see it.
    (_index("x", 3), _unindex("x", 5), False),
    # Removed (v5), then an older index (v3) arrives: the tombstone wins.
    (_unindex("x", 5), _index("x", 3), False),
    # Removed (v3), then a newer index (v5): the object is back.
    (_unindex("x", 3), _index("x", 5), True),
    # Indexed (v5), then an older removal (v3): the object stays.
    (_index("x", 5), _unindex("x", 3), True),
])
def test_commits_of_one_object_wait_for_each_other(db, first_change, second_change, present):
    async def scenario(first, second, observer):
        name = f"one-object-{first_change['op']}-{first_change['version']}"
        catalog = await _catalog(first, name, portal_type="FieldIndex")
        transaction = await _open_commit(first, catalog, _batch("first", first_change))
        task = asyncio.create_task(_commit(second, catalog, _batch("second", second_change)))
        waits_in = await _waiting_on(observer, second)
        assert waits_in is not None and waits_in.startswith("insert into catalog_inflight"), waits_in
        await transaction.commit()
        await task
        found = await observer.fetchval(f"select count(*) from {catalog.table} where uid = 'x'")
        assert found == (1 if present else 0)

    _run(db, scenario)


def test_a_clear_waits_for_commits_under_way_and_holds_off_new_ones(db):
    async def scenario(first, second, observer):
        registry = CatalogRegistry()
        catalog = await _catalog(first, "clearing", SearchableText="ZCTextIndex", portal_type="FieldIndex")
        transaction = await _open_commit(first, catalog, _batch("a", _index("a", 1, "garden river")))
        clearing = asyncio.create_task(registry.clear(second, catalog))
        assert (await _waiting_on(observer, second)).startswith("select pg_advisory_xact_lock")
        await transaction.commit()
        await clearing
        assert await observer.fetchval(f"select count(*) from {catalog.table}") == 0

        # Now the other way round: a commit waits for an open clear batch, then applies after it.
        transaction = second.transaction()
        await transaction.start()
        clear = Batch.model_validate({"batch_id": "c", "entries": [_index("c", 1, "zope")], "clear": True})
        await batches.apply_one_shot(second, catalog, clear, batches.convert(clear, catalog, 10))
        task = asyncio.create_task(_commit(first, catalog, _batch("d", _index("d", 1, "plone garden"))))
        assert (await _waiting_on(observer, first)).startswith("select pg_advisory_xact_lock_shared")
        await transaction.commit()
        await task
        assert {r["uid"] for r in await observer.fetch(f"select uid from {catalog.table}")} == {"c", "d"}
        kept, recount = await _counts(observer, catalog)
        assert kept == recount

    _run(db, scenario)


async def _two_phase(conn, catalog, batch: Batch):
    """Stage (the text profile kept with the batch as JSON), then commit in a second transaction,
    as the connector does at vote and finish."""
    async with conn.transaction():
        await batches.stage(conn, catalog, batch, batches.convert(batch, catalog, 10_000))
    async with conn.transaction():
        return await batches.commit(conn, catalog, batch.batch_id)


@pytest.mark.parametrize("apply", [_commit, _two_phase], ids=["one-shot", "two-phase"])
def test_many_commits_at_once_end_as_the_versions_decide(db, apply):
    """Eight connections commit batches over a shared set of objects, all at once. Whatever order
    the commits take, each object ends as its newest change says (versions are unique), and the
    text statistics equal a recount of the rows. A deadlock would fail a commit."""
    rnd = random.Random(11)
    uids = [f"u{n}" for n in range(40)]
    version = iter(range(1, 10_000))
    plan = []  # per connection, its batches
    for conn_no in range(8):
        plan.append([])
        for batch_no in range(4):
            changes = {}
            for uid in rnd.sample(uids, rnd.randrange(1, 15)):
                changes[uid] = (_unindex(uid, next(version)) if rnd.random() < 0.25
                                else _index(uid, next(version), _text(rnd)))
            plan[-1].append(_batch(f"c{conn_no}-b{batch_no}", *changes.values()))
    newest = {}
    for batch in (b for batches_ in plan for b in batches_):
        for change in batch.entries:
            if change.uid not in newest or change.version > newest[change.uid].version:
                newest[change.uid] = change

    async def scenario(*conns):
        catalog = await _catalog(conns[0], f"many-at-once-{apply.__name__}", SearchableText="ZCTextIndex",
                                 portal_type="FieldIndex")

        async def client(conn, mine):
            for batch in mine:
                await apply(conn, catalog, batch)

        await asyncio.gather(*(client(conn, mine) for conn, mine in zip(conns, plan, strict=True)))
        observer = conns[0]
        rows = {r["uid"]: r["version"] for r in await observer.fetch(f"select uid, version from {catalog.table}")}
        expected = {uid: change.version for uid, change in newest.items() if change.op == "index"}
        assert rows == expected
        counter = await observer.fetchval("select counter from catalog where id = $1", catalog.id)
        assert counter == sum(len(mine) for mine in plan)
        kept, recount = await _counts(observer, catalog)
        assert kept == recount
        assert await observer.fetchval("select count(*) from catalog_inflight") == 0

    _run(db, scenario, connections=8)


def test_a_schema_change_waits_for_a_batch_staged_and_committing_in_one_transaction(db):
    """Staging creates the batch's row, whose foreign key locks the catalog row against the schema
    change's ``for update``. If the schema change could take the catalog's write lock while the
    staging transaction had not, each would wait for the other (a deadlock, found in review):
    staging takes the write lock first."""
    async def scenario(first, second, observer):
        registry = CatalogRegistry()
        catalog = await _catalog(first, "schema-race", SearchableText="ZCTextIndex", portal_type="FieldIndex")
        batch = _batch("s1", _index("s", 1, "garden"))
        transaction = first.transaction()
        await transaction.start()
        rows = await batches.one_shot_rows(first, catalog, "s1")
        await batches.stage(first, catalog, batch, batches.convert(batch, catalog, 10), rows)
        update = SchemaUpdate(indexes=[IndexDeclaration(name="review_state", type="FieldIndex")])
        changing = asyncio.create_task(registry.update_schema(second, catalog, update))
        assert (await _waiting_on(observer, second)).startswith("select pg_advisory_xact_lock")
        result = await batches.commit(first, catalog, "s1", rows)
        await transaction.commit()
        updated = await changing
        assert result.applied == 1 and "review_state" in updated.schema.indexes
        kept, recount = await _counts(observer, catalog)
        assert kept == recount

    _run(db, scenario)


def test_a_staged_batch_committed_while_its_catalog_is_dropped_ends_cleanly(db):
    async def scenario(first, second, observer):
        registry = CatalogRegistry()
        catalog = await _catalog(first, "dropping", portal_type="FieldIndex")
        batch = _batch("d1", _index("d", 1))
        async with first.transaction():
            await batches.stage(first, catalog, batch, batches.convert(batch, catalog, 10))
        transaction = second.transaction()
        await transaction.start()
        await registry.drop(second, catalog)

        async def settle():
            async with first.transaction():
                return await batches.commit(first, catalog, "d1")

        task = asyncio.create_task(settle())
        assert (await _waiting_on(observer, first)).startswith("select pg_advisory_xact_lock_shared")
        await transaction.commit()
        with pytest.raises(CatalogError) as raised:
            await task
        assert raised.value.status == 404
        assert await observer.fetchval("select count(*) from catalog where name = 'dropping'") == 0

    _run(db, scenario)
