"""The rows of a transaction before its vote: ``new_oid``, ``store``, ``restore``,
``deleteObject``, the COPY that streams rows into the temporary table, and the new objects kept
for the vote's direct COPY into zodb_object_state.
"""

from __future__ import annotations

import collections
import logging
import os

import psycopg
import ZODB.POSException
from ZODB.utils import p64, u64

from plone_connector.storage.errors import DisconnectedError, StorageClosedError
from plone_connector.storage.rows import (
    EXACT_WARNING_KINDS,
    PendingRow,
    copy_line,
    exact_kind,
    serial_tid,
    state_line,
    transcoded,
)
from plone_connector.storage.shared import log, store_side
from plone_connector.storage.sql import (
    COPY_NEW_STATES,
    COPY_TEMP,
    DELETE_BLOB,
    DELETE_TEMP_ROW,
    DELETE_TEMP_ROWS,
    OID_BLOCK,
    TRUNCATE_TEMP,
)

# Rows buffered in memory before they are written to the COPY streaming into the temporary table.
STORE_BATCH_ROWS = 100


# New objects of a history-free transaction are kept in memory and copied straight into
# zodb_object_state at vote (one write per row instead of two), up to this many bytes of state in
# a transaction; beyond it they take the temporary table like every other row.
DIRECT_MAX_BYTES = 64 << 20


# Rows per chunk of the new objects' COPY at vote (_send_direct).
DIRECT_COPY_ROWS = 64


# Oids are taken from the database's sequence in blocks, from this size doubling up to the next.
OID_BLOCK_MIN = 32


OID_BLOCK_MAX = 1024


# The temporary table keeps its rows across commits (the vote deletes its own): PostgreSQL
# truncates an ON COMMIT DELETE ROWS table in every transaction that touches any temporary table,
# which cost 1.2-1.4 ms per commit here (a small commit's whole time is about 2 ms). Deleted rows
# leave dead tuples that nothing vacuums, so the table is truncated once this many rows went in.
TEMP_TRUNCATE_ROWS = 50_000


class Stores:
    """JsonbStorage's part that collects and sends a transaction's rows."""

    @store_side
    def new_oid(self) -> bytes:
        if self._closed:
            raise StorageClosedError(self.__name__)
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        with self._lock:
            if not self._oid_pool:
                # Each refill doubles the instance's block, up to the largest, and it stays there
                # (a bulk import costs one round trip per 1,024 objects, not per 32); what is
                # left of a block when the instance closes is a gap (docs/storage.md, Oids).
                size = self._oid_block
                self._oid_block = min(size * 2, OID_BLOCK_MAX)
                query = OID_BLOCK.format(size=int(size))
                if self._in_db_transaction:
                    (oids,) = self._begin_db_transaction().execute(query).fetchone()
                else:
                    (oids,) = self._outside_transaction(query).fetchone()
                self._oid_pool = sorted(oids, reverse=True)
            return p64(self._oid_pool.pop())

    def _begin_db_transaction(self) -> psycopg.Connection:
        """The store connection, inside this transaction's database transaction and free for a
        statement: a COPY still open into the temporary table is ended first (while it is
        open, psycopg holds the connection's lock; any other statement would wait forever)."""
        if not self._in_db_transaction:
            if self._sent:
                # Rows or blob chunks went out in a database transaction that the server has
                # dropped with the connection: going on would commit the rest alone.
                raise DisconnectedError(
                    "the database connection was lost earlier in this transaction; it must be aborted"
                )
            self._outside_transaction("begin")
            self._in_db_transaction = True
        elif self._copy is not None:
            self._end_copy()
        return self._store_conn

    def _copy_rows(self, lines: str) -> None:
        """Write rows to the temporary table through a COPY kept open between stores: the server
        parses them while this process pickles and encodes the next ones."""
        if self._copy is None:
            conn = self._begin_db_transaction()
            self._sent = True
            if self._temp_rows >= TEMP_TRUNCATE_ROWS and not self._flushed:
                # Only while none of this transaction's rows are in the table: a COPY reopened
                # later in a transaction (after a new oid block, a blob upload, at vote) must
                # not take the rows streamed before it along.
                conn.execute(TRUNCATE_TEMP)
                self._temp_rows = 0
            cursor = conn.cursor()
            block = cursor.copy(COPY_TEMP)
            self._copy = (cursor, block, block.__enter__())
        self._copy[2].write(lines)

    def _end_copy(self, error: BaseException | None = None) -> None:
        """End the open COPY: it waits for the server to have stored every row, or with
        ``error`` makes the server abandon it (the transaction is then rolled back)."""
        cursor, block, _ = self._copy
        self._copy = None
        try:
            if error is None:
                block.__exit__(None, None, None)
            else:
                block.__exit__(type(error), error, None)
        finally:
            cursor.close()

    def _encode(self, oid: bytes, prev: bytes, data: bytes, blob_id: int | None) -> PendingRow:
        return transcoded(PendingRow(int.from_bytes(oid, "big"), serial_tid(prev), None, "", [], None, blob_id, data))

    @store_side
    def store(self, oid, serial, data, version, transaction):
        self._check_write(version, transaction)
        with self._lock:
            zoid = u64(oid)
            if serial_tid(serial) == 0:
                # A new object: transcoded at vote, in the COPY that sends it (_send_direct),
                # while the server stores the rows before it, unless _add_row sends it another way.
                self._add_row(PendingRow(zoid, 0, None, "", [], None, self._uploaded.get(zoid), data))
            else:
                self._add_row(self._encode(oid, serial, data, self._uploaded.get(zoid)))

    def _add_row(self, row: PendingRow) -> None:
        zoid = row.zoid
        if self._deletes:
            self._deletes.discard(zoid)
        direct = (
            row.prev_tid == 0
            and not self._hp
            and self._restore_tid is None
            and zoid not in self._flushed
            and self._direct_bytes < DIRECT_MAX_BYTES
        )
        if row.class_name is None:  # not transcoded yet (store)
            if direct:
                self._direct_bytes += len(row.pickle)
            else:
                row = self._transcode(row)
        elif direct:
            self._direct_bytes += len(row.state_json) + len(row.exact or b"")
        if direct:
            self._direct[zoid] = row
        else:
            self._direct.pop(zoid, None)
            self._pending[zoid] = row
        # Kept for conflict resolution and, after commit, for loadSerial of what we wrote.
        self._pickles[zoid] = row.pickle
        self._written[zoid] = row.loaded
        if row.exact is not None or self._exact:
            self._note_exact(row)
        self._prev_tids[zoid] = row.prev_tid
        if len(self._pending) >= STORE_BATCH_ROWS:
            self._flush()

    def _transcode(self, row: PendingRow) -> PendingRow:
        """A new object's row that store() left as its pickle, transcoded in place."""
        transcoded(row)
        self._written[row.zoid] = row.loaded
        if row.exact is not None:
            self._note_exact(row)
        return row

    def _transcode_direct(self) -> None:
        for row in self._direct.values():
            if row.class_name is None:
                self._transcode(row)

    def _send_direct(self, conn: psycopg.Connection, tid: int) -> None:
        """COPY the new objects' rows into zodb_object_state, transcoding those store() left as
        pickles on the way: a chunk goes out every DIRECT_COPY_ROWS rows, so the server stores
        one while this process transcodes the next (the server's part is the larger)."""
        with conn.cursor() as cur, cur.copy(COPY_NEW_STATES) as copy:
            lines = []
            for row in self._direct.values():
                if row.class_name is None:
                    self._transcode(row)
                lines.append(state_line(row, tid))
                if len(lines) == DIRECT_COPY_ROWS:
                    copy.write("".join(lines))
                    lines = []
            if lines:
                copy.write("".join(lines))

    def _note_exact(self, row: PendingRow) -> None:
        """Remember an exact copy until tpc_finish counts it (an aborted one never is)."""
        if row.exact is None:
            self._exact.pop(row.zoid, None)
        else:
            self._exact[row.zoid] = (row.class_name, row.exact_reason)

    def _count_exact(self, tid: int) -> None:
        kinds = collections.Counter()
        for zoid, (class_name, reason) in sorted(self._exact.items()):
            if zoid in self._deletes:  # written, then deleted in the same transaction
                continue
            kind = exact_kind(reason)
            kinds[kind] += 1
            log.log(
                logging.WARNING if kind in EXACT_WARNING_KINDS else logging.INFO,
                "kept an exact pickle of oid 0x%x (%s) at tid 0x%x: %s",
                zoid, class_name or "not a ZODB record", tid, reason,
            )
        with self._shared.metrics_lock:
            self._shared.exact_copies.update(kinds)

    def _flush(self) -> None:
        if not self._pending:
            return
        rows = list(self._pending.values())
        again = [row.zoid for row in rows if row.zoid in self._flushed]
        if again:
            self._begin_db_transaction().execute(DELETE_TEMP_ROWS, (again,))
        self._copy_rows("".join(map(copy_line, rows)))
        self._temp_rows += len(rows)
        self._flushed.update(row.zoid for row in rows)
        self._pending.clear()

    def _move_to_temp(self, zoids: list[int]) -> None:
        """Send these new objects' rows the temporary table's way after all (at vote: the COPY
        is ended here, as the vote's statements that follow need the connection)."""
        if zoids:
            for zoid in zoids:
                row = self._direct.pop(zoid)
                self._pending[zoid] = self._transcode(row) if row.class_name is None else row
            self._flush()
            self._begin_db_transaction()

    @store_side
    def restore(self, oid, serial, data, version, prev_txn, transaction):
        self._check_write(version, transaction)
        with self._lock:
            if data is None:
                # An undone creation: in history-free storage the object simply goes away.
                self._forget_row(u64(oid))
                self._deletes.add(u64(oid))
                return
            row = self._encode(oid, serial, data, self._uploaded.get(u64(oid)))
            row.data_tid = u64(prev_txn) if prev_txn else None
            self._add_row(row)

    @store_side
    def deleteObject(self, oid, serial, transaction):
        """IExternalGC: delete the object in this transaction; ``serial`` must be its current tid
        (checked at vote, a ConflictError otherwise). History-preserving: a deletion revision, so
        older revisions stay loadable until a pack removes them."""
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        self._check_transaction(transaction)
        zoid = u64(oid)
        with self._lock:
            self._forget_row(zoid)
            self._deletes.add(zoid)
            self._prev_tids[zoid] = u64(serial)

    def _forget_row(self, zoid: int) -> None:
        """The object goes away in this transaction: a row stored for it earlier in the
        transaction goes too, wherever it waits, and the blob uploaded for it. (A row written by
        an undo refers to an older revision's blob, which stays.)"""
        oid = p64(zoid)
        if zoid in self._flushed:
            self._begin_db_transaction().execute(DELETE_TEMP_ROW, (zoid,))
            self._flushed.discard(zoid)
        self._pending.pop(zoid, None)
        self._direct.pop(zoid, None)
        uploaded = self._uploaded.pop(zoid, None)
        if uploaded is not None:
            self._begin_db_transaction().execute(DELETE_BLOB, (uploaded,))
        blob_file = self._blob_files.pop(oid, None)
        if blob_file is not None and os.path.exists(blob_file):
            os.remove(blob_file)
        self._pickles.pop(zoid, None)
        self._written.pop(zoid, None)
        self._exact.pop(zoid, None)

    def checkCurrentSerialInTransaction(self, oid, serial, transaction):
        self._check_transaction(transaction)
        self._read_current[u64(oid)] = u64(serial)
