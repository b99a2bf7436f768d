"""Fails unless ZODB's conformance mixins really ran (pytest silently skips ``check*`` names).

Runs last in tests/storage (file name order). The minimums are the mixin tests that apply, as
counted with ZODB 6.4; fewer means tests stopped being collected or stopped passing.
"""

from __future__ import annotations

import pytest

from tests.storage import conftest

MINIMUM_PASSED = {
    # history-free + history-preserving runs of the same mixin are added up (history-free
    # variants of a mixin's test are ours and not counted)
    "BasicStorage.BasicStorage": 32,
    "ConflictResolution.ConflictResolvingStorage": 10,
    "ConflictResolution.ConflictResolvingTransUndoStorage": 2,
    "HistoryStorage.HistoryStorage": 1,
    "IExternalGC.test": 1,  # ZODB's doctest file, history-preserving only
    "IteratorStorage.ExtendedIteratorStorage": 1,
    "IteratorStorage.IteratorStorage": 13,
    "MTStorage.MTStorage": 10,
    "PackableStorage.PackableStorage": 17,
    "PackableStorage.PackableStorageWithOptionalGC": 1,
    "PackableStorage.PackableUndoStorage": 2,
    "PersistentStorage.PersistentStorage": 2,
    "ReadOnlyStorage.ReadOnlyStorage": 4,
    "RecoveryStorage.RecoveryStorage": 10,
    "RevisionStorage.RevisionStorage": 7,
    "Synchronization.SynchronizedStorage": 14,
    "TransactionalUndoStorage.TransactionalUndoStorage": 18,
    "racetest.RaceTests": 4,
    "testMVCCMappingStorage.MVCCTests": 6,
}


@pytest.mark.parametrize("mixin", sorted(MINIMUM_PASSED))
def test_conformance_mixin_ran(mixin):
    passed = conftest.PASSED[mixin]
    assert passed >= MINIMUM_PASSED[mixin], (
        f"only {passed} tests of ZODB's {mixin} passed, expected at least {MINIMUM_PASSED[mixin]}"
        " (run the whole tests/storage folder)"
    )
    assert conftest.FAILED[mixin] == 0
