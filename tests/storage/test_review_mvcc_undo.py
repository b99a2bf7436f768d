"""Review of historical connections, reads before the first poll, history-preserving undo
metadata and copies, against FileStorage's behaviour. "Another process" is a second
JsonbStorage on the same database."""

# The closures in loops here are called at once, inside their iteration (B023 warns of later calls).
# ruff: noqa: B023

from __future__ import annotations

import psycopg
import pytest
import transaction
import ZODB
from persistent.mapping import PersistentMapping
from persistent.TimeStamp import TimeStamp
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import POSKeyError, ReadConflictError
from ZODB.tests.StorageTestBase import zodb_unpickle
from ZODB.utils import p64, u64, z64

from plone_connector.storage import JsonbStorage
from tests.storage.test_history import _commit


def _backend(dsn, pid):
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "select state, backend_xmin is not null from pg_stat_activity where pid = %s", (pid,)
        ).fetchone()


@pytest.fixture(params=["hf", "hp"])
def any_storage(request, storage_dsn, hp_storage_dsn):
    hp = request.param == "hp"
    storage = JsonbStorage(hp_storage_dsn if hp else storage_dsn, history_preserving=hp)
    storage.cleanup()
    yield storage, (hp_storage_dsn if hp else storage_dsn)
    storage.close()


# ---------------------------------------------------------------- 1. historical connections


def test_a_closed_historical_connection_keeps_no_snapshot_open(any_storage):
    """DB.open(at=...) wraps a new instance in ZODB's HistoricalStorageAdapter, which never
    calls sync, poll_invalidations or afterCompletion. The instance's first load begins a
    repeatable-read snapshot that then stays open while the connection idles in the historical
    pool (up to historical_timeout, 300 s, or for as long as no one opens another connection),
    holding back VACUUM in the whole database: the very thing afterCompletion prevents for
    ordinary connections (docs/decisions/storage-mvcc.md)."""
    storage, dsn = any_storage
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()["doc"] = PersistentMapping(v=1)
        at = db.lastTransaction()
        tm = transaction.TransactionManager()
        conn = db.open(tm, at=at)
        assert conn.root()["doc"]["v"] == 1
        instance = conn._storage._storage
        pid = instance._load_conn.info.backend_pid
        tm.abort()  # the end of the (read-only) transaction
        conn.close()
        assert _backend(dsn, pid) in (None, ("idle", False))
    finally:
        db.close()


def _undo_id(storage, description: bytes):
    (entry,) = [e for e in storage.undoLog(0, 1000) if e["description"] == description]
    return entry["id"]


def _undo(storage, undone: bytes, **meta):
    t = TransactionMetaData(**meta)
    storage.tpc_begin(t)
    try:
        storage.undo(_undo_id(storage, undone), t)
        storage.tpc_vote(t)
        return storage.tpc_finish(t)
    except BaseException:
        storage.tpc_abort(t)
        raise


def _delete(storage, oid, serial, **meta):
    t = TransactionMetaData(**meta)
    storage.tpc_begin(t)
    storage.deleteObject(oid, serial, t)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


def _history_script(storage):
    """The same transactions on any undoable storage; the tids in order."""
    a, b, c = p64(1), p64(2), p64(3)
    tids = []
    tids.append(_commit(storage, [(a, z64, 1), (b, z64, 1)], description="t1"))
    tids.append(_commit(storage, [(a, tids[0], 2)], description="t2"))
    tids.append(_commit(storage, [(c, z64, 1)], description="t3"))
    tids.append(_undo(storage, b"t2", description="undo t2"))
    tids.append(_undo(storage, b"t3", description="undo t3"))
    tids.append(_commit(storage, [(b, tids[0], 2)], description="t6"))
    tids.append(_undo(storage, b"undo t2", description="undo undo t2", user="bob"))
    tids.append(_delete(storage, b, tids[5], description="t8", extension={"k": 8}))
    tids.append(_commit(storage, [], description="empty", user="ann", extension={"k": 9, "x": "y"}))
    return (a, b, c), tids


def _outcome(fn):
    try:
        return fn()
    except POSKeyError:
        return "POSKeyError"


def test_load_before_matches_filestorage_through_undo_and_redo(hp_storage, tmp_path):
    from ZODB.FileStorage import FileStorage

    fs = FileStorage(str(tmp_path / "Data.fs"))
    try:
        results = []
        for storage in (fs, hp_storage):
            if storage is hp_storage:
                # the oids of the script: 1, 2, 3
                storage._oid_pool = []
            oids, tids = _history_script(storage)
            index = {tid: i for i, tid in enumerate(tids)}
            probes = [*tids, p64(u64(tids[-1]) + 1)]
            seen = []
            for oid in oids:
                for before in probes:
                    def probe():
                        r = storage.loadBefore(oid, before)
                        if r is None:
                            return None
                        data, start, end = r
                        return zodb_unpickle(data).value, index[start], None if end is None else index[end]
                    seen.append(_outcome(probe))
                for tid in tids:
                    seen.append(_outcome(lambda: zodb_unpickle(storage.loadSerial(oid, tid)).value))
                seen.append([(index[h["tid"]], h["description"]) for h in storage.history(oid, 100)])
            results.append(seen)
        assert results[1] == results[0]
    finally:
        fs.close()


@pytest.mark.parametrize(
    "first,last",
    [(0, -20), (0, 3), (2, 5), (3, -2), (5, 2), (0, 0), (1, -1), (8, -20), (20, -5), (0, 100)],
)
def test_undo_log_matches_filestorage(hp_storage, tmp_path, first, last):
    from ZODB.FileStorage import FileStorage

    fs = FileStorage(str(tmp_path / "Data.fs"))
    try:
        results = []
        for storage in (fs, hp_storage):
            _oids, tids = _history_script(storage)
            times = {TimeStamp(tid).timeTime(): i for i, tid in enumerate(tids)}

            def entries(log):
                return [
                    (times[e["time"]], e["user_name"], e["description"],
                     sorted((k, v) for k, v in e.items() if k not in ("id", "time", "size")))
                    for e in log
                ]

            seen = [
                entries(storage.undoLog(first, last)),
                entries(storage.undoLog(first, last, lambda e: e["description"].startswith(b"undo"))),
                entries(storage.undoLog(first, last, lambda e: e.get("k") is not None)),
                entries(storage.undoInfo(first, last, {"user_name": b"ann"})),
                entries(storage.undoInfo(first, last, {"k": 8})),
            ]
            # the ids undo again
            for e in storage.undoLog(first, last):
                assert _undo_id(storage, e["description"]) == e["id"]
            results.append(seen)
        assert results[1] == results[0]
    finally:
        fs.close()


# ---------------------------------------------------------------- 2. reads before the first poll


@pytest.mark.parametrize("read", ["load", "loadBefore", "loadSerial"])
def test_a_deletion_between_a_read_before_the_first_poll_and_that_poll_is_reported(storage, read):
    """An instance that reads before its first poll starts its snapshot there (its polls count
    from it), but did not note gc_tid: the first poll then cannot see that a deletion (deleteObject,
    a pack) moved it, and reports nothing for an object it read and that is gone. An instance
    that polled first answers None ("invalidate everything") in the same case."""
    oid = storage.new_oid()
    _commit(storage, [(z64, z64, 0)])
    tid = _commit(storage, [(oid, z64, 1)])
    instance = storage.new_instance()
    try:
        if read == "load":
            instance.load(oid)
        elif read == "loadBefore":
            instance.loadBefore(oid, p64(u64(tid) + 1))
        else:
            instance.loadSerial(oid, tid)
        other = storage.new_instance()
        try:
            _delete(other, oid, tid)
        finally:
            other.release()
        instance.sync()
        invalidated = instance.poll_invalidations()
        assert invalidated is None or oid in invalidated
        with pytest.raises(POSKeyError):
            instance.load(oid)
    finally:
        instance.release()


def test_an_undone_creation_packed_away_before_the_first_poll_is_reported(hp_storage):
    """History-preserving: another process undoes an object's creation, then packs, which
    removes the deletion revision (and moves gc_tid, the only trace left). An instance that read
    the object before its first poll is told nothing by that poll."""
    import time

    from ZODB.serialize import referencesf

    storage = hp_storage
    oid = storage.new_oid()
    _commit(storage, [(z64, z64, 0)], description="root")
    _commit(storage, [(oid, z64, 1)], description="create")
    instance = storage.new_instance()
    try:
        instance.load(oid)
        _undo(storage, b"create")
        time.sleep(0.01)
        storage.pack(time.time() + 1, referencesf)
        instance.sync()
        invalidated = instance.poll_invalidations()
        assert invalidated is None or oid in invalidated
    finally:
        instance.release()


# ---------------------------------------------------------------- 3/4. undo with blobs, copies


def _build_source(storage):
    """Transactions through ZODB on ``storage`` (blobs, undo, undo of a creation, deleteObject,
    a transaction without records); returns the oids of interest."""
    import ZODB.blob

    db = ZODB.DB(storage)
    tm = transaction.TransactionManager()
    conn = db.open(tm)
    root = conn.root()
    root["a"] = PersistentMapping(v=1)
    root["blob"] = blob = ZODB.blob.Blob(b"one")
    tm.get().note("t1")
    tm.commit()
    root["a"]["v"] = 2
    with blob.open("w") as f:
        f.write(b"two")
    tm.get().note("t2")
    tm.get().setUser("u2")
    tm.commit()
    root["c"] = PersistentMapping(v=3)
    tm.get().note("t3")
    tm.commit()
    oids = {"a": root["a"]._p_oid, "blob": blob._p_oid, "c": root["c"]._p_oid}
    db.undo(_undo_id(storage, b"t2"), tm.get())
    tm.get().note("undo t2")
    tm.commit()
    c = root.pop("c")
    tm.get().note("t5")
    tm.commit()
    conn.close()
    _delete(storage, oids["c"], c._p_serial, description="t6 gc")
    _commit(storage, [], description="t7 empty", extension={"e": 7})
    conn = db.open(tm)
    root = conn.root()
    root["d"] = PersistentMapping(v=4)
    root["blob2"] = blob2 = ZODB.blob.Blob(b"new blob")
    tm.get().note("t8")
    tm.commit()
    oids["d"], oids["blob2"] = root["d"]._p_oid, blob2._p_oid
    db.undo(_undo_id(storage, b"t8"), tm.get())
    tm.get().note("undo t8")
    tm.commit()
    db.undo(_undo_id(storage, b"undo t2"), tm.get())
    tm.get().note("undo undo t2")
    tm.commit()
    conn.close()
    return db, oids


def _value(storage, oid, data, tid):
    import ZODB.blob

    if data is None:
        return None
    if ZODB.blob.is_blob_record(data):
        with open(storage.loadBlob(oid, tid), "rb") as f:
            return ("blob", f.read())
    return ("state", repr(sorted(dict(_state(data)).items())) if isinstance(_state(data), dict) else repr(_state(data)))


def _state(data):
    import io

    import zodbpickle.pickle as pk

    unpickler = pk.Unpickler(io.BytesIO(data))
    unpickler.persistent_load = lambda ref: ("ref", ref[0] if isinstance(ref, tuple) else ref)
    unpickler.load()  # class
    state = unpickler.load()
    if isinstance(state, dict) and "data" in state:
        return state["data"]
    return state


def _dump(storage, by_tid=False):
    index = {txn.tid: i for i, txn in enumerate(storage.iterator())}
    if by_tid:  # copies of one source: the same tids
        index = {tid: u64(tid) for tid in index}
    out = []
    for txn in storage.iterator():
        records = sorted(
            (u64(r.oid), _value(storage, r.oid, r.data, txn.tid),
             None if r.data_txn is None else index.get(r.data_txn, "?"))
            for r in txn
        )
        out.append(((u64(txn.tid),) if by_tid else ())
                   + (txn.status, txn.user, txn.description, dict(txn.extension), records))
    return out


def test_copy_of_a_history_matches_filestorage_copy(tmp_path, hp_destination_dsn, hf_destination_dsn):
    from ZODB.FileStorage import FileStorage

    source = FileStorage(str(tmp_path / "src.fs"), blob_dir=str(tmp_path / "src-blobs"))
    db, oids = _build_source(source)
    fs_copy = FileStorage(str(tmp_path / "dst.fs"), blob_dir=str(tmp_path / "dst-blobs"))
    hp = JsonbStorage(hp_destination_dsn, history_preserving=True, blob_dir=str(tmp_path / "hp-blobs"))
    hf = JsonbStorage(hf_destination_dsn, blob_dir=str(tmp_path / "hf-blobs"))
    try:
        fs_copy.copyTransactionsFrom(source)
        for dest in (hp, hf):
            dest.cleanup()
            dest.copyTransactionsFrom(source)
        expected = _dump(fs_copy)
        assert _dump(source) == expected
        assert _dump(hp) == expected
        assert [txn.tid for txn in hp.iterator()] == [txn.tid for txn in fs_copy.iterator()]
        # Every object's current revision, in both modes, and the last transaction.
        for dest in (hp, hf):
            assert dest.lastTransaction() == fs_copy.lastTransaction()
            for oid in [z64, *oids.values()]:
                def current(storage):
                    try:
                        data, serial = storage.load(oid)
                    except POSKeyError:
                        return "POSKeyError"
                    return serial, _value(storage, oid, data, serial)
                assert current(dest) == current(fs_copy), (dest, oid)
        # undo log and history agree too
        def log(storage):
            return [(e["description"], e["user_name"], TimeStamp(e["id"] if len(e["id"]) == 8 else
                     __import__("base64").decodebytes(e["id"] + b"\n")).timeTime()) for e in storage.undoLog(0, 100)]
        assert log(hp) == log(fs_copy)
        for oid in [z64, *oids.values()]:
            assert [(h["tid"], h["description"]) for h in hp.history(oid, 100)] == [
                (h["tid"], h["description"]) for h in fs_copy.history(oid, 100)
            ]
        # No blob chunk that no revision refers to (blob2's creation was undone; HF keeps only
        # the current blobs).
        with hp._connect() as conn:
            assert conn.execute(
                "select count(*) from zodb_blob_chunk c where not exists"
                " (select 1 from zodb_object_history h where h.blob_id = c.blob_id)"
            ).fetchone()[0] == 0
        with hf._connect() as conn:
            assert conn.execute(
                "select count(*) from zodb_blob_chunk c where not exists"
                " (select 1 from zodb_object_state s where s.blob_id = c.blob_id)"
            ).fetchone()[0] == 0
        # And back: the history-preserving copy as a source gives FileStorage the same history.
        fs_again = FileStorage(str(tmp_path / "again.fs"), blob_dir=str(tmp_path / "again-blobs"))
        try:
            fs_again.copyTransactionsFrom(hp)
            assert _dump(fs_again) == expected
        finally:
            fs_again.close()
    finally:
        hf.close()
        hp.close()
        fs_copy.close()
        db.close()


@pytest.mark.parametrize("pack_after", ["t3", "undo t2", "t7 empty", "undo t8", "undo undo t2"])
def test_pack_of_a_copied_history_matches_filestorage(tmp_path, hp_destination_dsn, pack_after):
    """The same history (undone creations of a blob and a mapping, deleteObject, an undo of an
    undo), packed at the same time in FileStorage and in the history-preserving storage."""
    from ZODB.FileStorage import FileStorage
    from ZODB.serialize import referencesf

    source = FileStorage(str(tmp_path / "src.fs"), blob_dir=str(tmp_path / "src-blobs"))
    db, oids = _build_source(source)
    fs_copy = FileStorage(str(tmp_path / "dst.fs"), blob_dir=str(tmp_path / "dst-blobs"))
    hp = JsonbStorage(hp_destination_dsn, history_preserving=True, blob_dir=str(tmp_path / "hp-blobs"))
    try:
        fs_copy.copyTransactionsFrom(source)
        hp.cleanup()
        hp.copyTransactionsFrom(source)
        tids = [txn.tid for txn in fs_copy.iterator()]
        names = [txn.description for txn in fs_copy.iterator()]
        k = names.index(pack_after.encode())
        t = TimeStamp(tids[k]).timeTime()
        if k + 1 < len(tids):
            t = (t + TimeStamp(tids[k + 1]).timeTime()) / 2
        else:
            t += 0.001
        fs_copy.pack(t, referencesf)
        hp.pack(t, referencesf)
        with hp._connect() as conn:
            assert conn.execute(
                "select count(*) from zodb_blob_chunk c where not exists"
                " (select 1 from zodb_object_history h where h.blob_id = c.blob_id)"
            ).fetchone()[0] == 0

        def current(storage, oid):
            try:
                data, serial = storage.load(oid)
            except POSKeyError:
                return "POSKeyError"
            return serial, _value(storage, oid, data, serial)

        for oid in [z64, *oids.values()]:
            assert current(hp, oid) == current(fs_copy, oid), oid
            # After the pack time only: FileStorage's pack also keeps older revisions that a
            # later undo points back at, where this storage keeps the state in the undo's row.
            for tid in [tid for tid in tids if TimeStamp(tid).timeTime() > t]:
                def before(storage):
                    r = storage.loadBefore(oid, p64(u64(tid) + 1))
                    if r is None:
                        return None
                    return r[1], r[2], _value(storage, oid, r[0], r[1])
                assert _outcome(lambda: before(hp)) == _outcome(lambda: before(fs_copy)), (oid, tid)

        def log(storage):
            return [(e["description"], e["user_name"]) for e in storage.undoLog(0, 100)]

        assert log(hp) == log(fs_copy)
        # The undo log's entries still undo the same way (or fail the same way).
        for description, _user in log(fs_copy):
            outcomes = []
            for storage in (fs_copy, hp):
                try:
                    _undo(storage, description)
                except Exception as error:  # noqa: BLE001 - compared by type
                    outcomes.append(type(error).__name__)
                else:
                    outcomes.append("ok")
            assert outcomes[0] == outcomes[1], (description, outcomes)
        for oid in [z64, *oids.values()]:  # new tids now: the values only
            assert current(hp, oid)[-1] == current(fs_copy, oid)[-1], oid
    finally:
        hp.close()
        fs_copy.close()
        db.close()


def test_historical_connections_read_the_state_at_their_time(any_storage):
    """What a historical Connection reads, before and after other commits and its own reuse from
    the historical pool: FileStorage's state at that time in history-preserving mode; in
    history-free mode the same, or an error for an object changed since (never a newer state)."""
    storage, _dsn = any_storage
    hp = storage._hp
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()["doc"] = PersistentMapping(v=1)
            conn.root()["other"] = PersistentMapping(v=1)
        at = db.lastTransaction()
        tm = transaction.TransactionManager()
        for round_ in range(3):
            hist = db.open(tm, at=at)
            try:
                assert hist.root()["other"]["v"] == 1
                try:
                    value = hist.root()["doc"]["v"]
                except ReadConflictError:
                    assert not hp and round_ > 0
                else:
                    assert value == 1
                assert "new" not in hist.root()
            finally:
                tm.abort()
                hist.close()
            with db.transaction() as conn:
                conn.root()["doc"]["v"] = round_ + 2
                conn.root()["new"] = PersistentMapping()
    finally:
        db.close()


def test_many_historical_connections_do_not_each_keep_a_database_connection(any_storage):
    """ZODB keeps closed historical Connections in a pool per ``before`` value, for
    historical_timeout (300 s), reclaimed only when another Connection is opened. Each kept its
    instance's database connection: opening the database at many times (a history browser)
    holds as many PostgreSQL connections, up to max_connections."""
    storage, dsn = any_storage
    db = ZODB.DB(storage)
    try:
        with db.transaction() as conn:
            conn.root()["doc"] = PersistentMapping(v=0)
            conn.root()["counter"] = PersistentMapping(v=0)
        tids = []
        for i in range(12):
            with db.transaction() as conn:
                conn.root()["counter"]["v"] = i
            tids.append(db.lastTransaction())

        def backends():
            with psycopg.connect(dsn, autocommit=True) as conn:
                return conn.execute(
                    "select count(*) from pg_stat_activity where datname = current_database()"
                ).fetchone()[0]

        start = backends()
        tm = transaction.TransactionManager()
        for tid in tids:
            hist = db.open(tm, at=tid)
            assert hist.root()["doc"]["v"] == 0
            tm.abort()
            hist.close()
        assert backends() - start <= 3
    finally:
        db.close()
