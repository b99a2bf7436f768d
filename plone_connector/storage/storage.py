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

This module opens the storage and composes ``JsonbStorage`` from one part per concern (each a
class of methods, no state of its own; the package's ``__init__`` lists the modules).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
from collections import OrderedDict

import psycopg
import ZODB.blob
import ZODB.interfaces
import ZODB.POSException
from persistent.TimeStamp import TimeStamp
from psycopg.conninfo import conninfo_to_dict
from ZODB.ConflictResolution import ConflictResolvingStorage
from ZODB.mvccadapter import HistoricalStorageAdapter
from ZODB.utils import u64
from zope.interface import alsoProvides, implementer

from plone_connector.storage import transcoder
from plone_connector.storage.blobcache import BlobCacheLimit
from plone_connector.storage.blobs import BLOB_CHUNK_SIZE, Blobs
from plone_connector.storage.cache import StateCache
from plone_connector.storage.commit import COMMIT_OUTCOME_WAIT, TwoPhaseCommit
from plone_connector.storage.connections import Connections
from plone_connector.storage.errors import (
    CommitLockTimeout,
    DisconnectedError,
    StorageClosedError,
    StorageOpenError,
)
from plone_connector.storage.history import COPY_PROGRESS_SECONDS, History
from plone_connector.storage.listener import InvalidationListener
from plone_connector.storage.load import RECENT_STATES, Loads
from plone_connector.storage.mvcc import Snapshots
from plone_connector.storage.rows import OPAQUE, exact_kind
from plone_connector.storage.schema import migrate
from plone_connector.storage.shared import Shared, log
from plone_connector.storage.sql import (
    CLEANUP,
    COUNT_OBJECTS,
    EXPIRE_BATCH_OUTCOMES,
    IN_RECOVERY,
    STORAGE_SIZE,
)
from plone_connector.storage.store import (
    DIRECT_COPY_ROWS,
    DIRECT_MAX_BYTES,
    OID_BLOCK_MAX,
    OID_BLOCK_MIN,
    STORE_BATCH_ROWS,
    TEMP_TRUNCATE_ROWS,
    Stores,
)

# Names other modules and tests import from here. The settings are read where they are defined:
# a test that changes one patches that module (store, commit, history, ...), not this one.
__all__ = [
    "BLOB_CHUNK_SIZE",
    "COMMIT_OUTCOME_WAIT",
    "COPY_PROGRESS_SECONDS",
    "DIRECT_COPY_ROWS",
    "DIRECT_MAX_BYTES",
    "OID_BLOCK_MAX",
    "OID_BLOCK_MIN",
    "OPAQUE",
    "OUTCOME_KEEP_DAYS",
    "RECENT_STATES",
    "STORE_BATCH_ROWS",
    "TEMP_TRUNCATE_ROWS",
    "CommitLockTimeout",
    "DisconnectedError",
    "JsonbStorage",
    "StorageClosedError",
    "StorageOpenError",
    "exact_kind",
    "log",
]


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
        if listen and read_only and conn.execute(IN_RECOVERY).fetchone()[0]:
            log.info("read-only storage on a server in recovery: no LISTEN, polls only")
            return False
    return listen


# Days a catalog batch outcome (catalog_txn_outcome) is kept; pack removes older ones.
OUTCOME_KEEP_DAYS = 30


@implementer(
    ZODB.interfaces.IStorage,
    ZODB.interfaces.IMVCCStorage,
    ZODB.interfaces.IBlobStorage,
    ZODB.interfaces.IStorageIteration,
    ZODB.interfaces.IStorageRestoreable,
    ZODB.interfaces.IBlobStorageRestoreable,
    ZODB.interfaces.IExternalGC,
)
class JsonbStorage(Loads, Snapshots, Stores, TwoPhaseCommit, Blobs, History, Connections, ConflictResolvingStorage):
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
        _shared: Shared | None = None,
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
            _shared = Shared(
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

    def __len__(self) -> int:
        with self._connect() as conn:
            return conn.execute(COUNT_OBJECTS).fetchone()[0]

    def getSize(self) -> int:
        with self._connect() as conn:
            return conn.execute(STORAGE_SIZE).fetchone()[0]

    def getName(self) -> str:
        return self.__name__

    def sortKey(self) -> str:
        return f"jsonb:{self._shared.dsn}"

    def isReadOnly(self) -> bool:
        return self._shared.read_only

    def registerDB(self, db) -> None:
        pass  # invalidations are polled per instance, not pushed through the DB

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
                EXPIRE_BATCH_OUTCOMES,
                (OUTCOME_KEEP_DAYS,),
            )
        with self._lock:
            self._snapshot_tid = None  # let this instance see its own pack

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
            for statement in CLEANUP:
                conn.execute(statement)
        self._ltid = self._own_tid = 0
        self._polled_tid = None
        self._polled_gc_tid = None
        self._snapshot_tid = None
        self._first_tid = None
        self._oid_pool = []
        self._oid_block = OID_BLOCK_MIN
        self._recent.clear()
        self._shared.cache.clear()


def _pack_tid(t: float) -> int:
    """The tid of pack time ``t`` (seconds since the epoch), as ZODB's TimeStamp builds it."""
    seconds = time.gmtime(t)
    return u64(TimeStamp(*seconds[:5], seconds[5] + t % 1).raw())


JsonbStorage.zap_all = JsonbStorage.cleanup  # the name zodbconvert --clear looks for


class _HistoricalInstance(HistoricalStorageAdapter):
    """HistoricalStorageAdapter whose instance gives its database connection back at the end of
    every transaction and when the Connection closes: no snapshot stays open, and no database
    connection is held by a Connection idle in ZODB's historical pools (one per ``before``
    value). A historical transaction's first load connects again (they are rare; reads in one
    transaction share one snapshot)."""

    def afterCompletion(self) -> None:
        self._storage.release()
