"""EXPLAIN (ANALYZE, BUFFERS) of the statements the service runs for the benchmark's queries.

    python benchmarks/_catalog_plans.py --objects 100000 [--out plans.txt]

Fills a catalog in a fresh database through the store functions (no HTTP: faster to set up),
then runs the service's own ``store.search.search`` for each query of catalog_bench.py with a
connection that explains the statement instead of answering it, so what is explained is exactly
the SQL text and parameters the service sends (with the session settings of its pool).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from catalog_bench import PRINCIPALS, plone_queries  # noqa: E402

from catalog_schemas.api import SearchRequest  # noqa: E402
from catalog_service.cli import load_demo  # noqa: E402
from catalog_service.planner.plan import Limits, Security  # noqa: E402
from catalog_service.settings import Settings  # noqa: E402
from catalog_service.store.catalogs import CatalogRegistry  # noqa: E402
from catalog_service.store.database import _init_connection, server_settings  # noqa: E402
from catalog_service.store.search import search  # noqa: E402
from tests.pg import create_database, drop_database  # noqa: E402


class Explained(Exception):
    """Raised by the explaining connection once the plan is in hand: the search stops there."""

    def __init__(self, plan: str):
        self.plan = plan


class ExplainingConnection:
    def __init__(self, conn: asyncpg.Connection):
        self.conn = conn

    async def fetch(self, sql: str, *params):
        rows = await self.conn.fetch(f"explain (analyze, buffers) {sql}", *params)
        raise Explained("\n".join(r[0] for r in rows))

    async def fetchval(self, sql: str, *params):
        return await self.conn.fetchval(sql, *params)


async def explain_all(dsn: str, name: str, size: int) -> str:
    conn = await asyncpg.connect(dsn, server_settings=server_settings(Settings()))
    await _init_connection(conn)
    out = []
    try:
        catalog = await CatalogRegistry().current(conn, name)
        security = Security(principals=tuple(PRINCIPALS), effective_at=datetime.now(UTC))
        for q in plone_queries(size):
            if q.anonymous:
                continue  # the same statement as the connector's with Anonymous
            request = SearchRequest(query=q.query, b_size=q.b_size)
            for _ in range(3):  # warm caches as the benchmark's repeated runs do
                try:
                    await search(ExplainingConnection(conn), catalog, request, security, Limits())
                except Explained as explained:
                    plan = explained.plan
            out.append(f"-- {q.label} at {size:,} objects\n{plan}\n")
    finally:
        await conn.close()
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=100000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    dsn, admin = create_database("plans")
    try:
        started = time.perf_counter()
        asyncio.run(_migrate_and_load(dsn, args.objects))
        print(f"loaded {args.objects:,} objects in {time.perf_counter() - started:.0f} s", file=sys.stderr)
        text = asyncio.run(explain_all(dsn, "plans", args.objects))
    finally:
        drop_database(admin, dsn)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


async def _migrate_and_load(dsn: str, count: int) -> None:
    from catalog_service.cli import _migrate

    await _migrate(dsn)
    await load_demo(dsn, "plans", count, chunk=5000, quiet=True)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("vacuum analyze")
    finally:
        await conn.close()


if __name__ == "__main__":
    raise SystemExit(main())
