"""A blob cache directory shared by real processes (test_blobs.py shares one between storage
instances of one process): several processes download the same blob into it at once, and read
it back, and no partial download is left behind."""

from __future__ import annotations

import hashlib
import multiprocessing
import os

import transaction
import ZODB

from plone_connector.storage import JsonbStorage
from plone_connector.storage.storage import BLOB_CHUNK_SIZE
from tests.storage.test_blobs import _write_blob

READERS = 4


def _read_in_a_process(dsn, blob_dir, oid, serial, barrier, results):
    storage = JsonbStorage(dsn, blob_dir=blob_dir)
    try:
        barrier.wait(60)  # every process asks for the blob at once
        path = storage.loadBlob(oid, serial)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        results.put((os.getpid(), path, digest))
    except BaseException as error:
        results.put((os.getpid(), None, repr(error)))
        raise
    finally:
        storage.close()


def test_processes_download_one_blob_into_a_shared_directory_at_once(storage_dsn, tmp_path):
    shared = str(tmp_path / "shared-cache")
    writer = JsonbStorage(storage_dsn, blob_dir=shared)
    writer.cleanup()
    db = ZODB.DB(writer)
    try:
        size = 5 * BLOB_CHUNK_SIZE + 17
        oid, serial = _write_blob(db, size)
        cached = writer.fshelper.getBlobFilename(oid, serial)
        with open(cached, "rb") as f:
            expected = hashlib.sha256(f.read()).hexdigest()
        os.remove(cached)  # as if written by a machine with another cache

        context = multiprocessing.get_context("spawn")
        barrier = context.Barrier(READERS)
        results = context.Queue()
        processes = [
            context.Process(target=_read_in_a_process, args=(storage_dsn, shared, oid, serial, barrier, results))
            for _ in range(READERS)
        ]
        for process in processes:
            process.start()
        answers = [results.get(timeout=120) for _ in processes]
        for process in processes:
            process.join(60)
        assert [process.exitcode for process in processes] == [0] * READERS, answers
        assert len({pid for pid, _, _ in answers}) == READERS
        assert {(path, digest) for _, path, digest in answers} == {(cached, expected)}
        assert os.path.getsize(cached) == size
        leftovers = [n for n in os.listdir(os.path.dirname(cached)) if not n.endswith(".blob")]
        assert leftovers == []
    finally:
        db.close()
        transaction.abort()
