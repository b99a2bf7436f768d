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


def _terminate(database_url, pid):
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        assert conn.execute("select pg_terminate_backend(%s)", (pid,)).fetchone()[0]


def test_a_kept_connection_the_server_closed_is_replaced(database_url):
    """pg_terminate_backend (or a restart, idle_session_timeout) closes a kept connection: the
    next search gets a live one, not the closed one (it raised InterfaceError: 'connection has
    been released back to the pool')."""
    async def scenario():
        db = Database(Settings(pool_min_size=1, pool_max_size=4), database_url)
        await db.open()
        try:
            pool, conn = await db.acquire_read(None)
            pid = conn.get_server_pid()
            await db.release_read(pool, conn)
            assert db._kept == [conn]
            await asyncio.to_thread(_terminate, database_url, pid)
            await asyncio.sleep(0.2)  # the close reaches the client
            pool, again = await db.acquire_read(None)
            assert await again.fetchval("select pg_backend_pid()") != pid
            await db.release_read(pool, again)
        finally:
            await asyncio.wait_for(db.close(), 10)

    asyncio.run(scenario())


def test_a_connection_lost_in_use_is_not_given_back_to_the_pool(database_url):
    """A connection whose statement failed because the server ended the session is terminated, and
    the pool's next connection is a new session."""
    import asyncpg
    import pytest

    from catalog_service.store.database import lost_connection

    async def scenario():
        db = Database(Settings(pool_min_size=1, pool_max_size=1), database_url)
        await db.open()
        try:
            with pytest.raises(asyncpg.PostgresError) as lost:
                async with db.acquire() as conn:
                    pid = conn.get_server_pid()
                    await conn.execute("select pg_terminate_backend(pg_backend_pid())")
            assert lost_connection(lost.value)
            async with db.acquire() as conn:
                assert await conn.fetchval("select pg_backend_pid()") != pid
        finally:
            await asyncio.wait_for(db.close(), 10)

    asyncio.run(scenario())
