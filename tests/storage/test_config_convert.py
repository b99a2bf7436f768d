"""The <jsonbstorage> ZConfig section, and zodbconvert from FileStorage and RelStorage into JsonbStorage."""

from __future__ import annotations

import random

import pytest
import ZODB
import ZODB.blob
import ZODB.config
import ZODB.FileStorage
from BTrees.OOBTree import OOBTree
from persistent.list import PersistentList
from persistent.mapping import PersistentMapping
from relstorage.zodbconvert import main as zodbconvert

from plone_connector.storage import JsonbStorage
from tests.pg import create_database, drop_database
from tests.storage.conversion import assert_same_objects, write_config
from tests.storage.conversion import zodbconvert as zodbconvert_script


def _section(dsn, blob_dir, extra=""):
    return f"""
    <jsonbstorage>
        dsn {dsn}
        blob-dir {blob_dir}
        {extra}
    </jsonbstorage>
    """


def test_zconfig_section_opens_the_storage(fresh_dsn, tmp_path):
    storage_dsn = fresh_dsn  # its own tables: other tests leave records in the shared schema
    db = ZODB.config.databaseFromString(
        "%import plone_connector.storage\n<zodb>\n" + _section(storage_dsn, tmp_path / "blobs") + "</zodb>"
    )
    try:
        with db.transaction() as conn:
            conn.root()["configured"] = True
    finally:
        db.close()
    # Read-only writes nothing, the schema included: it opens the database created above.
    config = "%import plone_connector.storage\n" + _section(storage_dsn, tmp_path / "blobs", "read-only true")
    storage = ZODB.config.storageFromString(config)
    try:
        assert isinstance(storage, JsonbStorage)
        assert storage.isReadOnly()
        assert storage._shared.blob_dir == str(tmp_path / "blobs")
        db = ZODB.DB(storage)
        with db.transaction() as conn:
            assert conn.root()["configured"] is True
    finally:
        storage.close()


def _fill_filestorage(path, blob_dir):
    """A FileStorage with history: several transactions, updates, deletions, BTrees, a blob."""
    db = ZODB.DB(ZODB.FileStorage.FileStorage(str(path), blob_dir=str(blob_dir)))
    _fill(db)


def _fill(db):
    """Commit the synthetic content in ``db`` and close it."""
    rnd = random.Random(5)
    with db.transaction() as conn:
        root = conn.root()
        root["tree"] = OOBTree()
        root["list"] = PersistentList()
        root["blob"] = ZODB.blob.Blob(b"first blob")
    for i in range(30):
        with db.transaction(f"txn {i}") as conn:
            root = conn.root()
            root["tree"][f"key {i} ünïcode"] = PersistentMapping(n=i, f=rnd.random(), t=(i, str(i)))
            root["list"].append(i)
            if i % 7 == 3:
                del root["tree"][f"key {i - 1} ünïcode"]
            if i == 20:
                with root["blob"].open("w") as out:
                    out.write(b"second blob " * 1000)
    db.close()


def _current_states(storage):
    """{oid: unpickled-equal state} of everything reachable, via ZODB connections."""
    db = ZODB.DB(storage)
    conn = db.open()
    root = conn.root()
    tree = {key: (value["n"], value["f"], value["t"]) for key, value in root["tree"].items()}
    with root["blob"].open() as blob_file:
        blob = blob_file.read()
    state = (tree, list(root["list"]), blob, sorted(root.keys()))
    conn.close()
    db.close()
    return state


def _assert_converted(source, storage) -> dict:
    """Compare the converted ``storage`` with its ``source`` object by object, then close both;
    return the counts compared. Both sources were filled by ``_fill``: one blob, one OOBTree."""
    try:
        compared = assert_same_objects(source, storage)
    finally:
        source.close()
        storage.close()
    assert compared["blob files"] == 1
    assert compared["BTrees.OOBTree.OOBTree"] == 1
    return compared


@pytest.mark.slow
def test_zodbconvert_from_filestorage(storage_dsn, tmp_path):
    source_path, source_blobs = tmp_path / "Data.fs", tmp_path / "fs-blobs"
    _fill_filestorage(source_path, source_blobs)
    config = tmp_path / "convert.conf"
    config.write_text(
        "%import plone_connector.storage\n"
        f"<filestorage source>\n path {source_path}\n blob-dir {source_blobs}\n</filestorage>\n"
        + _section(storage_dsn, tmp_path / "jsonb-blobs").replace("<jsonbstorage>", "<jsonbstorage destination>")
    )
    zodbconvert(["zodbconvert", "--clear", str(config)])
    expected = _current_states(ZODB.FileStorage.FileStorage(str(source_path), blob_dir=str(source_blobs), read_only=True))
    assert _current_states(JsonbStorage(storage_dsn, blob_dir=str(tmp_path / "other-cache"))) == expected
    _assert_converted(ZODB.FileStorage.FileStorage(str(source_path), blob_dir=str(source_blobs), read_only=True),
                      JsonbStorage(storage_dsn))


@pytest.fixture
def relstorage_dsn():
    """A database of its own for RelStorage, as a key=value DSN (its driver, psycopg2, wants one)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    dsn, admin = create_database("relstorage")
    yield make_conninfo(**{key: value for key, value in conninfo_to_dict(dsn).items() if value})
    drop_database(admin, dsn)


def _relstorage(dsn, blob_dir):
    from relstorage.adapters.postgresql import PostgreSQLAdapter
    from relstorage.options import Options
    from relstorage.storage import RelStorage

    options = Options(keep_history=False, blob_dir=str(blob_dir), shared_blob_dir=False)
    return RelStorage(PostgreSQLAdapter(dsn=dsn, options=options), options=options)


@pytest.mark.slow
def test_zodbconvert_from_history_free_relstorage(relstorage_dsn, fresh_dsn, tmp_path):
    _fill(ZODB.DB(_relstorage(relstorage_dsn, tmp_path / "rs-blobs")))
    config = write_config(
        tmp_path / "convert.conf",
        "%import relstorage\n"
        "<relstorage source>\n"
        "  keep-history false\n"
        f"  blob-dir {tmp_path / 'convert-rs-blobs'}\n"
        f"  <postgresql>\n    dsn {relstorage_dsn}\n  </postgresql>\n"
        "</relstorage>",
        fresh_dsn,
        tmp_path / "jsonb-blobs",
    )
    zodbconvert_script(config)
    compared = _assert_converted(_relstorage(relstorage_dsn, tmp_path / "check-rs-blobs"),
                                 JsonbStorage(fresh_dsn, blob_dir=str(tmp_path / "check-jsonb-blobs")))
    assert compared["persistent.mapping.PersistentMapping"] == 31  # the root, and all ever added
