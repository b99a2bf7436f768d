"""Checks that a storage converted by zodbconvert (or copyTransactionsFrom) holds what its source
held: object by object, and for a history-preserving copy, transaction by transaction.

Records are compared as unpickled structures (plone_connector.storage.jsonstate_tree), so no
application class is imported: JsonbStorage rebuilds a record from its JSON, and the bytes may
differ from the source's (dict order in jsonb, pickle memo) while the state is the same.
"""

from __future__ import annotations

import collections
import subprocess
import sys
from pathlib import Path

import ZODB.blob
import ZODB.POSException
from ZODB.utils import get_pickle_metadata, oid_repr

from plone_connector.storage.jsonstate_tree import load_structure, same_structure


def write_config(
    path: Path, source: str, dsn: str, blob_dir: Path, *, history_preserving: bool = False
) -> Path:
    """A zodbconvert configuration: ``source`` (a storage section named ``source``) into a
    ``<jsonbstorage destination>`` on ``dsn``."""
    path.write_text(
        "%import plone_connector.storage\n"
        f"{source}\n"
        "<jsonbstorage destination>\n"
        f"  dsn {dsn}\n"
        f"  blob-dir {blob_dir}\n"
        f"  history-preserving {'true' if history_preserving else 'false'}\n"
        "</jsonbstorage>\n"
    )
    return path


def filestorage_section(path: Path, blob_dir: Path) -> str:
    return f"<filestorage source>\n  path {path}\n  blob-dir {blob_dir}\n  read-only true\n</filestorage>"


def zodbconvert(config_path: Path, *arguments: str) -> subprocess.CompletedProcess:
    """Run the ``zodbconvert`` console script installed next to this interpreter."""
    script = Path(sys.executable).with_name("zodbconvert")
    assert script.exists(), script
    result = subprocess.run(  # noqa: S603 - our own script and arguments
        [str(script), *arguments, str(config_path)], capture_output=True, text=True, timeout=1200
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def same_record(a: bytes, b: bytes) -> bool:
    """Do two ZODB records unpickle to the same class and an equal state?

    Equal as unpickled states are: dicts with string keys compare as mappings; everything else
    (types, float bits, persistent references, shared objects) exactly (``same_structure``).
    """
    meta_a, state_a, _ = load_structure(a)
    meta_b, state_b, _ = load_structure(b)
    return same_structure(meta_a, meta_b) and same_structure(state_a, state_b, ordered=False)


def _blob_bytes(storage, oid: bytes, serial: bytes) -> bytes:
    with open(storage.loadBlob(oid, serial), "rb") as blob_file:
        return blob_file.read()


def _oids(storage) -> set[bytes]:
    oids: set[bytes] = set()
    transactions = storage.iterator()
    try:
        for txn in transactions:
            oids.update(record.oid for record in txn)
    finally:
        close = getattr(transactions, "close", None)
        if close is not None:
            close()
    return oids


def assert_same_objects(source, destination) -> collections.Counter:
    """Every object the source's iterator names: if it loads from the source, it loads from the
    destination with the same serial, class and state (blob files byte-equal); if not, it does not
    load from the destination either. The destination holds no other object (``len``).

    Returns how many objects of each class were compared (and ``"blob files"``).
    """
    compared: collections.Counter = collections.Counter()
    current = 0
    for oid in sorted(_oids(source)):
        try:
            data, serial = source.load(oid)
        except ZODB.POSException.POSKeyError:
            try:
                destination.load(oid)
            except ZODB.POSException.POSKeyError:
                continue
            raise AssertionError(f"{oid_repr(oid)} is gone from the source but loads from the copy") from None
        current += 1
        copy, copy_serial = destination.load(oid)
        module, name = get_pickle_metadata(data)
        where = f"{oid_repr(oid)} {module}.{name}"
        assert copy_serial == serial, where
        assert get_pickle_metadata(copy) == (module, name), where
        assert same_record(copy, data), where
        if ZODB.blob.is_blob_record(data):
            assert _blob_bytes(destination, oid, serial) == _blob_bytes(source, oid, serial), where
            compared["blob files"] += 1
        compared[f"{module}.{name}"] += 1
    assert len(destination) == current
    return compared


def assert_same_history(source, destination) -> collections.Counter:
    """The two storages' iterators yield the same transactions (tid, status, user, description,
    extension) with the same revisions (oid, state, back pointer, blob file).

    Returns how many "transactions", "revisions", "back pointers", "deletions" and "blob files"
    were compared.
    """
    compared: collections.Counter = collections.Counter()
    source_transactions, copied_transactions = source.iterator(), destination.iterator()
    try:
        for txn, copy in zip(source_transactions, copied_transactions, strict=True):
            where = f"transaction {oid_repr(txn.tid)}"
            assert (copy.tid, copy.status, copy.user, copy.description, copy.extension) == (
                txn.tid,
                txn.status,
                txn.user,
                txn.description,
                txn.extension,
            ), where
            compared["transactions"] += 1
            records = {record.oid: record for record in txn}
            copied = {record.oid: record for record in copy}
            assert copied.keys() == records.keys(), where
            for oid, record in records.items():
                copied_record = copied[oid]
                at = f"{where}, {oid_repr(oid)}"
                assert copied_record.tid == record.tid == txn.tid, at
                assert copied_record.data_txn == record.data_txn, at
                compared["back pointers"] += record.data_txn is not None
                if record.data is None:
                    assert copied_record.data is None, at
                    compared["deletions"] += 1
                    continue
                assert same_record(copied_record.data, record.data), at
                if ZODB.blob.is_blob_record(record.data):
                    assert _blob_bytes(destination, oid, txn.tid) == _blob_bytes(source, oid, txn.tid), at
                    compared["blob files"] += 1
                compared["revisions"] += 1
    finally:
        for transactions in (source_transactions, copied_transactions):
            close = getattr(transactions, "close", None)
            if close is not None:
                close()
    return compared
