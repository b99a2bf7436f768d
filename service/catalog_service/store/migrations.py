"""Versioned SQL migrations from ``catalog_schemas/migrations``, applied in order.

Safe to run twice and from several processes at once: each run takes a transaction-scoped
advisory lock, reads the applied versions and applies only the missing files, each in the
same transaction as its version row.
"""

from __future__ import annotations

import logging
import re
from importlib import resources

import asyncpg

log = logging.getLogger(__name__)
LOCK_KEY = 0x63617461  # "cata"


def available() -> list[tuple[int, str, str]]:
    files = resources.files("catalog_schemas") / "migrations"
    found = []
    for entry in files.iterdir():
        match = re.fullmatch(r"(\d{4})_([a-z0-9_]+)\.sql", entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(found)


async def applied_versions(conn: asyncpg.Connection) -> set[int]:
    exists = await conn.fetchval("select to_regclass('catalog_schema_version') is not null")
    if not exists:
        return set()
    return {r["version"] for r in await conn.fetch("select version from catalog_schema_version")}


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """Apply missing migrations; return the names applied."""
    done = []
    async with conn.transaction():
        await conn.execute("select pg_advisory_xact_lock($1)", LOCK_KEY)
        await conn.execute(
            "create table if not exists catalog_schema_version ("
            " version integer primary key, name text not null,"
            " applied timestamptz not null default now())"
        )
        have = await applied_versions(conn)
        for version, name, sql in available():
            if version in have:
                continue
            log.info("applying migration %s", name)
            await conn.execute(sql)
            await conn.execute("insert into catalog_schema_version (version, name) values ($1, $2)", version, name)
            done.append(name)
    return done


async def pending(conn: asyncpg.Connection) -> list[str]:
    have = await applied_versions(conn)
    return [name for version, name, _ in available() if version not in have]
