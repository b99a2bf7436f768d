"""Review of pack against undo, commits, readers and restores in other storage instances, and of
the process cache and polls after them. Each test forces one interleaving deterministically;
"another process" is a second JsonbStorage on the same database."""

from __future__ import annotations

import time

import pytest
from persistent.TimeStamp import TimeStamp
from ZODB.Connection import TransactionMetaData
from ZODB.FileStorage import FileStorage
from ZODB.POSException import UndoError
from ZODB.serialize import referencesf
from ZODB.tests.StorageTestBase import zodb_unpickle
from ZODB.utils import z64

from plone_connector.storage import JsonbStorage
from tests.storage.test_concurrency import _undo
from tests.storage.test_history import _commit


def _seconds(tid: bytes) -> float:
    return TimeStamp(tid).timeTime()


@pytest.fixture
def hp_pair(hp_storage_dsn, tmp_path):
    """Two history-preserving storages ("processes") on one database."""
    blob_dir = str(tmp_path / "blobs")
    first = JsonbStorage(hp_storage_dsn, history_preserving=True, blob_dir=blob_dir)
    first.cleanup()
    second = JsonbStorage(hp_storage_dsn, history_preserving=True, blob_dir=blob_dir)
    yield first, second
    second.close()
    first.close()


def test_undo_racing_a_pack_leaves_no_back_pointer_to_a_removed_revision(hp_pair, tmp_path):
    """undo() reads the back pointer of the revision it restores (``coalesce(data_tid, tid)`` of
    the revision before the undone one) before the commit lock. A pack by time that runs before
    the vote, with a pack time between that revision and the undone transaction, keeps the
    revision but removes the older one it points back at, and nulls the pointer there (pack.py:
    "A back pointer to a revision the pack removed points nowhere"). The undo then commits a
    revision pointing at the removed one: the iterator names a transaction that no longer
    exists, and a copy to FileStorage (zodbconvert) fails with UndoError("Invalid transaction
    id") in FileStorage.restore."""
    a, b = hp_pair
    t0 = _commit(a, [(z64, z64, 0)])
    t1 = _commit(a, [(z64, t0, 1)])
    u2 = _undo(a, t1)  # z64 back at state 0, pointing back at t0
    time.sleep(0.05)
    t3 = _commit(a, [(z64, u2, 3)])
    pack_time = _seconds(u2) + 0.02
    assert _seconds(u2) < pack_time < _seconds(t3)

    t = TransactionMetaData()
    a.tpc_begin(t)
    try:
        a.undo(t3, t)  # restores u2's state, whose origin is t0
        b.pack(pack_time, referencesf)  # keeps u2 (current at the pack time), removes t0 and t1
        a.tpc_vote(t)
        u4 = a.tpc_finish(t)
    except BaseException:
        a.tpc_abort(t)
        raise
    assert zodb_unpickle(a.load(z64)[0]).value == 0

    tids = set()
    pointers = []
    for txn in a.iterator():
        tids.add(txn.tid)
        for record in txn:
            if record.data_txn is not None:
                pointers.append((txn.tid, record.data_txn))
    dangling = [(tid, data_txn) for tid, data_txn in pointers if data_txn not in tids]

    # The consequence: zodbconvert to FileStorage.
    destination = FileStorage(str(tmp_path / "copy.fs"))
    try:
        destination.copyTransactionsFrom(a)
        copy_error = None
    except UndoError as error:
        copy_error = error
    finally:
        destination.close()
    assert copy_error is None, f"copy to FileStorage failed: {copy_error!r}"
    assert dangling == [], f"back pointers to removed transactions: {dangling} (undo at {u4!r})"


@pytest.mark.parametrize("gc", [False, True])
def test_a_pack_between_the_objects_an_undo_reads_gives_an_undo_error(hp_pair, monkeypatch, gc):
    """undo() checks that the undone transaction is not packed, then reads each object's
    revisions one statement at a time (READ COMMITTED, no lock). A pack by time past the undone
    transaction that commits between two objects removes the undone revision of the second
    (superseded before the pack time) or, with gc, the whole object (x and y are garbage: the
    root does not refer to them); undo() must still fail cleanly with UndoError (the vote
    would say "packed meanwhile"), not with a TypeError from a missing row."""
    a, b = hp_pair
    x, y = a.new_oid(), a.new_oid()
    t0 = _commit(a, [(z64, z64, 0)])
    t1 = _commit(a, [(x, z64, 1), (y, z64, 1)])
    t2 = _commit(a, [(x, t1, 2), (y, t1, 2)])
    _commit(a, [(y, t2, 3)])  # y's t2 revision is superseded; x's is current
    assert t0 < t1 < t2
    time.sleep(0.02)

    real = JsonbStorage._undo_object
    packed = []

    def undo_object(self, zoid, undone):
        real(self, zoid, undone)
        if not packed:
            packed.append(True)
            b.pack(time.time(), referencesf, gc=gc)

    monkeypatch.setattr(JsonbStorage, "_undo_object", undo_object)
    t = TransactionMetaData()
    a.tpc_begin(t)
    try:
        with pytest.raises(UndoError):
            a.undo(t2, t)
            a.tpc_vote(t)
    finally:
        a.tpc_abort(t)
    assert packed
