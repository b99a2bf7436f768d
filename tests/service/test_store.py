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


def _cli(dsn, *args, timeout=300):
    return subprocess.run([sys.executable, "-m", "catalog_service.cli", *args],
                          env={"DATABASE_URL": dsn, "PATH": ""}, capture_output=True, text=True, timeout=timeout)


async def _index_state(conn, table):
    """(names of the partition's invalid indexes, its number of extended statistics)."""
    invalid = {r["name"] for r in await conn.fetch(
        "select c.relname as name from pg_index i join pg_class c on c.oid = i.indexrelid "
        "where i.indrelid = $1::regclass and not i.indisvalid", table)}
    statistics = await conn.fetchval("select count(*) from pg_statistic_ext where stxrelid = $1::regclass", table)
    return invalid, statistics


def test_two_migrate_runs_at_once_build_each_index_once():
    """Two `catalog-service migrate` processes started together on a catalog whose indexes and
    statistics are gone: both succeed, and the indexes and statistics are built once, valid (the
    second run waits for the first's upgrade, then finds nothing to do)."""
    from catalog_service.cli import load_demo
    from catalog_service.store.catalogs import defer_indexes, missing_indexes, secondary_indexes

    async def prepare(dsn):
        conn = await connect(dsn)
        try:
            await migrate(conn)
            await load_demo(dsn, "site", 300, quiet=True)
            catalog, _ = await CatalogRegistry().get(conn, "site")
            _, statistics = await _index_state(conn, catalog.table)
            assert statistics > 0
            await defer_indexes(conn, catalog)
            for row in await conn.fetch("select stxname from pg_statistic_ext where stxrelid = $1::regclass",
                                        catalog.table):
                await conn.execute(f'drop statistics "{row["stxname"]}"')
            return catalog, statistics
        finally:
            await conn.close()

    async def check(dsn, catalog):
        conn = await connect(dsn)
        try:
            return await missing_indexes(conn, catalog), await _index_state(conn, catalog.table)
        finally:
            await conn.close()

    for _ in range(3):
        dsn, admin = create_database("m")
        try:
            catalog, statistics = asyncio.run(prepare(dsn))
            env = {"DATABASE_URL": dsn, "PATH": ""}
            runs = [subprocess.Popen([sys.executable, "-m", "catalog_service.cli", "migrate"], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
            outputs = [run.communicate(timeout=300) for run in runs]
            for run, (_, err) in zip(runs, outputs, strict=True):
                assert run.returncode == 0, err
            built = [line for _, err in outputs for line in err.splitlines() if "site: built" in line]
            assert len(built) == len(secondary_indexes(catalog)), built
            missing, (invalid, rebuilt_statistics) = asyncio.run(check(dsn, catalog))
            assert missing == [] and invalid == set()
            assert rebuilt_statistics == statistics
        finally:
            drop_database(admin, dsn)


def test_upgrade_waits_for_the_process_holding_the_upgrade_lock(fresh_db):
    from catalog_service.store.catalogs import defer_indexes, missing_indexes, upgrade_lock

    async def run():
        holder, other = await connect(fresh_db), await connect(fresh_db)
        try:
            await migrate(holder)
            registry = CatalogRegistry()
            catalog, _ = await registry.create(holder, CatalogCreate(
                id="w", indexes=[IndexDeclaration(name="portal_type", type="FieldIndex")]))
            await defer_indexes(holder, catalog)
            async with upgrade_lock(holder):
                # What a service worker does at start: another process is at it, so skip.
                assert await registry.upgrade_partitions(other, wait=False) == []
                waiting = asyncio.create_task(registry.upgrade_partitions(other, build_indexes=True))
                await asyncio.sleep(1)
                assert not waiting.done()
            await asyncio.wait_for(waiting, 60)
            assert await missing_indexes(holder, catalog) == []
        finally:
            await holder.close()
            await other.close()

    asyncio.run(run())


@pytest.mark.parametrize("repair", [("migrate",), ("indexes", "build", "inv")])
def test_an_index_left_invalid_by_a_failed_concurrent_build_is_built_again(fresh_db, repair):
    """A CREATE INDEX CONCURRENTLY that fails leaves an invalid index under its name. It counts as
    missing: `indexes missing` lists it, and `migrate` and `indexes build` drop and rebuild it."""
    import asyncpg

    async def break_parent_index():
        conn = await connect(fresh_db)
        try:
            await migrate(conn)
            catalog, _ = await CatalogRegistry().create(conn, CatalogCreate(
                id="inv", indexes=[IndexDeclaration(name="portal_type", type="FieldIndex")]))
            batch = Batch.model_validate({"batch_id": "b", "entries": [
                {"op": "index", "uid": f"u{i}", "path": f"/plone/f/d{i}", "values": {"portal_type": "Document"}}
                for i in range(2)]})
            async with conn.transaction():
                await batches.apply_one_shot(conn, catalog, batch, batches.convert(batch, catalog, 10))
            name = f"{catalog.table}_parent"
            await conn.execute(f"drop index {name}")
            # Both objects have the same parent: the unique build fails and leaves its index behind.
            with pytest.raises(asyncpg.UniqueViolationError):
                await conn.execute(f"create unique index concurrently {name} on {catalog.table} (parent)")
            assert (await _index_state(conn, catalog.table))[0] == {name}
            return catalog.table, name
        finally:
            await conn.close()

    async def definition(table, name):
        conn = await connect(fresh_db)
        try:
            invalid, _ = await _index_state(conn, table)
            return invalid, await conn.fetchval("select indexdef from pg_indexes where indexname = $1", name)
        finally:
            await conn.close()

    table, name = asyncio.run(break_parent_index())
    out = _cli(fresh_db, "indexes", "missing", "inv")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [name]
    out = _cli(fresh_db, *repair)
    assert out.returncode == 0, out.stderr
    assert f"built {name}" in out.stderr
    invalid, indexdef = asyncio.run(definition(table, name))
    assert invalid == set()
    assert "UNIQUE" not in indexdef and indexdef.endswith("(parent, rid)")
    out = _cli(fresh_db, "indexes", "missing", "inv")
    assert out.returncode == 0 and out.stdout == "", out
