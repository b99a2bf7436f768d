"""Garbage collection of the history-free storage, also while other processes commit, and
external garbage collection (pack-gc false, IExternalGC.deleteObject)."""

from __future__ import annotations

import os
import random
import threading
import time
from types import SimpleNamespace

import psycopg
import pytest
import transaction
import ZODB
import ZODB.blob
import ZODB.config
from persistent.mapping import PersistentMapping
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import ConflictError, POSKeyError, ReadConflictError
from ZODB.serialize import referencesf
from ZODB.utils import z64

from plone_connector.storage import JsonbStorage
from plone_connector.storage import pack as pack_module
from plone_connector.storage.pack import PackError
from plone_connector.storage.storage import DisconnectedError


@pytest.fixture
def storage(storage_dsn, tmp_path):
    storage = JsonbStorage(storage_dsn, blob_dir=str(tmp_path / "blobs"))
    storage.cleanup()
    yield storage
    storage.close()


def reachable(storage) -> set[bytes]:
    """Every oid reachable from the root, loading each one (a dangling reference raises)."""
    seen, todo = set(), [z64]
    while todo:
        oid = todo.pop()
        if oid in seen:
            continue
        seen.add(oid)
        data, _serial = storage.load(oid)
        todo.extend(referencesf(data))
    return seen


def row_count(storage) -> int:
    with psycopg.connect(storage._shared.dsn) as conn:
        return conn.execute("select count(*) from zodb_object_state").fetchone()[0]


def test_pack_removes_unreachable_objects_and_their_blobs(storage):
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        root = conn.root()
        root["keep"] = PersistentMapping(child=PersistentMapping(n=1))
        root["drop"] = PersistentMapping(child=PersistentMapping(n=2))
        blob = ZODB.blob.Blob(b"blob data")
        root["blob"] = blob
        tm.commit()
        blob_oid = blob._p_oid
        blob_serial = storage.load(blob_oid)[1]
        blob_file = storage.loadBlob(blob_oid, blob_serial)
        del root["drop"], root["blob"]
        tm.commit()
        assert row_count(storage) == 6
        storage.pack(time.time(), referencesf)
        assert reachable(storage) == {z64, root["keep"]._p_oid, root["keep"]["child"]._p_oid}
        assert row_count(storage) == 3
        with psycopg.connect(storage._shared.dsn) as pg:
            assert pg.execute("select count(*) from zodb_blob_chunk").fetchone()[0] == 0
        with pytest.raises(POSKeyError):
            storage.load(blob_oid)
        assert not os.path.exists(blob_file)
        conn.close()
    finally:
        db.close()


def _writer(dsn, seed, stop, errors, commits):
    """Creates, unlinks and re-links objects, including ones another writer has unlinked."""
    rnd = random.Random(seed)
    storage = JsonbStorage(dsn)
    db = ZODB.DB(storage)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    held = []  # persistent objects kept across transactions: the dangerous case for pack
    try:
        while not stop.is_set():
            try:
                tm.begin()
                slots = conn.root()[f"slots{seed}"]
                for _ in range(3):
                    key = rnd.randrange(8)
                    if held and rnd.random() < 0.4:
                        obj = rnd.choice(held)
                    else:
                        obj = PersistentMapping(child=PersistentMapping(n=rnd.random()))
                    old = slots.get(key)
                    slots[key] = obj
                    if old is not None:
                        held.append(old)
                # Borrow objects linked by the other writer; it may unlink them before we link them.
                other = conn.root()[f"slots{1 - seed}"]
                held.extend(other.values())
                del held[:-12]
                tm.commit()
                commits.append(1)
            except (ConflictError, ReadConflictError, POSKeyError, DisconnectedError):
                # POSKeyError: a held object pack removed; the application drops it and retries.
                tm.abort()
                held.clear()
    except Exception as error:  # noqa: BLE001 - reported by the test
        errors.append(error)
    finally:
        tm.abort()
        conn.close()
        db.close()


@pytest.mark.slow
def test_pack_while_writers_commit_never_removes_a_live_object(storage, storage_dsn):
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        conn.root()["slots0"] = PersistentMapping()
        conn.root()["slots1"] = PersistentMapping()
    stop, errors, commits = threading.Event(), [], []
    writers = [
        threading.Thread(target=_writer, args=(storage_dsn, seed, stop, errors, commits))
        for seed in (0, 1)
    ]
    for thread in writers:
        thread.start()
    packs = 0
    deadline = time.monotonic() + 6
    try:
        while time.monotonic() < deadline:
            storage.pack(time.time(), referencesf)
            packs += 1
            # Integrity at every step, while the writers go on.
            reachable(storage)
    finally:
        stop.set()
        for thread in writers:
            thread.join()
    assert errors == []
    assert packs >= 5 and len(commits) >= 20
    storage.pack(time.time(), referencesf)
    live = reachable(storage)
    # And garbage was really collected: nothing but live objects remains.
    assert row_count(storage) == len(live)
    db.close()


@pytest.mark.parametrize("history_preserving", [False, True])
@pytest.mark.parametrize("new_transaction_after_pack", [False, True])
def test_relinking_an_object_removed_by_pack_is_refused(
    storage_dsn, hp_storage_dsn, tmp_path, new_transaction_after_pack, history_preserving
):
    dsn = hp_storage_dsn if history_preserving else storage_dsn
    storage = JsonbStorage(dsn, history_preserving=history_preserving, blob_dir=str(tmp_path / "blobs"))
    storage.cleanup()
    db1 = ZODB.DB(storage)
    db2 = ZODB.DB(JsonbStorage(dsn, history_preserving=history_preserving))
    try:
        tm1, tm2 = transaction.TransactionManager(), transaction.TransactionManager()
        c1 = db1.open(tm1)
        c1.root()["one"] = PersistentMapping(x=PersistentMapping(n=1))
        c1.root()["two"] = PersistentMapping()
        tm1.commit()
        c2 = db2.open(tm2)
        held = c2.root()["one"]["x"]  # process 2 holds x
        assert held["n"] == 1
        del c1.root()["one"]["x"]
        tm1.commit()
        storage.pack(time.time(), referencesf)
        with pytest.raises(POSKeyError):
            storage.load(held._p_oid)
        if new_transaction_after_pack:
            tm2.begin()  # the application kept ``held`` across transactions
        c2.root()["two"]["y"] = held
        with pytest.raises(ReadConflictError, match="removed by pack"):
            tm2.commit()
        tm2.abort()
        # New objects take part in the check like changed ones (history-free: their references
        # are sent along with the check; the rows still skip the temporary table).
        c2.root()["two"]["fresh"] = PersistentMapping(child=PersistentMapping(n=2), one=c2.root()["one"])
        tm2.commit()
        c2.root()["two"]["wrapper"] = PersistentMapping(ref=held)
        with pytest.raises(ReadConflictError, match="removed by pack"):
            tm2.commit()
        tm2.abort()
        tm1.begin()
        assert c1.root()["two"]["fresh"]["child"]["n"] == 2
        assert "wrapper" not in c1.root()["two"] and "y" not in c1.root()["two"]
        reachable(storage)
        c1.close()
        c2.close()
    finally:
        db1.close()
        db2.close()


def test_pack_gc_false_from_zconfig_keeps_garbage_for_deleteobject(storage_dsn, tmp_path):
    # An external garbage collector (zc.zodbdgc) runs with pack-gc false and removes what it
    # finds unreachable with IExternalGC.deleteObject, blobs included.
    storage = ZODB.config.storageFromString(
        f"""
        %import plone_connector.storage
        <jsonbstorage>
            dsn {storage_dsn}
            blob-dir {tmp_path / "blobs"}
            pack-gc false
        </jsonbstorage>
        """
    )
    storage.cleanup()
    db = ZODB.DB(storage)
    other = JsonbStorage(storage_dsn)  # another process that has the garbage in its cache
    try:
        with db.transaction() as conn:
            conn.root()["child"] = PersistentMapping(n=1)
            conn.root()["blob"] = ZODB.blob.Blob(b"blob data")
        with db.transaction() as conn:
            child_oid, blob_oid = conn.root()["child"]._p_oid, conn.root()["blob"]._p_oid
            del conn.root()["child"], conn.root()["blob"]
        other.poll_invalidations()
        other.load(child_oid)
        db.pack(time.time())
        assert row_count(storage) == 3
        serials = {oid: storage.load(oid)[1] for oid in (child_oid, blob_oid)}
        blob_file = storage.loadBlob(blob_oid, serials[blob_oid])

        txn = TransactionMetaData()
        storage.tpc_begin(txn)
        for oid, serial in serials.items():
            storage.deleteObject(oid, serial, txn)
        storage.tpc_vote(txn)
        tid = storage.tpc_finish(txn)
        assert tid == storage.lastTransaction()
        assert row_count(storage) == 1
        for oid in serials:
            with pytest.raises(POSKeyError):
                storage.load(oid)
        with psycopg.connect(storage_dsn) as pg:
            assert pg.execute("select count(*) from zodb_blob_chunk").fetchone()[0] == 0
        assert not os.path.exists(blob_file)
        other.sync()  # a new transaction there, as its Connection would begin one
        other.poll_invalidations()
        with pytest.raises(POSKeyError):
            other.load(child_oid)
    finally:
        other.close()
        db.close()


def test_deleteobject_with_a_stale_serial_conflicts(storage):
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()["child"] = PersistentMapping(n=1)
        with db.transaction() as conn:
            oid = conn.root()["child"]._p_oid
        stale = storage.load(oid)[1]
        with db.transaction() as conn:
            conn.root()["child"]["n"] = 2
        txn = TransactionMetaData()
        storage.tpc_begin(txn)
        storage.deleteObject(oid, stale, txn)
        with pytest.raises(ConflictError):
            storage.tpc_vote(txn)
        storage.tpc_abort(txn)
        assert storage.load(oid)[1] > stale
    finally:
        db.close()


def test_deleteobject_of_an_object_stored_in_the_same_transaction(storage):
    # Its row and blob, already streamed to the database, go too; nothing is left behind.
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()["blob"] = ZODB.blob.Blob(b"old")
        with db.transaction() as conn:
            oid = conn.root()["blob"]._p_oid
        serial = storage.load(oid)[1]
        data = storage.load(oid)[0]
        new_blob = os.path.join(storage.temporaryDirectory(), "new.blob")
        with open(new_blob, "wb") as out:
            out.write(b"new")
        txn = TransactionMetaData()
        storage.tpc_begin(txn)
        storage.storeBlob(oid, serial, data, new_blob, "", txn)
        storage._flush()  # as after STORE_BATCH_ROWS stores
        storage.deleteObject(oid, serial, txn)
        storage.tpc_vote(txn)
        storage.tpc_finish(txn)
        with pytest.raises(POSKeyError):
            storage.load(oid)
        with psycopg.connect(storage._shared.dsn) as pg:
            assert pg.execute("select count(*) from zodb_blob_chunk").fetchone()[0] == 0
    finally:
        db.close()


def _root_and_garbage(storage):
    """Commit a root (oid 0) and an object nothing refers to; return the garbage's oid."""
    from ZODB.tests.MinPO import MinPO
    from ZODB.tests.StorageTestBase import zodb_pickle

    garbage = storage.new_oid()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(z64, z64, zodb_pickle(MinPO("root")), "", t)
    storage.store(garbage, z64, zodb_pickle(MinPO("garbage")), "", t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    return garbage


def _commit_opaque(storage):
    """A record that is not a ZODB pickle: kept exact, its references unknown."""
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(storage.new_oid(), z64, b"not a pickle", "", t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)


def test_pack_refuses_garbage_collection_while_references_are_unknown(storage):
    garbage = _root_and_garbage(storage)
    _commit_opaque(storage)
    with pytest.raises(PackError, match="not ZODB pickles"):
        storage.pack(time.time(), referencesf)
    storage.load(garbage)  # still there


def test_a_record_with_unknown_references_committed_during_pack_stops_it(storage, storage_dsn, monkeypatch):
    """Phase 1 marks without locks; a record whose references are unknown committed before
    phase 2 could refer to what phase 1 called garbage, and the rescue cannot see that."""
    garbage = _root_and_garbage(storage)
    other = JsonbStorage(storage_dsn)

    class Connection:
        """pack's connection: commits the record just before phase 2 takes the commit lock."""

        def __init__(self, conn):
            self._conn = conn

        def __enter__(self):
            self._conn.__enter__()
            return self

        def __exit__(self, *exc_info):
            return self._conn.__exit__(*exc_info)

        def __getattr__(self, name):
            return getattr(self._conn, name)

        def execute(self, query, *args, **kwargs):
            if "for update" in query:
                _commit_opaque(other)
            return self._conn.execute(query, *args, **kwargs)

    monkeypatch.setattr(
        pack_module, "psycopg", SimpleNamespace(connect=lambda *a, **k: Connection(psycopg.connect(*a, **k)))
    )
    try:
        with pytest.raises(PackError, match="not ZODB pickles"):
            storage.pack(time.time(), referencesf)
    finally:
        other.close()
    storage.load(garbage)


@pytest.mark.parametrize("mode", ["history-free", "history-preserving"])
def test_pack_prunes_catalog_batch_outcomes_past_the_keep_days(storage, hp_storage, storage_dsn, hp_storage_dsn, mode):
    """catalog_txn_outcome holds a row per transaction with catalog changes; the catalog service
    reads them for at most its abandon TTL (7 days). Pack removes those older than
    OUTCOME_KEEP_DAYS, and keeps the recent ones."""
    from plone_connector.storage.storage import OUTCOME_KEEP_DAYS

    target, dsn = (storage, storage_dsn) if mode == "history-free" else (hp_storage, hp_storage_dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "insert into catalog_txn_outcome (batch_id, tid, recorded) values"
            " ('old', 1, now() - make_interval(days => %s)), ('recent', 2, now() - interval '6 days')",
            (OUTCOME_KEEP_DAYS + 1,),
        )
    target.pack(time.time(), referencesf)
    with psycopg.connect(dsn, autocommit=True) as conn:
        kept = {row[0] for row in conn.execute("select batch_id from catalog_txn_outcome")}
    assert kept == {"recent"}
