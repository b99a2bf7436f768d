"""LISTEN/NOTIFY: learn of commits by other processes without polling the database.

Every commit sends ``NOTIFY zodb_commit, '<tid>'`` inside its transaction, so the notification
is delivered only if the commit happened. One listener thread per storage (per process) keeps
the highest tid it has heard of and calls subscribers (``JsonbStorage.on_commit``), so caches
outside ZODB (e.g. the catalog connector's) learn of other processes' commits within
milliseconds; after a reconnection they are called with None (commits in between went unheard). ZODB Connections do not depend on it: they poll at every transaction boundary
(see docs/decisions/storage-mvcc.md), which is the fallback that is always correct.
"""

from __future__ import annotations

import logging
import threading

import psycopg

CHANNEL = "zodb_commit"

log = logging.getLogger(__name__)


class InvalidationListener:
    def __init__(self, dsn: str, retry_seconds: float = 1.0, connect_timeout: int = 10):
        self._dsn = dsn
        self._connect_timeout = connect_timeout
        self._retry_seconds = retry_seconds
        self._stopping = threading.Event()
        self._guard = threading.Lock()
        self.last_tid = 0
        # Incremented on every (re)connection: notifications between two epochs may be lost.
        self.epoch = 0
        self.connected = False
        self._subscribers: list = []
        self._thread = threading.Thread(target=self._run, name="zodb-jsonb-listener", daemon=True)
        self._thread.start()

    def trusted_epoch(self) -> int | None:
        """The current epoch if notifications are flowing, else None."""
        with self._guard:
            return self.epoch if self.connected else None

    def subscribe(self, callback) -> None:
        with self._guard:
            self._subscribers.append(callback)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self._dsn, autocommit=True, connect_timeout=self._connect_timeout) as conn:
                    conn.execute(f"listen {CHANNEL}")
                    with self._guard:
                        self.epoch += 1
                        self.connected = True
                        subscribers = list(self._subscribers) if self.epoch > 1 else []
                    # Commits while we were not listening were not heard: subscribers get None,
                    # "anything may have changed".
                    self._call(subscribers, None)
                    while not self._stopping.is_set():
                        for notify in conn.notifies(timeout=0.1):
                            try:
                                tid = int(notify.payload)
                            except ValueError:  # not a storage's: anyone may notify the channel
                                log.warning("ignored a notification on %s: %r", CHANNEL, notify.payload[:100])
                                continue
                            with self._guard:
                                self.last_tid = max(self.last_tid, tid)
                                subscribers = list(self._subscribers)
                            self._call(subscribers, tid)
            except psycopg.Error as error:
                log.warning("invalidation listener lost its connection, polling meanwhile: %s", error)
            finally:
                with self._guard:
                    self.connected = False
            self._stopping.wait(self._retry_seconds)

    @staticmethod
    def _call(subscribers: list, tid: int | None) -> None:
        for callback in subscribers:
            try:
                callback(tid)
            except Exception:
                log.exception("commit subscriber %r failed", callback)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
