"""The storage's tables, created and migrated by the storage itself.

Migrations are numbered and applied in order; ``zodb_schema_version`` records the applied ones.
A transaction-level advisory lock serialises migration, so two processes opening the same
database at once never apply a step twice. All names carry the ``zodb_`` prefix so the storage
can share a database with the catalog service (which owns ``catalog_*``), except
``catalog_txn_outcome``, whose name and columns are a contract with the catalog service.
"""

from __future__ import annotations

import json
import logging

import psycopg

from plone_connector.storage import jsonstate

log = logging.getLogger(__name__)

# Arbitrary but fixed: the advisory lock key of this storage's migrations ("zodb" in ASCII).
MIGRATION_LOCK = 0x7A6F6462
# The catalog service's migration lock ("cata"), also taken while this storage creates the one
# table they share (catalog_txn_outcome): two "create table if not exists" of one table at once
# fail in one of the two transactions.
CATALOG_MIGRATION_LOCK = 0x63617461

# ZODB's TimeStamp packs (minutes since 1900-01-01, seconds * 2**32 / 60) into 8 bytes. Computing
# it in SQL lets the committing transaction take its tid from the database clock under the commit
# lock, so tids increase across processes whatever their local clocks say.
_NOW_TID = """
create or replace function zodb_now_tid() returns bigint language sql volatile as $$
    select ((((((extract(year from t)::bigint - 1900) * 12 + extract(month from t)::bigint - 1) * 31
              + extract(day from t)::bigint - 1) * 24 + extract(hour from t)::bigint) * 60
              + extract(minute from t)::bigint) << 32)
           | floor(extract(second from t) * 4294967296 / 60)::bigint
    from (select clock_timestamp() at time zone 'UTC' as t) as now
$$
"""

MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (
        1,
        "history-free object state, tid counter, blobs, catalog outcome",
        [
            # One row: the last committed tid. Updating it is the commit lock (a row lock held from
            # tpc_vote to tpc_finish); gc_tid is the counter value when pack last deleted objects.
            """create table zodb_commit (
                   singleton boolean primary key default true check (singleton),
                   tid bigint not null,
                   gc_tid bigint not null default 0,
                   history_preserving boolean not null)""",
            """create table zodb_object_state (
                   zoid bigint primary key,
                   tid bigint not null,
                   class_name text not null,
                   state jsonb,
                   refs bigint[] not null default '{}',
                   exact bytea,
                   blob_id bigint)""",
            "create index zodb_object_state_tid on zodb_object_state (tid)",
            "create sequence zodb_oid_seq minvalue 1",
            "create sequence zodb_blob_seq minvalue 1",
            """create table zodb_blob_chunk (
                   blob_id bigint not null,
                   chunk_num integer not null,
                   chunk bytea not null,
                   primary key (blob_id, chunk_num))""",
            _NOW_TID,
            """create table if not exists catalog_txn_outcome (
                   batch_id text primary key,
                   tid bigint,
                   recorded timestamptz default now())""",
        ],
    ),
    (
        2,
        "history-preserving revisions and transaction metadata",
        [
            # Empty in history-free mode. In history-preserving mode every revision is here
            # (the current one too; zodb_object_state stays the current view for fast loads).
            """create table zodb_transaction (
                   tid bigint primary key,
                   packed boolean not null default false,
                   username bytea not null default '',
                   description bytea not null default '',
                   extension bytea not null default '')""",
            """create table zodb_object_history (
                   zoid bigint not null,
                   tid bigint not null,
                   class_name text not null,
                   state jsonb,
                   refs bigint[] not null default '{}',
                   exact bytea,
                   blob_id bigint,
                   deleted boolean not null default false,
                   -- undo: the revision whose state this one restores (iterator's data_txn)
                   data_tid bigint,
                   primary key (zoid, tid))""",
            "create index zodb_object_history_tid on zodb_object_history (tid)",
        ],
    ),
    (
        3,
        "JSON state format version written",
        [
            # The newest state format version (jsonstate.FORMAT_VERSION) of the code that opened
            # the database for writing. Every database before this column was written in
            # version 1, the only one there was.
            "alter table zodb_commit add column state_format integer not null default 1",
        ],
    ),
    (
        4,
        "catalog_txn_outcome.recorded not null, as the catalog service creates the table",
        [
            # The table is a contract with the service; created here first, it lacked the
            # service's not null (nothing writes a null, but the two definitions must agree).
            # Only where it is nullable: a table the service created (perhaps owned by another
            # role, which this one could not alter) already has it.
            """do $$ begin
                   if exists (select 1 from pg_attribute
                              where attrelid = to_regclass('catalog_txn_outcome')
                                and attname = 'recorded' and not attnotnull) then
                       update catalog_txn_outcome set recorded = now() where recorded is null;
                       alter table catalog_txn_outcome alter column recorded set not null;
                   end if;
               end $$""",
        ],
    ),
]

LATEST = MIGRATIONS[-1][0]


class SchemaError(Exception):
    """The database holds a storage schema this code cannot use."""


class StateFormatError(SchemaError):
    """The database holds object states in a JSON format version newer than this code reads."""


def check_state_format(written: int) -> None:
    """Refuse a database whose states may be in a format this code would misread."""
    if written > jsonstate.FORMAT_VERSION:
        raise StateFormatError(
            f"database holds states in JSON format version {written}; this code reads versions up"
            f" to {jsonstate.FORMAT_VERSION} (upgrade plone_connector.storage)"
        )


def migrate(conn: psycopg.Connection, history_preserving: bool, *, read_only: bool = False) -> int:
    """Bring the schema to the latest version; return the version. Safe to run concurrently.

    Also checks the state format version recorded in the database and, unless ``read_only``,
    raises it to this code's, so older code refuses a database it could misread. ``read_only``
    writes nothing (a replica refuses writes): the schema must be there and current.
    """
    with conn.transaction():
        if read_only:
            return _check_read_only(conn, history_preserving)
        conn.execute("select pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(
            """create table if not exists zodb_schema_version (
                   version integer primary key,
                   description text not null,
                   applied timestamptz not null default now())"""
        )
        applied = {row[0] for row in conn.execute("select version from zodb_schema_version")}
        if any(version not in applied for version, _, _ in MIGRATIONS):
            conn.execute("select pg_advisory_xact_lock(%s)", (CATALOG_MIGRATION_LOCK,))
        for version, description, statements in MIGRATIONS:
            if version in applied:
                continue
            for statement in statements:
                conn.execute(statement)
            if version == 1:
                conn.execute(
                    "insert into zodb_commit (tid, history_preserving) values (0, %s)",
                    (history_preserving,),
                )
            conn.execute(
                "insert into zodb_schema_version (version, description) values (%s, %s)",
                (version, description),
            )
        newest = max(applied | {v for v, _, _ in MIGRATIONS})
        if newest > LATEST:
            raise SchemaError(f"database schema version {newest} is newer than this code ({LATEST})")
        written = _check_mode_and_format(conn, history_preserving)
        if written < jsonstate.FORMAT_VERSION:
            # Under the commit lock (the zodb_commit row), so no commit of this code lands
            # between the rewrite and the new version.
            conn.execute("select 1 from zodb_commit for update")
            if written < 2:
                rewrite_version_1_orders(conn)
            conn.execute("update zodb_commit set state_format = %s", (jsonstate.FORMAT_VERSION,))
    return LATEST


# Rows whose JSON holds this text may have an object that version 1 read as a dict with a key
# "@order"; jsonb prints the key exactly so (ASCII, nothing to escape).
_ORDER_CANDIDATES = """
    select zoid, tid, class_name, state::text from {table}
    where exact is null and state is not null and strpos(state::text, '"@order"') > 0
"""


def rewrite_version_1_orders(conn: psycopg.Connection) -> int:
    """Format 1 -> 2: version 2 reads an object member "@order" as the dict's key order, which
    version 1 wrote as an ordinary key. Rows that a version 2 reader would read otherwise than
    version 1 did (a user dict with that key) are written again from the record version 1 reads,
    in version 2 (the key then goes into "@dict" pairs). Every other row means the same in both
    versions and is left alone. Returns the number of rows rewritten."""
    rewritten = 0
    for table in ("zodb_object_state", "zodb_object_history"):
        if conn.execute("select to_regclass(%s)", (table,)).fetchone()[0] is None:
            continue
        for zoid, tid, class_name, text in conn.execute(_ORDER_CANDIDATES.format(table=table)).fetchall():
            state = json.loads(text)
            old = jsonstate.decode_record(class_name, state, jsonb_order=True, version=1)
            try:
                same = jsonstate.decode_record(class_name, state, jsonb_order=True) == old
            except jsonstate.TranscodeError:
                same = False
            if same:
                continue
            encoded = jsonstate.encode_record(old)
            conn.execute(
                f"update {table} set class_name = %s, state = %s::jsonb, exact = %s where zoid = %s and tid = %s",
                (encoded.class_name, jsonstate.json_dumps(encoded.state), encoded.exact, zoid, tid),
            )
            rewritten += 1
    if rewritten:
        log.info("state format 1 -> 2: %d rows with a dict key '@order' written again", rewritten)
    return rewritten


def _check_read_only(conn: psycopg.Connection, history_preserving: bool) -> int:
    if conn.execute("select to_regclass('zodb_schema_version')").fetchone()[0] is None:
        raise SchemaError("no storage schema in this database: open it once read-write to create it")
    applied = {row[0] for row in conn.execute("select version from zodb_schema_version")}
    newest = max(applied, default=0)
    if newest > LATEST:
        raise SchemaError(f"database schema version {newest} is newer than this code ({LATEST})")
    missing = sorted(version for version, _, _ in MIGRATIONS if version not in applied)
    if missing:
        raise SchemaError(
            f"database schema lacks migrations {missing} of this code; a read-only storage does not"
            " migrate: open it once read-write (on the primary)"
        )
    _check_mode_and_format(conn, history_preserving)
    return LATEST


def _check_mode_and_format(conn: psycopg.Connection, history_preserving: bool) -> int:
    (stored_mode, written) = conn.execute("select history_preserving, state_format from zodb_commit").fetchone()
    if stored_mode != history_preserving:
        raise SchemaError(
            f"database was created with history_preserving={stored_mode}, "
            f"opened with history_preserving={history_preserving}"
        )
    check_state_format(written)
    return written
