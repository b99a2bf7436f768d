"""What the parts of JsonbStorage share: the state of one storage and all its instances
(``Shared``), the logger, and the decorators that say how a call treats its connection.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
from dataclasses import dataclass, field

import psycopg
import ZODB.blob

from plone_connector.storage.blobcache import BlobCacheLimit
from plone_connector.storage.cache import StateCache
from plone_connector.storage.errors import DisconnectedError
from plone_connector.storage.listener import InvalidationListener

# One logger for the whole storage, by the name its users know (docs/storage.md).
log = logging.getLogger("plone_connector.storage.storage")


def store_side(method):
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


def current_on_main(method):
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
class Shared:
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

