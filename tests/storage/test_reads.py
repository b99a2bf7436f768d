"""The read side: blob downloads outside the snapshot, the invalidation listener, the main
instance's reads and snapshots that must not stay open.

Each of these failed before its fix (found in a review, stop 19)."""

from __future__ import annotations

import threading
import time

import psycopg
import transaction
import ZODB
import ZODB.blob

from plone_connector.storage import JsonbStorage


def test_blob_downloaded_outside_the_snapshot_is_never_cached_empty(storage, storage_dsn, tmp_path):
    """loadBlob of a serial newer than the instance's snapshot downloads on a fresh autocommit
    connection in two statements (the blob_id, then its chunks). When another process replaces
    the blob in between (history-free: the old chunks are deleted), the chunk query finds no
    rows, and an empty file is cached under the requested (oid, serial) and returned."""
    other = JsonbStorage(storage_dsn, blob_dir=str(tmp_path / "other"))
    db_other = ZODB.DB(other)
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()["file"] = ZODB.blob.Blob(b"version 0")
        tm.commit()
        oid = conn.root()["file"]._p_oid
        conn.close()

        reader = storage.new_instance()
        reader.poll_invalidations()
        reader.load(oid)  # its snapshot holds version 0

        tm2 = transaction.TransactionManager()
        conn2 = db_other.open(tm2)
        with conn2.root()["file"].open("w") as out:
            out.write(b"version 1")
        tm2.commit()
        conn2.root()["file"]._p_activate()  # a stored blob is a ghost after the commit
        serial1 = conn2.root()["file"]._p_serial
        assert serial1 != reader.load(oid)[1]

        original = reader._download_blob

        class Interleaved:
            """The fresh connection; another process commits version 2 after the blob_id query."""

            def __init__(self, conn):
                self._conn = conn
                self._done = False

            def execute(self, *args, **kwargs):
                result = self._conn.execute(*args, **kwargs)
                if not self._done:
                    self._done = True
                    row = result.fetchone()
                    with conn2.root()["file"].open("w") as out:
                        out.write(b"version 2")
                    tm2.commit()

                    class _One:
                        def fetchone(self):
                            return row

                    return _One()
                return result

            def cursor(self, *args, **kwargs):
                return self._conn.cursor(*args, **kwargs)

        def download(conn, *args):
            if conn is reader._load_conn:
                return original(conn, *args)
            return original(Interleaved(conn), *args)

        reader._download_blob = download
        try:
            filename = reader.loadBlob(oid, serial1)
        except Exception:  # noqa: BLE001 - a POSKeyError would be a correct answer
            filename = None
        if filename is not None:
            with open(filename, "rb") as blob_file:
                assert blob_file.read() == b"version 1"
        reader.release()
        conn2.close()
    finally:
        db.close()
        db_other.close()


def test_listener_survives_a_notification_it_cannot_parse(storage, storage_dsn):
    """The listener thread parses every payload on the channel as an integer; a ValueError is
    not a psycopg.Error, so the thread dies and on_commit subscribers hear nothing again."""
    listener = storage._shared.listener
    deadline = time.monotonic() + 10
    while listener.trusted_epoch() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    heard = threading.Event()
    storage.on_commit(lambda tid: heard.set())
    with psycopg.connect(storage_dsn, autocommit=True) as conn:
        conn.execute("select pg_notify('zodb_commit', 'not a tid')")
    time.sleep(0.5)
    db = ZODB.DB(storage)  # creating the root commits
    try:
        with db.transaction() as conn:
            conn.root()["x"] = 1
        assert heard.wait(5), "the listener stopped hearing commits"
    finally:
        db.close()


def test_db_history_lists_revisions_committed_after_its_first_call(hp_storage):
    """DB.history (Zope's History tab) asks the main storage instance, which ZODB never syncs or
    polls. history() reads in that instance's snapshot, opened at its first load and kept until
    the instance commits, packs or is released: revisions committed later through Connections
    (other instances) never show."""
    from persistent.mapping import PersistentMapping

    db = ZODB.DB(hp_storage)
    try:
        with db.transaction() as conn:
            conn.root()["doc"] = PersistentMapping(v=1)
        with db.transaction() as conn:
            oid = conn.root()["doc"]._p_oid
        assert len(db.history(oid, size=10)) == 1
        with db.transaction() as conn:
            conn.root()["doc"]["v"] = 2
            conn.root()["doc"]._p_changed = True
        assert len(db.history(oid, size=10)) == 2
    finally:
        db.close()



def _backend(dsn, pid):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "select state, backend_xmin is not null from pg_stat_activity where pid = %s", (pid,)
        ).fetchone()


def test_no_snapshot_stays_open_in_a_pooled_connection_or_the_main_instance(storage, storage_dsn):
    """An open repeatable-read snapshot, idle, holds back VACUUM for the whole database: a
    Connection back in ZODB's pool, and the main instance between its calls, hold none."""
    from persistent.mapping import PersistentMapping

    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()["doc"] = PersistentMapping(v=1)
        tm.commit()
        instance = conn._storage
        conn.root()["doc"]["v"]
        pid = instance._load_conn.info.backend_pid
        assert _backend(storage_dsn, pid) == ("idle in transaction", True)  # in use: a snapshot
        conn.close()
        assert _backend(storage_dsn, pid) == ("idle", False)
        storage.load(b"\0" * 8)
        main_pid = storage._load_conn.info.backend_pid
        assert _backend(storage_dsn, main_pid) == ("idle", False)
        # And a reused Connection reads on, with a new snapshot.
        conn = db.open(tm)
        assert conn.root()["doc"]["v"] == 1
        conn.close()
    finally:
        db.close()


def test_the_fast_load_survives_repeated_queries_and_snapshot_ends(hp_storage):
    """The load connection's prepared statement is libpq's; psycopg, once it has prepared a
    statement of its own (any query run five times), answers a ROLLBACK with DEALLOCATE ALL,
    which would drop it and fail every later load."""
    from ZODB.Connection import TransactionMetaData
    from ZODB.tests.MinPO import MinPO
    from ZODB.tests.StorageTestBase import zodb_pickle, zodb_unpickle
    from ZODB.utils import z64

    storage = hp_storage
    oid = storage.new_oid()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, z64, zodb_pickle(MinPO(1)), "", t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    instance = storage.new_instance()
    try:
        for _ in range(3):
            instance.poll_invalidations()
            for _ in range(6):  # the same query often enough for psycopg to prepare it
                instance.history(oid, 5)
            instance._shared.cache.clear()
            assert zodb_unpickle(instance.load(oid)[0]).value == 1
            instance.afterCompletion()  # a ROLLBACK
    finally:
        instance.release()
