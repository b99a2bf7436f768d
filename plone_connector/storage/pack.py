"""Garbage collection of a history-free storage, in SQL over the ``refs`` column.

Phase 1 (no locks): in one snapshot, mark everything reachable from the root (oid 0) with a
recursive query; the rest is garbage *as of the snapshot's tid*.

Phase 2 (under the commit lock, briefly): objects written after that tid, and everything they
reference that phase 1 called garbage (transitively), are rescued; the remaining garbage rows and
their blob chunks are deleted, and the deletion gets a tid of its own (``gc_tid``). A storage
instance older than ``gc_tid`` (its cache, or the application, may still hold a removed object)
has the references its transactions *add* checked at ``tpc_vote``, and gets a
ReadConflictError instead of committing a dangling reference.
"""

from __future__ import annotations

import psycopg
from psycopg.errors import DeadlockDetected
from ZODB.POSException import StorageError
from ZODB.utils import p64

# Phase 2 of a history-free pack run again after losing a deadlock to a commit.
DEADLOCK_ATTEMPTS = 3


class PackError(StorageError):
    """Garbage collection cannot run safely on this database."""


def _refuse_opaque(conn: psycopg.Connection, table: str, condition: str = "true") -> None:
    opaque = conn.execute(f"select count(*) from {table} where class_name = '' and {condition}").fetchone()[0]
    if opaque:
        raise PackError(
            f"{opaque} records are not ZODB pickles, so their references are unknown;"
            " refusing to collect garbage (pack with gc=False)"
        )


def pack_history_free(dsn: str) -> list[bytes]:
    """Remove unreachable objects; return the oids of removed objects that had blobs."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _refuse_opaque(conn, "zodb_object_state")
        conn.execute("begin isolation level repeatable read")
        (pack_tid,) = conn.execute("select tid from zodb_commit").fetchone()
        conn.execute("create temporary table zodb_pack_garbage (zoid bigint primary key)")
        conn.execute(
            """insert into zodb_pack_garbage (zoid)
               select zoid from zodb_object_state
               except
               (with recursive live (zoid) as (
                    select 0::bigint
                    union
                    select unnest(s.refs) from zodb_object_state s join live on s.zoid = live.zoid)
                select zoid from live)"""
        )
        conn.execute("commit")
        try:
            for attempt in range(DEADLOCK_ATTEMPTS):
                try:
                    removed = _collect(conn, pack_tid)
                    break
                except DeadlockDetected as error:
                    # A commit holding a garbage row's lock asked for the commit lock: PostgreSQL
                    # aborted this side. The garbage list and its rescue are still right; again.
                    conn.execute("rollback")
                    if attempt == DEADLOCK_ATTEMPTS - 1:
                        raise StorageError(
                            f"pack lost {DEADLOCK_ATTEMPTS} deadlocks with commits; run it again"
                        ) from error
        except BaseException:
            if not conn.closed:
                conn.execute("rollback")
            raise
        finally:
            if not conn.closed:
                conn.execute("drop table if exists zodb_pack_garbage")
    return [p64(zoid) for zoid, blob_id in removed if blob_id is not None]


def _collect(conn: psycopg.Connection, pack_tid: int) -> list[tuple[int, int | None]]:
    """Phase 2 in one database transaction: rescue, delete; (zoid, blob_id) of what went."""
    conn.execute("begin")
    conn.execute("select tid from zodb_commit for update")
    # Again under the lock, for what was committed since phase 1 (indexed by tid): such
    # a record would refer to objects that the rescue below cannot see.
    _refuse_opaque(conn, "zodb_object_state", f"tid > {int(pack_tid)}")
    conn.execute(
        """with recursive rescued (zoid) as (
               select g.zoid from zodb_pack_garbage g
               where g.zoid in (
                   select zoid from zodb_object_state where tid > %(tid)s
                   union all
                   select unnest(refs) from zodb_object_state where tid > %(tid)s)
               union
               select g.zoid from rescued r
               join zodb_object_state s on s.zoid = r.zoid
               cross join unnest(s.refs) as ref (zoid)
               join zodb_pack_garbage g on g.zoid = ref.zoid)
           delete from zodb_pack_garbage where zoid in (select zoid from rescued)""",
        {"tid": pack_tid},
    )
    removed = conn.execute(
        """delete from zodb_object_state s using zodb_pack_garbage g
           where s.zoid = g.zoid returning s.zoid, s.blob_id"""
    ).fetchall()
    blob_ids = [blob_id for _zoid, blob_id in removed if blob_id is not None]
    if blob_ids:
        conn.execute("delete from zodb_blob_chunk where blob_id = any(%s)", (blob_ids,))
    if removed:
        conn.execute(
            "update zodb_commit set tid = greatest(tid + 1, zodb_now_tid()),"
            " gc_tid = greatest(tid + 1, zodb_now_tid())"
        )
    conn.execute("commit")
    return removed


def pack_history_preserving(dsn: str, pack_tid: int, gc: bool) -> list[tuple[bytes, bytes]]:
    """Drop revisions superseded before ``pack_tid`` and, with ``gc``, unreachable objects.

    Runs under the commit lock from start to end (simple and safe; commits wait meanwhile).
    Returns (oid, tid) of the blob revisions removed.
    """
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute("select tid from zodb_commit for update")
        removed = conn.execute(
            """delete from zodb_object_history h using (
                   select zoid, max(tid) as keep from zodb_object_history where tid <= %(p)s group by zoid
               ) k
               where h.zoid = k.zoid and h.tid < k.keep
               returning h.zoid, h.tid, h.blob_id""",
            {"p": pack_tid},
        ).fetchall()
        # An object deleted (undone creation) before the pack time and not revived: gone.
        deletions = conn.execute(
            """delete from zodb_object_history h
               where h.deleted and h.tid <= %(p)s
                 and not exists (select 1 from zodb_object_history l where l.zoid = h.zoid and l.tid > h.tid)
               returning h.zoid, h.tid, h.blob_id""",
            {"p": pack_tid},
        ).fetchall()
        removed += deletions
        gone: list[int] = []
        if gc:
            _refuse_opaque(conn, "zodb_object_history", "not deleted")
            # Live: reachable from the root through any revision that remains (those current at
            # the pack time and every later one), so nothing a later state can reach goes away.
            conn.execute(
                """create temporary table zodb_pack_live on commit drop as
                   with recursive live (zoid) as (
                       select 0::bigint
                       union
                       select unnest(h.refs) from zodb_object_history h join live on h.zoid = live.zoid)
                   select zoid from live"""
            )
            dead = conn.execute(
                """delete from zodb_object_history h
                   where not exists (select 1 from zodb_pack_live l where l.zoid = h.zoid)
                   returning h.zoid, h.tid, h.blob_id"""
            ).fetchall()
            removed += dead
            gone = sorted({zoid for zoid, _tid, _blob in dead})
            conn.execute("delete from zodb_object_state where zoid = any(%s)", (gone,))
        if gone or deletions:
            # As in history-free packs: a new gc_tid empties other processes' caches at their
            # next poll, and makes instances older than it check that new references do not
            # point at removed objects. Removed deletion revisions count too: they were how a
            # poll learnt that those objects went away (a process that last polled before the
            # deletion would otherwise keep serving them).
            conn.execute(
                "update zodb_commit set tid = greatest(tid + 1, zodb_now_tid()),"
                " gc_tid = greatest(tid + 1, zodb_now_tid())"
            )
        # A back pointer to a revision the pack removed points nowhere: the revision holds its
        # state itself now. (FileStorage's pack keeps the older revision a later undo points back
        # at instead, so loadBefore/loadSerial of it before the pack time still answer there;
        # here they do not. The current states and undo log agree: test_review_mvcc_undo.py.)
        conn.execute(
            """update zodb_object_history h set data_tid = null
               where h.data_tid is not null and h.data_tid <> h.tid and not exists (
                   select 1 from zodb_object_history o where o.zoid = h.zoid and o.tid = h.data_tid)"""
        )
        conn.execute("update zodb_transaction set packed = true where tid <= %s and not packed", (pack_tid,))
        conn.execute(
            """delete from zodb_transaction t where t.tid <= %s
               and not exists (select 1 from zodb_object_history h where h.tid = t.tid)""",
            (pack_tid,),
        )
        blob_ids = sorted({blob_id for _zoid, _tid, blob_id in removed if blob_id is not None})
        if blob_ids:
            conn.execute(
                """delete from zodb_blob_chunk c where c.blob_id = any(%s)
                   and not exists (select 1 from zodb_object_history h where h.blob_id = c.blob_id)""",
                (blob_ids,),
            )
    return [(p64(zoid), p64(tid)) for zoid, tid, blob_id in removed if blob_id is not None]
