"""Opening the storage with bad settings or an unreachable server, the schema it shares with the
catalog service, and what zodbconvert's copy says while it runs (found in an audit, stop 21;
each test failed before its change)."""

from __future__ import annotations

import logging
import os

import psycopg
import pytest
import transaction
import ZODB
import ZODB.blob
import ZODB.FileStorage
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from zope.interface.verify import verifyObject

from plone_connector.storage import JsonbStorage, StorageOpenError
from plone_connector.storage import history as history_module
from plone_connector.storage import storage as storage_module
from plone_connector.storage.schema import LATEST


def _tables(dsn: str) -> set[str]:
    with psycopg.connect(dsn) as conn:
        return {
            name
            for (name,) in conn.execute(
                "select table_name from information_schema.tables where table_schema = current_schema()"
            )
        }


@pytest.mark.parametrize("timeout", [0, -1])
def test_a_connect_timeout_libpq_would_read_as_forever_is_refused(fresh_dsn, timeout):
    with pytest.raises(ValueError, match="connect_timeout"):
        JsonbStorage(fresh_dsn, connect_timeout=timeout)
    assert _tables(fresh_dsn) == set()


def test_a_blob_directory_that_cannot_be_made_leaves_the_database_untouched(fresh_dsn, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError):
        JsonbStorage(fresh_dsn, blob_dir=str(blocker / "blobs"))
    assert _tables(fresh_dsn) == set()
    # So the next open may still choose the mode (before, the failed one had fixed it).
    storage = JsonbStorage(fresh_dsn, history_preserving=True, blob_dir=str(tmp_path / "blobs"))
    storage.close()


def test_a_malformed_dsn_is_a_storage_open_error():
    with pytest.raises(StorageOpenError, match="invalid DSN"):
        JsonbStorage("not a dsn at all")


def test_an_unreachable_server_is_a_storage_open_error_without_the_password(fresh_dsn):
    params = {**conninfo_to_dict(fresh_dsn), "host": "127.0.0.1", "port": "1", "password": "s3cret-word"}
    with pytest.raises(StorageOpenError) as raised:
        JsonbStorage(make_conninfo(**params), connect_timeout=2)
    assert "s3cret-word" not in str(raised.value)
    assert "port=1" in str(raised.value)
    assert isinstance(raised.value.__cause__, psycopg.OperationalError)


def test_a_missing_database_is_a_storage_open_error(fresh_dsn):
    params = {**conninfo_to_dict(fresh_dsn), "dbname": "no_such_database_here"}
    with pytest.raises(StorageOpenError, match="no_such_database_here"):
        JsonbStorage(make_conninfo(**params))


def test_a_history_preserving_storage_provides_undo_and_a_history_free_one_does_not(fresh_dsn, tmp_path):
    from ZODB.interfaces import IStorageUndoable

    storage = JsonbStorage(fresh_dsn, history_preserving=True, blob_dir=str(tmp_path / "hp"))
    try:
        assert verifyObject(IStorageUndoable, storage)
        assert storage.supportsUndo()
    finally:
        storage.close()


def test_a_history_free_storage_does_not_provide_undo(storage):
    from ZODB.interfaces import IStorageUndoable

    assert not IStorageUndoable.providedBy(storage)


def test_the_outcome_table_is_defined_as_the_catalog_service_defines_it(fresh_dsn, tmp_path):
    JsonbStorage(fresh_dsn, blob_dir=str(tmp_path / "b")).close()
    with psycopg.connect(fresh_dsn) as conn:
        (not_null,) = conn.execute(
            "select attnotnull from pg_attribute where attrelid = to_regclass('catalog_txn_outcome')"
            " and attname = 'recorded'"
        ).fetchone()
        versions = [v for (v,) in conn.execute("select version from zodb_schema_version order by version")]
    assert not_null
    assert versions == list(range(1, LATEST + 1))


def test_a_database_from_before_the_outcome_change_migrates_with_its_rows(fresh_dsn, tmp_path):
    JsonbStorage(fresh_dsn, blob_dir=str(tmp_path / "b")).close()
    with psycopg.connect(fresh_dsn) as conn:  # as version 3 left it, with a row without a time
        conn.execute("alter table catalog_txn_outcome alter column recorded drop not null")
        conn.execute("insert into catalog_txn_outcome (batch_id, tid, recorded) values ('b1', 7, null)")
        conn.execute("delete from zodb_schema_version where version = 4")
    JsonbStorage(fresh_dsn, blob_dir=str(tmp_path / "b")).close()
    with psycopg.connect(fresh_dsn) as conn:
        row = conn.execute("select tid, recorded is not null from catalog_txn_outcome where batch_id = 'b1'").fetchone()
        (not_null,) = conn.execute(
            "select attnotnull from pg_attribute where attrelid = to_regclass('catalog_txn_outcome')"
            " and attname = 'recorded'"
        ).fetchone()
    assert row == (7, True)
    assert not_null


def _filestorage_with_blobs(path, count: int):
    fs = ZODB.FileStorage.FileStorage(str(path / "Data.fs"), blob_dir=str(path / "blobs"))
    db = ZODB.DB(fs)
    with db.transaction() as conn:
        for i in range(count):
            blob = ZODB.blob.Blob(f"blob {i}".encode())
            conn.root()[f"b{i}"] = blob
    db.close()
    return path / "Data.fs", path / "blobs"


def test_the_copy_logs_its_progress_and_a_summary(fresh_dsn, tmp_path, caplog, monkeypatch):
    data_fs, blobs = _filestorage_with_blobs(tmp_path, 3)
    # A blob file lost in the source: warned about and counted, the rest still copied.
    source = ZODB.FileStorage.FileStorage(str(data_fs), blob_dir=str(blobs), read_only=True)
    lost = None
    for txn in source.iterator():
        for record in txn:
            if ZODB.blob.is_blob_record(record.data):
                lost = source.loadBlob(record.oid, record.tid)
    os.remove(lost)
    monkeypatch.setattr(history_module, "COPY_PROGRESS_SECONDS", 0.0)
    destination = JsonbStorage(fresh_dsn, blob_dir=str(tmp_path / "dst"))
    try:
        with caplog.at_level(logging.INFO, logger=storage_module.log.name):
            destination.copyTransactionsFrom(source)
    finally:
        source.close()
    messages = [r.getMessage() for r in caplog.records if r.name == storage_module.log.name]
    progress = [m for m in messages if m.startswith("copy: ") and "so far" in m]
    summary = [m for m in messages if m.startswith("copy: done")]
    missing = [r for r in caplog.records if "is missing in the source" in r.getMessage()]
    assert len(progress) == 2  # one line per transaction at a zero interval: the root's and the blobs'
    assert summary == [summary[0]] and "2 transactions" in summary[0] and "2 blobs" in summary[0]
    assert "1 blob files were missing" in summary[0]
    assert len(missing) == 1 and missing[0].levelno == logging.WARNING
    db = ZODB.DB(destination)
    try:
        with db.transaction() as conn:
            readable = sorted(k for k, blob in conn.root().items() if _readable(blob))
        assert len(readable) == 2
    finally:
        db.close()
        transaction.abort()


def _readable(blob) -> bool:
    try:
        with blob.open() as f:
            return f.read().startswith(b"blob ")
    except ZODB.POSException.POSKeyError:
        return False
