"""Blobs: ZODB's reusable blob test suite against JsonbStorage, and chunked streaming."""

from __future__ import annotations

import os
import re
import tracemalloc
import unittest

import psycopg
import pytest
import transaction
import ZODB
import ZODB.blob
import ZODB.tests.testblob
import ZODB.tests.util

from plone_connector.storage import JsonbStorage
from plone_connector.storage.storage import BLOB_CHUNK_SIZE
from tests.storage.conftest import dsn_with_schema

_state = {"dsn": None, "seen": set(), "history_preserving": False}


def _factory(name, blob_dir):
    # Each storage name is a database of its own (a schema), as the blob tests expect.
    schema = f"zodb_blob_{'hp' if _state['history_preserving'] else 'hf'}_{name}"
    with psycopg.connect(_state["dsn"], autocommit=True) as conn:
        conn.execute(f"create schema if not exists {schema}")
    storage = JsonbStorage(
        dsn_with_schema(_state["dsn"], schema),
        name=name,
        blob_dir=os.path.abspath(blob_dir),
        history_preserving=_state["history_preserving"],
    )
    if name not in _state["seen"]:
        # A new storage name in a test means a new, empty database to that test.
        _state["seen"].add(name)
        storage.cleanup()
    return storage


def _flatten(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from _flatten(test)
        else:
            yield test


# History-free: blob_packing.txt (packs old blob revisions away by time) and BlobUndoTests need
# history; they run against the history-preserving mode below.
SUITE = list(
    _flatten(ZODB.tests.testblob.storage_reusable_suite("Jsonb", _factory, test_undo=False))
)
HP_SUITE = list(
    _flatten(
        ZODB.tests.testblob.storage_reusable_suite(
            "JsonbHP", _factory, test_undo=True, test_packing=True, test_blob_storage_recovery=True
        )
    )
)


@pytest.mark.parametrize("case", SUITE, ids=[test.id() for test in SUITE])
def test_zodb_blob_suite(case, database_url, tmp_path, monkeypatch):
    _run_case(case, database_url, False, tmp_path, monkeypatch)


@pytest.mark.parametrize("case", HP_SUITE, ids=[test.id() for test in HP_SUITE])
def test_zodb_blob_suite_history_preserving(case, database_url, tmp_path, monkeypatch):
    _run_case(case, database_url, True, tmp_path, monkeypatch)


def _run_case(case, dsn, history_preserving, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _state["dsn"] = dsn
    _state["history_preserving"] = history_preserving
    _state["seen"] = set()
    result = unittest.TestResult()
    case.run(result)
    problems = "\n".join(text for _test, text in result.errors + result.failures)
    assert result.testsRun == 1 and not result.skipped
    if case.id() == "blob_transaction_txt" and os.geteuid() == 0:
        # Root may write a read-only file: the example at line 367 expects PermissionError, and
        # its write truncates the committed blob the example at line 403 reads. FileStorage
        # fails exactly these two as root too. Everything else in the file must pass.
        failed_lines = sorted(set(re.findall(r"blob_transaction\.txt\", line (\d+), in", problems)))
        assert failed_lines == ["367", "403"], problems
        return
    assert not problems, problems


@pytest.fixture
def storage(storage_dsn, tmp_path):
    storage = JsonbStorage(storage_dsn, blob_dir=str(tmp_path / "blobs"))
    storage.cleanup()
    yield storage
    storage.close()


def _write_blob(db, size, peaks=None):
    conn = db.open()
    blob = ZODB.blob.Blob()
    with blob.open("w") as out:
        block = bytes(range(256)) * 4096  # 1 MiB
        written = 0
        while written < size:
            piece = block[: size - written]
            out.write(piece)
            written += len(piece)
    conn.root()["blob"] = blob
    del block, piece
    if peaks is not None:
        tracemalloc.start()
    transaction.commit()
    if peaks is not None:
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    oid = blob._p_oid
    conn.close()
    return oid, db.storage.load(oid)[1]


def test_blob_stored_in_chunks_and_streamed(storage, storage_dsn, tmp_path):
    size = 12 * BLOB_CHUNK_SIZE + 123
    db = ZODB.DB(storage)
    try:
        peaks = []
        oid, serial = _write_blob(db, size, peaks)
        upload_peak = peaks[0]
        with psycopg.connect(storage_dsn) as conn:
            chunks = conn.execute(
                "select count(*), sum(length(chunk)), max(length(chunk)) from zodb_blob_chunk"
            ).fetchone()
        assert chunks == (13, size, BLOB_CHUNK_SIZE)
        # A second process with a cold cache downloads it.
        other = JsonbStorage(storage_dsn, blob_dir=str(tmp_path / "other-cache"))
        try:
            tracemalloc.start()
            filename = other.loadBlob(oid, serial)
            _, download_peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert os.path.getsize(filename) == size
            with open(filename, "rb") as blob_file:
                assert blob_file.read(256) == bytes(range(256))
        finally:
            other.close()
        # Never the whole blob in memory: peaks stay near one chunk, far below the blob's size.
        assert upload_peak < 4 * BLOB_CHUNK_SIZE
        assert download_peak < 3 * BLOB_CHUNK_SIZE
    finally:
        db.close()


def test_replaced_blob_chunks_are_deleted(storage, storage_dsn):
    db = ZODB.DB(storage)
    try:
        _write_blob(db, 10)
        conn = db.open()
        with conn.root()["blob"].open("w") as out:
            out.write(b"second version")
        transaction.commit()
        conn.close()
        with psycopg.connect(storage_dsn) as pg:
            assert pg.execute("select count(*) from zodb_blob_chunk").fetchone()[0] == 1
        conn = db.open()
        with conn.root()["blob"].open() as blob_file:
            assert blob_file.read() == b"second version"
        conn.close()
    finally:
        db.close()


def test_blob_cache_directory_shared_by_processes(storage_dsn, tmp_path):
    shared = str(tmp_path / "shared-cache")
    writer = JsonbStorage(storage_dsn, blob_dir=shared)
    writer.cleanup()
    readers = [JsonbStorage(storage_dsn, blob_dir=shared) for _ in range(3)]
    db = ZODB.DB(writer)
    try:
        oid, serial = _write_blob(db, 3 * BLOB_CHUNK_SIZE + 5)
        cached = writer.fshelper.getBlobFilename(oid, serial)
        os.remove(cached)  # as if written by a process with another cache
        import threading

        names, errors = [], []

        def read(storage):
            try:
                names.append(storage.loadBlob(oid, serial))
            except Exception as error:  # noqa: BLE001 - asserted below
                errors.append(error)

        threads = [threading.Thread(target=read, args=(storage,)) for storage in readers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == [] and set(names) == {cached}
        assert os.path.getsize(cached) == 3 * BLOB_CHUNK_SIZE + 5
        leftovers = [n for n in os.listdir(os.path.dirname(cached)) if not n.endswith(".blob")]
        assert leftovers == []  # no partial downloads left behind
    finally:
        db.close()
        for storage in readers:
            storage.close()
