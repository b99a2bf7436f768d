"""The SQL statements of JsonbStorage, in one place, grouped by the module that sends them (the
tables are schema.py's, pack's statements are pack.py's). Only transaction control (``begin``,
``commit``, ``rollback``) stays inline.

Statement text depends only on the statement's shape, never on values: values go as parameters,
so prepared statements are reused. The few templates (``{...}``) take an integer the storage
computed itself or the name of one of its own tables.
"""

# ------------------------------------------------------------------ Connections (connections.py)

TEMP_TABLE = """
create temporary table if not exists zodb_temp_store (
    zoid bigint primary key,
    prev_tid bigint not null,
    class_name text not null,
    state jsonb,
    refs bigint[] not null,
    exact bytea,
    blob_id bigint,
    data_tid bigint
)
"""

# Only the vote takes locks on the store connection (rows, then the commit lock); {ms}: an integer.
LOCK_TIMEOUT = "set lock_timeout = {ms}"


# ------------------------------------------------------------------ Snapshots and polls (mvcc.py)

# Every change after {since}, own commits included (the process cache needs them all).
POLL = (
    "select c.tid, c.gc_tid, x.zoids, x.tids, c.state_format from zodb_commit c,"
    " (select array_agg(zoid) as zoids, array_agg(tid) as tids from {table} where tid > {since}) x"
)

# A read snapshot; also the start of the poll's single round trip (mvcc.py).
SNAPSHOT_BEGIN = "begin isolation level repeatable read read only"
COMMIT_STATE = "select tid, gc_tid, null::bigint[], null::bigint[], state_format from zodb_commit"
LAST_TID = "select tid from zodb_commit"


# ------------------------------------------------------------------ Loads (load.py)

LOAD_CURRENT = "select tid, class_name, state, exact from zodb_object_state where zoid = %s"
# The same, without the record when its tid is the one the process cache holds (cache.py);
# prepared once per load connection (libpq's protocol: bytes, $n parameters).
FAST_LOAD_NAME = b"zodb_load"
FAST_LOAD = (
    b"select tid, class_name, case when tid = $2 then null else state end,"
    b" case when tid = $2 then null else exact end from zodb_object_state where zoid = $1"
)

PREFETCH = "select zoid, tid, class_name, state, exact from zodb_object_state where zoid = any(%s)"
LOAD_BEFORE = (
    "select tid, class_name, state, exact, deleted from zodb_object_history"
    " where zoid = %s and tid < %s order by tid desc limit 1"
)
HAS_HISTORY = "select 1 from zodb_object_history where zoid = %s limit 1"
NEXT_REVISION = "select min(tid) from zodb_object_history where zoid = %s and tid >= %s"
LOAD_REVISION = (
    "select tid, class_name, state, exact from zodb_object_history"
    " where zoid = %s and tid = %s and not deleted"
)


# ------------------------------------------------------------------ A transaction's rows before the vote (store.py)

# A block of oids; {size}: an integer.
OID_BLOCK = "select array_agg(nextval('zodb_oid_seq')) from generate_series(1, {size})"
TRUNCATE_TEMP = "truncate zodb_temp_store"
COPY_TEMP = (
    "copy zodb_temp_store (zoid, prev_tid, class_name, state, refs, exact, blob_id, data_tid)"
    " from stdin"
)
COPY_NEW_STATES = "copy zodb_object_state (zoid, tid, class_name, state, refs, exact, blob_id) from stdin"
DELETE_TEMP_ROWS = "delete from zodb_temp_store where zoid = any(%s)"
DELETE_TEMP_ROW = "delete from zodb_temp_store where zoid = %s"
DELETE_BLOB = "delete from zodb_blob_chunk where blob_id = %s"


# ------------------------------------------------------------------ The vote and the commit (commit.py)

# Locks the rows of the objects a transaction writes or deletes (in zoid order, so that two
# committers never wait for each other in a cycle) and returns only those worth a look: a blob to
# replace, or a row that is not what the transaction expected (a conflict). The common commit
# gets no rows back. MATERIALIZED: every row is locked, whatever the outer query keeps.
LOCK_AND_COMPARE = """
with locked as materialized (
    select zoid, tid, blob_id from zodb_object_state
    where zoid = any(%s::bigint[]) order by zoid for update
)
select zoid, l.tid, l.blob_id, e.zoid is not null and l.tid is distinct from e.tid
from locked l full join unnest(%s::bigint[], %s::bigint[]) as e (zoid, tid) using (zoid)
where l.blob_id is not null or (e.zoid is not null and l.tid is distinct from e.tid)
order by zoid
"""

LOCK_READ_CURRENT = "select zoid, tid from zodb_object_state where zoid = any(%s) order by zoid for share"
COMMIT_LOCK_AT = (
    "update zodb_commit set tid = %s where tid < %s"
    " returning tid, gc_tid, pg_current_xact_id()::text, pg_notify(%s, tid::text)"
)
COMMIT_LOCK = (
    "update zodb_commit set tid = greatest(tid + 1, zodb_now_tid())"
    " returning tid, gc_tid, pg_current_xact_id()::text, pg_notify(%s, tid::text)"
)
UNDONE_KEPT = "select count(*) from zodb_transaction where tid = any(%s) and not packed"
CREATED_EXISTS = "select min(zoid) from zodb_object_state where zoid = any(%s::bigint[])"
COPY_TEMP_IN = """insert into zodb_object_state (zoid, tid, class_name, state, refs, exact, blob_id)
    select zoid, %s, class_name, state, refs, exact, blob_id from zodb_temp_store
    on conflict (zoid) do update set
        tid = excluded.tid, class_name = excluded.class_name, state = excluded.state,
        refs = excluded.refs, exact = excluded.exact,
        blob_id = coalesce(excluded.blob_id, zodb_object_state.blob_id)"""
EMPTY_TEMP = "delete from zodb_temp_store"
DELETE_STATES = "delete from zodb_object_state where zoid = any(%s)"
BUMP_GC_TID = "update zodb_commit set gc_tid = tid"
DELETE_BLOBS = "delete from zodb_blob_chunk where blob_id = any(%s)"
ADVANCE_OID_SEQ = "select setval('zodb_oid_seq', greatest(%s, (select last_value from zodb_oid_seq)))"
RECORD_BATCH_OUTCOMES = "insert into catalog_txn_outcome (batch_id, tid) select unnest(%s::text[]), %s"
INSERT_TRANSACTION = (
    "insert into zodb_transaction (tid, username, description, extension, packed)"
    " values (%s, %s, %s, %s, %s)"
)
INSERT_HISTORY = """insert into zodb_object_history
        (zoid, tid, class_name, state, refs, exact, blob_id, data_tid)
    select t.zoid, %(tid)s, t.class_name, t.state, t.refs, t.exact,
           coalesce(t.blob_id, s.blob_id),
           case when t.data_tid is null or t.data_tid = %(tid)s or exists (
                    select 1 from zodb_object_history o
                    where o.zoid = t.zoid and o.tid = t.data_tid)
                then t.data_tid end
    from zodb_temp_store t left join zodb_object_state s using (zoid)"""
INSERT_DELETIONS = (
    "insert into zodb_object_history (zoid, tid, class_name, deleted)"
    " select unnest(%s::bigint[]), %s, '', true"
)
LATEST_REVISION = "select max(tid) from zodb_object_history where zoid = %s"
UPDATE_RESOLVED = (
    "update zodb_temp_store set prev_tid = %s, class_name = %s, state = %s::jsonb,"
    " refs = %s, exact = %s, data_tid = null where zoid = %s"
)
NEW_REFS_PACKED_AWAY = """select r.zoid from (
        (select unnest(refs) as zoid from zodb_temp_store
         except
         select unnest(s.refs) from zodb_object_state s join zodb_temp_store t using (zoid))
        union
        select unnest(%s::bigint[])
    ) r
    where not exists (select 1 from zodb_object_state s where s.zoid = r.zoid)
      and not exists (select 1 from zodb_temp_store t where t.zoid = r.zoid)
      and r.zoid <> all(%s::bigint[])
    limit 1"""
XACT_STATUS = "select pg_xact_status(%s::xid8)"
END_VOTER_SESSION = (
    "select pg_terminate_backend(pid, %s) from pg_stat_activity"
    " where pid = %s and backend_xid = %s::xid8::xid"
)


# ------------------------------------------------------------------ Blobs (blobs.py)

# {table}: zodb_object_history or zodb_object_state.
BLOB_ID = "select blob_id from {table} where zoid = %s and tid = %s"
NEXT_BLOB_ID = "select nextval('zodb_blob_seq')"
INSERT_BLOB_CHUNK = "insert into zodb_blob_chunk (blob_id, chunk_num, chunk) values (%s, %s, %s)"
BLOB_CHUNKS = "select chunk from zodb_blob_chunk where blob_id = %s order by chunk_num"


# ------------------------------------------------------------------ History, undo, iteration (history.py)

_REVISION = (
    "select tid, class_name, state, exact, deleted, blob_id, coalesce(data_tid, tid)"
    " from zodb_object_history where zoid = %s"
)
CURRENT_REVISION = _REVISION + " order by tid desc limit 1"
REVISION_AT = _REVISION + " and tid = %s"
REVISION_BEFORE = _REVISION + " and tid < %s order by tid desc limit 1"
HISTORY = """select h.tid, t.username, t.description, t.extension,
           coalesce(length(h.exact), length(h.state::text), 0)
    from zodb_object_history h join zodb_transaction t using (tid)
    where h.zoid = %s order by h.tid desc limit %s"""
UNDO_LOG = (
    "select tid, username, description, extension from zodb_transaction"
    " where not packed order by tid desc"
)
UNDOABLE = "select 1 from zodb_transaction where tid = %s and not packed"
UNDONE_OBJECTS = "select zoid from zodb_object_history where tid = %s order by zoid"
ITER_TRANSACTIONS = (
    "select tid, packed, username, description, extension from zodb_transaction"
    " where tid between %s and %s order by tid"
)
ITER_RECORDS_HP = (
    "select zoid, class_name, state, exact, deleted, data_tid from zodb_object_history"
    " where tid = %s order by zoid"
)
ITER_TIDS_HF = "select distinct tid from zodb_object_state where tid between %s and %s order by tid"
ITER_RECORDS_HF = (
    "select zoid, class_name, state, exact, false, null from zodb_object_state"
    " where tid = %s order by zoid"
)


# ------------------------------------------------------------------ Opening, pack, cleanup (storage.py)

# cleanup(): everything goes, under the commit lock.
CLEANUP = (
    "select 1 from zodb_commit for update",
    "delete from zodb_object_state",
    "delete from zodb_object_history",
    "delete from zodb_transaction",
    "delete from zodb_blob_chunk",
    "delete from catalog_txn_outcome",
    "update zodb_commit set tid = 0, gc_tid = 0",
    "alter sequence zodb_oid_seq restart",
)
IN_RECOVERY = "select pg_is_in_recovery()"
COUNT_OBJECTS = "select count(*) from zodb_object_state"
STORAGE_SIZE = (
    "select coalesce(sum(pg_total_relation_size(c)), 0) from unnest("
    "array['zodb_object_state', 'zodb_blob_chunk']::regclass[]) c"
)
EXPIRE_BATCH_OUTCOMES = "delete from catalog_txn_outcome where recorded < now() - make_interval(days => %s)"
