"""Scoped API keys in ``catalog_key`` (docs/decisions/0020).

A key reads ``csk1.<id>.<secret>``; the table keeps its SHA-256 and its id, never the secret. The
keys of a catalog are loaded with the catalog (``CatalogRegistry.get``), so a search identifies
its key without a round trip; creating or revoking a key moves the catalog's schema revision in
the same transaction, so that every service process loads the catalog, and its keys, again before
its next search answers (a revoked key is refused everywhere at once).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import asyncpg
import orjson

from catalog_schemas.keys import KeyCreate, KeyInfo

from ..errors import BadRequest, NotFound

if TYPE_CHECKING:
    from .catalogs import Catalog

KEY_PREFIX = "csk1."


@dataclass(frozen=True)
class ScopedKey:
    id: str
    hash: str
    name: str
    filter: dict[str, Any]
    principals: tuple[str, ...]
    created: datetime
    expires: datetime | None
    revoked: datetime | None

    def expired(self, now: datetime) -> bool:
        return self.expires is not None and self.expires <= now

    def matches(self, key: str) -> bool:
        return hmac.compare_digest(hash_key(key), self.hash)

    def info(self, catalog: str, now: datetime | None = None) -> KeyInfo:
        now = now or datetime.now(UTC)
        return KeyInfo(id=self.id, catalog=catalog, name=self.name, filter=self.filter,
                       principals=list(self.principals), created=self.created, expires=self.expires,
                       revoked=self.revoked, active=self.revoked is None and not self.expired(now))


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def key_id_of(key: str) -> str | None:
    """The id part of a key's text (unverified: to find the key to compare it with)."""
    parts = key[len(KEY_PREFIX):].split(".") if key.startswith(KEY_PREFIX) else []
    return parts[0] if len(parts) == 2 and parts[0] else None


def _key(row) -> ScopedKey:
    return ScopedKey(id=row["key_id"], hash=row["key_hash"], name=row["name"], filter=orjson.loads(row["filter"]),
                     principals=tuple(row["principals"]), created=row["created"], expires=row["expires"],
                     revoked=row["revoked"])


async def load_keys(conn: asyncpg.Connection, catalog_id: int) -> tuple[ScopedKey, ...]:
    """Every key of the catalog, revoked and expired ones too (their searches are told so)."""
    rows = await conn.fetch("select * from catalog_key where catalog_id = $1 order by created, key_id", catalog_id)
    return tuple(_key(r) for r in rows)


def expiry(spec: KeyCreate, now: datetime) -> datetime | None:
    if spec.expires is not None and spec.ttl is not None:
        raise BadRequest("give expires or ttl, not both", parameter="expires")
    if spec.ttl is not None:
        return now + timedelta(seconds=spec.ttl)
    if spec.expires is not None and spec.expires <= now:
        raise BadRequest(f"expires {spec.expires.isoformat()} is past", parameter="expires")
    return spec.expires


async def create_key(conn: asyncpg.Connection, catalog: Catalog, spec: KeyCreate) -> tuple[ScopedKey, str]:
    """Store a new key of ``catalog`` (its filter checked by the caller) and return it with its
    text, which is not kept."""
    try:
        filter_json = orjson.dumps(spec.filter).decode()
    except TypeError as exc:  # an integer beyond 64 bits, which no index holds either
        raise BadRequest(f"filter: {exc}") from None
    key_id = secrets.token_hex(8)
    text = f"{KEY_PREFIX}{key_id}.{secrets.token_urlsafe(32)}"
    async with conn.transaction():
        row = await conn.fetchrow(
            "insert into catalog_key (catalog_id, key_id, key_hash, name, filter, principals, expires) "
            "select id, $2, $3, $4, $5::jsonb, $6::text[], $7 from catalog where id = $1 returning *",
            catalog.id, key_id, hash_key(text), spec.name, filter_json,
            list(dict.fromkeys(spec.principals)), expiry(spec, datetime.now(UTC)))
        if row is None:
            raise NotFound(f"no catalog {catalog.name!r}")
        await _keys_changed(conn, catalog)
    return _key(row), text


async def revoke_key(conn: asyncpg.Connection, catalog: Catalog, key_id: str) -> ScopedKey:
    """Revoke the key (again: it keeps the time of the first revocation)."""
    async with conn.transaction():
        row = await conn.fetchrow(
            "update catalog_key set revoked = coalesce(revoked, now()) where catalog_id = $1 and key_id = $2 "
            "returning *", catalog.id, key_id)
        if row is None:
            raise NotFound(f"catalog {catalog.name!r} has no key {key_id!r}")
        await _keys_changed(conn, catalog)
    return _key(row)


async def _keys_changed(conn: asyncpg.Connection, catalog: Catalog) -> None:
    # Every process reloads the catalog with its keys (store.search checks the revision).
    await conn.execute("update catalog set schema_rev = schema_rev + 1 where id = $1", catalog.id)


async def catalog_of_key(conn: asyncpg.Connection, key: str) -> str | None:
    """The name of the catalog whose key ``key`` is, if any (for routes of no one catalog)."""
    return await conn.fetchval("select c.name from catalog_key k join catalog c on c.id = k.catalog_id "
                               "where k.key_hash = $1", hash_key(key))
