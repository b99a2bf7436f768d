"""Blobs: stored in chunks of ``BLOB_CHUNK_SIZE`` in zodb_blob_chunk, streamed both ways; the blob
directory is a cache of them (its size limit: blobcache.py).
"""

from __future__ import annotations

import os
import tempfile

import psycopg
import ZODB.blob
import ZODB.POSException
from ZODB.utils import u64

from plone_connector.storage.shared import current_on_main, store_side
from plone_connector.storage.sql import (
    BLOB_CHUNKS,
    BLOB_ID,
    DELETE_BLOB,
    INSERT_BLOB_CHUNK,
    NEXT_BLOB_ID,
    SNAPSHOT_BEGIN,
)

BLOB_CHUNK_SIZE = 1 << 20


class Blobs:
    """JsonbStorage's part that stores, caches and loads blobs."""

    @store_side
    def storeBlob(self, oid, oldserial, data, blobfilename, version, transaction):
        self._check_write(version, transaction)
        with self._lock:
            blob_id = self._upload_blob(oid, blobfilename)
            self._add_row(self._encode(oid, oldserial, data, blob_id))
            self._blob_files[oid] = self._take_blob_file(blobfilename)

    @store_side
    def restoreBlob(self, oid, serial, data, blobfilename, prev_txn, transaction):
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        self._check_transaction(transaction)
        with self._lock:
            blob_id = self._upload_blob(oid, blobfilename)
            row = self._encode(oid, serial, data, blob_id)
            row.data_tid = u64(prev_txn) if prev_txn else None
            self._add_row(row)
            self._blob_files[oid] = self._take_blob_file(blobfilename)

    def _take_blob_file(self, filename: str) -> str:
        """Own the caller's file now (savepoints delete theirs before tpc_finish)."""
        fd, target = tempfile.mkstemp(suffix=".pending", dir=self._shared.fshelper.temp_dir)
        os.close(fd)
        ZODB.blob.rename_or_copy_blob(filename, target, chmod=True)
        return target

    def _upload_blob(self, oid: bytes, filename: str) -> int:
        """Stream a blob file into chunk rows (inside the still uncommitted transaction). An
        upload of the object's blob earlier in this transaction (a change, a savepoint, another
        change) is referenced by nothing from now on: its chunks go."""
        conn = self._begin_db_transaction()
        self._sent = True
        earlier = self._uploaded.pop(u64(oid), None)
        if earlier is not None:
            conn.execute(DELETE_BLOB, (earlier,))
        (blob_id,) = conn.execute(NEXT_BLOB_ID).fetchone()
        with open(filename, "rb") as blob_file, conn.cursor() as cur:
            chunk_num = 0
            while True:
                chunk = blob_file.read(BLOB_CHUNK_SIZE)
                if not chunk and chunk_num:
                    break
                cur.execute(
                    INSERT_BLOB_CHUNK,
                    (blob_id, chunk_num, chunk),
                )
                chunk_num += 1
                if len(chunk) < BLOB_CHUNK_SIZE:
                    break
        self._uploaded[u64(oid)] = blob_id
        return blob_id

    def _cache_blob_file(self, oid: bytes, tid: bytes, filename: str) -> None:
        fshelper = self._shared.fshelper
        fshelper.getPathForOID(oid, create=True)
        target = fshelper.getBlobFilename(oid, tid)
        size = os.path.getsize(filename)
        ZODB.blob.rename_or_copy_blob(filename, target, chmod=True)
        if self._shared.blob_cache is not None:
            self._shared.blob_cache.added(size)  # (a cleanup may remove the file at once)

    @current_on_main
    def loadBlob(self, oid: bytes, serial: bytes) -> str:
        fshelper = self._shared.fshelper
        filename = fshelper.getBlobFilename(oid, serial)
        if os.path.exists(filename):
            if self._shared.blob_cache is not None:
                self._shared.blob_cache.used(filename)
            return filename
        try:
            return self._fetch_blob(oid, serial, filename)
        except FileNotFoundError:
            # Another process's pack or deletion removed the object's folder in the shared
            # cache while we wrote into it (its current revision is still ours to read): again.
            return self._fetch_blob(oid, serial, filename)

    def _fetch_blob(self, oid: bytes, serial: bytes, filename: str) -> str:
        self._shared.fshelper.getPathForOID(oid, create=True)
        with self._lock:
            conn = self._ensure_snapshot()
            if self._download_blob(conn, oid, serial, filename):
                return filename
        # Committed after our snapshot (e.g. read back right after our own commit): a snapshot of
        # its own, so that the row and its chunks are read as of one moment.
        with self._connect() as fresh:
            fresh.execute(SNAPSHOT_BEGIN)
            if self._download_blob(fresh, oid, serial, filename):
                return filename
        raise ZODB.POSException.POSKeyError("No blob file", oid, serial)

    def _download_blob(self, conn: psycopg.Connection, oid: bytes, serial: bytes, filename: str) -> bool:
        table = "zodb_object_history" if self._hp else "zodb_object_state"
        row = conn.execute(
            BLOB_ID.format(table=table),
            (u64(oid), u64(serial)),
        ).fetchone()
        if row is None or row[0] is None:
            return False
        fd, partial = tempfile.mkstemp(suffix=".partial", dir=os.path.dirname(filename))
        try:
            chunks = size = 0
            with os.fdopen(fd, "wb") as out, conn.cursor() as cur:
                # Chunks stream one row at a time; the blob never sits in memory whole.
                for (chunk,) in cur.stream(BLOB_CHUNKS, (row[0],)):
                    out.write(chunk)
                    chunks += 1
                    size += len(chunk)
            if not chunks:  # every blob has one chunk at least (an empty one for an empty file)
                raise ZODB.POSException.POSKeyError("No blob chunks", oid, serial)
            os.chmod(partial, 0o444)
            # Atomic: processes sharing the cache directory never see a partial file. (A cleanup
            # may remove it right after; the caller's open then downloads it again.)
            os.replace(partial, filename)
            if self._shared.blob_cache is not None:
                self._shared.blob_cache.added(size)
        except BaseException:
            if os.path.exists(partial):
                os.remove(partial)
            raise
        return True

    def openCommittedBlobFile(self, oid, serial, blob=None):
        try:
            return self._open_committed(self.loadBlob(oid, serial), blob)
        except FileNotFoundError:
            # The blob cache limit removed it between loadBlob and open: download it again.
            return self._open_committed(self.loadBlob(oid, serial), blob)

    @staticmethod
    def _open_committed(filename: str, blob):
        if blob is None:
            return open(filename, "rb")
        return ZODB.blob.BlobFile(filename, "r", blob)

    @property
    def fshelper(self) -> ZODB.blob.FilesystemHelper:
        """The blob cache layout (ZODB's blob tests and tools look for this name)."""
        return self._shared.fshelper

    def temporaryDirectory(self) -> str:
        return self._shared.fshelper.temp_dir
