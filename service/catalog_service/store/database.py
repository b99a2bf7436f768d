"""Connection pools: the primary for writes, optional replicas for queries."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from ..errors import Unavailable
from ..settings import Settings

log = logging.getLogger(__name__)

# A connection the server closed or lost while the service held it: a terminated backend, a
# restart or failover, idle_session_timeout. Its statement did not run, or its outcome is unknown.
_LOST = (asyncpg.ConnectionDoesNotExistError, asyncpg.AdminShutdownError, asyncpg.CrashShutdownError)
# asyncpg's words (InterfaceError, InternalClientError) for using such a connection, or one that
# the server's last message, the FATAL error of a shutdown or a pg_terminate_backend, left in the
# middle of its protocol while the close is still on its way. It says "another operation is in
# progress" also when two tasks share a connection, which would be a bug of the service: such a
# request too is run again (api.deps.idempotent), with a warning in the log.
_LOST_WORDS = ("connection is closed", "connection has been released back to the pool",
               "another operation is in progress", "another operation (")
# No connection to be had: the server is away, starting, shutting down or full, or the pool
# waited too long (OSError: refused, no socket, unreachable; TimeoutError is one).
_UNREACHABLE = (asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError,
                OSError)


def lost_connection(exc: BaseException) -> bool:
    """Did ``exc`` come from a connection that the server closed or lost?"""
    if isinstance(exc, _LOST):
        return True
    return isinstance(exc, (asyncpg.InterfaceError, asyncpg.InternalClientError)) and any(
        words in str(exc) for words in _LOST_WORDS)


def database_unavailable(exc: BaseException) -> bool:
    """Is ``exc`` the database being away (a 503 to try again), rather than a fault of the service?"""
    return lost_connection(exc) or isinstance(exc, _UNREACHABLE)


def _alive(conn) -> bool:
    """Is a connection acquired from the pool still usable? When the server closes one, asyncpg
    hands its holder back to the pool and detaches the proxy (``_con`` becomes None); every call on
    the proxy then raises, ``is_closed()`` included."""
    raw = conn._con
    return raw is not None and not raw.is_closed()


def _terminate(conn) -> None:
    """Close a pool connection that the server lost, so that it is never handed out again: one
    left in the middle of asyncpg's protocol would fail the next request too. The pool replaces it."""
    raw = conn._con
    if raw is not None:
        raw.terminate()


async def _give_back(pool: asyncpg.Pool, conn) -> None:
    """``pool.release(conn)``, also when the server closed the connection before the release ran:
    asyncpg has then given the holder back itself, and its release task, finding the holder free,
    raises InternalClientError though nothing is wrong."""
    try:
        await pool.release(conn)
    except asyncpg.InternalClientError:
        if conn._con is not None:
            raise


class _Acquired:
    """``async with db.acquire() as conn``: a connection of the pool, given back when done, or
    terminated if the server lost it (see _terminate)."""

    __slots__ = ("pool", "conn")

    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool
        self.conn = None

    async def __aenter__(self):
        self.conn = await self.pool.acquire()
        return self.conn

    async def __aexit__(self, kind, exc, traceback) -> None:
        conn, self.conn = self.conn, None
        if exc is not None and lost_connection(exc):
            _terminate(conn)
        await _give_back(self.pool, conn)


async def _init_connection(conn: asyncpg.Connection) -> None:
    # jsonb stays text (binary format: a version byte, then the text), so metadata passes through
    # without being parsed, and COPY in binary works.
    await conn.set_type_codec("jsonb", encoder=_jsonb_encode, decoder=_jsonb_decode, schema="pg_catalog",
                              format="binary")


def _jsonb_encode(text: str | bytes) -> bytes:
    """JSON text, or its UTF-8 bytes (the batch code has them from orjson), as binary jsonb."""
    return b"\x01" + (text if isinstance(text, bytes) else text.encode())


def _jsonb_decode(data: bytes) -> str:
    return data[1:].decode()


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Return a connection to the pool as it is: asyncpg has already rolled back an open
    transaction. The default reset (``RESET ALL; UNLISTEN *; CLOSE ALL; pg_advisory_unlock_all()``)
    is one more round trip per request, and the service leaves no session state behind: settings
    are fixed when a connection starts (``server_settings``), changed only with ``SET LOCAL``, its
    one session lock (``store.catalogs.upgrade_lock``) is released before the connection comes
    back (or the connection is closed), it listens to nothing, and declares no cursors outside
    transactions."""


def server_settings(settings: Settings) -> dict[str, str]:
    return {
        # Array parameters (= any($n), && $n) make generic plans choose poor indexes; plan each run.
        "plan_cache_mode": "force_custom_plan",
        "statement_timeout": str(int(settings.statement_timeout * 1000)),
        "jit": "off",
        # Starting parallel workers takes milliseconds, longer than most catalog queries run, and the
        # planner cannot see how few rows an index condition on a computed array (the relevance
        # cells, docs/decisions/0007) selects: at the default (1000) it ran a 300-row read in
        # parallel, 12 ms instead of 2. Counts over hundreds of thousands of rows still go parallel.
        "parallel_setup_cost": "10000",
        "work_mem": settings.work_mem,
        "application_name": "catalog-service",
    }


# Primary connections a worker keeps for its searches between requests (see Database.release_read);
# the pool's other connections stay free for writes.
KEPT_FOR_SEARCHES = 2


class Database:
    def __init__(self, settings: Settings, dsn: str):
        self.settings = settings
        self.dsn = dsn
        self.primary: asyncpg.Pool | None = None
        self.replicas: list[asyncpg.Pool] = []
        # Connections acquired from the primary pool and kept for the next search (LIFO).
        self._kept: list[asyncpg.Connection] = []

    async def open(self) -> None:
        kwargs = dict(
            min_size=self.settings.pool_min_size,
            max_size=self.settings.pool_max_size,
            statement_cache_size=self.settings.statement_cache_size,
            server_settings=server_settings(self.settings),
            init=_init_connection,
            reset=_keep_session,
            # Seconds to connect: a server that does not answer (a failover, a lost network) is
            # answered 503 soon, instead of after asyncpg's default minute.
            timeout=self.settings.connect_timeout,
        )
        self.primary = await asyncpg.create_pool(self.dsn, **kwargs)
        for url in self.settings.replica_urls:
            self.replicas.append(await asyncpg.create_pool(url, **kwargs))

    async def close(self) -> None:
        kept, self._kept = self._kept, []
        for conn in kept:
            await _give_back(self.primary, conn)  # a detached (closed) one: nothing to do
        pools = ([self.primary] if self.primary else []) + self.replicas
        await asyncio.gather(*(p.close() for p in pools), return_exceptions=True)

    def acquire(self):
        if self.primary is None:
            raise Unavailable("database pool is not open")
        return _Acquired(self.primary)

    async def renew(self) -> None:
        """Connect anew after a lost connection: the others were most likely lost with it (a
        restart or failover, pg_terminate_backend of the service's sessions), and an idle one can
        look open until its close is read. Idle connections are replaced at their next use, busy
        ones when they come back."""
        kept, self._kept = self._kept, []
        for conn in kept:
            await _give_back(self.primary, conn)
        for pool in ([self.primary] if self.primary else []) + self.replicas:
            await pool.expire_connections()

    async def acquire_read(self, min_lsn: str | None):
        """A connection for a query: a replica that has replayed ``min_lsn`` (the caller's last
        commit) if there is one, else the primary, so a client always reads its own writes."""
        for pool in self.replicas:
            try:
                conn = await pool.acquire()
            except Exception as exc:
                if not database_unavailable(exc):
                    raise
                log.warning("replica unreachable", exc_info=True)  # the primary answers instead
                continue
            try:
                if min_lsn is None or await conn.fetchval(
                        "select pg_last_wal_replay_lsn() >= $1::pg_lsn", min_lsn):
                    return pool, conn
            except Exception as exc:
                if not (isinstance(exc, asyncpg.PostgresError) or database_unavailable(exc)):
                    raise
                log.warning("replica check failed", exc_info=True)
            await _give_back(pool, conn)
        while self._kept:
            conn = self._kept.pop()
            if _alive(conn):
                return self.primary, conn
            # Closed by the server while kept: the pool has its holder back already.
            await _give_back(self.primary, conn)
        return self.primary, await self.primary.acquire()

    async def release_read(self, pool: asyncpg.Pool, conn: asyncpg.Connection,
                           failed: BaseException | None = None) -> None:
        """Give back a connection from :meth:`acquire_read`. A primary connection in a clean
        state is kept for the next search instead (up to KEPT_FOR_SEARCHES): asyncpg's release and
        acquire (a shielded task, the reset hook, the idle timers) were about a tenth of a short
        search's CPU in the service. Searches run no transactions and leave no session state
        (see _keep_session), so a kept connection is as the pool would hand it out. One whose
        search ``failed`` is not kept, and is terminated if the server lost it."""
        if failed is not None:
            if lost_connection(failed):
                _terminate(conn)
            await _give_back(pool, conn)
            return
        if (pool is self.primary and len(self._kept) < KEPT_FOR_SEARCHES and _alive(conn)
                and not conn.is_in_transaction() and not conn._protocol._is_cancelling()):
            self._kept.append(conn)
            return
        await _give_back(pool, conn)
