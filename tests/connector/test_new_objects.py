"""created_in_this_transaction (new_objects.py) on a real FileStorage without Plone: an object counts as
new until its transaction commits, before and after a savepoint, and never once committed."""

from __future__ import annotations

import transaction
from persistent.mapping import PersistentMapping
from ZODB import DB
from ZODB.FileStorage import FileStorage

from plone_connector.catalog.new_objects import created_in_this_transaction


def test_new_until_committed_across_savepoints(tmp_path):
    database = DB(FileStorage(str(tmp_path / "Data.fs")))
    manager = transaction.TransactionManager()
    connection = database.open(transaction_manager=manager)
    root = connection.root()
    try:
        old = root["old"] = PersistentMapping()
        manager.commit()
        assert not created_in_this_transaction(old)

        new = root["new"] = PersistentMapping()
        assert created_in_this_transaction(new)  # no oid yet
        connection.add(new)
        assert created_in_this_transaction(new)  # an oid, in the connection's _added
        manager.savepoint()
        assert new._p_oid is not None
        assert created_in_this_transaction(new)  # now the savepoint storage's
        later = root["later"] = PersistentMapping()
        manager.savepoint()
        assert created_in_this_transaction(later) and created_in_this_transaction(new)
        old["changed"] = True
        manager.savepoint()
        assert not created_in_this_transaction(old)  # changed, not created
        manager.commit()
        assert not created_in_this_transaction(new)
        assert not created_in_this_transaction(later)
    finally:
        manager.abort()
        connection.close()
        database.close()
