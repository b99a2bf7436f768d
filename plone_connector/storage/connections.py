"""The two PostgreSQL connections of an instance: the load connection (its snapshot, mvcc.py) and
the store connection (the two-phase commit, commit.py).
"""

from __future__ import annotations

import psycopg
from psycopg import pq

from plone_connector.storage.errors import DisconnectedError, StorageClosedError
from plone_connector.storage.sql import FAST_LOAD, FAST_LOAD_NAME, LOCK_TIMEOUT, TEMP_TABLE

_INT8_OID = 20


class Connections:
    """JsonbStorage's part that opens, replaces and drops its database connections."""

    def _connect(self) -> psycopg.Connection:
        if self._closed:
            raise StorageClosedError(self.__name__)
        return psycopg.connect(
            self._shared.dsn, autocommit=True, connect_timeout=self._shared.connect_timeout
        )

    def _load(self) -> psycopg.Connection:
        if self._load_conn is None or self._load_conn.closed:
            conn = self._connect()
            # psycopg's own prepared statements off: after one it answers every ROLLBACK (each
            # new snapshot starts with one) with DEALLOCATE ALL, which would take ours along.
            conn.prepare_threshold = None
            result = conn.pgconn.prepare(FAST_LOAD_NAME, FAST_LOAD, [_INT8_OID, _INT8_OID])
            if result.status != pq.ExecStatus.COMMAND_OK:
                conn.close()
                raise psycopg.OperationalError(result.error_message.decode(errors="replace"))
            self._load_conn = conn
            self._snapshot_tid = None
        return self._load_conn

    def _store(self) -> psycopg.Connection:
        if self._store_conn is None or self._store_conn.closed:
            conn = self._connect()
            conn.execute(TEMP_TABLE)
            # Only vote takes locks on this connection (rows, then the commit lock).
            conn.execute(LOCK_TIMEOUT.format(ms=int(self._shared.commit_lock_timeout * 1000)))
            self._store_conn = conn
        return self._store_conn

    def _drop_store_conn(self) -> None:
        conn, self._store_conn = self._store_conn, None
        self._in_db_transaction = False
        self._copy = None
        self._temp_rows = 0  # a new session has a new, empty table
        if conn is not None:
            conn.close()

    def _drop_load_conn(self) -> None:
        conn, self._load_conn = self._load_conn, None
        self._snapshot_tid = None
        if conn is not None:
            conn.close()

    def _load_lost(self, error: BaseException | str) -> DisconnectedError:
        """The load connection broke in the middle of a snapshot: drop it, and have the rest of
        the transaction refuse to read (the main instance's calls each have their own)."""
        if self._snapshot_tid is not None and not (self._is_main and self._transaction is None):
            self._snapshot_lost = True
        self._drop_load_conn()
        return DisconnectedError(f"database connection lost while loading: {error}")

    def _outside_transaction(self, query: str):
        """Run ``query`` on the store connection while no database transaction is open there:
        a connection broken since its last use (server restart) is replaced, nothing is lost."""
        try:
            return self._store().execute(query)
        except psycopg.OperationalError:
            self._drop_store_conn()
            return self._store().execute(query)
