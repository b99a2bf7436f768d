"""Read-only mode (a replica), the storage's lifecycle and schema creation beside the catalog
service. Found in a review (stop 19); each failed before its fix."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
import ZODB
import ZODB.POSException
from ZODB.utils import z64

from plone_connector.storage import JsonbStorage
from plone_connector.storage.storage import StorageClosedError


def _with_root(dsn):
    db = ZODB.DB(JsonbStorage(dsn, listen=False))
    with db.transaction() as conn:
        conn.root()["x"] = 1
    db.close()


def test_read_only_storage_opens_on_a_read_only_server(fresh_dsn):
    """A hot standby runs every transaction read-only; the schema is current. Opening must only
    read (here: CREATE TABLE IF NOT EXISTS in migrate() fails with ReadOnlySqlTransaction)."""
    _with_root(fresh_dsn)
    replica_like = fresh_dsn + "%20-cdefault_transaction_read_only%3Don"
    storage = JsonbStorage(replica_like, read_only=True, listen=False)
    try:
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            assert conn.root()["x"] == 1
        db.close()
    finally:
        storage.close()


def test_read_only_storage_does_not_create_the_schema(fresh_dsn):
    """A read-only storage on an empty database refuses it, writing nothing (it created every
    table and the zodb_commit row)."""
    from plone_connector.storage.schema import SchemaError

    with pytest.raises(SchemaError, match="read-write"):
        JsonbStorage(fresh_dsn, read_only=True, listen=False)
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("select to_regclass('zodb_commit')").fetchone()[0] is None


def test_read_only_storage_refuses_cleanup(fresh_dsn):
    """cleanup() (zodbconvert --clear's zap_all) on a read-only storage wiped the database."""
    _with_root(fresh_dsn)
    storage = JsonbStorage(fresh_dsn, read_only=True, listen=False)
    try:
        with pytest.raises(ZODB.POSException.ReadOnlyError):
            storage.cleanup()
    finally:
        storage.close()
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("select count(*) from zodb_object_state").fetchone()[0] == 1


def test_no_working_instance_after_close(fresh_dsn):
    """new_instance() of a closed storage gave an instance that loads (and commits) normally."""
    _with_root(fresh_dsn)
    storage = JsonbStorage(fresh_dsn, listen=False)
    storage.close()
    with pytest.raises(StorageClosedError):
        storage.new_instance().load(z64)


def test_schema_created_while_the_catalog_service_creates_its_tables(fresh_dsn):
    """The catalog service's migration 0001 creates catalog_txn_outcome under its own advisory
    lock; a storage opening a fresh database at the same moment failed with UniqueViolation
    (pg_type_typname_nsp_index) instead of finding the table."""
    from catalog_service.store.migrations import LOCK_KEY

    holder = psycopg.connect(fresh_dsn)  # a transaction, as the service's migration runs
    holder.execute("select pg_advisory_xact_lock(%s)", (LOCK_KEY,))
    holder.execute(
        "create table if not exists catalog_txn_outcome (batch_id text primary key, tid bigint,"
        " recorded timestamptz not null default now())"
    )
    outcome = []

    def open_storage():
        try:
            outcome.append(JsonbStorage(fresh_dsn, listen=False))
        except Exception as error:  # noqa: BLE001 - the test looks at it
            outcome.append(error)

    thread = threading.Thread(target=open_storage)
    thread.start()
    time.sleep(1.0)
    holder.commit()
    holder.close()
    thread.join(30)
    (storage,) = outcome
    assert not isinstance(storage, Exception), repr(storage)
    storage.close()


@pytest.mark.parametrize(
    "options", [{"blob_cache_size": 0}, {"blob_cache_size": 10**6, "blob_cache_size_check": 100}, {"cache_mb": -1}]
)
def test_bad_options_are_refused_before_anything_is_created(fresh_dsn, options):
    with pytest.raises(ValueError):
        JsonbStorage(fresh_dsn, listen=False, **options)
    with psycopg.connect(fresh_dsn) as conn:
        assert conn.execute("select to_regclass('zodb_commit')").fetchone()[0] is None


def test_a_catalog_batch_id_recorded_twice_is_a_clear_error_not_a_conflict(fresh_dsn):
    """ConflictError is transient (Zope retries it); a batch id that is taken stays taken."""
    from ZODB.Connection import TransactionMetaData
    from ZODB.tests.MinPO import MinPO
    from ZODB.tests.StorageTestBase import zodb_pickle

    storage = JsonbStorage(fresh_dsn, listen=False)
    try:
        for attempt in range(2):
            t = TransactionMetaData(extension={"catalog_batch_ids": ["batch-1"]})
            storage.tpc_begin(t)
            storage.store(storage.new_oid(), z64, zodb_pickle(MinPO(attempt)), "", t)
            if attempt == 0:
                storage.tpc_vote(t)
                storage.tpc_finish(t)
                continue
            with pytest.raises(ZODB.POSException.StorageError, match="batch id already recorded") as raised:
                storage.tpc_vote(t)
            assert not isinstance(raised.value, ZODB.POSException.ConflictError)
            storage.tpc_abort(t)
    finally:
        storage.close()
