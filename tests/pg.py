"""A real PostgreSQL for the tests: DATABASE_URL if set, else the embedded server.

Each test session gets a database of its own (created here, dropped at the end), so concurrent
runs on one server never see each other's tables.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parent.parent


def server_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    from catalog_service.embedded import start

    return start(ROOT / ".pgdata" / "tests", database="postgres")


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def create_database(prefix: str = "t") -> tuple[str, str]:
    """Create a fresh database; return (its DSN, the admin DSN that can drop it)."""
    admin = server_url()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'create database "{name}"')
    return with_database(admin, name), admin


def drop_database(admin: str, dsn: str) -> None:
    name = urlsplit(dsn).path.lstrip("/")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')
