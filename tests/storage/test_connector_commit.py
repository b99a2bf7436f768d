"""The connector's catalog batch and JsonbStorage at commit time (found in a review, stop 20).

The connector's data manager sorts after the ZODB connections: the storages vote and finish
first, then the batch is committed in the service. When a storage's ``tpc_finish`` raises, the
transaction package calls ``tpc_abort`` on every resource, the batch's data manager included, which
aborted the staged batch in the service. But a storage can raise from ``tpc_finish`` after its
data is durable (JsonbStorage: after COMMIT, the outcome could not be checked; or the blob cache
could not take the committed blob file). ZODB then holds the transaction, ``catalog_txn_outcome``
records its batch id, and the service had aborted the batch for good (no resolver commits an
aborted batch): the catalog lost the transaction's changes. Now a batch whose vote went through
stays staged for the resolvers (decisions/0015), and JsonbStorage does not fail tpc_finish for
the blob cache.

Storage and service share the session database, so the storage's ``catalog_txn_outcome`` is the
table the service reads.
"""

from __future__ import annotations

import errno
import os
import time

import psycopg
import pytest
import transaction
import ZODB
import ZODB.blob
from persistent.mapping import PersistentMapping
from ZODB.POSException import StorageError

from catalog_schemas.api import CatalogCreate, IndexDeclaration
from plone_connector.catalog.batch import current_manager
from plone_connector.catalog.client import get_client
from plone_connector.storage import JsonbStorage
from tests.connector.conftest import catalog_service  # noqa: F401  (a fixture, used by name)

CATALOG = "review-connector"


@pytest.fixture(scope="module")
def catalog(catalog_service, database_url):  # noqa: F811
    client = get_client()
    client.create_catalog(CatalogCreate(id=CATALOG, indexes=[IndexDeclaration(name="portal_type", type="FieldIndex")]))
    return client


@pytest.fixture
def db(database_url, tmp_path):
    database = ZODB.DB(JsonbStorage(database_url, blob_dir=str(tmp_path / "blobs")))
    yield database
    transaction.abort()
    database.close()


def _read_back(database_url: str, tmp_path, key: str):
    """What a fresh storage instance (another process) reads for ``key`` under the root."""
    other = ZODB.DB(JsonbStorage(database_url, blob_dir=str(tmp_path / "other-blobs")))
    try:
        conn = other.open(transaction_manager=transaction.TransactionManager())
        value = conn.root().get(key)
        return None if value is None else dict(value)
    finally:
        other.close()


def _batch_state(database_url: str, batch_id: str) -> tuple[str | None, bool]:
    with psycopg.connect(database_url, autocommit=True) as pg:
        row = pg.execute("select state from catalog_batch where batch_id = %s", (batch_id,)).fetchone()
        recorded = pg.execute("select 1 from catalog_txn_outcome where batch_id = %s", (batch_id,)).fetchone()
    return (row[0] if row else None), recorded is not None


def _change_with_catalog_entry(conn, key: str, value) -> str:
    """Change ``key`` of the root in the current transaction and index it in the catalog batch."""
    conn.root()[key] = value
    manager = current_manager(get_client(), CATALOG, lambda: 1, create=True)
    manager.batch.index(f"/site/{key}", f"/site/{key}", {"portal_type": "Document"}, {}, None)
    return manager.batch.batch_id


def _assert_batch_follows_zodb(database_url: str, batch_id: str) -> None:
    state, recorded = _batch_state(database_url, batch_id)
    assert recorded, "catalog_txn_outcome does not hold the batch id of the committed transaction"
    # ZODB committed: the batch must be committed, or stay staged for a resolver (the service's
    # commits what catalog_txn_outcome records; the connector's what the ZODB log holds). Aborted,
    # it is lost: nothing commits an aborted batch.
    assert state in ("staged", "committed"), (
        f"ZODB committed the transaction but its catalog batch is {state!r}: its entries are lost")


def test_outcome_unknown_at_finish_leaves_a_committed_batch_to_the_resolvers(catalog, db, database_url,
                                                                             tmp_path, monkeypatch):
    """The connection breaks around COMMIT, the server committed, and the status check cannot
    reach the server: JsonbStorage raises "outcome unknown" (StorageError) from tpc_finish. The
    patch does exactly that: the real COMMIT, then the error ``_commit_or_verify`` raises then."""
    conn = db.open()
    real = JsonbStorage._commit_or_verify

    def committed_but_unknown(self):
        real(self)
        raise StorageError("database connection lost at commit and the outcome is unknown (status None)")

    batch_id = _change_with_catalog_entry(conn, "unknown-outcome", PersistentMapping(title="v1"))
    monkeypatch.setattr(JsonbStorage, "_commit_or_verify", committed_but_unknown)
    with pytest.raises(StorageError):
        transaction.commit()
    transaction.abort()
    monkeypatch.undo()
    assert _read_back(database_url, tmp_path, "unknown-outcome") == {"title": "v1"}  # ZODB has it
    _assert_batch_follows_zodb(database_url, batch_id)


def test_blob_cache_failure_after_commit_does_not_lose_the_batch(catalog, db, database_url, tmp_path,
                                                                 monkeypatch):
    """The blob cache's disk is full: JsonbStorage's tpc_finish moves the committed blob file into
    the cache after COMMIT, the move fails, and tpc_finish raises though the data is durable."""
    conn = db.open()
    blob = ZODB.blob.Blob()
    with blob.open("w") as f:
        f.write(b"file data")
    batch_id = _change_with_catalog_entry(conn, "with-blob", PersistentMapping(title="file", data=blob))
    fshelper = db.storage._shared.fshelper
    real_path = fshelper.getPathForOID

    def disk_full(oid, create=False):
        if create:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_path(oid, create)

    monkeypatch.setattr(fshelper, "getPathForOID", disk_full)
    commit_error = None
    try:
        transaction.commit()
    except OSError as exc:
        commit_error = exc
    transaction.abort()
    monkeypatch.undo()
    stored = _read_back(database_url, tmp_path, "with-blob")
    assert stored is not None and stored["title"] == "file"  # ZODB has it
    assert commit_error is None or _batch_state(database_url, batch_id)[0] != "aborted", (
        f"tpc_finish raised {commit_error!r} after COMMIT, and the connector aborted the batch of the "
        "committed transaction")
    _assert_batch_follows_zodb(database_url, batch_id)


def test_the_batch_is_staged_before_the_storage_takes_its_commit_lock(catalog, db, monkeypatch):
    """JsonbStorage's vote takes the database's commit lock and holds it until tpc_finish: the
    connector's staging (large for a rebuild) must be over by then, or every other writer of the
    database waits for it. The data manager waited for it in its tpc_vote, after the storage's."""
    from plone_connector.catalog import batch as batch_module

    events: list[str] = []
    real_send, real_vote = batch_module.Staging.send, JsonbStorage.tpc_vote

    def send(self, client, *args):
        time.sleep(0.3)  # a large batch: the storages vote long before it would be over
        real_send(self, client, *args)
        events.append("staged")

    def tpc_vote(self, transaction):
        events.append("storage vote")
        return real_vote(self, transaction)

    monkeypatch.setattr(batch_module.Staging, "send", send)
    monkeypatch.setattr(JsonbStorage, "tpc_vote", tpc_vote)
    conn = db.open()
    _change_with_catalog_entry(conn, "staged-first", PersistentMapping(title="v1"))
    transaction.commit()
    assert events[:2] == ["staged", "storage vote"], events
