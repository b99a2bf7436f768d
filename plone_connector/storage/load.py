"""The load path: ``load`` (the process cache, then one prepared statement), ``prefetch``,
``loadBefore``, ``loadSerial``.
"""

from __future__ import annotations

import struct

import psycopg
import ZODB.POSException
from psycopg import pq
from ZODB.utils import p64, u64

from plone_connector.storage import jsonstate
from plone_connector.storage.shared import current_on_main
from plone_connector.storage.sql import (
    FAST_LOAD_NAME,
    HAS_HISTORY,
    LOAD_BEFORE,
    LOAD_CURRENT,
    LOAD_REVISION,
    NEXT_REVISION,
    PREFETCH,
)

# Recently written or loaded pickles, by (oid, tid): conflict resolution needs the state a
# transaction started from, which a history-free table no longer has once it was overwritten.
RECENT_STATES = 1000


_INT8 = struct.Struct(">q")


class Loads:
    """JsonbStorage's part that reads records in the instance's snapshot."""

    def _record(self, oid: bytes, tid: int, class_name: str, state, exact: bytes | None) -> bytes:
        if exact is not None:
            return bytes(exact)
        if type(state) is bytes:  # the JSON text of _load_row
            return jsonstate.decode_text(class_name, state)
        return jsonstate.decode_record(class_name, state)

    def _remember(self, oid: bytes, tid: bytes, data: bytes) -> None:
        recent = self._recent
        recent[(oid, tid)] = data
        if len(recent) > RECENT_STATES:
            recent.popitem(last=False)

    def _snapshot_query(self, query: str, params: tuple):
        """Run a read in the current snapshot; a lost connection loses the snapshot: transient."""
        conn = self._ensure_snapshot()
        try:
            return conn.execute(query, params).fetchone()
        except psycopg.OperationalError as error:
            raise self._load_lost(error) from error

    def _load_row(self, zoid: int, cached_tid: int):
        """(tid, class_name, state, exact) in the snapshot, or None; state and exact are None
        when ``tid == cached_tid``. libpq's prepared statement, binary in and out: the hot path
        of every load, at half the cost of a cursor round trip."""
        conn = self._ensure_snapshot()
        pgconn = conn.pgconn
        try:
            result = pgconn.exec_prepared(
                FAST_LOAD_NAME, [_INT8.pack(zoid), _INT8.pack(cached_tid)], [1, 1], 1
            )
        except psycopg.OperationalError as error:
            raise self._load_lost(error) from error
        if result.status != pq.ExecStatus.TUPLES_OK:
            message = result.error_message.decode(errors="replace")
            if pgconn.status == pq.ConnStatus.BAD:
                raise self._load_lost(message)
            raise ZODB.POSException.StorageError(f"load failed: {message}")
        if not result.ntuples:
            return None
        (tid,) = _INT8.unpack(result.get_value(0, 0))
        class_name = result.get_value(0, 1).decode()
        state = result.get_value(0, 2)
        if state is not None:
            state = state[1:]  # binary jsonb: a version byte, then the text (see _record)
        exact = result.get_value(0, 3)
        return tid, class_name, state, exact

    @current_on_main
    def load(self, oid: bytes, version: str = "") -> tuple[bytes, bytes]:
        zoid = u64(oid)
        cache = self._shared.cache
        with self._lock:
            self._ensure_snapshot()
            snapshot = self._snapshot_tid
            known = cache.current(zoid, snapshot)
            if known is not None:
                # Current in our snapshot: no round trip.
                self._remember(oid, p64(known[0]), known[1])
                return known[1], p64(known[0])
            cached_tid = cache.tid_of(zoid)
            row = self._load_row(zoid, cached_tid)
        if row is None:
            raise ZODB.POSException.POSKeyError(oid)
        data = cache.get(zoid, row[0]) if row[0] == cached_tid else None
        if data is None:
            if row[2] is None and row[3] is None and row[0] == cached_tid:
                # Evicted between our look and now: read it whole.
                with self._lock:
                    row = self._load_row(zoid, -1)
                if row is None:
                    raise ZODB.POSException.POSKeyError(oid)
            data = self._record(oid, *row)
            cache.put(zoid, row[0], data, snapshot)
        tid = p64(row[0])
        self._remember(oid, tid, data)
        return data, tid

    @current_on_main
    def prefetch(self, oids) -> None:
        """Load many objects in one round trip into the process cache (ZODB's Connection.prefetch)."""
        cache = self._shared.cache
        with self._lock:
            self._ensure_snapshot()
            snapshot = self._snapshot_tid
            wanted = [u64(oid) for oid in oids if cache.current(u64(oid), snapshot) is None]
            if not wanted:
                return
            try:
                rows = self._load_conn.execute(
                    PREFETCH,
                    (wanted,),
                ).fetchall()
            except psycopg.OperationalError as error:
                raise self._load_lost(error) from error
        for zoid, tid, class_name, state, exact in rows:
            cache.put(zoid, tid, self._record(p64(zoid), tid, class_name, state, exact), snapshot)

    @current_on_main
    def loadBefore(self, oid: bytes, tid: bytes):
        if self._hp:
            return self._load_before_hp(oid, tid)
        data, serial = self.load(oid)
        if serial < tid:
            return data, serial, None
        # History-free: the revision current before ``tid`` is gone; the committed one is newer.
        raise ZODB.POSException.ReadConflictError(oid=oid, serials=(serial, tid))

    def _load_before_hp(self, oid: bytes, tid: bytes):
        zoid = u64(oid)
        with self._lock:
            row = self._snapshot_query(
                LOAD_BEFORE,
                (zoid, u64(tid)),
            )
            if row is None:
                if self._snapshot_query(HAS_HISTORY, (zoid,)):
                    return None
                raise ZODB.POSException.POSKeyError(oid)
            end = self._snapshot_query(NEXT_REVISION, (zoid, u64(tid)))[0]
        start, class_name, state, exact, deleted = row
        if deleted:
            raise ZODB.POSException.POSKeyError(oid)  # its creation was undone
        return self._record(oid, start, class_name, state, exact), p64(start), (p64(end) if end else None)

    @current_on_main
    def loadSerial(self, oid: bytes, serial: bytes) -> bytes:
        if self._resolving:
            # tryToResolveConflict asks for the state the transaction started from.
            recent = self._recent.get((oid, serial))
            if recent is not None:
                return recent
        if self._hp:
            query = LOAD_REVISION
            params = (u64(oid), u64(serial))
        else:
            query, params = LOAD_CURRENT, (u64(oid),)
        with self._lock:
            row = self._snapshot_query(query, params)
            if row is None or row[0] != u64(serial):
                # Committed since our snapshot (e.g. resolving a conflict against it)?
                with self._connect() as fresh:
                    row = fresh.execute(query, params).fetchone()
        if row is None or row[0] != u64(serial):
            raise ZODB.POSException.POSKeyError(oid, serial)
        return self._record(oid, *row)

    def getTid(self, oid: bytes) -> bytes:
        return self.load(oid)[1]
