"""Catalogs: one per Plone site, each with its own partition of ``catalog_object``."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import cached_property

import asyncpg
import orjson

from catalog_schemas.api import (
    CATALOG_ID_PATTERN,
    NAME_PATTERN,
    CatalogCreate,
    CatalogSettings,
    IndexDeclaration,
    SchemaUpdate,
)

from ..errors import BadRequest, Conflict, NotFound
from ..indexes import make_index
from ..indexes.base import index_ident
from ..indexes.path import ExtendedPathIndex
from ..indexes.simple import STATISTICS_SUFFIXES
from ..indexes.text import CELLS_SUFFIX, ZCTextIndex
from ..planner.plan import CatalogSchema
from .keys import ScopedKey, load_keys

_CATALOG_ID = re.compile(CATALOG_ID_PATTERN)
log = logging.getLogger(__name__)

# Plone's index values of one object (object_provides alone lists dozens of interface names)
# pass PostgreSQL's 2 kB TOAST threshold, so by default each row's idx was compressed, and every
# condition on idx decompressed it again: 36 µs a row for a Plone folder listing's five
# conditions. Rows are kept uncompressed and inline up to a page instead (about 8x faster scans of
# Plone-sized rows, at a larger heap); larger rows are still compressed, with lz4 where the server
# has it.
TOAST_TARGET_OPTION = "toast_tuple_target=8160"
# A catalog's text statistics (lexicon, documents and words, score cells), emptied with its rows.
TEXT_TABLES = ("catalog_lexicon", "catalog_text_stats", "catalog_text_cell")
# After a bulk load the text tables' statistics too: without them the planner took a new lexicon
# for one row a text index, and scored a glob by reading the whole lexicon once per result row
# (a one-letter glob on 2,000 objects: 2.4 s, 0.14 s after ANALYZE; autovacuum may come late).
ANALYZE_TEXT = "analyze " + ", ".join(TEXT_TABLES)
_INDEX_NAME = re.compile(NAME_PATTERN)
# The (quoted) name in an index's "create index if not exists <name> on ..." statement.
_CREATED_INDEX = re.compile(r'create index if not exists ("(?:[^"]|"")*"|\S+) on ')


async def _tune_partition(conn: asyncpg.Connection, table: str) -> None:
    await conn.execute(f"alter table {table} set ({TOAST_TARGET_OPTION})")
    try:
        async with conn.transaction():
            for column in ("idx", "text", "meta"):
                await conn.execute(f"alter table {table} alter column {column} set compression lz4")
    except asyncpg.FeatureNotSupportedError:
        pass  # a server built without lz4 keeps pglz


# Advisory lock class (the first of two keys; the catalog id is the second) taken by every write
# to a catalog's rows: shared by batch commits, exclusive by whatever rewrites the whole catalog.
WRITE_LOCK = 0x63617462  # "catb"


async def lock_writes(conn: asyncpg.Connection, catalog: Catalog, exclusive: bool) -> None:
    """The catalog's write lock until this transaction ends, first in every writing transaction:
    shared by batch staging and commits (they run side by side), exclusive for whatever rewrites
    the whole catalog (a clear, a schema change, a drop), which waits for the commits under way
    and keeps new ones out."""
    take = "pg_advisory_xact_lock" if exclusive else "pg_advisory_xact_lock_shared"
    await conn.execute(f"select {take}($1, $2)", WRITE_LOCK, catalog.id)


# Advisory lock (one bigint key) held while a process builds or repairs catalogs' SQL indexes and
# statistics: migrations' partition upgrade and the build after a bulk load. Without it, two
# `catalog-service migrate` runs (or service start-ups) at once built, dropped or created
# statistics of the same names side by side. Session level, because CREATE INDEX CONCURRENTLY
# cannot run inside a transaction block.
UPGRADE_LOCK = 0x63617463  # "catc"
# Seconds between attempts to take UPGRADE_LOCK. It is polled rather than waited for: a session
# blocked in pg_advisory_lock() holds a snapshot, and the holder's CREATE INDEX CONCURRENTLY waits
# for every older snapshot to end, a deadlock that PostgreSQL breaks by failing one of the two.
UPGRADE_LOCK_POLL = 0.2


@asynccontextmanager
async def upgrade_lock(conn: asyncpg.Connection, wait: bool = True) -> AsyncIterator[bool]:
    """Hold UPGRADE_LOCK on ``conn``'s session for the block; yields whether it is held (always,
    with ``wait``; without, False when another process holds it)."""
    take = "select pg_try_advisory_lock($1)"
    held = await conn.fetchval(take, UPGRADE_LOCK)
    while not held and wait:
        await asyncio.sleep(UPGRADE_LOCK_POLL)
        held = await conn.fetchval(take, UPGRADE_LOCK)
    if not held:
        yield False
        return
    try:
        yield True
    finally:
        try:
            await conn.execute("select pg_advisory_unlock($1)", UPGRADE_LOCK)
        except BaseException:
            # The session must not go back to a pool still holding the lock: ending it releases it.
            conn.terminate()
            raise


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Catalog:
    id: int
    name: str
    title: str
    token_hash: str
    declarations: tuple[IndexDeclaration, ...]
    metadata: tuple[str, ...]
    schema_rev: int
    schema: CatalogSchema
    settings: CatalogSettings = field(default_factory=CatalogSettings)
    # The token a rotation replaced, valid until previous_token_until (its grace period).
    previous_token_hash: str | None = None
    previous_token_until: datetime | None = None
    # The scoped API keys (store/keys.py); None until loaded (CatalogRegistry.get loads them).
    keys: tuple[ScopedKey, ...] | None = None

    @property
    def table(self) -> str:
        return self.schema.table

    @cached_property
    def entry_slots(self) -> dict[str, tuple]:
        """Per index an entry can fill: (its ``stored`` conversion, its ``absent_value``). Computed
        once per catalog version, for the conversion of batches."""
        return {name: (index.stored, index.absent_value) for name, index in self.schema.indexes.items()
                if not (isinstance(index, ExtendedPathIndex) and index.physical)}  # the row's own columns

    @cached_property
    def metadata_names(self) -> frozenset[str]:
        return frozenset(self.metadata)

    @cached_property
    def text_indexes(self) -> list[str]:
        """The names of the catalog's ZCTextIndexes, whose words live in the row's ``text``."""
        return [name for name, index in self.schema.indexes.items() if isinstance(index, ZCTextIndex)]

    def token_keys(self) -> list[str]:
        """The hashes of the catalog's valid tokens: its token, and the one a rotation replaced
        while its grace period lasts. (They are also the keys of the signed tokens.)"""
        keys = [self.token_hash]
        if self.previous_token_hash and self.previous_token_until and datetime.now(UTC) < self.previous_token_until:
            keys.append(self.previous_token_hash)
        return keys

    def token_matches(self, token: str) -> bool:
        given = hash_token(token)
        return any(hmac.compare_digest(given, key) for key in self.token_keys())


def table_name(catalog_id: int) -> str:
    return f"catalog_object_{int(catalog_id)}"


def build(row) -> Catalog:
    declarations = tuple(IndexDeclaration.model_validate(d) for d in orjson.loads(row["indexes"]))
    metadata = tuple(orjson.loads(row["metadata"]))
    indexes = {d.name: make_index(d) for d in declarations}
    schema = CatalogSchema(catalog_id=row["id"], table=table_name(row["id"]), indexes=indexes, metadata=metadata)
    settings = CatalogSettings.model_validate(orjson.loads(row["settings"])) if "settings" in row else CatalogSettings()
    return Catalog(id=row["id"], name=row["name"], title=row["title"], token_hash=row["token_hash"],
                   declarations=declarations, metadata=metadata, schema_rev=row["schema_rev"], schema=schema,
                   settings=settings, previous_token_hash=row.get("previous_token_hash"),
                   previous_token_until=row.get("previous_token_until"))


def _check_declarations(indexes: list[IndexDeclaration], metadata: list[str]) -> None:
    names = [d.name for d in indexes]
    if len(set(names)) != len(names):
        raise BadRequest("index names must be unique")
    if len(set(metadata)) != len(metadata):
        raise BadRequest("metadata names must be unique")
    for decl in indexes:
        make_index(decl)  # raises on a bad declaration
    for name in metadata:
        if not isinstance(name, str) or not name or len(name) > 200:
            raise BadRequest(f"invalid metadata column name {name!r}")


def _changes(catalog: Catalog, update: SchemaUpdate) -> bool:
    """Whether ``update`` may change ``catalog``: a removal (unless ``only_add``), a declaration
    that differs from the catalog's, a column it lacks."""
    if not update.only_add and (update.remove_indexes or update.remove_metadata):
        return True
    current = {d.name: d for d in catalog.declarations}
    return (any(current.get(d.name) != d for d in update.indexes)
            or any(m not in catalog.metadata_names for m in update.metadata))


# Declaration fields that say only where the client reads the values (it extracts them): a change
# of them alone keeps the index's values, as ZCatalog keeps an index's data when its properties are
# changed (its GenericSetup importers clear the index themselves; the connector then replaces it).
_INFORMATIVE_FIELDS = frozenset({"indexed_attrs", "lexicon_id", "since_field", "until_field",
                                 "index_naive_time_as_local"})


def _keeps_values(old: IndexDeclaration | None, new: IndexDeclaration) -> bool:
    """Whether declaring ``new`` in place of ``old`` leaves the index's stored values valid."""
    if old is None:
        return False
    informative = set(_INFORMATIVE_FIELDS)
    if new.type in ("ExtendedPathIndex", "PathIndex"):
        informative.discard("indexed_attrs")  # they choose the physical form (path.py)
    return old.model_dump(exclude=informative) == new.model_dump(exclude=informative)


async def _holds_values(conn: asyncpg.Connection, catalog: Catalog, name: str) -> bool:
    """Whether any committed row holds a value of index ``name`` (a physical path index: any row)."""
    index = catalog.schema.indexes[name]
    if isinstance(index, ExtendedPathIndex) and index.physical:
        return bool(await conn.fetchval(f"select exists (select 1 from {catalog.table})"))
    return bool(await conn.fetchval(
        f"select exists (select 1 from {catalog.table} where idx ? $1::text or text ? $1::text)", name))


class CatalogRegistry:
    """Catalog rows by name, cached per process; the cache is checked against ``schema_rev``."""

    def __init__(self) -> None:
        self._cache: dict[str, Catalog] = {}

    async def get(self, conn: asyncpg.Connection, name: str) -> tuple[Catalog, int]:
        """The catalog and its current counter."""
        if not _CATALOG_ID.match(name):  # no catalog has such a name (a NUL would not reach SQL)
            raise NotFound(f"no catalog {name!r}")
        row = await conn.fetchrow("select id, schema_rev, counter from catalog where name = $1", name)
        if row is None:
            self._cache.pop(name, None)
            raise NotFound(f"no catalog {name!r}")
        cached = self._cache.get(name)
        if cached is None or cached.id != row["id"] or cached.schema_rev != row["schema_rev"] or cached.keys is None:
            full = await conn.fetchrow("select * from catalog where id = $1", row["id"])
            if full is None:
                raise NotFound(f"no catalog {name!r}")
            # The keys as of the revision read: creating or revoking one moves it.
            cached = replace(build(full), keys=await load_keys(conn, row["id"]))
            self._cache[name] = cached
        return cached, row["counter"]

    async def current(self, conn: asyncpg.Connection, name: str, refresh: bool = False) -> Catalog:
        """The catalog from the cache (no round trip), or loaded. Searches check the revision they
        ran against and ask again with ``refresh`` when it moved."""
        cached = None if refresh else self._cache.get(name)
        if cached is None:
            cached, _ = await self.get(conn, name)
        return cached

    def forget(self, name: str) -> None:
        self._cache.pop(name, None)

    async def create(self, conn: asyncpg.Connection, spec: CatalogCreate, token: str | None = None
                     ) -> tuple[Catalog, str]:
        _check_declarations(spec.indexes, spec.metadata)
        token = token or secrets.token_urlsafe(32)
        async with conn.transaction():
            exists = await conn.fetchval("select 1 from catalog where name = $1", spec.id)
            if exists:
                raise Conflict(f"catalog {spec.id!r} exists")
            row = await conn.fetchrow(
                "insert into catalog (name, title, token_hash, indexes, metadata, settings) "
                "values ($1, $2, $3, $4, $5, $6) on conflict (name) do nothing returning *",
                spec.id, spec.title, hash_token(token),
                orjson.dumps([d.model_dump() for d in spec.indexes]).decode(),
                orjson.dumps(spec.metadata).decode(),
                spec.settings.model_dump_json(),
            )
            if row is None:
                raise Conflict(f"catalog {spec.id!r} exists")
            catalog = build(row)
            table = catalog.table
            await conn.execute(
                f"create table {table} partition of catalog_object for values in ({catalog.id})")
            await _tune_partition(conn, table)
            await conn.execute(f"create unique index {table}_rid on {table} (rid)")
            for index in catalog.schema.indexes.values():
                for statement in index.ddl(table):
                    if statement.startswith("create statistics"):
                        await conn.execute(statement)
            for _, _, statement in secondary_indexes(catalog):
                await conn.execute(statement)
        self._cache[spec.id] = catalog
        return catalog, token

    async def update_schema(self, conn: asyncpg.Connection, catalog: Catalog, update: SchemaUpdate) -> Catalog:
        """Apply ``update`` (see SchemaUpdate, ``only_add`` included). An update that changes
        nothing leaves the catalog, and its schema revision, as they are."""
        if not _changes(catalog, update):
            return catalog
        async with conn.transaction():
            await lock_writes(conn, catalog, exclusive=True)
            # Decided on the catalog as it stands under the lock: a schema change that committed
            # since the request loaded it is kept, not overwritten with the older declarations.
            row = await conn.fetchrow("select * from catalog where id = $1 for update", catalog.id)
            if row is None:
                raise NotFound(f"no catalog {catalog.name!r}")
            catalog = build(row)
            table = catalog.table
            current = {d.name: d for d in catalog.declarations}
            # (No index was ever declared under a name that is not an index name: such a name has
            # no leftovers, and no SQL identifier.)
            remove_indexes = [n for n in update.remove_indexes if n in current or _INDEX_NAME.fullmatch(n)]
            remove_metadata = list(update.remove_metadata)
            if update.only_add:
                remove_indexes, remove_metadata = [], []
            # An index both removed and declared is replaced (its values dropped), as if changed.
            changed = list({d.name: d for d in update.indexes
                            if current.get(d.name) != d or d.name in remove_indexes}.values())
            if update.only_add:
                # Nothing that loses data: no new declaration (which drops the values) for an
                # index that holds values.
                changed = [d for d in changed if d.name not in current or not await _holds_values(conn, catalog, d.name)]
            # A name the catalog does not have is removed all the same (no 404): a retried or
            # repeated removal is harmless, and drops any leftovers of the name.
            for name in remove_indexes:
                current.pop(name, None)
            for decl in changed:
                current[decl.name] = decl
            metadata = [m for m in catalog.metadata if m not in set(remove_metadata)]
            metadata += [m for m in update.metadata if m not in metadata]
            if not (changed or remove_indexes or remove_metadata) and metadata == list(catalog.metadata):
                return catalog
            _check_declarations(list(current.values()), metadata)
            declared = {d.name: d for d in catalog.declarations}
            # Only redeclared (values kept, no SQL index to make again): a change of informative
            # fields alone of an index that is not also removed.
            redeclared = {d.name for d in changed
                          if d.name not in remove_indexes and _keeps_values(declared.get(d.name), d)}
            removed = list(dict.fromkeys(remove_indexes + [d.name for d in changed if d.name in catalog.schema.indexes
                                                           and d.name not in redeclared]))
            for name in removed:
                for suffix in ("v", "g", "t", "c", "p", "r", "pr"):
                    await conn.execute(f"drop index if exists {index_ident(table, name, suffix)}")
                for suffix in STATISTICS_SUFFIXES:
                    await conn.execute(f"drop statistics if exists {index_ident(table, name, suffix)}")
                await conn.execute(f"update {table} set idx = idx - $1::text, text = text - $1::text - $2::text "
                                   f"where idx ? $1::text or text ? $1::text", name, name + CELLS_SUFFIX)
                for table_name_ in TEXT_TABLES:
                    await conn.execute(f"delete from {table_name_} where catalog_id = $1 and index_name = $2",
                                       catalog.id, name)
            for name in remove_metadata:
                await conn.execute(f"update {table} set meta = meta - $1::text where meta ? $1::text", name)
            for decl in changed:
                if decl.name in redeclared:
                    continue
                for statement in make_index(decl).ddl(table):
                    await conn.execute(statement)
            row = await conn.fetchrow(
                "update catalog set indexes = $2, metadata = $3, schema_rev = schema_rev + 1 "
                "where id = $1 returning *",
                catalog.id, orjson.dumps([d.model_dump() for d in current.values()]).decode(),
                orjson.dumps(metadata).decode())
        updated = build(row)
        self._cache[catalog.name] = updated
        return updated

    async def update_settings(self, conn: asyncpg.Connection, catalog: Catalog, changes: dict,
                              resets: tuple[str, ...] = ()) -> Catalog:
        """Replace the settings named in ``changes`` and reset those in ``resets`` to their
        defaults, on the settings as stored (validated as CatalogSettings). The schema revision
        moves, so that every service process reloads the catalog with them."""
        async with conn.transaction():
            row = await conn.fetchrow("select settings from catalog where id = $1 for update", catalog.id)
            if row is None:
                raise NotFound(f"no catalog {catalog.name!r}")
            stored = {k: v for k, v in orjson.loads(row["settings"]).items() if k not in resets}
            merged = CatalogSettings.model_validate({**stored, **changes})
            row = await conn.fetchrow("update catalog set settings = $2, schema_rev = schema_rev + 1 "
                                      "where id = $1 returning *", catalog.id, merged.model_dump_json())
        updated = build(row)
        self._cache[catalog.name] = updated
        return updated

    async def rotate_token(self, conn: asyncpg.Connection, catalog: Catalog, grace: float
                           ) -> tuple[Catalog, str, datetime | None]:
        """Give the catalog a new connector token; the current one (and the signed tokens minted
        with it) stays valid for ``grace`` seconds (0: not at all). Returns the catalog, the new
        token and the end of the old one's grace period. The schema revision moves, so that every
        worker loads the catalog, and its tokens, again."""
        token = secrets.token_urlsafe(32)
        until = datetime.now(UTC) + timedelta(seconds=grace) if grace > 0 else None
        row = await conn.fetchrow(
            "update catalog set previous_token_hash = case when $3::timestamptz is null then null else token_hash end, "
            "previous_token_until = $3::timestamptz, token_hash = $2, schema_rev = schema_rev + 1 "
            "where id = $1 returning *", catalog.id, hash_token(token), until)
        if row is None:
            raise NotFound(f"no catalog {catalog.name!r}")
        rotated = build(row)
        self._cache[catalog.name] = rotated
        return rotated, token, until

    async def by_token(self, conn: asyncpg.Connection, token: str) -> Catalog | None:
        """The catalog whose connector token ``token`` is, if any."""
        digest = hash_token(token)
        name = await conn.fetchval(
            "select name from catalog where token_hash = $1 or (previous_token_hash = $1 "
            "and previous_token_until > now()) limit 1", digest)
        if name is None:
            return None
        catalog, _ = await self.get(conn, name)
        return catalog if catalog.token_matches(token) else None

    async def clear(self, conn: asyncpg.Connection, catalog: Catalog) -> int:
        async with conn.transaction():
            await lock_writes(conn, catalog, exclusive=True)
            counter = await conn.fetchval(
                "update catalog set counter = counter + 1 where id = $1 returning counter", catalog.id)
            await conn.execute(f"delete from {catalog.table}")
            await conn.execute("delete from catalog_tombstone where catalog_id = $1", catalog.id)
            for table_name in TEXT_TABLES:
                await conn.execute(f"delete from {table_name} where catalog_id = $1", catalog.id)
        return counter

    async def drop(self, conn: asyncpg.Connection, catalog: Catalog) -> None:
        async with conn.transaction():
            await lock_writes(conn, catalog, exclusive=True)
            await conn.execute(f"drop table if exists {catalog.table}")
            await conn.execute("delete from catalog_tombstone where catalog_id = $1", catalog.id)
            for table_name in TEXT_TABLES:
                await conn.execute(f"delete from {table_name} where catalog_id = $1", catalog.id)
            await conn.execute("delete from catalog_staged where catalog_id = $1", catalog.id)
            await conn.execute("delete from catalog where id = $1", catalog.id)
        self._cache.pop(catalog.name, None)

    async def upgrade_partitions(self, conn: asyncpg.Connection, build_indexes: bool = False,
                                 progress=None, wait: bool = True) -> list[str]:
        """Bring catalogs made by earlier versions up to date: expression statistics (built by
        the next ANALYZE), the partition's storage settings (they apply to rows written from now
        on) and, with ``build_indexes``, the SQL indexes this version declares (built
        concurrently, then the ones they replace dropped), and any left invalid by a failed or
        cancelled build (dropped and built again). Building an index takes a while on a large
        catalog, so the service does not do it at start-up: it returns (and logs) the missing
        ones, and ``catalog-service migrate`` builds them. ``progress`` gets a line per index
        built. Runs under UPGRADE_LOCK; without ``wait``, does nothing and returns [] when
        another process holds it (that process is doing the same)."""
        async with upgrade_lock(conn, wait) as held:
            if not held:
                log.info("another process is upgrading the catalogs' partitions; not waiting for it")
                return []
            return await self._upgrade_partitions(conn, build_indexes, progress)

    async def _upgrade_partitions(self, conn: asyncpg.Connection, build_indexes: bool, progress) -> list[str]:
        missing = []
        for row in await conn.fetch("select * from catalog"):
            catalog = build(row)
            options = await conn.fetchval("select reloptions from pg_class where relname = $1", catalog.table)
            if TOAST_TARGET_OPTION not in (options or []):
                await _tune_partition(conn, catalog.table)
            for index in catalog.schema.indexes.values():
                for statement in index.ddl(catalog.table):
                    if statement.startswith("create statistics"):
                        await conn.execute(statement)
            for index, name, statement in await missing_indexes(conn, catalog):
                if not build_indexes:
                    missing.append(f"{catalog.name}: {name}")
                    continue
                began = time.monotonic()
                # An invalid index of that name (a concurrent build that failed) would make
                # "if not exists" skip the build.
                await conn.execute(f"drop index concurrently if exists {name}")
                await conn.execute(statement.replace("create index if not exists",
                                                     "create index concurrently if not exists", 1))
                for suffix in index.superseded if index is not None else ():
                    await conn.execute(f"drop index concurrently if exists "
                                       f"{index_ident(catalog.table, index.name, suffix)}")
                if progress is not None:
                    progress(f"{catalog.name}: built {name} in {time.monotonic() - began:.1f} s")
        if missing:
            log.warning("catalog indexes are missing, new in this version or deferred by a bulk load that did not "
                        "build them (run `catalog-service migrate`, or POST /catalogs/{id}/indexes/build): %s",
                        ", ".join(missing))
        return missing

    async def count(self, conn: asyncpg.Connection, catalog: Catalog) -> int:
        return await conn.fetchval(f"select count(*) from {catalog.table}")


def secondary_indexes(catalog: Catalog) -> list[tuple[object, str, str]]:
    """(index or None, quoted name, create statement) of every SQL index of the catalog's
    partition but its keys (uid, rid): the ones a bulk load may leave out and build at the end."""
    table = catalog.table
    found: list[tuple[object, str, str]] = [
        (None, f"{table}_path", f"create index if not exists {table}_path on {table} (path)"),
        (None, f"{table}_parent", f"create index if not exists {table}_parent on {table} (parent, rid)")]
    for index in catalog.schema.indexes.values():
        for statement in index.ddl(table):
            if not statement.startswith("create statistics"):
                found.append((index, _CREATED_INDEX.match(statement).group(1), statement))
    return found


def plain_name(name: str) -> str:
    """An index name as PostgreSQL lists it: without the quotes of a mixed-case identifier."""
    return name[1:-1].replace('""', '"') if name.startswith('"') else name


async def missing_indexes(conn: asyncpg.Connection, catalog: Catalog) -> list[tuple[object, str, str]]:
    """The catalog's secondary indexes (as :func:`secondary_indexes`) that its partition lacks or
    holds invalid: a CREATE INDEX CONCURRENTLY that failed or was cancelled leaves its index
    behind, maintained by writes but never used by queries, until it is dropped and built again."""
    wanted = secondary_indexes(catalog)
    absent = set(await conn.fetchval(
        "select coalesce(array_agg(n), '{}') from unnest($1::text[]) n "
        "where not coalesce((select i.indisvalid from pg_index i where i.indexrelid = to_regclass(n)), false)",
        [name for _, name, _ in wanted]))
    return [entry for entry in wanted if entry[1] in absent]


async def defer_indexes(conn: asyncpg.Connection, catalog: Catalog) -> list[str]:
    """Drop the catalog's secondary indexes before a bulk load (docs/decisions/0010): each row
    then costs PostgreSQL a heap write and its two key entries instead of some thirty index
    updates, and :func:`build_indexes` builds each index once, from sorted data, at the end.
    Queries stay correct meanwhile, only slower (they scan). Returns the names dropped."""
    async with conn.transaction():
        await lock_writes(conn, catalog, exclusive=True)
        absent = {name for _, name, _ in await missing_indexes(conn, catalog)}
        dropped = [name for _, name, _ in secondary_indexes(catalog) if name not in absent]
        for name in dropped:
            await conn.execute(f"drop index if exists {name}")
    log.info("catalog %s: %d indexes deferred until built", catalog.name, len(dropped))
    return [plain_name(name) for name in dropped]


async def build_indexes(pool: asyncpg.Pool, catalog: Catalog, builders: int = 2, memory: str = "512MB",
                        progress=None) -> list[str]:
    """Build every secondary index the catalog's partition lacks, ``builders`` at a time on
    connections of ``pool``, then ANALYZE it. Plain ``create index``: each build reads the table
    once and sorts, and holds writes to the catalog off while it runs (reads go on). Indexes left
    invalid by a failed concurrent build are dropped and built again. Waits for UPGRADE_LOCK, held
    for the whole build by the first builder's connection. Returns the names built; ``progress``
    gets a line per index."""
    async with pool.acquire() as conn, upgrade_lock(conn):
        return await _build_indexes(pool, conn, catalog, builders, memory, progress)


async def _build_indexes(pool: asyncpg.Pool, first: asyncpg.Connection, catalog: Catalog, builders: int,
                         memory: str, progress) -> list[str]:
    queue = await missing_indexes(first, catalog)
    built: list[str] = []

    async def builder(conn: asyncpg.Connection) -> None:
        while queue:
            _, name, statement = queue.pop(0)
            began = time.monotonic()
            # An invalid index of that name, left by a failed concurrent build: dropped on its
            # own, as the DROP's exclusive lock would otherwise hold reads off during the build.
            await conn.execute(f"drop index if exists {name}")
            async with conn.transaction():
                # Shared: batch commits may wait for the build, a clear or drop may not run under it.
                await lock_writes(conn, catalog, exclusive=False)
                await conn.execute("set local statement_timeout = 0")
                await conn.execute("set local max_parallel_maintenance_workers = 0")  # builders in parallel instead
                await conn.execute(f"set local maintenance_work_mem = '{memory}'")
                await conn.execute(statement)
            built.append(plain_name(name))
            if progress is not None:
                progress(f"{catalog.name}: built {name} in {time.monotonic() - began:.1f} s")

    async def pooled_builder() -> None:
        async with pool.acquire() as conn:
            await builder(conn)

    # The first builder works on the lock's connection, so a pool with a single connection free
    # still builds (one index at a time) instead of waiting for itself.
    await asyncio.gather(builder(first), *(pooled_builder() for _ in range(max(1, builders) - 1)))
    async with first.transaction():
        await first.execute("set local statement_timeout = 0")
        await first.execute(f"analyze {catalog.table}")
        await first.execute(ANALYZE_TEXT)
    return built
