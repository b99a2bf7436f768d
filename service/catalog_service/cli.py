"""``catalog-service``: the operator's command line.

    catalog-service serve [--host H] [--port P] [--workers N] [--demo]
    catalog-service migrate
    catalog-service demo [--catalog demo] [--objects 2000]
    catalog-service stats [CATALOG]
    catalog-service indexes {missing,defer,build} CATALOG
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import sys
import time

from .settings import get_settings


def _dsn() -> str:
    from .db import resolve_dsn

    return resolve_dsn(get_settings())


async def _connect(dsn: str):
    import asyncpg

    from .store.database import _init_connection

    conn = await asyncpg.connect(dsn)
    await _init_connection(conn)
    return conn


async def _migrate(dsn: str) -> list[str]:
    from .store.catalogs import CatalogRegistry
    from .store.migrations import migrate

    conn = await _connect(dsn)
    try:
        applied = await migrate(conn)
        # Indexes this version declares and older catalogs lack (or hold invalid) are built here
        # (concurrently: the service may keep running), not at the service's start; a second
        # migrate at the same time waits for this one (store.catalogs.upgrade_lock).
        await CatalogRegistry().upgrade_partitions(
            conn, build_indexes=True, progress=lambda line: print(line, file=sys.stderr, flush=True))
        return applied
    finally:
        await conn.close()


async def load_demo(dsn: str, name: str, count: int, chunk: int = 2000, quiet: bool = False) -> str | None:
    """Create the demo catalog (unless it exists) and index ``count`` objects into it.
    Returns the catalog's connector token when it was created."""
    from catalog_schemas.api import Batch

    from .demo import objects, plone_catalog
    from .errors import NotFound
    from .store import batches
    from .store.catalogs import CatalogRegistry, defer_indexes

    registry = CatalogRegistry()
    conn = await _connect(dsn)
    try:
        try:
            await registry.get(conn, name)
            if not quiet:
                print(f"catalog {name!r} exists; not loading the demo again")
            return None
        except NotFound:
            pass
        catalog, token = await registry.create(conn, plone_catalog(name))
        started = time.perf_counter()
        # A large demo loads as a rebuild does: indexes built at the end (docs/decisions/0010).
        deferred = count >= DEFER_INDEXES_FROM
        if deferred:
            await defer_indexes(conn, catalog)
        pending: list[dict] = []
        done = 0

        async def flush():
            nonlocal done
            batch = Batch.model_validate({"batch_id": f"demo-{done}", "entries": pending})
            changes = batches.convert(batch, catalog, 1_000_000)
            async with conn.transaction():
                await batches.apply_one_shot(conn, catalog, batch, changes)
            done += len(pending)
            pending.clear()
            if not quiet:
                rate = done / (time.perf_counter() - started)
                print(f"\rindexed {done}/{count} objects ({rate:,.0f}/s)", end="", file=sys.stderr, flush=True)

        for entry in objects(count):
            pending.append(entry)
            if len(pending) >= chunk:
                await flush()
        if pending:
            await flush()
        if not quiet:
            print(file=sys.stderr)
        if deferred:
            await _build(dsn, catalog, None if quiet else lambda line: print(line, file=sys.stderr, flush=True))
        else:
            await conn.execute(f"analyze {catalog.table}")
        return token
    finally:
        await conn.close()


async def _stats(dsn: str, name: str | None) -> None:
    conn = await _connect(dsn)
    try:
        rows = await conn.fetch(
            "select c.name, c.title, c.counter, jsonb_array_length(c.indexes) as indexes, "
            "jsonb_array_length(c.metadata) as metadata, "
            "pg_total_relation_size(format('catalog_object_%s', c.id)) as bytes "
            "from catalog c where $1::text is null or c.name = $1 order by c.name", name)
        if not rows:
            print("no catalogs" if name is None else f"no catalog {name!r}")
            return
        print(f"{'catalog':<20} {'objects':>10} {'counter':>8} {'indexes':>7} {'metadata':>8} {'size':>10}")
        for r in rows:
            cid = await conn.fetchval("select id from catalog where name = $1", r["name"])
            objects = await conn.fetchval(f"select count(*) from catalog_object_{int(cid)}")
            print(f"{r['name']:<20} {objects:>10} {r['counter']:>8} {r['indexes']:>7} {r['metadata']:>8} "
                  f"{r['bytes'] / 1048576:>8.1f}MB")
    finally:
        await conn.close()


# Demo catalogs from this many objects on are loaded with their indexes deferred.
DEFER_INDEXES_FROM = 20000


async def _build(dsn: str, catalog, progress) -> list[str]:
    """Build the catalog's missing indexes on a pool of the configured number of builders."""
    import asyncpg

    from .store.catalogs import build_indexes
    from .store.database import _init_connection

    settings = get_settings()
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=settings.index_builders + 1, init=_init_connection)
    try:
        return await build_indexes(pool, catalog, builders=settings.index_builders,
                                   memory=settings.index_build_memory, progress=progress)
    finally:
        await pool.close()


async def _indexes(dsn: str, action: str, name: str) -> int:
    """List, defer or build a catalog's secondary indexes (docs/decisions/0010)."""
    from .errors import NotFound
    from .store.catalogs import CatalogRegistry, defer_indexes, missing_indexes, plain_name

    conn = await _connect(dsn)
    try:
        try:
            catalog, _ = await CatalogRegistry().get(conn, name)
        except NotFound:
            print(f"no catalog {name!r}", file=sys.stderr)
            return 1
        if action == "missing":
            for _, index, _ in await missing_indexes(conn, catalog):
                print(plain_name(index))
            return 0
        if action == "defer":
            dropped = await defer_indexes(conn, catalog)
            print(f"{len(dropped)} indexes of {name!r} deferred; build them with `catalog-service indexes build {name}`")
            return 0
    finally:
        await conn.close()
    started = time.perf_counter()
    built = await _build(dsn, catalog, lambda line: print(line, file=sys.stderr, flush=True))
    print(f"{len(built)} indexes of {name!r} built in {time.perf_counter() - started:.1f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="catalog-service", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP service")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=None)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--demo", action="store_true", help="load the demo catalog first if it is missing")
    sub.add_parser("migrate", help="apply database migrations")
    demo = sub.add_parser("demo", help="create and fill a demo catalog")
    demo.add_argument("--catalog", default="demo")
    demo.add_argument("--objects", type=int, default=2000)
    stats = sub.add_parser("stats", help="show catalogs and their sizes")
    stats.add_argument("catalog", nargs="?")
    indexes = sub.add_parser("indexes", help="list, defer (before a bulk load) or build a catalog's SQL indexes")
    indexes.add_argument("action", choices=["missing", "defer", "build"])
    indexes.add_argument("catalog")
    args = parser.parse_args(argv)

    settings = get_settings()
    if args.command == "migrate":
        applied = asyncio.run(_migrate(_dsn()))
        print("applied: " + ", ".join(applied) if applied else "database is up to date")
        return 0
    if args.command == "demo":
        dsn = _dsn()
        asyncio.run(_migrate(dsn))
        token = asyncio.run(load_demo(dsn, args.catalog, args.objects))
        if token:
            print(f"catalog {args.catalog!r} created; its connector token: {token}")
        return 0
    if args.command == "stats":
        asyncio.run(_stats(_dsn(), args.catalog))
        return 0
    if args.command == "indexes":
        return asyncio.run(_indexes(_dsn(), args.action, args.catalog))

    import uvicorn

    dsn = _dsn()
    # Workers must reach the same database, embedded or not.
    os.environ["DATABASE_URL"] = dsn
    if not settings.admin_token:
        token = secrets.token_urlsafe(24)
        os.environ["CATALOG_ADMIN_TOKEN"] = token
        print(f"CATALOG_ADMIN_TOKEN was not set; this run's admin token: {token}", file=sys.stderr)
    if settings.migrate_on_start or args.demo:
        asyncio.run(_migrate(dsn))
    if args.demo:
        token = asyncio.run(load_demo(dsn, "demo", 2000))
        if token:
            print(f"demo catalog created; its connector token: {token}", file=sys.stderr)
    host = args.host or settings.host
    port = args.port or settings.port
    print(f"catalog service on http://{host}:{port}  (try: curl 'http://{host}:{port}/search?catalog=demo"
          f"&SearchableText=plone&b_size=3')", file=sys.stderr)
    get_settings.cache_clear()
    uvicorn.run("catalog_service.app:app_factory", factory=True, host=host, port=port, workers=args.workers,
                log_level=settings.log_level, access_log=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
