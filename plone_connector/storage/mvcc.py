"""MVCC: the read snapshot of an instance, renewed by ``poll_invalidations``, which also lists the
oids changed since the previous poll (docs/decisions/storage-mvcc.md).
"""

from __future__ import annotations

import psycopg
import ZODB.POSException
from psycopg import pq
from ZODB.utils import p64

from plone_connector.storage.errors import DisconnectedError
from plone_connector.storage.schema import check_state_format
from plone_connector.storage.shared import log
from plone_connector.storage.sql import COMMIT_STATE, LAST_TID, POLL, SNAPSHOT_BEGIN


class Snapshots:
    """JsonbStorage's part that keeps the read snapshot and polls for invalidations."""

    def sync(self, force: bool = True) -> None:
        # Always renew, even when not forced: a snapshot kept on the word of the listener would
        # miss commits whose notification is still in flight (a stale read after another
        # process's commit returned). The renewal rides on the poll's single round trip.
        with self._lock:
            self._snapshot_tid = None
            self._snapshot_lost = False

    def on_commit(self, callback) -> None:
        """Call ``callback(tid: bytes)`` (in the listener thread) for every commit by any process,
        and ``callback(None)`` when the listener reconnected: commits meanwhile went unheard."""
        if self._shared.listener is None:
            raise ZODB.POSException.StorageError("storage opened with listen=False")
        self._shared.listener.subscribe(lambda tid: callback(None if tid is None else p64(tid)))

    def afterCompletion(self) -> None:
        """End the read snapshot: ZODB calls this after every transaction and when a Connection
        goes back to its pool, where an open snapshot could sit idle for hours holding back
        VACUUM in the whole database. The next poll or read starts a new one."""
        with self._lock:
            self._end_snapshot()

    def _end_snapshot(self) -> None:
        self._snapshot_tid = None
        self._snapshot_lost = False
        conn = self._load_conn
        if conn is None or conn.closed or conn.info.transaction_status == pq.TransactionStatus.IDLE:
            return
        try:
            conn.execute("rollback")
        except psycopg.OperationalError:
            self._drop_load_conn()  # the snapshot ended with the connection

    def _new_snapshot(self, since: int | None) -> tuple[list[int], list[int], int]:
        """Start a new snapshot; return (oids, tids) changed after ``since``, and gc_tid."""
        try:
            conn = self._load()
        except psycopg.OperationalError as error:
            self._drop_load_conn()
            raise DisconnectedError(f"cannot reach the database: {error}") from error
        if since is None:
            select = COMMIT_STATE
        else:
            # Integers formatted by us, never input: one simple-protocol round trip does
            # rollback, begin and poll together (the protocol takes no parameters). History-
            # preserving: the history table also shows deletions (undone creations).
            table = "zodb_object_history" if self._hp else "zodb_object_state"
            select = POLL.format(since=int(since), table=table)
        query = SNAPSHOT_BEGIN + "; " + select
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            query = "rollback; " + query
        try:
            tid, gc_tid, zoids, tids, state_format = _last_result(conn.execute(query)).fetchone()
        except psycopg.OperationalError:
            # A new snapshot is starting anyway, so a broken connection (server restart,
            # terminated backend) can be replaced here without losing anything.
            self._drop_load_conn()
            query = query.removeprefix("rollback; ")  # a new connection has no transaction
            try:
                tid, gc_tid, zoids, tids, state_format = _last_result(self._load().execute(query)).fetchone()
            except psycopg.OperationalError as error:
                self._drop_load_conn()
                raise DisconnectedError(f"cannot reach the database: {error}") from error
        # Newer code may have opened the database since this process did: its states would be
        # misread from now on.
        check_state_format(state_format)
        self._snapshot_tid = tid
        if self._first_tid is None:
            self._first_tid = tid
        return zoids or [], tids or [], gc_tid

    def _ensure_snapshot(self) -> psycopg.Connection:
        if self._snapshot_lost:
            raise DisconnectedError(
                "the transaction's read snapshot was lost with its database connection;"
                " it must end (abort, then retry) before it reads again"
            )
        if self._snapshot_tid is None:
            _zoids, _tids, gc_tid = self._new_snapshot(None)
            if self._polled_tid is None:
                # The next poll counts from this snapshot: it must also know the gc_tid seen
                # here, or a deletion before that poll (which no row shows) would go unreported.
                self._polled_tid = self._snapshot_tid
                self._polled_gc_tid = gc_tid
        return self._load_conn

    def _snapshot_done(self) -> None:
        """After a two-phase commit: ZODB ends an instance's snapshot with afterCompletion;
        nobody calls that on the main instance, which ends its own."""
        if self._is_main:
            self._end_snapshot()
        else:
            self._snapshot_tid = None

    def poll_invalidations(self) -> list[bytes] | None:
        with self._lock:
            if self._snapshot_tid is not None and self._polled_tid == self._snapshot_tid:
                return []
            self._snapshot_lost = False  # a new transaction
            cache = self._shared.cache
            first = self._polled_tid is None
            since = cache.horizon if first else self._polled_tid
            try:
                zoids, tids, gc_tid = self._new_snapshot(since)
            except DisconnectedError as error:
                # ZODB polls right after a commit too: raising here would report a committed
                # transaction as failed (and a retry would run it twice). Answer "invalidate
                # everything" instead; the transaction's first read starts a snapshot, and
                # raises if the database is still out of reach.
                log.warning("poll failed, the connection's whole cache is invalidated: %s", error)
                self._snapshot_tid = None
                self._polled_tid = None  # the next snapshot's tid, once a read starts one
                return None
            snapshot = self._snapshot_tid
            cache.advance(snapshot if since is None else since, snapshot, zoids, tids or [], gc_tid)
            own = self._own_tid
            self._polled_tid = snapshot
            self._ltid = max(self._ltid, snapshot)
            gc_moved = self._polled_gc_tid is not None and gc_tid != self._polled_gc_tid
            self._polled_gc_tid = gc_tid
            if first:
                return []
            if gc_moved:
                # A pack or a deletion removed objects since our last poll; their removal is in
                # no row a poll can see: the Connection's whole cache goes (packs are rare).
                return None
            # Our own commits are not invalidations for our Connection.
            return list({p64(zoid) for zoid, tid in zip(zoids, tids, strict=True) if tid != own})

    def lastTransaction(self) -> bytes:
        with self._lock:
            if self._is_main and not self._in_db_transaction:
                # The storage as the DB sees it (DB.lastTransaction, historical connections):
                # the newest commit of any process, not this instance's last poll.
                if self._shared.read_only:  # e.g. on a replica: no write connection
                    with self._connect() as conn:
                        (tid,) = conn.execute(LAST_TID).fetchone()
                else:
                    (tid,) = self._outside_transaction(LAST_TID).fetchone()
                self._ltid = max(self._ltid, tid)
            elif not self._ltid or self._snapshot_tid is None:
                # No snapshot yet (before the first poll, or after one that failed): the reads
                # of this transaction will see the one that starts now, which may be newer than
                # the last poll (the catalog connector versions its entries by this).
                self._ensure_snapshot()
                self._ltid = max(self._ltid, self._snapshot_tid or 0)
            return p64(self._ltid)


def _last_result(cursor: psycopg.Cursor) -> psycopg.Cursor:
    while cursor.description is None and cursor.nextset():
        pass
    return cursor
