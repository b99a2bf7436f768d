"""The test fixtures clean up after a test that failed half-way through a commit."""

from __future__ import annotations

import transaction
import ZODB

from plone_connector.storage import JsonbStorage

# Kept alive past the test on purpose, as a failing test's frame would keep them.
_ABANDONED: list = []


def test_a_storage_left_voting_does_not_block_the_schema_drop(fresh_dsn):
    """``fresh_dsn`` drops its schema afterwards; a storage left between vote and finish holds the
    commit lock on its tables, and the drop used to wait for it forever (the run then hung)."""
    db = ZODB.DB(JsonbStorage(fresh_dsn))
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    conn.root()["x"] = 1
    txn = tm.get()
    conn.tpc_begin(txn)
    conn.commit(txn)
    conn.tpc_vote(txn)
    assert conn._storage.lastTransaction() is not None
    _ABANDONED.append((db, conn, txn))
