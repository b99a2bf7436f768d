"""ZODB's own storage conformance tests against the history-free JsonbStorage.

Mixin tests that need history (old revisions, undo, transaction metadata) cannot apply to a
history-free storage; each is replaced by a skip with its reason or by a history-free variant
checking what does apply. The history-preserving mode runs them (test_conformance_hp.py).
"""

from __future__ import annotations

import time

import pytest
import ZODB.blob
from ZODB.POSException import POSKeyError
from ZODB.serialize import referencesf
from ZODB.tests import (
    BasicStorage,
    ConflictResolution,
    IteratorStorage,
    MTStorage,
    PackableStorage,
    PersistentStorage,
    ReadOnlyStorage,
    RecoveryStorage,
    StorageTestBase,
    Synchronization,
)
from ZODB.tests.PackableStorage import ZERO, Root, dumps, pdumps
from ZODB.tests.testMVCCMappingStorage import MVCCTests
from ZODB.utils import load_current

from plone_connector.storage import JsonbStorage
from tests.storage.conformance import not_applicable, run_checks, skip_without_connections

NO_HISTORY = "history-free: old revisions are not kept"
NO_UNDO = "history-free: no undo"
NO_METADATA = "history-free: transaction metadata (user, description, extension) is not kept"


class JsonbStorageTestBase(StorageTestBase.StorageTestBase):
    @pytest.fixture(autouse=True)
    def _database(self, storage_dsn):
        self._dsn = storage_dsn

    def open(self, read_only=False):
        self._storage = JsonbStorage(self._dsn, read_only=read_only)

    def setUp(self):
        skip_without_connections(self, self._dsn)
        super().setUp()
        self.open()
        self._storage.cleanup()

    def _new_storage_client(self):
        # racetest: another client of the same database, as another process would be.
        return JsonbStorage(self._dsn)


@run_checks
class HistoryFreeConformance(
    JsonbStorageTestBase,
    BasicStorage.BasicStorage,
    MTStorage.MTStorage,
    Synchronization.SynchronizedStorage,
    ConflictResolution.ConflictResolvingStorage,
    PersistentStorage.PersistentStorage,
    ReadOnlyStorage.ReadOnlyStorage,
    IteratorStorage.IteratorStorage,
    PackableStorage.PackableStorageWithOptionalGC,
    MVCCTests,
):
    @not_applicable(NO_HISTORY + " (iterates and loadSerial()s every revision)")
    def testSimpleIteration(self):
        pass

    @not_applicable(NO_UNDO)
    def testUndoZombie(self):
        pass

    @not_applicable(NO_METADATA)
    def testTransactionExtensionFromIterator(self):
        pass

    @not_applicable(NO_HISTORY + " (loadSerial of revisions 1 and 2 before the pack)")
    def testPackOnlyOneObject(self):
        pass

    def _unreferenced_object_in_two_revisions(self):
        """Store an object the root does not reference, with value 1 then 2; return its oid and
        the two tids."""
        self._initroot()
        obj = self._newobj()
        oid = obj.getoid()
        obj.value = 1
        tid1 = self._dostoreNP(oid, data=pdumps(obj))
        obj.value = 2
        tid2 = self._dostoreNP(oid, revid=tid1, data=pdumps(obj))
        return oid, tid1, tid2

    def testPackAllRevisions(self):
        # History-free variant: only the current revision exists; pack removes the object,
        # which the root does not reference.
        oid, tid1, tid2 = self._unreferenced_object_in_two_revisions()
        with self.assertRaises(KeyError):
            self._storage.loadSerial(oid, tid1)
        # The record is rebuilt from JSON: an equal state, not necessarily the same bytes.
        self.assertEqual(self._makeloader()(self._storage.loadSerial(oid, tid2)).value, 2)
        self._storage.pack(time.time(), referencesf)
        for tid in tid1, tid2:
            with self.assertRaises(KeyError):
                self._storage.loadSerial(oid, tid)
        with self.assertRaises(POSKeyError):
            self._storage.load(oid)

    def testPackAllRevisionsNoGC(self):
        # History-free variant (the mixin's loads revisions 1 and 2 before the pack): pack with
        # gc=False keeps an object the root does not reference, at its current revision.
        oid, tid1, tid2 = self._unreferenced_object_in_two_revisions()
        self._storage.pack(time.time(), referencesf, gc=False)
        with self.assertRaises(KeyError):
            self._storage.loadSerial(oid, tid1)
        self.assertEqual(self._makeloader()(self._storage.loadSerial(oid, tid2)).value, 2)
        data, tid = load_current(self._storage, oid)
        self.assertEqual((tid, self._makeloader()(data).value), (tid2, 2))
        # The same pack with gc removes it: gc=False was what kept it.
        self._storage.pack(time.time(), referencesf)
        with self.assertRaises(POSKeyError):
            self._storage.load(oid)

    def testPackJustOldRevisions(self):
        # History-free variant: an object the root references survives pack unchanged.
        loads = self._makeloader()
        root = Root()
        obj = self._newobj()
        oid = obj.getoid()
        root.obj = obj
        root.value = 0
        revid0 = self._dostoreNP(ZERO, data=dumps(root))
        obj.value = 1
        revid1 = self._dostoreNP(oid, data=pdumps(obj))
        obj.value = 3
        revid3 = self._dostoreNP(oid, revid=revid1, data=pdumps(obj))
        self._storage.pack(time.time(), referencesf)
        data, revid = load_current(self._storage, ZERO)
        self.assertEqual((revid, loads(data).value), (revid0, 0))
        data, revid = load_current(self._storage, oid)
        self.assertEqual((revid, loads(data).value), (revid3, 3))


@run_checks
class HistoryFreeRecovery(StorageTestBase.StorageTestBase, RecoveryStorage.RecoveryStorage):
    """copyTransactionsFrom/restore from a history-preserving JsonbStorage (the mixin undoes in
    its source) into a history-free one, as zodbconvert into a history-free database does.

    ``compare`` is the history-free form of the mixin's (IteratorDeepCompare): the destination
    keeps no old revisions and no transaction metadata, so instead of transaction by transaction
    it must hold exactly the source's current revision of every object, with its tid, record
    and blob.
    """

    @pytest.fixture(autouse=True)
    def _databases(self, hp_storage_dsn, hf_destination_dsn):
        self._src_dsn = hp_storage_dsn
        self._dst_dsn = hf_destination_dsn

    def setUp(self):
        super().setUp()
        self._storage = JsonbStorage(self._src_dsn, history_preserving=True)
        self._storage.cleanup()
        self._dst = JsonbStorage(self._dst_dsn)
        self._dst.cleanup()

    def tearDown(self):
        self._dst.close()
        super().tearDown()

    def compare(self, source, destination):
        current = {}
        for txn in source.iterator():
            for record in txn:
                current[record.oid] = record  # later revisions replace earlier ones
        current = {oid: record for oid, record in current.items() if record.data is not None}
        copied = {}
        for txn in destination.iterator():
            for record in txn:
                self.assertEqual(record.tid, txn.tid)
                self.assertNotIn(record.oid, copied)
                copied[record.oid] = record
        self.assertEqual(sorted(copied), sorted(current))
        for oid, record in current.items():
            self.assertEqual((copied[oid].tid, copied[oid].data), (record.tid, record.data))
            self.assertEqual(load_current(destination, oid), (record.data, record.tid))
            if ZODB.blob.is_blob_record(record.data):
                with open(source.loadBlob(oid, record.tid), "rb") as one, open(
                    destination.loadBlob(oid, record.tid), "rb"
                ) as other:
                    self.assertEqual(one.read(), other.read())
