"""The service analyzes a catalog's partition after enough commits (store/upkeep.py), without
waiting for autovacuum: checked on PostgreSQL's own record of manual ANALYZE runs
(``pg_stat_user_tables.last_analyze``; autovacuum's are ``last_autoanalyze``)."""

from __future__ import annotations

import asyncio
import time
import uuid

import asyncpg
import psycopg
import pytest

from catalog_schemas.api import Batch, CatalogCreate, IndexDeclaration
from catalog_service.store import batches
from catalog_service.store.catalogs import CatalogRegistry
from catalog_service.store.database import _init_connection
from catalog_service.store.migrations import migrate
from catalog_service.store.upkeep import StatisticsUpkeep
from tests.pg import create_database, drop_database

INDEXES = [IndexDeclaration(name="portal_type", type="FieldIndex"),
           IndexDeclaration(name="allowedRolesAndUsers", type="KeywordIndex")]


def entries(n: int, start: int = 0) -> list[dict]:
    return [{"op": "index", "uid": f"u{i}", "path": f"/plone/d{i}",
             "values": {"portal_type": "Document" if i % 2 else "News Item", "allowedRolesAndUsers": ["Anonymous"]}}
            for i in range(start, start + n)]


def analyzed_manually(dsn: str, table: str):
    with psycopg.connect(dsn) as conn:
        return conn.execute("select last_analyze from pg_stat_user_tables where relname = %s", (table,)).fetchone()[0]


def test_a_catalog_filled_over_http_is_analyzed_by_the_service(live_service, database_url):
    name = "st-" + uuid.uuid4().hex[:8]
    with live_service.client() as admin:
        created = admin.post("/catalogs", json=CatalogCreate(id=name, indexes=INDEXES).model_dump())
        assert created.status_code == 201, created.text
        try:
            with psycopg.connect(database_url) as conn:
                table = f"catalog_object_{conn.execute('select id from catalog where name = %s', (name,)).fetchone()[0]}"
            headers = {"Authorization": f"Bearer {created.json()['token']}"}
            response = admin.post(f"/catalogs/{name}/batches", headers=headers,
                                  json={"batch_id": "b1", "entries": entries(80)})
            assert response.status_code == 200, response.text
            deadline = time.monotonic() + 20
            while analyzed_manually(database_url, table) is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert analyzed_manually(database_url, table) is not None
        finally:
            admin.delete(f"/catalogs/{name}")


@pytest.fixture
def dsn():
    dsn, admin = create_database("up")
    yield dsn
    drop_database(admin, dsn)


class Pool:
    """What StatisticsUpkeep needs of the service's Database: acquire()."""

    def __init__(self, pool):
        self.pool = pool

    def acquire(self):
        return self.pool.acquire()


def run(dsn, body):
    async def main():
        pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2, init=_init_connection)
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
                catalog, _ = await CatalogRegistry().create(conn, CatalogCreate(id="up", indexes=INDEXES))

                async def write(n: int, start: int) -> int:
                    batch = Batch.model_validate({"batch_id": f"b{start}", "entries": entries(n, start)})
                    async with conn.transaction():
                        result = await batches.apply_one_shot(conn, catalog, batch,
                                                              batches.convert(batch, catalog, 1000))
                    return result.applied

                await body(Pool(pool), catalog, write)
        finally:
            await pool.close()

    asyncio.run(main())


async def analyzed(upkeep: StatisticsUpkeep, runs: int, seconds: float = 5.0) -> None:
    """Wait until ``upkeep`` ran ANALYZE ``runs`` times (or the time is up)."""
    deadline = time.monotonic() + seconds
    while upkeep.analyzed < runs and time.monotonic() < deadline:
        await asyncio.sleep(0.02)


def test_analyzed_once_50_rows_changed_then_after_10_percent_more(dsn):
    async def body(db, catalog, write):
        upkeep = StatisticsUpkeep(db, pause=0.01)
        upkeep.written(catalog, await write(49, 0))
        await asyncio.sleep(0.3)
        assert upkeep.analyzed == 0 and analyzed_manually(dsn, catalog.table) is None
        upkeep.written(catalog, await write(1, 49))
        await analyzed(upkeep, 1)
        assert upkeep.analyzed == 1 and analyzed_manually(dsn, catalog.table) is not None
        # Now the partition holds 50 rows: the next ANALYZE comes after 50 + 5 more changes.
        upkeep.written(catalog, await write(54, 50))
        await asyncio.sleep(0.3)
        assert upkeep.analyzed == 1
        upkeep.written(catalog, await write(1, 104))
        await analyzed(upkeep, 2)
        assert upkeep.analyzed == 2
        await upkeep.close()

    run(dsn, body)


def test_a_threshold_passed_during_the_pause_is_served_when_it_ends(dsn):
    async def body(db, catalog, write):
        upkeep = StatisticsUpkeep(db, pause=1.0)
        upkeep.written(catalog, await write(60, 0))
        await analyzed(upkeep, 1)
        first = time.monotonic()
        upkeep.written(catalog, await write(60, 60))  # past the threshold again, within the pause
        await asyncio.sleep(0.3)
        assert upkeep.analyzed == 1
        await analyzed(upkeep, 2)
        assert upkeep.analyzed == 2 and time.monotonic() - first >= 0.9
        await upkeep.close()

    run(dsn, body)


def test_pause_zero_never_analyzes(dsn):
    async def body(db, catalog, write):
        upkeep = StatisticsUpkeep(db, pause=0)
        upkeep.written(catalog, await write(200, 0))
        await asyncio.sleep(0.3)
        assert upkeep.analyzed == 0 and analyzed_manually(dsn, catalog.table) is None
        await upkeep.close()

    run(dsn, body)


def test_a_catalog_analyzed_before_the_process_started_waits_for_a_tenth_of_its_rows(dsn):
    async def body(db, catalog, write):
        await write(200, 0)
        async with db.acquire() as conn:
            await conn.execute(f"analyze {catalog.table}")
        before = analyzed_manually(dsn, catalog.table)
        upkeep = StatisticsUpkeep(db, pause=0.01)  # a new process: it knows nothing of the catalog
        upkeep.written(catalog, await write(60, 200))  # 50 + 10% of 200 = 70: not yet
        await asyncio.sleep(0.3)
        assert upkeep.analyzed == 0 and analyzed_manually(dsn, catalog.table) == before
        upkeep.written(catalog, await write(10, 260))
        await analyzed(upkeep, 1)
        assert upkeep.analyzed == 1 and analyzed_manually(dsn, catalog.table) > before
        await upkeep.close()

    run(dsn, body)
