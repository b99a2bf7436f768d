"""JsonbStorage: a ZODB storage keeping object state as JSONB rows in PostgreSQL.

The storage is an ``IMVCCStorage`` (see docs/decisions/storage-mvcc.md): every ZODB Connection
gets its own instance (``new_instance``) with two PostgreSQL connections:

- the *load* connection holds one REPEATABLE READ transaction per ZODB transaction, so all loads
  see one consistent snapshot; ``poll_invalidations`` renews it and lists the oids changed since
  the previous poll, in a single round trip;
- the *store* connection runs the two-phase commit: rows are streamed into a temporary table
  during ``store``, the touched rows are locked and compared at ``tpc_vote`` (conflicts resolved
  with ZODB's ``tryToResolveConflict``), then the commit lock (the single row of ``zodb_commit``)
  is taken, the tid is computed from the database clock, rows are copied in, and ``tpc_finish``
  commits. The commit lock is held only from the end of ``tpc_vote`` to ``tpc_finish``.

All instances of a process share a record cache (cache.py) kept exact by the polls. In
history-preserving mode every revision also goes to ``zodb_object_history`` (undo, history,
pack by time); ``zodb_object_state`` stays the current view in both modes. See docs/storage.md
and docs/decisions/storage-*.md.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import re
import shutil
import struct
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg
import ZODB.blob
import ZODB.interfaces
import ZODB.POSException
import zodbpickle.pickle
from persistent.TimeStamp import TimeStamp
from psycopg import pq
from psycopg.conninfo import conninfo_to_dict
from transaction.interfaces import TransientError
from ZODB.BaseStorage import DataRecord, TransactionRecord
from ZODB.ConflictResolution import ConflictResolvingStorage
from ZODB.mvccadapter import HistoricalStorageAdapter
from ZODB.utils import p64, u64, z64
from zope.interface import alsoProvides, implementer

from plone_connector.storage import jsonstate, transcoder
from plone_connector.storage.blobcache import BlobCacheLimit
from plone_connector.storage.cache import StateCache
from plone_connector.storage.listener import CHANNEL, InvalidationListener
from plone_connector.storage.schema import check_state_format, migrate

log = logging.getLogger(__name__)

BLOB_CHUNK_SIZE = 1 << 20
# Rows buffered in memory before they are written to the COPY streaming into the temporary table.
STORE_BATCH_ROWS = 100
# New objects of a history-free transaction are kept in memory and copied straight into
# zodb_object_state at vote (one write per row instead of two), up to this many bytes of state in
# a transaction; beyond it they take the temporary table like every other row.
DIRECT_MAX_BYTES = 64 << 20
# How often copyTransactionsFrom (zodbconvert) logs its progress.
COPY_PROGRESS_SECONDS = 10.0
# Rows per chunk of the new objects' COPY at vote (_send_direct).
DIRECT_COPY_ROWS = 64
# Oids are taken from the database's sequence in blocks, from this size doubling up to the next.
OID_BLOCK_MIN = 32
OID_BLOCK_MAX = 1024
# Recently written or loaded pickles, by (oid, tid): conflict resolution needs the state a
# transaction started from, which a history-free table no longer has once it was overwritten.
RECENT_STATES = 1000
# Seconds tpc_finish waits for a transaction whose connection broke during COMMIT to end on the
# server before it ends that transaction's session itself.
COMMIT_OUTCOME_WAIT = 5.0
# The temporary table keeps its rows across commits (the vote deletes its own): PostgreSQL
# truncates an ON COMMIT DELETE ROWS table in every transaction that touches any temporary table,
# which cost 1.2-1.4 ms per commit here (a small commit's whole time is about 2 ms). Deleted rows
# leave dead tuples that nothing vacuums, so the table is truncated once this many rows went in.
TEMP_TRUNCATE_ROWS = 50_000

_TEMP_TABLE = """
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
# Days a catalog batch outcome (catalog_txn_outcome) is kept; pack removes older ones.
OUTCOME_KEEP_DAYS = 30

_LOCK_AND_COMPARE = """
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
_POLL = (
    "select c.tid, c.gc_tid, x.zoids, x.tids, c.state_format from zodb_commit c,"
    " (select array_agg(zoid) as zoids, array_agg(tid) as tids from {table} where tid > {since}) x"
)

# class_name of records that are not ZODB pickles (kept exact, references unknown).
OPAQUE = ""

_LOAD_CURRENT = "select tid, class_name, state, exact from zodb_object_state where zoid = %s"
# The same, without the record when its tid is the one the process cache holds (cache.py).
_FAST_LOAD_NAME = b"zodb_load"
_FAST_LOAD_SQL = (
    b"select tid, class_name, case when tid = $2 then null else state end,"
    b" case when tid = $2 then null else exact end from zodb_object_state where zoid = $1"
)
_INT8_OID = 20
_INT8 = struct.Struct(">q")


class StorageClosedError(ZODB.POSException.StorageError):
    """The storage (or this instance of it) was closed."""


class DisconnectedError(ZODB.POSException.StorageError, TransientError):
    """The database connection broke during a transaction; nothing of it was committed.

    Transient: transaction managers (and Zope's publisher) retry the transaction, which
    reconnects.
    """


class CommitLockTimeout(ZODB.POSException.StorageError, TransientError):
    """The commit lock, or the row lock of an object this transaction writes, was not granted
    within ``commit_lock_timeout`` seconds (another commit, or a history-preserving pack, held it).
    Nothing was committed; transient, so transaction managers retry."""


class StorageOpenError(ZODB.POSException.StorageError):
    """The storage could not be opened: the DSN is malformed, or the PostgreSQL server cannot be
    reached or refused the connection (the message says which; the driver's error is chained)."""


def _redacted(dsn: str) -> str:
    """The DSN without its password, for messages."""
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        return "(a DSN that does not parse)"
    params.pop("password", None)
    params.pop("sslpassword", None)  # the client key's passphrase
    return " ".join(f"{key}={value}" for key, value in params.items()) or "(libpq defaults)"


def _open_database(dsn: str, connect_timeout: int, history_preserving: bool, read_only: bool, listen: bool) -> bool:
    """Create or migrate the schema (``migrate``); whether to LISTEN (a replica refuses it)."""
    try:
        conn = psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout)
    except psycopg.OperationalError as error:
        raise StorageOpenError(f"cannot open the storage at {_redacted(dsn)}: {str(error).strip()}") from error
    except psycopg.ProgrammingError as error:  # what libpq says of a DSN it cannot parse
        # libpq quotes the part it stumbled on, which may be (a piece of) the password: the
        # quoted parts are left out, and so is the driver's error (every traceback shows it).
        reason = re.sub(r'"[^"]*"', lambda quoted: quoted[0] if quoted[0] == '"="' else '"…"', str(error).strip())
        raise StorageOpenError(f"invalid DSN: {reason}") from None
    with conn:
        migrate(conn, history_preserving, read_only=read_only)
        if listen and read_only and conn.execute("select pg_is_in_recovery()").fetchone()[0]:
            log.info("read-only storage on a server in recovery: no LISTEN, polls only")
            return False
    return listen


def _store_side(method):
    """A broken connection while writing: drop it, raise the transient DisconnectedError."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except psycopg.OperationalError as error:
            with self._lock:
                self._drop_store_conn()
            raise DisconnectedError(f"database connection lost in {method.__name__}: {error}") from error

    return wrapper


def _current_on_main(method):
    """Reads on the main instance (the DB's own: DB.history, db.storage.load, scripts) see the
    database as it is now, like FileStorage's, in a snapshot of their own that ends with the
    call. ZODB never polls the main instance, so a snapshot kept between calls would go stale
    and, idle, hold back VACUUM. Inside a two-phase commit (copyTransactionsFrom, a direct
    user of the storage API) the transaction's snapshot stays, as on any instance."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if not self._is_main:
            return method(self, *args, **kwargs)
        # Reentrant; held across the call, so that one call has one snapshot even with other
        # threads, and a two-phase commit (tpc_begin sets _transaction under it) cannot begin
        # in the middle of a call and have its snapshot ended by it.
        with self._lock:
            if self._transaction is not None:
                return method(self, *args, **kwargs)
            self._snapshot_tid = None
            try:
                return method(self, *args, **kwargs)
            finally:
                self._end_snapshot()

    return wrapper


@dataclass
class _Shared:
    """What a storage and all its instances share: configuration, oid-free state, the listener."""

    dsn: str
    name: str
    history_preserving: bool
    read_only: bool
    blob_dir: str
    blob_dir_is_temporary: bool
    fshelper: ZODB.blob.FilesystemHelper
    listener: InvalidationListener | None
    connect_timeout: int
    cache: StateCache
    pack_gc: bool = True
    commit_lock_timeout: float = 30.0
    blob_cache: BlobCacheLimit | None = None
    # Committed records kept as exact pickles, per kind of reason (exact_copy_counts).
    exact_copies: collections.Counter = field(default_factory=collections.Counter)
    metrics_lock: threading.Lock = field(default_factory=threading.Lock)
    instances: int = 0


@dataclass(slots=True)
class _PendingRow:
    zoid: int
    prev_tid: int
    class_name: str | None  # None: a new object's row not transcoded yet (store, _transcode)
    state_json: str
    refs: list[int]
    exact: bytes | None
    blob_id: int | None
    pickle: bytes
    data_tid: int | None = None
    exact_reason: str | None = None  # the transcoder's reason when ``exact`` is set
    # What a load from the database returns for this row: ``exact``, or the record the
    # transcoder rebuilt from the JSON in jsonb's key order (and checked).
    record: bytes | None = None

    @property
    def loaded(self) -> bytes:
        return self.exact if self.exact is not None else self.record


# Exact copies whose reason may be a transcoder gap or bug (worth a look) log at WARNING; the
# format's known limits (a type without a JSON form, bytes that are not a ZODB pickle) at INFO.
_EXACT_WARNING_KINDS = frozenset({"round trip differs", "unreadable"})


def exact_kind(reason: str | None) -> str:
    """The kind of an exact copy's reason: its text up to the first colon ("unsupported",
    "unreadable", "round trip differs", "opaque")."""
    return (reason or "unknown").split(":", 1)[0].strip() or "unknown"


@implementer(
    ZODB.interfaces.IStorage,
    ZODB.interfaces.IMVCCStorage,
    ZODB.interfaces.IBlobStorage,
    ZODB.interfaces.IStorageIteration,
    ZODB.interfaces.IStorageRestoreable,
    ZODB.interfaces.IBlobStorageRestoreable,
    ZODB.interfaces.IExternalGC,
)
class JsonbStorage(ConflictResolvingStorage):
    """A ZODB storage on PostgreSQL with object state in JSONB.

    ``JsonbStorage(dsn, history_preserving=False, blob_dir=None, ...)``; ``blob_dir`` is the blob
    cache directory (shared between processes or private; blobs live in the database). Without
    one a private temporary directory is used and removed on close. ``cache_mb`` sizes the
    process-wide record cache (cache.py; 0 disables it). ``pack_gc=False`` makes ``pack`` keep
    unreachable objects unless it is called with ``gc=True`` (for an external garbage collector
    such as zc.zodbdgc, which removes objects with ``deleteObject``). ``commit_lock_timeout``
    (seconds, 0 for no limit) bounds how long ``tpc_vote`` waits for locks (CommitLockTimeout).
    ``blob_cache_size`` (bytes) limits the blob cache directory, trimmed once files worth
    ``blob_cache_size_check`` percent of it were added (blobcache.py).
    """

    def __init__(
        self,
        dsn: str,
        name: str | None = None,
        *,
        history_preserving: bool = False,
        blob_dir: str | None = None,
        read_only: bool = False,
        listen: bool = True,
        connect_timeout: int = 10,
        cache_mb: int = 64,
        pack_gc: bool = True,
        commit_lock_timeout: float = 30.0,
        blob_cache_size: int | None = None,
        blob_cache_size_check: int = 10,
        _shared: _Shared | None = None,
    ):
        if _shared is None:
            # Options first: a bad one leaves nothing behind (no schema change, no directory).
            if commit_lock_timeout < 0:
                raise ValueError(f"commit_lock_timeout must be 0 (no limit) or more, not {commit_lock_timeout}")
            if cache_mb < 0:
                raise ValueError(f"cache_mb must be 0 (no cache) or more, not {cache_mb}")
            if connect_timeout < 1:
                # libpq reads 0 and less as "wait forever".
                raise ValueError(f"connect_timeout must be 1 second or more, not {connect_timeout}")
            BlobCacheLimit.check_options(blob_cache_size, blob_cache_size_check)
            # The blob directory before the database: one that cannot be made leaves no schema
            # (whose mode, fixed at creation, the next open would then have to match).
            temporary = blob_dir is None
            if temporary:
                blob_dir = tempfile.mkdtemp(prefix="jsonb-blobs-")
            try:
                fshelper = ZODB.blob.FilesystemHelper(blob_dir, layout_name="bushy")
                fshelper.create()
                listen = _open_database(dsn, connect_timeout, history_preserving, read_only, listen)
            except BaseException:
                if temporary:
                    shutil.rmtree(blob_dir, ignore_errors=True)
                raise
            blob_cache = None
            if blob_cache_size is not None:
                blob_cache = BlobCacheLimit(blob_dir, fshelper.temp_dir, blob_cache_size, blob_cache_size_check)
                blob_cache.start_cleanup()  # a kept directory may already be over the limit
            _shared = _Shared(
                dsn=dsn,
                name=name or "JsonbStorage",
                history_preserving=history_preserving,
                read_only=read_only,
                blob_dir=blob_dir,
                blob_dir_is_temporary=temporary,
                fshelper=fshelper,
                listener=InvalidationListener(dsn, connect_timeout=connect_timeout) if listen else None,
                connect_timeout=connect_timeout,
                cache=StateCache(cache_mb << 20),
                pack_gc=pack_gc,
                commit_lock_timeout=commit_lock_timeout,
                blob_cache=blob_cache,
            )
            log.info("%s: JSON state transcoder %s", _shared.name, transcoder.active())
        self._shared = _shared
        self._hp = _shared.history_preserving
        if self._hp:
            alsoProvides(self, ZODB.interfaces.IStorageUndoable)
        self._is_main = _shared.instances == 0
        _shared.instances += 1
        self.__name__ = _shared.name
        self._closed = False
        # Serialises use of this instance's connections by several threads (ZODB's MT tests
        # share one storage between threads, as BaseStorage allows).
        self._lock = threading.RLock()
        self._commit_lock = threading.Lock()
        self._load_conn: psycopg.Connection | None = None
        self._store_conn: psycopg.Connection | None = None
        # (cursor, copy context, Copy) of the COPY into the temporary table while it is open.
        self._copy = None
        self._temp_rows = 0  # rows written to this session's temporary table since its truncation
        self._snapshot_tid: int | None = None
        self._polled_tid: int | None = None
        self._polled_gc_tid: int | None = None  # gc_tid as this instance's last poll saw it
        # The load connection broke while a transaction read in its snapshot: loads refuse
        # until the transaction ends, rather than go on in a newer snapshot (read skew).
        self._snapshot_lost = False
        self._first_tid: int | None = None
        self._ltid = 0  # the newest tid this instance knows of (lastTransaction)
        self._own_tid = 0  # this instance's last commit: not an invalidation for its Connection
        self._oid_pool: list[int] = []
        self._oid_block = OID_BLOCK_MIN
        self._resolving = False
        self._recent: OrderedDict[tuple[bytes, bytes], bytes] = OrderedDict()
        self._reset_transaction()

    # ------------------------------------------------------------------ connections

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
            result = conn.pgconn.prepare(_FAST_LOAD_NAME, _FAST_LOAD_SQL, [_INT8_OID, _INT8_OID])
            if result.status != pq.ExecStatus.COMMAND_OK:
                conn.close()
                raise psycopg.OperationalError(result.error_message.decode(errors="replace"))
            self._load_conn = conn
            self._snapshot_tid = None
        return self._load_conn

    def _load_row(self, zoid: int, cached_tid: int):
        """(tid, class_name, state, exact) in the snapshot, or None; state and exact are None
        when ``tid == cached_tid``. libpq's prepared statement, binary in and out: the hot path
        of every load, at half the cost of a cursor round trip."""
        conn = self._ensure_snapshot()
        pgconn = conn.pgconn
        try:
            result = pgconn.exec_prepared(
                _FAST_LOAD_NAME, [_INT8.pack(zoid), _INT8.pack(cached_tid)], [1, 1], 1
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

    def _store(self) -> psycopg.Connection:
        if self._store_conn is None or self._store_conn.closed:
            conn = self._connect()
            conn.execute(_TEMP_TABLE)
            # Only vote takes locks on this connection (rows, then the commit lock).
            conn.execute(f"set lock_timeout = {int(self._shared.commit_lock_timeout * 1000)}")
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

    # ------------------------------------------------------------------ MVCC

    def new_instance(self) -> JsonbStorage:
        if self._closed:
            raise StorageClosedError(self.__name__)
        return JsonbStorage(self._shared.dsn, history_preserving=self._hp, _shared=self._shared)

    def before_instance(self, before=None):
        """The storage of a historical Connection (``DB.open(at=...)``): ZODB's adapter around a
        new instance, which also passes ``afterCompletion`` on. ZODB's own adapter has none, so
        the snapshot its first load began stayed open while the Connection idled in the
        historical pool, holding back VACUUM; and ZODB keeps a pool per ``before`` value (for
        ``historical_timeout``, 300 s), so each distinct time opened kept a database connection."""
        return _HistoricalInstance(self.new_instance(), before)

    def release(self) -> None:
        with self._lock:
            self._drop_load_conn()
            self._drop_store_conn()

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
            select = "select tid, gc_tid, null::bigint[], null::bigint[], state_format from zodb_commit"
        else:
            # Integers formatted by us, never input: one simple-protocol round trip does
            # rollback, begin and poll together (the protocol takes no parameters). History-
            # preserving: the history table also shows deletions (undone creations).
            table = "zodb_object_history" if self._hp else "zodb_object_state"
            select = _POLL.format(since=int(since), table=table)
        query = "begin isolation level repeatable read read only; " + select
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

    # ------------------------------------------------------------------ reading

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

    @_current_on_main
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

    @_current_on_main
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
                    "select zoid, tid, class_name, state, exact from zodb_object_state where zoid = any(%s)",
                    (wanted,),
                ).fetchall()
            except psycopg.OperationalError as error:
                raise self._load_lost(error) from error
        for zoid, tid, class_name, state, exact in rows:
            cache.put(zoid, tid, self._record(p64(zoid), tid, class_name, state, exact), snapshot)

    @_current_on_main
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
                "select tid, class_name, state, exact, deleted from zodb_object_history"
                " where zoid = %s and tid < %s order by tid desc limit 1",
                (zoid, u64(tid)),
            )
            if row is None:
                if self._snapshot_query("select 1 from zodb_object_history where zoid = %s limit 1", (zoid,)):
                    return None
                raise ZODB.POSException.POSKeyError(oid)
            end = self._snapshot_query(
                "select min(tid) from zodb_object_history where zoid = %s and tid >= %s", (zoid, u64(tid))
            )[0]
        start, class_name, state, exact, deleted = row
        if deleted:
            raise ZODB.POSException.POSKeyError(oid)  # its creation was undone
        return self._record(oid, start, class_name, state, exact), p64(start), (p64(end) if end else None)

    @_current_on_main
    def loadSerial(self, oid: bytes, serial: bytes) -> bytes:
        if self._resolving:
            # tryToResolveConflict asks for the state the transaction started from.
            recent = self._recent.get((oid, serial))
            if recent is not None:
                return recent
        if self._hp:
            query = (
                "select tid, class_name, state, exact from zodb_object_history"
                " where zoid = %s and tid = %s and not deleted"
            )
            params = (u64(oid), u64(serial))
        else:
            query, params = _LOAD_CURRENT, (u64(oid),)
        with self._lock:
            row = self._snapshot_query(query, params)
            if row is None or row[0] != u64(serial):
                # Committed since our snapshot (e.g. resolving a conflict against it)?
                with self._connect() as fresh:
                    row = fresh.execute(query, params).fetchone()
        if row is None or row[0] != u64(serial):
            raise ZODB.POSException.POSKeyError(oid, serial)
        return self._record(oid, *row)

    @_current_on_main
    def history(self, oid: bytes, size: int = 1):
        if not self._hp:
            data, serial = self.load(oid)
            return [_history_entry(serial, b"", b"", b"", len(data))]
        with self._lock:
            conn = self._ensure_snapshot()
            rows = conn.execute(
                """select h.tid, t.username, t.description, t.extension,
                          coalesce(length(h.exact), length(h.state::text), 0)
                   from zodb_object_history h join zodb_transaction t using (tid)
                   where h.zoid = %s order by h.tid desc limit %s""",
                (u64(oid), size),
            ).fetchall()
        if not rows:
            raise ZODB.POSException.POSKeyError(oid)
        return [_history_entry(p64(tid), user, desc, ext, length) for tid, user, desc, ext, length in rows]

    def lastTransaction(self) -> bytes:
        with self._lock:
            if self._is_main and not self._in_db_transaction:
                # The storage as the DB sees it (DB.lastTransaction, historical connections):
                # the newest commit of any process, not this instance's last poll.
                if self._shared.read_only:  # e.g. on a replica: no write connection
                    with self._connect() as conn:
                        (tid,) = conn.execute("select tid from zodb_commit").fetchone()
                else:
                    (tid,) = self._outside_transaction("select tid from zodb_commit").fetchone()
                self._ltid = max(self._ltid, tid)
            elif not self._ltid or self._snapshot_tid is None:
                # No snapshot yet (before the first poll, or after one that failed): the reads
                # of this transaction will see the one that starts now, which may be newer than
                # the last poll (the catalog connector versions its entries by this).
                self._ensure_snapshot()
                self._ltid = max(self._ltid, self._snapshot_tid or 0)
            return p64(self._ltid)

    def __len__(self) -> int:
        with self._connect() as conn:
            return conn.execute("select count(*) from zodb_object_state").fetchone()[0]

    def getSize(self) -> int:
        with self._connect() as conn:
            return conn.execute(
                "select coalesce(sum(pg_total_relation_size(c)), 0) from unnest("
                "array['zodb_object_state', 'zodb_blob_chunk']::regclass[]) c"
            ).fetchone()[0]

    def getName(self) -> str:
        return self.__name__

    def sortKey(self) -> str:
        return f"jsonb:{self._shared.dsn}"

    def isReadOnly(self) -> bool:
        return self._shared.read_only

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
            for tid, user, desc, ext in cur.stream(
                "select tid, username, description, extension from zodb_transaction"
                " where not packed order by tid desc"
            ):
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

    @_store_side
    def undo(self, transaction_id, transaction=None):
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        if not self._hp:
            raise ZODB.POSException.UndoError("history-free storage: nothing to undo")
        self._check_transaction(transaction)
        undone = u64(transaction_id)
        with self._lock:
            conn = self._begin_db_transaction()
            if conn.execute(
                "select 1 from zodb_transaction where tid = %s and not packed", (undone,)
            ).fetchone() is None:
                raise ZODB.POSException.UndoError("Invalid undo transaction id")
            self._undone.add(undone)
            oids = []
            for (zoid,) in conn.execute(
                "select zoid from zodb_object_history where tid = %s order by zoid", (undone,)
            ).fetchall():
                self._undo_object(zoid, undone)
                oids.append(p64(zoid))
        return None, oids

    def _undo_object(self, zoid: int, undone: int) -> None:
        oid = p64(zoid)
        # Asked for per object: the rows of the objects before may have left a COPY open.
        conn = self._begin_db_transaction()
        revision = (
            "select tid, class_name, state, exact, deleted, blob_id, coalesce(data_tid, tid)"
            " from zodb_object_history where zoid = %s"
        )
        current = conn.execute(revision + " order by tid desc limit 1", (zoid,)).fetchone()
        undone_row = conn.execute(revision + " and tid = %s", (zoid, undone)).fetchone()
        before = conn.execute(revision + " and tid < %s order by tid desc limit 1", (zoid, undone)).fetchone()
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

    def registerDB(self, db) -> None:
        pass  # invalidations are polled per instance, not pushed through the DB

    def getTid(self, oid: bytes) -> bytes:
        return self.load(oid)[1]

    def exact_copy_counts(self) -> dict[str, int]:
        """Records this process committed as exact pickles (JSON could not hold them losslessly),
        per kind of reason: "unsupported" (a value the JSON format has no form for),
        "round trip differs", "unreadable" (the transcoder's gaps), "opaque" (not a ZODB
        pickle). Counted at tpc_finish, shared by all instances of the storage."""
        with self._shared.metrics_lock:
            return dict(self._shared.exact_copies)

    @property
    def exact_records(self) -> int:
        """The total of ``exact_copy_counts()``."""
        return sum(self.exact_copy_counts().values())

    # ------------------------------------------------------------------ oids

    @_store_side
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
                query = f"select array_agg(nextval('zodb_oid_seq')) from generate_series(1, {int(size)})"
                if self._in_db_transaction:
                    (oids,) = self._begin_db_transaction().execute(query).fetchone()
                else:
                    (oids,) = self._outside_transaction(query).fetchone()
                self._oid_pool = sorted(oids, reverse=True)
            return p64(self._oid_pool.pop())

    # ------------------------------------------------------------------ two-phase commit

    def _reset_transaction(self) -> None:
        self._transaction = None
        self._restore_tid: int | None = None
        self._pending: dict[int, _PendingRow] = {}
        # New objects to copy into zodb_object_state at vote, and the bytes of state they hold.
        self._direct: dict[int, _PendingRow] = {}
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
        with self._lock:  # read under it by reads on the main instance (_current_on_main)
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
                conn.execute("truncate zodb_temp_store")
                self._temp_rows = 0
            cursor = conn.cursor()
            block = cursor.copy(
                "copy zodb_temp_store (zoid, prev_tid, class_name, state, refs, exact, blob_id, data_tid)"
                " from stdin"
            )
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

    def _outside_transaction(self, query: str):
        """Run ``query`` on the store connection while no database transaction is open there:
        a connection broken since its last use (server restart) is replaced, nothing is lost."""
        try:
            return self._store().execute(query)
        except psycopg.OperationalError:
            self._drop_store_conn()
            return self._store().execute(query)

    def _encode(self, oid: bytes, prev: bytes, data: bytes, blob_id: int | None) -> _PendingRow:
        return _transcoded(_PendingRow(int.from_bytes(oid, "big"), _serial(prev), None, "", [], None, blob_id, data))

    @_store_side
    def store(self, oid, serial, data, version, transaction):
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        if version:
            raise ZODB.POSException.Unsupported("Versions aren't supported")
        self._check_transaction(transaction)
        with self._lock:
            zoid = u64(oid)
            if _serial(serial) == 0:
                # A new object: transcoded at vote, in the COPY that sends it (_send_direct),
                # while the server stores the rows before it, unless _add_row sends it another way.
                self._add_row(_PendingRow(zoid, 0, None, "", [], None, self._uploaded.get(zoid), data))
            else:
                self._add_row(self._encode(oid, serial, data, self._uploaded.get(zoid)))

    def _add_row(self, row: _PendingRow) -> None:
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

    def _transcode(self, row: _PendingRow) -> _PendingRow:
        """A new object's row that store() left as its pickle, transcoded in place."""
        _transcoded(row)
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
        with conn.cursor() as cur, cur.copy(
            "copy zodb_object_state (zoid, tid, class_name, state, refs, exact, blob_id) from stdin"
        ) as copy:
            lines = []
            for row in self._direct.values():
                if row.class_name is None:
                    self._transcode(row)
                lines.append(_state_line(row, tid))
                if len(lines) == DIRECT_COPY_ROWS:
                    copy.write("".join(lines))
                    lines = []
            if lines:
                copy.write("".join(lines))

    def _note_exact(self, row: _PendingRow) -> None:
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
                logging.WARNING if kind in _EXACT_WARNING_KINDS else logging.INFO,
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
            self._begin_db_transaction().execute(
                "delete from zodb_temp_store where zoid = any(%s)", (again,)
            )
        self._copy_rows("".join(map(_copy_line, rows)))
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

    @_store_side
    def storeBlob(self, oid, oldserial, data, blobfilename, version, transaction):
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        if version:
            raise ZODB.POSException.Unsupported("Versions aren't supported")
        self._check_transaction(transaction)
        with self._lock:
            blob_id = self._upload_blob(oid, blobfilename)
            self._add_row(self._encode(oid, oldserial, data, blob_id))
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
            conn.execute("delete from zodb_blob_chunk where blob_id = %s", (earlier,))
        (blob_id,) = conn.execute("select nextval('zodb_blob_seq')").fetchone()
        with open(filename, "rb") as blob_file, conn.cursor() as cur:
            chunk_num = 0
            while True:
                chunk = blob_file.read(BLOB_CHUNK_SIZE)
                if not chunk and chunk_num:
                    break
                cur.execute(
                    "insert into zodb_blob_chunk (blob_id, chunk_num, chunk) values (%s, %s, %s)",
                    (blob_id, chunk_num, chunk),
                )
                chunk_num += 1
                if len(chunk) < BLOB_CHUNK_SIZE:
                    break
        self._uploaded[u64(oid)] = blob_id
        return blob_id

    @_store_side
    def restore(self, oid, serial, data, version, prev_txn, transaction):
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        if version:
            raise ZODB.POSException.Unsupported("Versions aren't supported")
        self._check_transaction(transaction)
        with self._lock:
            if data is None:
                # An undone creation: in history-free storage the object simply goes away.
                self._forget_row(u64(oid))
                self._deletes.add(u64(oid))
                return
            row = self._encode(oid, serial, data, self._uploaded.get(u64(oid)))
            row.data_tid = u64(prev_txn) if prev_txn else None
            self._add_row(row)

    @_store_side
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

    @_store_side
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
            self._begin_db_transaction().execute("delete from zodb_temp_store where zoid = %s", (zoid,))
            self._flushed.discard(zoid)
        self._pending.pop(zoid, None)
        self._direct.pop(zoid, None)
        uploaded = self._uploaded.pop(zoid, None)
        if uploaded is not None:
            self._begin_db_transaction().execute("delete from zodb_blob_chunk where blob_id = %s", (uploaded,))
        blob_file = self._blob_files.pop(oid, None)
        if blob_file is not None and os.path.exists(blob_file):
            os.remove(blob_file)
        self._pickles.pop(zoid, None)
        self._written.pop(zoid, None)
        self._exact.pop(zoid, None)

    def checkCurrentSerialInTransaction(self, oid, serial, transaction):
        self._check_transaction(transaction)
        self._read_current[u64(oid)] = u64(serial)

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
                "select zoid, tid from zodb_object_state where zoid = any(%s) order by zoid for share",
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
            _LOCK_AND_COMPARE,
            (
                _int_array(written + deletes),  # text: a third of adapting the lists
                _int_array([zoid for zoid, _ in expected]),
                _int_array([tid for _, tid in expected]),
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
                "update zodb_commit set tid = %s where tid < %s"
                " returning tid, gc_tid, pg_current_xact_id()::text, pg_notify(%s, tid::text)",
                (self._restore_tid, self._restore_tid, CHANNEL),
            ).fetchone()
            if row is None:
                raise ZODB.POSException.StorageTransactionError(
                    f"restored tid {p64(self._restore_tid)!r} is not after the last committed tid"
                )
        else:
            row = conn.execute(
                "update zodb_commit set tid = greatest(tid + 1, zodb_now_tid())"
                " returning tid, gc_tid, pg_current_xact_id()::text, pg_notify(%s, tid::text)",
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
                "select count(*) from zodb_transaction where tid = any(%s) and not packed",
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
                    "select min(zoid) from zodb_object_state where zoid = any(%s::bigint[])",
                    (_int_array(sorted(created)),),
                )
            if self._flushed:
                conn.execute(
                    """insert into zodb_object_state (zoid, tid, class_name, state, refs, exact, blob_id)
                       select zoid, %s, class_name, state, refs, exact, blob_id from zodb_temp_store
                       on conflict (zoid) do update set
                           tid = excluded.tid, class_name = excluded.class_name, state = excluded.state,
                           refs = excluded.refs, exact = excluded.exact,
                           blob_id = coalesce(excluded.blob_id, zodb_object_state.blob_id)""",
                    (tid,),
                )
                conn.execute("delete from zodb_temp_store")  # the next transaction starts empty
            if self._deletes:
                conn.execute("delete from zodb_object_state where zoid = any(%s)", (sorted(self._deletes),))
                if not self._hp:
                    # History-free polls cannot see deleted rows: tell other processes' caches the
                    # way pack does.
                    conn.execute("update zodb_commit set gc_tid = tid")
            if replaced and not self._hp:  # history keeps old blob revisions
                conn.execute("delete from zodb_blob_chunk where blob_id = any(%s)", (replaced,))
            if restoring and written:
                conn.execute(
                    "select setval('zodb_oid_seq', greatest(%s, (select last_value from zodb_oid_seq)))",
                    (max(written),),
                )
            if self._batch_ids:
                conn.execute(
                    "insert into catalog_txn_outcome (batch_id, tid) select unnest(%s::text[]), %s",
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
            "insert into zodb_transaction (tid, username, description, extension, packed)"
            " values (%s, %s, %s, %s, %s)",
            (tid, user, description, extension, self._packed),
        )
        if written:
            # A blob object stored without a new blob file keeps its blob (as the upsert does).
            # A back pointer (undo, restore) is kept only while the revision it names exists:
            # undo() read it before this lock, and a pack by time may have removed that
            # revision since (nulling the pointers already committed, pack.py); one naming a
            # missing revision makes FileStorage's restore (zodbconvert) fail.
            conn.execute(
                """insert into zodb_object_history
                       (zoid, tid, class_name, state, refs, exact, blob_id, data_tid)
                   select t.zoid, %(tid)s, t.class_name, t.state, t.refs, t.exact,
                          coalesce(t.blob_id, s.blob_id),
                          case when t.data_tid is null or t.data_tid = %(tid)s or exists (
                                   select 1 from zodb_object_history o
                                   where o.zoid = t.zoid and o.tid = t.data_tid)
                               then t.data_tid end
                   from zodb_temp_store t left join zodb_object_state s using (zoid)""",
                {"tid": tid},
            )
        if self._deletes:
            conn.execute(
                "insert into zodb_object_history (zoid, tid, class_name, deleted)"
                " select unnest(%s::bigint[]), %s, '', true",
                (sorted(self._deletes), tid),
            )

    @staticmethod
    def _latest_revision(conn: psycopg.Connection, zoid: int) -> int | None:
        return conn.execute("select max(tid) from zodb_object_history where zoid = %s", (zoid,)).fetchone()[0]

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
            row = conn.execute(_LOAD_CURRENT, (zoid,)).fetchone()
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
                "update zodb_temp_store set prev_tid = %s, class_name = %s, state = %s::jsonb,"
                " refs = %s, exact = %s, data_tid = null where zoid = %s",
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
            """select r.zoid from (
                   (select unnest(refs) as zoid from zodb_temp_store
                    except
                    select unnest(s.refs) from zodb_object_state s join zodb_temp_store t using (zoid))
                   union
                   select unnest(%s::bigint[])
               ) r
               where not exists (select 1 from zodb_object_state s where s.zoid = r.zoid)
                 and not exists (select 1 from zodb_temp_store t where t.zoid = r.zoid)
                 and r.zoid <> all(%s::bigint[])
               limit 1""",
            (_int_array(direct_refs), _int_array(sorted(self._direct))),
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
        query = "select pg_xact_status(%s::xid8)"
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
                    "select pg_terminate_backend(pid, %s) from pg_stat_activity"
                    " where pid = %s and backend_xid = %s::xid8::xid",
                    (int(COMMIT_OUTCOME_WAIT * 1000), self._backend_pid, self._xid),
                )
                (status,) = conn.execute(query, (self._xid,)).fetchone()
        return status

    def _cache_blob_file(self, oid: bytes, tid: bytes, filename: str) -> None:
        fshelper = self._shared.fshelper
        fshelper.getPathForOID(oid, create=True)
        target = fshelper.getBlobFilename(oid, tid)
        size = os.path.getsize(filename)
        ZODB.blob.rename_or_copy_blob(filename, target, chmod=True)
        if self._shared.blob_cache is not None:
            self._shared.blob_cache.added(size)  # (a cleanup may remove the file at once)

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

    def _snapshot_done(self) -> None:
        """After a two-phase commit: ZODB ends an instance's snapshot with afterCompletion;
        nobody calls that on the main instance, which ends its own."""
        if self._is_main:
            self._end_snapshot()
        else:
            self._snapshot_tid = None

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

    # ------------------------------------------------------------------ blobs

    @_current_on_main
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
            fresh.execute("begin isolation level repeatable read read only")
            if self._download_blob(fresh, oid, serial, filename):
                return filename
        raise ZODB.POSException.POSKeyError("No blob file", oid, serial)

    def _download_blob(self, conn: psycopg.Connection, oid: bytes, serial: bytes, filename: str) -> bool:
        table = "zodb_object_history" if self._hp else "zodb_object_state"
        row = conn.execute(
            f"select blob_id from {table} where zoid = %s and tid = %s",  # noqa: S608 - fixed names
            (u64(oid), u64(serial)),
        ).fetchone()
        if row is None or row[0] is None:
            return False
        fd, partial = tempfile.mkstemp(suffix=".partial", dir=os.path.dirname(filename))
        try:
            chunks = size = 0
            with os.fdopen(fd, "wb") as out, conn.cursor() as cur:
                # Chunks stream one row at a time; the blob never sits in memory whole.
                for (chunk,) in cur.stream(
                    "select chunk from zodb_blob_chunk where blob_id = %s order by chunk_num", (row[0],)
                ):
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

    # ------------------------------------------------------------------ iteration, copying

    def iterator(self, start: bytes | None = None, stop: bytes | None = None) -> Iterator[TransactionRecord]:
        """Transactions oldest first. History-free: one per tid still current on some object."""
        low = u64(start) if start else 0
        high = u64(stop) if stop else (1 << 63) - 1
        with self._connect() as conn:
            conn.execute("begin isolation level repeatable read read only")
            if self._hp:
                transactions = conn.execute(
                    "select tid, packed, username, description, extension from zodb_transaction"
                    " where tid between %s and %s order by tid",
                    (low, high),
                ).fetchall()
                records_sql = (
                    "select zoid, class_name, state, exact, deleted, data_tid from zodb_object_history"
                    " where tid = %s order by zoid"
                )
            else:
                transactions = [
                    (tid, False, b"", b"", b"")
                    for (tid,) in conn.execute(
                        "select distinct tid from zodb_object_state where tid between %s and %s order by tid",
                        (low, high),
                    )
                ]
                records_sql = (
                    "select zoid, class_name, state, exact, false, null from zodb_object_state"
                    " where tid = %s order by zoid"
                )
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

    # ------------------------------------------------------------------ pack

    def pack(self, t, referencesf, gc: bool | None = None) -> None:
        """Remove old revisions (history-preserving: those superseded before ``t``) and, with
        ``gc`` (default: the storage's ``pack_gc``), objects unreachable from the root."""
        from plone_connector.storage.pack import pack_history_free, pack_history_preserving

        if self._closed:
            raise StorageClosedError(self.__name__)
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        if gc is None:
            gc = self._shared.pack_gc
        fshelper = self._shared.fshelper
        if self._hp:
            for oid, tid in pack_history_preserving(self._shared.dsn, _pack_tid(t), gc):
                path = fshelper.getBlobFilename(oid, tid)
                if os.path.exists(path):
                    os.remove(path)
                folder = os.path.dirname(path)
                # Not while another process downloads into it (a .partial file).
                if os.path.isdir(folder) and not any(n.endswith((".blob", ".partial")) for n in os.listdir(folder)):
                    shutil.rmtree(folder, ignore_errors=True)
        elif gc:
            for oid in pack_history_free(self._shared.dsn):
                path = fshelper.getPathForOID(oid)
                if os.path.exists(path):
                    shutil.rmtree(path, ignore_errors=True)
        # else history-free without gc: there are no old revisions, so nothing to remove
        with psycopg.connect(self._shared.dsn, autocommit=True, connect_timeout=self._shared.connect_timeout) as conn:
            # The catalog service reads batch outcomes to resolve batches left staged, for at most
            # its abandon TTL (7 days by default): older ones only fill the table.
            conn.execute(
                "delete from catalog_txn_outcome where recorded < now() - make_interval(days => %s)",
                (OUTCOME_KEEP_DAYS,),
            )
        with self._lock:
            self._snapshot_tid = None  # let this instance see its own pack

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            if self._transaction is not None:
                self.tpc_abort(self._transaction)
            self.release()
            self._closed = True
        if self._is_main:
            if self._shared.listener is not None:
                self._shared.listener.stop()
            if self._shared.blob_dir_is_temporary:
                shutil.rmtree(self._shared.blob_dir, ignore_errors=True)

    def cleanup(self) -> None:
        """Remove everything (tests, ``zodbconvert --clear``): objects, blobs, batch outcomes."""
        if self._shared.read_only:
            raise ZODB.POSException.ReadOnlyError()
        with self._connect() as conn, conn.transaction():
            conn.execute("select 1 from zodb_commit for update")
            conn.execute("delete from zodb_object_state")
            conn.execute("delete from zodb_object_history")
            conn.execute("delete from zodb_transaction")
            conn.execute("delete from zodb_blob_chunk")
            conn.execute("delete from catalog_txn_outcome")
            conn.execute("update zodb_commit set tid = 0, gc_tid = 0")
            conn.execute("alter sequence zodb_oid_seq restart")
        self._ltid = self._own_tid = 0
        self._polled_tid = None
        self._polled_gc_tid = None
        self._snapshot_tid = None
        self._first_tid = None
        self._oid_pool = []
        self._oid_block = OID_BLOCK_MIN
        self._recent.clear()
        self._shared.cache.clear()


def _transcoded(row: _PendingRow) -> _PendingRow:
    """``row`` (its ``pickle``, not transcoded yet) with the fields the transcoder gives it."""
    try:
        class_name, text, refs, exact, reason, record = jsonstate.encode_row(row.pickle)
    except jsonstate.TranscodeError as error:
        # Not a ZODB pickle at all (ZODB's own tests store such bytes; so do record-transforming
        # wrappers): keep it exactly. Its references are unknown, so pack refuses to collect
        # garbage while such records exist (see pack.py).
        row.class_name, row.state_json, row.exact = OPAQUE, "null", row.pickle
        row.exact_reason = f"opaque: {error}"
        return row
    row.class_name = class_name
    row.state_json = text
    if refs:
        row.refs = [int.from_bytes(ref, "big") for ref in refs]
    if exact is not None:
        row.exact = exact
        row.exact_reason = reason
    row.record = record
    return row


def _copy_line(row: _PendingRow) -> str:
    """The row as a line of COPY's text format for the temporary table (a fifth of psycopg's
    write_row per row)."""
    data_tid = _NULL if row.data_tid is None else row.data_tid
    return f"{row.zoid}\t{row.prev_tid}\t{_copy_fields(row)}\t{data_tid}\n"


def _state_line(row: _PendingRow, tid: int) -> str:
    """The row as a line of COPY's text format for zodb_object_state, written at ``tid``."""
    return f"{row.zoid}\t{tid}\t{_copy_fields(row)}\n"


def _copy_fields(row: _PendingRow) -> str:
    """class_name, state, refs, exact and blob_id in COPY's text format.

    Text fields escape what COPY reads specially (backslash, tab, newline, carriage return);
    NULL is ``\\N``; bytea goes in its hex form, whose backslash is escaped too.
    """
    exact = _NULL if row.exact is None else "\\\\x" + row.exact.hex()
    blob_id = _NULL if row.blob_id is None else row.blob_id
    state = row.state_json
    if "\\" in state:  # JSON escapes control characters: only its backslashes need escaping
        state = state.replace("\\", "\\\\")
    return f"{_copy_escape(row.class_name)}\t{state}\t{_int_array(row.refs)}\t{exact}\t{blob_id}"


_NULL = "\\N"


def _copy_escape(text: str) -> str:
    if "\\" in text:  # first: the escapes below add backslashes
        text = text.replace("\\", "\\\\")
    if "\t" in text:
        text = text.replace("\t", "\\t")
    if "\n" in text:
        text = text.replace("\n", "\\n")
    if "\r" in text:
        text = text.replace("\r", "\\r")
    return text


def _int_array(values: list[int | None]) -> str:
    """A bigint[] in PostgreSQL's text form: a quarter of psycopg's cost of adapting a list
    (1.2 of 4.5 us per COPY row, 1,000 rows of two references)."""
    if None in values:
        return "{" + ",".join("NULL" if value is None else str(value) for value in values) + "}"
    return "{" + ",".join(map(str, values)) + "}"


def _pack_tid(t: float) -> int:
    """The tid of pack time ``t`` (seconds since the epoch), as ZODB's TimeStamp builds it."""
    seconds = time.gmtime(t)
    return u64(TimeStamp(*seconds[:5], seconds[5] + t % 1).raw())


def _as_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    return (value or "").encode("utf-8")


def _dumps(extension: dict) -> bytes:
    return zodbpickle.pickle.dumps(extension, 3)


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


def _last_result(cursor: psycopg.Cursor) -> psycopg.Cursor:
    while cursor.description is None and cursor.nextset():
        pass
    return cursor


def _serial(serial: bytes | str | None) -> int:
    if not serial:
        return 0
    if isinstance(serial, str):  # some callers (ZODB's blob doctests) pass '\0' * 8
        serial = serial.encode("latin-1")
    return int.from_bytes(serial, "big") if len(serial) == 8 else u64(serial)  # u64 raises


JsonbStorage.zap_all = JsonbStorage.cleanup  # the name zodbconvert --clear looks for


class _HistoricalInstance(HistoricalStorageAdapter):
    """HistoricalStorageAdapter whose instance gives its database connection back at the end of
    every transaction and when the Connection closes: no snapshot stays open, and no database
    connection is held by a Connection idle in ZODB's historical pools (one per ``before``
    value). A historical transaction's first load connects again (they are rare; reads in one
    transaction share one snapshot)."""

    def afterCompletion(self) -> None:
        self._storage.release()


class _Transaction(TransactionRecord):
    def __init__(self, tid, status, user, description, extension, records: list[DataRecord]):
        super().__init__(tid, status, user, description, zodbpickle.pickle.loads(extension) if extension else {})
        self._records = records

    def __iter__(self):
        return iter(self._records)

