"""The SQL statements of JsonbStorage, in one place (the tables are schema.py's).

Statement text depends only on the statement's shape, never on values: values go as parameters,
so the server's and psycopg's prepared statements are reused. The few statements built with
``format`` take integers the storage computed itself or the name of one of its own tables.
"""

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

# Every change after {since}, own commits included (the process cache needs them all).
POLL = (
    "select c.tid, c.gc_tid, x.zoids, x.tids, c.state_format from zodb_commit c,"
    " (select array_agg(zoid) as zoids, array_agg(tid) as tids from {table} where tid > {since}) x"
)

LOAD_CURRENT = "select tid, class_name, state, exact from zodb_object_state where zoid = %s"
# The same, without the record when its tid is the one the process cache holds (cache.py);
# prepared once per load connection (libpq's protocol: bytes, $n parameters).
FAST_LOAD_NAME = b"zodb_load"
FAST_LOAD = (
    b"select tid, class_name, case when tid = $2 then null else state end,"
    b" case when tid = $2 then null else exact end from zodb_object_state where zoid = $1"
)
