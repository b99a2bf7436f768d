"""History-preserving mode: undo within one transaction, undo racing a commit, and copies of
other storages' history (back pointers, packed transactions), against FileStorage's behaviour.

Each of these failed before its fix (found in a review, stop 19)."""

from __future__ import annotations

import os

import pytest
import transaction
import ZODB
import ZODB.blob
from ZODB.Connection import TransactionMetaData
from ZODB.FileStorage import FileStorage
from ZODB.POSException import POSKeyError
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.utils import z64

from plone_connector.storage import JsonbStorage
from plone_connector.storage import storage as storage_module


def _commit(storage, items, **meta):
    t = TransactionMetaData(**meta)
    storage.tpc_begin(t)
    for oid, serial, value in items:
        storage.store(oid, serial, zodb_pickle(MinPO(value)), "", t)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


def test_undo_of_a_change_and_the_creation_in_one_transaction(hp_storage):
    """Undoing, in one transaction, a change of many objects and then the transaction that
    created them: every object goes away (FileStorage does this). The first undo streamed its
    rows into the temporary table (a batch is 100 rows); the creation's undo only drops the rows
    still in memory, so the vote writes a state revision and a deletion revision with the same
    (zoid, tid): a spurious ConflictError ("object created twice")."""
    storage = hp_storage
    count = storage_module.STORE_BATCH_ROWS + 5
    oids = [storage.new_oid() for _ in range(count)]
    created = _commit(storage, [(oid, z64, 0) for oid in oids])
    changed = _commit(storage, [(oid, created, 1) for oid in oids])
    t = TransactionMetaData()
    storage.tpc_begin(t)
    try:
        storage.undo(changed, t)
        storage.undo(created, t)
        storage.tpc_vote(t)
        storage.tpc_finish(t)
    except BaseException:
        storage.tpc_abort(t)
        raise
    for oid in oids:
        try:
            storage.load(oid)
        except POSKeyError:
            continue
        raise AssertionError(f"{oid!r} still loads after its creation was undone")


def test_copy_keeps_the_back_pointer_of_an_undone_blob_change(tmp_path, hp_destination_dsn):
    """copyTransactionsFrom: an undo that restored a blob revision is a back pointer in the
    source (data_txn); restoreBlob drops ``prev_txn``, so the copy's iterator loses it."""
    source = FileStorage(str(tmp_path / "Data.fs"), blob_dir=str(tmp_path / "blobs"))
    db = ZODB.DB(source)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    conn.root()["blob"] = blob = ZODB.blob.Blob(b"one")
    tm.commit()
    with blob.open("w") as f:
        f.write(b"two")
    tm.commit()
    db.undo(db.undoLog(0, 1)[0]["id"], tm.get())
    tm.commit()
    conn.close()

    def back_pointers(storage):
        return [
            (txn.tid, record.oid, record.tid, record.data_txn)
            for txn in storage.iterator()
            for record in txn
            if record.data_txn is not None
        ]

    expected = back_pointers(source)
    assert expected  # the undo's blob record points back at the first revision

    destination = JsonbStorage(
        hp_destination_dsn, history_preserving=True, blob_dir=str(tmp_path / "dst-blobs")
    )
    try:
        destination.cleanup()
        destination.copyTransactionsFrom(source)
        assert back_pointers(destination) == expected
    finally:
        destination.close()
        db.close()


def _counter(value):
    from ZODB.tests.ConflictResolution import PCounter

    counter = PCounter()
    counter._value = value
    return zodb_pickle(counter)


def _store_counter(storage, oid, serial, value):
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(oid, serial, _counter(value), "", t)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


def test_undo_resolved_at_vote_is_no_back_pointer(hp_storage):
    """An undo row carries the back pointer (data_tid) of the revision it restores. When a commit
    changes the object between undo() and the vote, the vote resolves the conflict and writes a
    merged state, but keeps the back pointer: the iterator then says the record is T1's data, and a
    later undo of T1 takes the object for "still current" and restores T0's state verbatim,
    dropping the concurrent change (conflict resolution would give 3)."""
    from ZODB.tests.StorageTestBase import zodb_unpickle

    storage = hp_storage
    oid = storage.new_oid()
    t0 = _store_counter(storage, oid, z64, 0)
    t1 = _store_counter(storage, oid, t0, 1)
    t2 = _store_counter(storage, oid, t1, 2)
    other = storage.new_instance()
    try:
        t = TransactionMetaData()
        storage.tpc_begin(t)
        storage.undo(t2, t)  # restores 1 (T1's data)
        _store_counter(other, oid, t2, 5)  # concurrent: +3
        assert storage.tpc_vote(t) == [oid]  # resolved: 5 + (1 - 2) = 4
        undo_tid = storage.tpc_finish(t)
    finally:
        other.release()
    storage.sync()
    assert zodb_unpickle(storage.load(oid)[0])._value == 4
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.undo(t1, t)  # current 4, T1 held 1, T0 held 0: resolves to 4 + (0 - 1) = 3
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    storage.sync()
    undone = zodb_unpickle(storage.load(oid)[0])._value
    record = next(r for txn in storage.iterator(undo_tid, undo_tid) for r in txn)
    assert undone == 3, f"undo of T1 gave {undone}: the concurrent change was lost"
    assert record.data_txn in (None, t1) and (
        record.data_txn is None or record.data == storage.loadSerial(oid, t1)
    ), "the undo's record claims T1's data but holds a merged state"


def test_copy_of_a_packed_filestorage_keeps_packed_transactions_out_of_undo(tmp_path, hp_destination_dsn):
    """A packed FileStorage marks the transactions before its pack time "p": they lost the older
    revisions an undo needs, and undoLog no longer offers them. copyTransactionsFrom drops that
    status (tpc_begin ignores it), so the copy offers them; undoing the one that last changed ``x``
    finds no earlier revision of ``x`` and deletes it, though the root still references it."""
    import base64
    import time

    from persistent.mapping import PersistentMapping

    source = FileStorage(str(tmp_path / "Data.fs"))
    db = ZODB.DB(source)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    conn.root()["x"] = PersistentMapping(v=1)
    tm.commit()
    conn.root()["x"]["v"] = 2
    tm.commit()
    time.sleep(0.01)
    db.pack(time.time())
    conn.root()["y"] = 1
    tm.commit()
    conn.close()
    assert {txn.status for txn in source.iterator()} == {"p", " "}
    offered = [base64.decodebytes(entry["id"] + b"\n") for entry in source.undoLog(0, 20)]

    destination = JsonbStorage(hp_destination_dsn, history_preserving=True)
    try:
        destination.cleanup()
        destination.copyTransactionsFrom(source)
        assert [entry["id"] for entry in destination.undoLog(0, 20)] == offered
    finally:
        destination.close()
        db.close()


def test_undo_of_a_blob_change_and_the_creation_keeps_the_older_blob(hp_storage_dsn, tmp_path):
    """The first undo restores the creation's blob (its row refers to that revision's chunks);
    undoing the creation in the same transaction drops that row, but the chunks belong to the
    first revision, which history still holds: they stay, and loadBlob of it still works."""
    storage = JsonbStorage(hp_storage_dsn, history_preserving=True, blob_dir=str(tmp_path / "blobs"))
    storage.cleanup()
    try:
        oid = storage.new_oid()
        serials = []
        for n, content in enumerate([b"one", b"two"]):
            blob = tmp_path / f"blob{n}"
            blob.write_bytes(content)
            t = TransactionMetaData()
            storage.tpc_begin(t)
            storage.storeBlob(oid, serials[-1] if serials else z64, zodb_pickle(MinPO(n)), str(blob), "", t)
            storage.tpc_vote(t)
            serials.append(storage.tpc_finish(t))
        t = TransactionMetaData()
        storage.tpc_begin(t)
        storage.undo(serials[1], t)
        storage.undo(serials[0], t)
        storage.tpc_vote(t)
        storage.tpc_finish(t)
        with pytest.raises(POSKeyError):
            storage.load(oid)
        for serial, content in zip(serials, [b"one", b"two"], strict=True):
            cached = storage.loadBlob(oid, serial)
            os.remove(cached)  # from the database's chunks, not the blob cache
            with open(storage.loadBlob(oid, serial), "rb") as blob_file:
                assert blob_file.read() == content
    finally:
        storage.close()


def test_a_back_pointer_to_a_revision_removed_by_pack_goes_with_it(hp_storage):
    """An undo's revision points back at the revision whose state it restored; once a pack
    removed that one, the iterator must not name a transaction that no longer has it (as
    FileStorage, whose pack copies the data into the record)."""
    import time as clock

    from ZODB.serialize import referencesf

    storage = hp_storage
    t0 = _commit(storage, [(z64, z64, 0)])
    t1 = _commit(storage, [(z64, t0, 1)])
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.undo(t1, t)
    storage.tpc_vote(t)
    t2 = storage.tpc_finish(t)
    (record,) = [r for txn in storage.iterator(t2, t2) for r in txn]
    assert record.data_txn == t0
    clock.sleep(0.01)
    storage.pack(clock.time(), referencesf)
    records = [(txn.tid, r.data_txn) for txn in storage.iterator() for r in txn]
    assert records == [(t2, None)]
    assert storage.loadSerial(z64, t2) == storage.load(z64)[0]
