"""The connector's record of committed batch ids in ZODB (outcomes.py, decisions/0011), on a real
FileStorage without Plone: concurrent writers merge, a fresh snapshot answers which batches
committed, and expired entries are pruned only after a clean resolution run."""

from __future__ import annotations

import time

import pytest
import transaction
from persistent import Persistent
from ZODB import DB
from ZODB.FileStorage import FileStorage

from plone_connector.catalog import outcomes

CATALOG = "log-test"


class Tool(Persistent):
    """Stands for the catalog tool: the log is an attribute of it."""


@pytest.fixture
def db(tmp_path):
    database = DB(FileStorage(str(tmp_path / "Data.fs")))
    manager = transaction.TransactionManager()
    root = database.open(transaction_manager=manager).root()
    root["tool"] = Tool()
    manager.commit()
    yield database
    database.close()


@pytest.fixture(autouse=True)
def no_clean_run():
    outcomes._last_clean.pop(CATALOG, None)
    yield
    outcomes._last_clean.pop(CATALOG, None)


def tool_in(database, manager):
    return database.open(transaction_manager=manager).root()["tool"]


def log_of(database) -> dict:
    manager = transaction.TransactionManager()
    tool = tool_in(database, manager)
    found = dict(getattr(tool, outcomes.LOG_ATTRIBUTE).items())
    manager.abort()
    return found


def test_concurrent_transactions_both_keep_their_ids(db):
    setup = transaction.TransactionManager()
    outcomes._write(tool_in(db, setup), CATALOG, "b0")  # the tree exists before they start
    setup.commit()
    first, second = transaction.TransactionManager(), transaction.TransactionManager()
    tools = [tool_in(db, tm) for tm in (first, second)]
    for tool, batch_id in zip(tools, ("b1", "b2"), strict=True):
        outcomes._write(tool, CATALOG, batch_id)
    first.commit()
    second.commit()  # resolved, not a ConflictError
    assert sorted(log_of(db)) == ["b0", "b1", "b2"]


def test_a_fresh_snapshot_tells_which_batches_committed(db):
    reader = transaction.TransactionManager()
    old_view = tool_in(db, reader)
    assert getattr(old_view, outcomes.LOG_ATTRIBUTE, None) is None  # this snapshot has no log
    writer = transaction.TransactionManager()
    outcomes._write(tool_in(db, writer), CATALOG, "committed")
    writer.commit()
    aborted = transaction.TransactionManager()
    outcomes._write(tool_in(db, aborted), CATALOG, "aborted")
    aborted.abort()
    oid = old_view._p_oid
    assert outcomes.committed_ids(db, oid, ["committed", "aborted", "unknown"]) == {"committed"}
    reader.abort()


def test_expired_entries_are_pruned_only_after_a_clean_resolution_run(db):
    old = int(time.time()) - 10 * 86400
    setup = transaction.TransactionManager()
    tool = tool_in(db, setup)
    outcomes._write(tool, CATALOG, "fresh-0")
    log = getattr(tool, outcomes.LOG_ATTRIBUTE)
    for i in range(1, 10):
        log[f"old-{i}"] = old
    log["old-5x"] = int(time.time())  # recent, between old ones: kept
    setup.commit()

    # No clean run of this process yet: a writer prunes nothing.
    writer = transaction.TransactionManager()
    outcomes._write(tool_in(db, writer), CATALOG, "old-0")
    writer.commit()
    assert len([k for k in log_of(db) if k.startswith("old-")]) == 11

    outcomes._last_clean[CATALOG] = time.time()
    writer = transaction.TransactionManager()
    outcomes._write(tool_in(db, writer), CATALOG, "old-0a")  # sorts just before old-1
    writer.commit()
    left = log_of(db)
    # The 8 entries after its id were looked at: old-1 .. old-5, old-5x, old-6, old-7; the old ones went.
    assert sorted(left) == ["fresh-0", "old-0", "old-0a", "old-5x", "old-8", "old-9"]
    assert left["old-0a"] >= int(time.time()) - 5  # the commit's time

    # A clean run long ago (the resolver thread stopped) does not allow pruning either.
    outcomes._last_clean[CATALOG] = time.time() - 3600
    writer = transaction.TransactionManager()
    outcomes._write(tool_in(db, writer), CATALOG, "old-7z")
    writer.commit()
    assert "old-8" in log_of(db)
