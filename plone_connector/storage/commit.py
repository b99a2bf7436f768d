"""The two-phase commit: ``tpc_begin``, ``tpc_vote`` (lock and compare the touched rows, resolve
conflicts, take the commit lock and the tid, copy the rows in), ``tpc_finish`` (COMMIT, and what
a connection lost around it means), ``tpc_abort`` (docs/decisions/storage-commit.md).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time

import psycopg
import ZODB.POSException
import zodbpickle.pickle
from ZODB.utils import p64, u64, z64

from plone_connector.storage.errors import CommitLockTimeout, DisconnectedError, StorageClosedError
from plone_connector.storage.listener import CHANNEL
from plone_connector.storage.rows import PendingRow, int_array
from plone_connector.storage.shared import log
from plone_connector.storage.sql import (
    ADVANCE_OID_SEQ,
    BUMP_GC_TID,
    COMMIT_LOCK,
    COMMIT_LOCK_AT,
    COPY_TEMP_IN,
    CREATED_EXISTS,
    DELETE_BLOBS,
    DELETE_STATES,
    EMPTY_TEMP,
    END_VOTER_SESSION,
    INSERT_DELETIONS,
    INSERT_HISTORY,
    INSERT_TRANSACTION,
    LATEST_REVISION,
    LOAD_CURRENT,
    LOCK_AND_COMPARE,
    LOCK_READ_CURRENT,
    NEW_REFS_PACKED_AWAY,
    RECORD_BATCH_OUTCOMES,
    UNDONE_KEPT,
    UPDATE_RESOLVED,
    XACT_STATUS,
)

# Seconds tpc_finish waits for a transaction whose connection broke during COMMIT to end on the
# server before it ends that transaction's session itself.
COMMIT_OUTCOME_WAIT = 5.0


class TwoPhaseCommit:
    """JsonbStorage's part that runs the two-phase commit on the store connection."""

    def _reset_transaction(self) -> None:
        self._transaction = None
        self._restore_tid: int | None = None
        self._pending: dict[int, PendingRow] = {}
        # New objects to copy into zodb_object_state at vote, and the bytes of state they hold.
        self._direct: dict[int, PendingRow] = {}
        self._direct_bytes = 0
        self._pickles: dict[int, bytes] = {}
        # What a load from the database will return for each row written, for the process cache.
        self._written: dict[int, bytes] = {}
        # (class name, reason) of each row written as an exact pickle.
        self._exact: dict[int, tuple[str, str | None]] = {}
        self._prev_tids: dict[int, int] = {}
        self._flushed: set[int] = set()
        self._read_current: dict[int, int] = {}
        self._blob_files: dict[bytes, str] = {}
        # The blob uploaded for an object in this transaction: a later store of the object
        # without a blob keeps it (as FileStorage does), a later upload replaces it.
        self._uploaded: dict[int, int] = {}
        self._deletes: set[int] = set()
        self._tid: int | None = None
        self._xid: str | None = None  # PostgreSQL's id of the voted transaction (xid8 as text)
        self._backend_pid: int | None = None
        self._batch_ids: list[str] = []
        self._undo_origins: dict[int, int | None] = {}
        self._undone: set[int] = set()  # transactions undone: checked again under the commit lock
        self._recreated: list[int] = []  # deleted objects written again (history-preserving)
        self._metadata = (b"", b"", b"")
        self._packed = False
        # Something this transaction's database transaction must keep (rows, blob chunks) was
        # sent; and the vote went through.
        self._sent = False
        self._voted = False
        self._resolved: list[bytes] = []
        self._in_db_transaction = False

    def tpc_transaction(self):
        return self._transaction

    def tpc_begin(self, transaction, tid: bytes | None = None, status: str = " ") -> None:
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        if self._closed:
            raise StorageClosedError(self.__name__)
        if self._transaction is transaction:
            raise ZODB.POSException.StorageTransactionError(
                "Duplicate tpc_begin calls for same transaction"
            )
        self._commit_lock.acquire()
        with self._lock:  # read under it by reads on the main instance (current_on_main)
            self._reset_transaction()
            self._transaction = transaction
        self._restore_tid = u64(tid) if tid is not None else None
        # A copied transaction that its source packed ("p"): the revisions an undo of it needs
        # are gone there, so it stays out of undoLog here too.
        self._packed = tid is not None and status == "p"
        extension = getattr(transaction, "extension", None)
        if extension is None:
            extension = getattr(transaction, "_extension", None) or {}
        batch_ids = extension.get("catalog_batch_ids") or []
        if isinstance(batch_ids, str) or not all(isinstance(b, str) for b in batch_ids):
            self._commit_lock.release()
            self._reset_transaction()
            raise ZODB.POSException.StorageTransactionError(
                "transaction extension catalog_batch_ids must be a list of str"
            )
        self._batch_ids = list(batch_ids)
        self._metadata = (
            _as_bytes(getattr(transaction, "user", b"")),
            _as_bytes(getattr(transaction, "description", b"")),
            getattr(transaction, "extension_bytes", None) or (_dumps(extension) if extension else b""),
        )

    def _check_transaction(self, transaction) -> None:
        if transaction is not self._transaction:
            raise ZODB.POSException.StorageTransactionError(self, transaction)

    def _check_write(self, version, transaction) -> None:
        """What store, restore and storeBlob refuse before they write: a read-only storage, a
        version, a transaction other than the one begun."""
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        if version:
            raise ZODB.POSException.Unsupported("Versions aren't supported")
        if transaction is not self._transaction:
            raise ZODB.POSException.StorageTransactionError(self, transaction)

    def tpc_vote(self, transaction):
        self._check_transaction(transaction)
        with self._lock:
            try:
                resolved = self._vote()
                self._voted = True
                return resolved
            except psycopg.errors.DeadlockDetected as error:
                raise ZODB.POSException.ConflictError(f"deadlock while locking objects: {error}") from error
            except psycopg.errors.UniqueViolation as error:
                if error.diag.table_name == "catalog_txn_outcome":
                    # Not a conflict a retry could get past: the catalog batch id is taken.
                    raise ZODB.POSException.StorageError(
                        f"catalog batch id already recorded by another transaction: {error}"
                    ) from error
                # A new object's oid was created by a transaction that committed meanwhile.
                raise ZODB.POSException.ConflictError(f"object created twice: {error}") from error
            except psycopg.errors.LockNotAvailable as error:
                raise CommitLockTimeout(
                    f"locks not granted within {self._shared.commit_lock_timeout:g} s: {error}"
                ) from error
            except psycopg.OperationalError as error:
                self._drop_store_conn()
                raise DisconnectedError(f"database connection lost in tpc_vote: {error}") from error

    def _vote(self) -> list[bytes]:
        self._flush()
        conn = self._begin_db_transaction()
        restoring = self._restore_tid is not None
        written = sorted(self._flushed.union(self._direct))
        if self._read_current and not restoring:
            rows = conn.execute(
                LOCK_READ_CURRENT,
                (sorted(set(self._read_current).difference(written)),),
            ).fetchall()
            current = dict(rows)
            for zoid, expected in self._read_current.items():
                if zoid in self._flushed or zoid in self._direct:
                    continue
                if current.get(zoid) != expected:
                    raise ZODB.POSException.ReadConflictError(
                        oid=p64(zoid), serials=(p64(current.get(zoid, 0)), p64(expected))
                    )
        deletes = sorted(self._deletes)
        # What each object's row must hold for no conflict: its tid when the transaction read
        # it, NULL (no row) for a new one. A deletion whose serial is not known expects nothing.
        expected = [] if restoring else [(zoid, self._prev_tids[zoid] or None) for zoid in written]
        if not restoring:
            # (Serial zero: created in this transaction, or never committed; no row expected.)
            expected += [(zoid, self._prev_tids[zoid] or None) for zoid in deletes if zoid in self._prev_tids]
        rows = conn.execute(
            LOCK_AND_COMPARE,
            (
                int_array(written + deletes),  # text: a third of adapting the lists
                int_array([zoid for zoid, _ in expected]),
                int_array([tid for _, tid in expected]),
            ),
        ).fetchall()
        old_blobs = {zoid: blob_id for zoid, _tid, blob_id, _differs in rows if blob_id is not None}
        differing = {zoid: tid for zoid, tid, _blob_id, differs in rows if differs}
        if differing:
            # A "new" object that exists (its oid was handed out twice, or stored with a made-up
            # one): the temporary table's path, whose conflict handling covers it.
            self._move_to_temp([zoid for zoid in differing if zoid in self._direct])
            self._detect_conflicts(conn, differing)
        # The commit lock: held from here until tpc_finish commits, so the statements under it
        # go in as few round trips as they can: the lock's own (which also asks for the
        # transaction id and queues the notification, sent by PostgreSQL only if it commits),
        # the new objects' COPY, and one pipeline with everything else.
        if restoring:
            row = conn.execute(
                COMMIT_LOCK_AT,
                (self._restore_tid, self._restore_tid, CHANNEL),
            ).fetchone()
            if row is None:
                raise ZODB.POSException.StorageTransactionError(
                    f"restored tid {p64(self._restore_tid)!r} is not after the last committed tid"
                )
        else:
            row = conn.execute(
                COMMIT_LOCK,
                (CHANNEL,),
            ).fetchone()
        tid, gc_tid, self._xid, _ = row
        self._tid = tid
        # The transaction's id: if the connection breaks around COMMIT, PostgreSQL tells whether
        # it committed (see _commit_or_verify).
        self._backend_pid = conn.info.backend_pid
        if gc_tid and gc_tid > (self._first_tid or 0) and not restoring:
            # A pack ran since this instance started: its cache (or the application) may hold
            # objects the pack removed. New references must not point at them.
            self._check_refs_survived_pack(conn)
        if self._undone:
            # undo() read the revisions it restores before this lock: a pack by time may have
            # taken them since (with their blobs), and marked the undone transaction packed.
            (kept,) = conn.execute(
                UNDONE_KEPT,
                (sorted(self._undone),),
            ).fetchone()
            if kept != len(self._undone):
                raise ZODB.POSException.UndoError("the undone transaction was packed meanwhile")
        if self._hp:
            self._write_history(conn, tid, written)
        if self._direct:
            self._send_direct(conn, tid)
        replaced = [blob_id for zoid, blob_id in old_blobs.items() if p64(zoid) in self._blob_files or zoid in self._deletes]
        if not (self._flushed or self._deletes or replaced or restoring or self._batch_ids):
            return self._resolved
        # New objects in the temporary table (history-preserving mode, beyond the direct path's
        # memory limit): the lock query found no row to lock, so another transaction may have
        # committed one for the oid since. The upsert would overwrite it; the direct COPY's
        # unique key refuses it, and so must this path.
        created = [] if restoring else [zoid for zoid in self._flushed if not self._prev_tids.get(zoid)]
        created += self._recreated
        with conn.pipeline():
            if created:
                existing = conn.execute(
                    CREATED_EXISTS,
                    (int_array(sorted(created)),),
                )
            if self._flushed:
                conn.execute(
                    COPY_TEMP_IN,
                    (tid,),
                )
                conn.execute(EMPTY_TEMP)  # the next transaction starts empty
            if self._deletes:
                conn.execute(DELETE_STATES, (sorted(self._deletes),))
                if not self._hp:
                    # History-free polls cannot see deleted rows: tell other processes' caches the
                    # way pack does.
                    conn.execute(BUMP_GC_TID)
            if replaced and not self._hp:  # history keeps old blob revisions
                conn.execute(DELETE_BLOBS, (replaced,))
            if restoring and written:
                conn.execute(
                    ADVANCE_OID_SEQ,
                    (max(written),),
                )
            if self._batch_ids:
                conn.execute(
                    RECORD_BATCH_OUTCOMES,
                    (self._batch_ids, tid),
                )
        if created:
            (twice,) = existing.fetchone()
            if twice is not None:  # the writes above are rolled back with the transaction
                raise ZODB.POSException.ConflictError(
                    f"object created twice: oid 0x{twice:x} was committed by another transaction meanwhile",
                    oid=p64(twice),
                )
        return self._resolved

    def _write_history(self, conn: psycopg.Connection, tid: int, written: list[int]) -> None:
        user, description, extension = self._metadata
        conn.execute(
            INSERT_TRANSACTION,
            (tid, user, description, extension, self._packed),
        )
        if written:
            # A blob object stored without a new blob file keeps its blob (as the upsert does).
            # A back pointer (undo, restore) is kept only while the revision it names exists:
            # undo() read it before this lock, and a pack by time may have removed that
            # revision since (nulling the pointers already committed, pack.py); one naming a
            # missing revision makes FileStorage's restore (zodbconvert) fail.
            conn.execute(
                INSERT_HISTORY,
                {"tid": tid},
            )
        if self._deletes:
            conn.execute(
                INSERT_DELETIONS,
                (sorted(self._deletes), tid),
            )

    @staticmethod
    def _latest_revision(conn: psycopg.Connection, zoid: int) -> int | None:
        return conn.execute(LATEST_REVISION, (zoid,)).fetchone()[0]

    def _detect_conflicts(self, conn: psycopg.Connection, differing: dict[int, int | None]) -> None:
        """Resolve, or raise for, the objects whose row was not what the transaction expected
        (``differing``: zoid to the committed tid, None without a row)."""
        conflicts = []
        for zoid, committed in sorted(differing.items()):
            prev = self._prev_tids[zoid]
            if zoid in self._deletes:
                raise ZODB.POSException.ConflictError(oid=p64(zoid), serials=(p64(committed or 0), p64(prev)))
            if committed is None and self._hp and prev == self._latest_revision(conn, zoid):
                # Re-created (an undo of its undone creation) from the deletion it saw; no row to
                # lock, so checked again under the commit lock, as new objects are.
                self._recreated.append(zoid)
                continue
            conflicts.append(zoid)
        for zoid in conflicts:
            oid = p64(zoid)
            committed = differing[zoid]
            if committed is None:
                raise ZODB.POSException.ConflictError(oid=oid, serials=(z64, p64(self._prev_tids[zoid])))
            row = conn.execute(LOAD_CURRENT, (zoid,)).fetchone()
            committed_data = self._record(oid, *row)
            self._resolving = True
            try:
                resolved = self.tryToResolveConflict(
                    oid, p64(committed), p64(self._prev_tids[zoid]), self._pickles[zoid], committed_data
                )
            finally:
                self._resolving = False
            new_row = self._encode(oid, p64(committed), resolved, None)
            # A merged state is no earlier revision's data: an undo's back pointer goes.
            conn.execute(
                UPDATE_RESOLVED,
                (committed, new_row.class_name, new_row.state_json, new_row.refs, new_row.exact, zoid),
            )
            self._pickles[zoid] = resolved
            self._written[zoid] = new_row.loaded
            self._note_exact(new_row)
            self._resolved.append(oid)

    def _check_refs_survived_pack(self, conn: psycopg.Connection) -> None:
        """Refuse to commit new references to objects that a pack has removed."""
        # Only references this transaction adds need checking; existing ones were checked (or
        # kept alive) when they were written. New objects waiting for the direct COPY send
        # theirs along (every reference of a new object is new).
        self._transcode_direct()
        direct_refs = sorted({ref for row in self._direct.values() for ref in row.refs})
        row = conn.execute(
            NEW_REFS_PACKED_AWAY,
            (int_array(direct_refs), int_array(sorted(self._direct))),
        ).fetchone()
        if row is not None:
            raise ZODB.POSException.ReadConflictError(
                f"object {p64(row[0])!r} was removed by pack; it cannot be referenced again"
            )

    def tpc_finish(self, transaction, f=None):
        self._check_transaction(transaction)
        with self._lock:
            try:
                if not self._voted:
                    raise ZODB.POSException.StorageTransactionError("tpc_finish without a successful tpc_vote")
                self._commit_or_verify()
                if self._exact:
                    self._count_exact(self._tid)
                tid = p64(self._tid)
                self._ltid = self._own_tid = self._tid
                cache = self._shared.cache
                cache.drop(list(self._pickles) + list(self._deletes))
                if not self._hp:
                    # The records as a load from the database would build them (the written
                    # pickle may differ in form): the same bytes in every process. Built on
                    # the first load that wants them; a transaction that only writes pays
                    # nothing. (History-preserving: loads may follow back pointers; not cached.)
                    cache.put_own(self._tid, [(zoid, self._written[zoid])
                                              for zoid in self._written if zoid not in self._deletes])
                for zoid, pickle in self._pickles.items():
                    self._remember(p64(zoid), tid, pickle)
                for oid, filename in self._blob_files.items():
                    try:
                        self._cache_blob_file(oid, tid, filename)
                    except OSError as error:
                        # Committed already: the blob is in the database, the cache holds only
                        # a copy (a load downloads it). A full disk must not fail the commit.
                        log.warning("blob of oid 0x%x committed at 0x%x not cached: %s",
                                    u64(oid), self._tid, error)
                        with contextlib.suppress(OSError):
                            os.remove(filename)
                if not self._hp:
                    # Deleted objects' blob files in the cache are garbage now, as after a pack.
                    for zoid in self._deletes:
                        shutil.rmtree(self._shared.fshelper.getPathForOID(p64(zoid)), ignore_errors=True)
                if f is not None:
                    f(tid)
                self._snapshot_done()  # our own commit is newer than the open snapshot
                return tid
            finally:
                self._end_transaction()

    def _commit_or_verify(self) -> None:
        if self._store_conn is None:  # dropped after the vote: the server rolled it back
            raise DisconnectedError("database connection lost before commit")
        try:
            status = self._store_conn.execute("commit").statusmessage
            self._in_db_transaction = False
            if status != "COMMIT":  # a transaction in error: PostgreSQL rolls it back
                raise ZODB.POSException.StorageError(f"the database did not commit ({status})")
            return
        except psycopg.OperationalError as error:
            self._drop_store_conn()
            lost = error
        # The connection broke around COMMIT: the server committed all of it or nothing. Its
        # transaction status says which. (Rows carrying our tid prove nothing: in history-free
        # mode a later commit may have overwritten them, and a deleting transaction has none.)
        try:
            status = self._voted_transaction_status()
        except psycopg.Error as error:
            raise ZODB.POSException.StorageError(
                f"database connection lost at commit and the outcome is unknown: {error}"
            ) from lost
        if status == "committed":
            return
        if status == "aborted":
            raise DisconnectedError(f"database connection lost before commit: {lost}") from lost
        # Still in progress after its session was told to end, or too old to be known (None).
        raise ZODB.POSException.StorageError(
            f"database connection lost at commit and the outcome is unknown (status {status}): {lost}"
        ) from lost

    def _voted_transaction_status(self) -> str | None:
        """``pg_xact_status`` of the voted transaction, asked on a new connection.

        "in progress" means its session has not finished the COMMIT yet, or has not noticed
        that the client is gone: wait a little, then end that session, after which PostgreSQL
        has either committed or rolled the transaction back and the answer is final.
        """
        query = XACT_STATUS
        deadline = time.monotonic() + COMMIT_OUTCOME_WAIT
        delay = 0.01
        with self._connect() as conn:
            while True:
                (status,) = conn.execute(query, (self._xid,)).fetchone()
                if status != "in progress" or time.monotonic() >= deadline:
                    break
                time.sleep(delay)
                delay = min(delay * 2, 0.25)
            if status == "in progress":
                # Only the session still running our transaction (a pid alone may be reused).
                conn.execute(
                    END_VOTER_SESSION,
                    (int(COMMIT_OUTCOME_WAIT * 1000), self._backend_pid, self._xid),
                )
                (status,) = conn.execute(query, (self._xid,)).fetchone()
        return status

    def tpc_abort(self, transaction):
        if transaction is not self._transaction:
            return
        with self._lock:
            try:
                for filename in self._blob_files.values():
                    if os.path.exists(filename):
                        os.remove(filename)
                self._snapshot_done()
            finally:
                self._end_transaction()

    def _end_transaction(self) -> None:
        # A transaction that ends without COMMIT or tpc_abort (a refused tpc_finish) must not
        # leave its database transaction, rows included, to the next one.
        self._rollback_store()
        self._reset_transaction()
        self._commit_lock.release()

    def _rollback_store(self) -> None:
        if not self._in_db_transaction or self._store_conn is None:
            return
        try:
            if self._copy is not None:
                self._end_copy(ZODB.POSException.StorageError("transaction aborted"))
            self._store_conn.execute("rollback")
        except psycopg.Error:
            self._drop_store_conn()
        self._in_db_transaction = False


def _as_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    return (value or "").encode("utf-8")


def _dumps(extension: dict) -> bytes:
    return zodbpickle.pickle.dumps(extension, 3)
