"""The service's connection handling for searches (store/database.py): a worker keeps a few
primary connections between searches instead of returning them to asyncpg's pool, only clean
ones, and gives them back when it closes."""

from __future__ import annotations

import asyncio

from catalog_service.settings import Settings
from catalog_service.store.database import KEPT_FOR_SEARCHES, Database


def test_searches_keep_clean_connections_and_give_them_back(database_url):
    async def scenario():
        db = Database(Settings(pool_min_size=1, pool_max_size=KEPT_FOR_SEARCHES + 2), database_url)
        await db.open()
        try:
            pool, first = await db.acquire_read(None)
            assert pool is db.primary
            assert await first.fetchval("select 1") == 1
            await db.release_read(pool, first)
            again = (await db.acquire_read(None))[1]
            assert again is first  # kept, not a pool round trip
            # One in a transaction is not kept (the pool resets it), nor one past the limit.
            held = [(await db.acquire_read(None))[1] for _ in range(KEPT_FOR_SEARCHES)]
            transaction = again.transaction()
            await transaction.start()
            await db.release_read(pool, again)
            assert again not in db._kept
            for conn in held:
                await db.release_read(pool, conn)
            assert db._kept == held[:KEPT_FOR_SEARCHES]
            # Writers still get connections: the pool lends its others.
            async with db.acquire() as writer:
                assert await writer.fetchval("select 2") == 2
        finally:
            await asyncio.wait_for(db.close(), 10)  # kept connections go back, the pool closes
        assert db._kept == []
        assert db.primary.is_closing()

    asyncio.run(scenario())
