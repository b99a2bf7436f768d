"""ZODB's own storage conformance tests against the history-preserving JsonbStorage."""

from __future__ import annotations

import unittest

import pytest
from ZODB.tests import (
    BasicStorage,
    ConflictResolution,
    HistoryStorage,
    IteratorStorage,
    MTStorage,
    PackableStorage,
    PersistentStorage,
    ReadOnlyStorage,
    RecoveryStorage,
    RevisionStorage,
    StorageTestBase,
    Synchronization,
    TransactionalUndoStorage,
)
from ZODB.tests.testMVCCMappingStorage import MVCCTests

from plone_connector.storage import JsonbStorage
from tests.storage.conformance import not_applicable, run_checks, skip_without_connections, zodb_doctest


class HistoryPreservingTestBase(StorageTestBase.StorageTestBase):
    @pytest.fixture(autouse=True)
    def _database(self, hp_storage_dsn):
        self._dsn = hp_storage_dsn

    def open(self, read_only=False):
        self._storage = JsonbStorage(self._dsn, history_preserving=True, read_only=read_only)

    def setUp(self):
        skip_without_connections(self, self._dsn)
        super().setUp()
        self.open()
        self._storage.cleanup()

    def _new_storage_client(self):
        return JsonbStorage(self._dsn, history_preserving=True)


@run_checks
class HistoryPreservingConformance(
    HistoryPreservingTestBase,
    BasicStorage.BasicStorage,
    MTStorage.MTStorage,
    Synchronization.SynchronizedStorage,
    ConflictResolution.ConflictResolvingStorage,
    ConflictResolution.ConflictResolvingTransUndoStorage,
    PersistentStorage.PersistentStorage,
    ReadOnlyStorage.ReadOnlyStorage,
    IteratorStorage.IteratorStorage,
    IteratorStorage.ExtendedIteratorStorage,
    PackableStorage.PackableStorageWithOptionalGC,
    PackableStorage.PackableUndoStorage,
    RevisionStorage.RevisionStorage,
    HistoryStorage.HistoryStorage,
    TransactionalUndoStorage.TransactionalUndoStorage,
    MVCCTests,
):
    @not_applicable(
        "takes its pack time from a patched time.time() that runs ahead of the real clock,"
        " while this storage's tids come from the database clock"
    )
    def testPackUndoLog(self):
        pass


@run_checks
class HistoryPreservingRecovery(HistoryPreservingTestBase, RecoveryStorage.RecoveryStorage):
    """copyTransactionsFrom/restore between two history-preserving storages."""

    @pytest.fixture(autouse=True)
    def _destination(self, hp_destination_dsn):
        self._dst_dsn = hp_destination_dsn

    def setUp(self):
        super().setUp()
        self._dst = JsonbStorage(self._dst_dsn, history_preserving=True)
        self._dst.cleanup()

    def new_dest(self):
        return JsonbStorage(self._dst_dsn, history_preserving=True)

    def tearDown(self):
        self._dst.close()
        super().tearDown()


@zodb_doctest("IExternalGC.test")
def test_external_gc(hp_storage_dsn):
    """ZODB's IExternalGC.test: deleteObject, loads before the deletion, pack with pack_gc=False.

    History-preserving only: the doctest loads a deleted object's older revision (loadBefore);
    the history-free mode's deleteObject is tested in test_pack.py."""

    def create_storage():
        storage = JsonbStorage(hp_storage_dsn, history_preserving=True, pack_gc=False)
        storage.cleanup()
        return storage

    (case,) = PackableStorage.IExternalGC_suite(create_storage)
    result = unittest.TestResult()
    case.run(result)
    assert result.testsRun == 1
    assert not result.errors and not result.failures, "\n".join(
        text for _test, text in result.errors + result.failures
    )
