"""Store-level behaviour on a real PostgreSQL: migrations, the staged-batch resolver, the CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from catalog_schemas.api import Batch, CatalogCreate, IndexDeclaration
from catalog_service.store import batches
from catalog_service.store.catalogs import CatalogRegistry
from catalog_service.store.database import _init_connection
from catalog_service.store.migrations import available, migrate, pending
from tests.pg import create_database, drop_database


async def connect(dsn):
    import asyncpg

    conn = await asyncpg.connect(dsn)
    await _init_connection(conn)
    return conn


@pytest.fixture
def fresh_db():
    dsn, admin = create_database("m")
    yield dsn
    drop_database(admin, dsn)


def test_migrations_twice_and_concurrently(fresh_db):
    async def run():
        conns = [await connect(fresh_db) for _ in range(4)]
        try:
            results = await asyncio.gather(*(migrate(c) for c in conns))
            applied = [name for result in results for name in result]
            assert sorted(applied) == sorted(name for _, name, _ in available())  # each applied once
            assert await migrate(conns[0]) == []
            assert await pending(conns[0]) == []
        finally:
            for c in conns:
                await c.close()

    asyncio.run(run())


def test_expired_staged_batches_are_resolved_from_txn_outcome(fresh_db):
    async def run():
        conn = await connect(fresh_db)
        try:
            await migrate(conn)
            registry = CatalogRegistry()
            catalog, _ = await registry.create(conn, CatalogCreate(
                id="r", indexes=[IndexDeclaration(name="portal_type", type="FieldIndex")]))
            for batch_id, portal_type in (("zodb-committed", "Document"), ("zodb-lost", "Folder")):
                batch = Batch.model_validate({"batch_id": batch_id, "entries": [
                    {"op": "index", "uid": batch_id, "path": f"/plone/{batch_id}",
                     "values": {"portal_type": portal_type}}]})
                async with conn.transaction():
                    await batches.stage(conn, catalog, batch, batches.convert(batch, catalog, 10))
            # The storage recorded only the first batch with its ZODB commit.
            await conn.execute("insert into catalog_txn_outcome (batch_id, tid) values ('zodb-committed', 1)")
            assert await batches.resolve_expired(conn, ttl_seconds=3600) == []  # not expired yet
            await conn.execute("update catalog_batch set created = now() - interval '2 hours'")
            outcomes = sorted(await batches.resolve_expired(conn, ttl_seconds=3600))
            assert outcomes == [("r", "zodb-committed", "committed"), ("r", "zodb-lost", "aborted")]
            rows = await conn.fetch(f"select uid from {catalog.table}")
            assert [r["uid"] for r in rows] == ["zodb-committed"]
            assert await conn.fetchval("select count(*) from catalog_staged") == 0
        finally:
            await conn.close()

    asyncio.run(run())


def test_cli_migrate_and_stats(fresh_db):
    env = {"DATABASE_URL": fresh_db, "PATH": ""}
    out = subprocess.run([sys.executable, "-m", "catalog_service.cli", "migrate"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "applied" in out.stdout
    out = subprocess.run([sys.executable, "-m", "catalog_service.cli", "demo", "--objects", "300"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "created" in out.stdout
    out = subprocess.run([sys.executable, "-m", "catalog_service.cli", "stats"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    line = [row for row in out.stdout.splitlines() if row.startswith("demo")][0]
    assert line.split()[1] == "300"


def test_migrate_builds_the_indexes_an_older_catalog_lacks(fresh_db):
    """A catalog made before sort indexes carried the rid: the service starts with it and says what
    is missing; `catalog-service migrate` builds the new indexes and drops the ones they replace."""
    from catalog_service.indexes.base import index_ident

    async def make_old_catalog():
        conn = await connect(fresh_db)
        try:
            await migrate(conn)
            registry = CatalogRegistry()
            catalog, _ = await registry.create(conn, CatalogCreate(id="old", indexes=[
                IndexDeclaration(name="modified", type="DateIndex"),
                IndexDeclaration(name="getObjPositionInParent", type="GopipIndex")]))
            t = catalog.table
            # As the earlier version declared them.
            await conn.execute(f"drop index {index_ident(t, 'modified', 'r')}")
            await conn.execute(f"create index {index_ident(t, 'modified', 'v')} on {t} "
                               f"(((idx->>'modified')::bigint))")
            await conn.execute(f"drop index {index_ident(t, 'getObjPositionInParent', 'pr')}")
            await conn.execute(f"create index {index_ident(t, 'getObjPositionInParent', 'p')} on {t} "
                               f"(parent, ((idx->>'getObjPositionInParent')::bigint))")
            missing = await registry.upgrade_partitions(conn)  # what the service does at start
            assert sorted(missing) == sorted([f"old: {index_ident(t, 'modified', 'r')}",
                                              f"old: {index_ident(t, 'getObjPositionInParent', 'pr')}"])
            return t
        finally:
            await conn.close()

    async def index_names(table):
        conn = await connect(fresh_db)
        try:
            return {r["indexname"] for r in await conn.fetch(
                "select indexname from pg_indexes where tablename = $1", table)}
        finally:
            await conn.close()

    table = asyncio.run(make_old_catalog())
    out = subprocess.run([sys.executable, "-m", "catalog_service.cli", "migrate"],
                         env={"DATABASE_URL": fresh_db, "PATH": ""}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "old: built" in out.stderr
    names = asyncio.run(index_names(table))
    assert {f"{table}_modified_r", f"{table}_getObjPositionInParent_pr"} <= names
    assert not {f"{table}_modified_v", f"{table}_getObjPositionInParent_p"} & names
    # Run again: nothing left to build.
    out = subprocess.run([sys.executable, "-m", "catalog_service.cli", "migrate"],
                         env={"DATABASE_URL": fresh_db, "PATH": ""}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "built" not in out.stderr, out.stderr
