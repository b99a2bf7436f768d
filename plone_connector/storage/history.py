"""History and undo (history-preserving mode), iteration and copying: ``history``, ``undoLog``,
``undo``, ``iterator``, ``copyTransactionsFrom`` (zodbconvert).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator

import ZODB.blob
import ZODB.POSException
import zodbpickle.pickle
from persistent.TimeStamp import TimeStamp
from ZODB.BaseStorage import DataRecord, TransactionRecord
from ZODB.utils import p64, u64

from plone_connector.storage.shared import current_on_main, log, store_side
from plone_connector.storage.sql import (
    CURRENT_REVISION,
    HISTORY,
    ITER_RECORDS_HF,
    ITER_RECORDS_HP,
    ITER_TIDS_HF,
    ITER_TRANSACTIONS,
    REVISION_AT,
    REVISION_BEFORE,
    SNAPSHOT_BEGIN,
    UNDO_LOG,
    UNDOABLE,
    UNDONE_OBJECTS,
)

# How often copyTransactionsFrom (zodbconvert) logs its progress.
COPY_PROGRESS_SECONDS = 10.0


class History:
    """JsonbStorage's part that reads and undoes past transactions and copies them."""

    @current_on_main
    def history(self, oid: bytes, size: int = 1):
        if not self._hp:
            data, serial = self.load(oid)
            return [_history_entry(serial, b"", b"", b"", len(data))]
        with self._lock:
            conn = self._ensure_snapshot()
            rows = conn.execute(
                HISTORY,
                (u64(oid), size),
            ).fetchall()
        if not rows:
            raise ZODB.POSException.POSKeyError(oid)
        return [_history_entry(p64(tid), user, desc, ext, length) for tid, user, desc, ext, length in rows]

    def supportsUndo(self) -> bool:
        return self._hp

    def supportsTransactionalUndo(self) -> bool:
        return self._hp

    def undoLog(self, first=0, last=-20, filter=None):
        if last < 0:
            last = first - last
        if not self._hp:
            return []
        entries = []
        with self._connect() as conn, conn.cursor() as cur:
            for tid, user, desc, ext in cur.stream(UNDO_LOG):
                entry = _history_entry(p64(tid), bytes(user), bytes(desc), bytes(ext), 0)
                entry["id"] = p64(tid)
                del entry["tid"], entry["serial"], entry["size"], entry["version"]
                if filter is None or filter(entry):
                    entries.append(entry)
                    if len(entries) >= last:
                        break
        return entries[first:last]

    def undoInfo(self, first=0, last=-20, specification=None):
        def matches(entry):
            return all(entry.get(key) == value for key, value in specification.items())

        return self.undoLog(first, last, matches if specification else None)

    @store_side
    def undo(self, transaction_id, transaction=None):
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        if not self._hp:
            raise ZODB.POSException.UndoError("history-free storage: nothing to undo")
        self._check_transaction(transaction)
        undone = u64(transaction_id)
        with self._lock:
            conn = self._begin_db_transaction()
            if conn.execute(UNDOABLE, (undone,)).fetchone() is None:
                raise ZODB.POSException.UndoError("Invalid undo transaction id")
            self._undone.add(undone)
            oids = []
            for (zoid,) in conn.execute(UNDONE_OBJECTS, (undone,)).fetchall():
                self._undo_object(zoid, undone)
                oids.append(p64(zoid))
        return None, oids

    def _undo_object(self, zoid: int, undone: int) -> None:
        oid = p64(zoid)
        # Asked for per object: the rows of the objects before may have left a COPY open.
        conn = self._begin_db_transaction()
        current = conn.execute(CURRENT_REVISION, (zoid,)).fetchone()
        undone_row = conn.execute(REVISION_AT, (zoid, undone)).fetchone()
        before = conn.execute(REVISION_BEFORE, (zoid, undone)).fetchone()
        if current is None or undone_row is None:
            # undo() listed the object, then a pack (these reads take no lock) removed the
            # revision it undoes, or the whole object as garbage.
            raise ZODB.POSException.UndoError("the undone transaction was packed meanwhile", oid)
        current_tid = current[0]
        # The undone revision is still current if later revisions only restored its state
        # (an undo of an undo): same data origin, as FileStorage's back pointers tell it.
        still_current = current_tid == undone or current[6] == undone_row[6]
        pending = self._pickles.get(zoid)  # an earlier undo in this transaction changed it
        if pending is not None:
            still_current = self._undo_origins.get(zoid) == undone_row[6]
        if before is None or before[4]:
            # Undoing the creation: the object goes away (if nothing changed it since).
            if not still_current:
                raise ZODB.POSException.UndoError("Some data were modified by a later transaction", oid)
            self._forget_row(zoid)  # an earlier undo in this transaction may have written it
            self._deletes.add(zoid)
            self._prev_tids[zoid] = current_tid
            return
        restored = self._record(oid, *before[:4])
        data_tid, blob_id = before[6], before[5]
        if not still_current:
            if current[4] and pending is None:
                raise ZODB.POSException.UndoError("object deleted by a later transaction", oid)
            committed = pending if pending is not None else self._record(oid, *current[:4])
            try:
                self._resolving = True
                restored = self.tryToResolveConflict(oid, p64(current_tid), p64(undone), restored, committed)
            except ZODB.POSException.ConflictError as error:
                raise ZODB.POSException.UndoError("Some data were modified by a later transaction", oid) from error
            finally:
                self._resolving = False
            data_tid = blob_id = None
        row = self._encode(oid, p64(self._prev_tids.get(zoid, current_tid)), restored, blob_id)
        row.data_tid = data_tid
        self._undo_origins[zoid] = data_tid
        self._add_row(row)

    def iterator(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[TransactionRecord]:
        """Transactions oldest first. History-free: one per tid still current on some object."""
        low = u64(start) if start else 0
        high = u64(stop) if stop else (1 << 63) - 1
        with self._connect() as conn:
            conn.execute(SNAPSHOT_BEGIN)
            if self._hp:
                transactions = conn.execute(
                    ITER_TRANSACTIONS,
                    (low, high),
                ).fetchall()
                records_sql = ITER_RECORDS_HP
            else:
                transactions = [
                    (tid, False, b"", b"", b"")
                    for (tid,) in conn.execute(
                        ITER_TIDS_HF,
                        (low, high),
                    )
                ]
                records_sql = ITER_RECORDS_HF
            for tid, packed, user, description, extension in transactions:
                records = [
                    DataRecord(
                        p64(zoid),
                        p64(tid),
                        None if deleted else self._record(p64(zoid), tid, cn, st, ex),
                        p64(data_tid) if data_tid else None,
                    )
                    for zoid, cn, st, ex, deleted, data_tid in conn.execute(records_sql, (tid,)).fetchall()
                ]
                yield _Transaction(
                    p64(tid), "p" if packed else " ", bytes(user), bytes(description), bytes(extension), records
                )

    def copyTransactionsFrom(self, other, verbose: bool = False) -> None:
        """Copy every transaction of ``other`` with its tids (zodbconvert), blobs included.

        Logs progress at INFO every ``COPY_PROGRESS_SECONDS`` (zodbconvert shows INFO) and a
        summary at the end; ``verbose`` adds a line every 1,000 transactions."""
        # ZODB.BaseStorage.copy would drop blobs; restoreBlob owns (moves) the file it gets, so
        # each source blob is copied to a temporary file first.
        started = last_report = time.monotonic()
        copied = records = blobs = missing = 0
        for txn in other.iterator():
            self.tpc_begin(txn, txn.tid, txn.status)
            try:
                for record in txn:
                    records += 1
                    blob_file = None
                    if record.data is not None and ZODB.blob.is_blob_record(record.data):
                        try:
                            blob_file = other.loadBlob(record.oid, record.tid)
                        except ZODB.POSException.POSKeyError:
                            # The source lost this blob file (or packed it meanwhile): the record
                            # is copied without one, so a load of its blob finds the object's
                            # previous blob if it had one (a store without a new file keeps it),
                            # else fails as in the source. Said loudly: the copy is not exact.
                            missing += 1
                            log.warning(
                                "copy: the blob of oid 0x%x at tid 0x%x is missing in the source;"
                                " its record is copied without it", u64(record.oid), u64(record.tid),
                            )
                    if blob_file is not None:
                        blobs += 1
                        fd, own_copy = tempfile.mkstemp(suffix=".copy", dir=self.temporaryDirectory())
                        os.close(fd)
                        shutil.copyfile(blob_file, own_copy)
                        self.restoreBlob(record.oid, record.tid, record.data, own_copy, record.data_txn, txn)
                    else:
                        self.restore(record.oid, record.tid, record.data, "", record.data_txn, txn)
                self.tpc_vote(txn)
                self.tpc_finish(txn)
            except BaseException:
                self.tpc_abort(txn)
                raise
            copied += 1
            now = time.monotonic()
            if now - last_report >= COPY_PROGRESS_SECONDS or (verbose and copied % 1000 == 0):
                last_report = now
                log.info(
                    "copy: %d transactions, %d records, %d blobs so far (%.0f records/s), at tid %s",
                    copied, records, blobs, records / (now - started), TimeStamp(txn.tid),
                )
        log.info(
            "copy: done, %d transactions, %d records, %d blobs in %.1f s%s",
            copied, records, blobs, time.monotonic() - started,
            f"; {missing} blob files were missing in the source (see the warnings)" if missing else "",
        )


def _history_entry(tid: bytes, user: bytes, description: bytes, extension: bytes, size: int) -> dict:
    entry = dict(zodbpickle.pickle.loads(extension)) if extension else {}
    entry.update(
        time=TimeStamp(tid).timeTime(),
        tid=tid,
        serial=tid,
        user_name=user,
        description=description,
        size=size,
        version="",
    )
    return entry


class _Transaction(TransactionRecord):
    def __init__(self, tid, status, user, description, extension, records: list[DataRecord]):
        super().__init__(tid, status, user, description, zodbpickle.pickle.loads(extension) if extension else {})
        self._records = records

    def __iter__(self):
        return iter(self._records)
