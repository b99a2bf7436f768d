"""Concurrency between threads and processes: invalidations and the process cache, the shared
blob cache, history-preserving pack against undo and readers (found in a review, stop 20; each
test failed before its fix).

Each test forces one interleaving deterministically; "another process" is a second
JsonbStorage on the same database (its own process cache, listener and connections)."""

from __future__ import annotations

import os
import threading
import time

import pytest
from persistent.TimeStamp import TimeStamp
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import POSKeyError, UndoError
from ZODB.serialize import referencesf
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle, zodb_unpickle
from ZODB.utils import z64

from plone_connector.storage import JsonbStorage
from tests.storage.test_history import _commit


def _commit_blob(storage, oid, serial, value, path, content: bytes):
    with open(path, "wb") as f:
        f.write(content)
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.storeBlob(oid, serial, zodb_pickle(MinPO(value)), str(path), "", t)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


def _undo(storage, tid):
    t = TransactionMetaData()
    storage.tpc_begin(t)
    try:
        storage.undo(tid, t)
        storage.tpc_vote(t)
        return storage.tpc_finish(t)
    except BaseException:
        storage.tpc_abort(t)
        raise


def _reference_to(oid: bytes):
    """A value that zodb_pickle writes as a persistent reference to ``oid``."""
    ref = MinPO(None)
    ref._p_oid = oid
    return ref


def _pack_time_after(tid: bytes) -> float:
    """A pack time at or after ``tid`` (tids come from the database clock)."""
    return max(time.time(), TimeStamp(tid).timeTime()) + 0.01


@pytest.fixture
def hp_pair(hp_storage_dsn, tmp_path):
    """Two history-preserving storages ("processes") on one database, sharing a blob directory."""
    blob_dir = str(tmp_path / "blobs")
    first = JsonbStorage(hp_storage_dsn, history_preserving=True, blob_dir=blob_dir)
    first.cleanup()
    second = JsonbStorage(hp_storage_dsn, history_preserving=True, blob_dir=blob_dir)
    yield first, second
    second.close()
    first.close()


def test_hp_pack_of_an_undone_creation_leaves_other_processes_stale(hp_pair):
    """History-preserving: undoing an object's creation writes a deletion revision, which is
    how polls (of zodb_object_history) learn that the object went away; it moves no gc_tid.
    A pack by time past the undo removes that deletion revision together with the older ones
    (pack.py: "An object deleted ... before the pack time and not revived: gone"), and still
    moves no gc_tid. A process whose cache and Connections last polled before the undo (an idle
    process, or a Connection idle in the pool) then polls past the pack: nothing reports the
    object, its poll returns no invalidation for it, the process cache moves its horizon over
    the stale entry, and loads keep returning the deleted object's state instead of
    POSKeyError (a write to it conflicts at every retry, as the cache keeps serving it)."""
    a, b = hp_pair
    _commit(a, [(z64, z64, 0)])  # a root, so that gc has something to keep
    x = a.new_oid()
    created = _commit(a, [(x, z64, 1)])

    # Process B: a Connection's instance reads x (the process cache now holds it).
    reader = b.new_instance()
    try:
        reader.poll_invalidations()
        assert reader.load(x)[1] == created
        reader.afterCompletion()

        # Process A: undo x's creation, then pack to now.
        undone = _undo(a, created)
        a.pack(_pack_time_after(undone), referencesf)

        # Process B: the next transaction's poll.
        reader.sync()
        invalidated = reader.poll_invalidations()
        assert invalidated is None or x in invalidated, (
            "the deletion of x (its creation undone) was never reported to a process that polled"
            " before the undo: the pack removed the deletion revision and moved no gc_tid"
        )
        with pytest.raises(POSKeyError):
            reader.load(x)  # the process cache must not serve the deleted object
    finally:
        reader.release()


def test_undo_racing_an_hp_pack_commits_a_revision_whose_blob_the_pack_deleted(hp_pair, tmp_path):
    """undo() reads the revision it restores (and its blob_id) on the store connection before the
    vote, outside the commit lock; the check that the undone transaction is not packed is made
    there too. A pack by time that runs between undo() and the vote (it holds the commit lock
    only for itself) removes that older revision and, no other revision referring to its blob,
    its blob chunks. The vote then re-checks nothing: the undo commits a current revision whose
    blob_id points at deleted chunks, and the object's blob is lost (loadBlob: "No blob
    chunks"). Expected: the vote refuses the undo (UndoError), or the blob survives."""
    a, b = hp_pair
    x = a.new_oid()
    _commit(a, [(z64, z64, _reference_to(x))])  # the root refers to x: pack's gc keeps it
    first = _commit_blob(a, x, z64, 1, tmp_path / "one", b"one")
    second = _commit_blob(a, x, first, 2, tmp_path / "two", b"two")

    t = TransactionMetaData()
    a.tpc_begin(t)
    try:
        a.undo(second, t)  # restores `first`'s state and blob
        # Another process packs meanwhile, to a time after `second` (the undone transaction).
        b.pack(_pack_time_after(second), referencesf)
        a.tpc_vote(t)
        undo_tid = a.tpc_finish(t)
    except UndoError:
        a.tpc_abort(t)
        return  # refused because the pack took what it needed: correct
    except BaseException:
        a.tpc_abort(t)
        raise

    assert a.load(x)[1] == undo_tid
    try:
        path = a.loadBlob(x, undo_tid)
    except POSKeyError as error:
        pytest.fail(f"the undo committed a current revision whose blob the pack deleted: {error}")
    with open(path, "rb") as blob_file:
        assert blob_file.read() == b"one"


def test_hp_pack_removes_a_blob_folder_while_another_process_downloads_into_it(hp_pair, tmp_path, monkeypatch):
    """The blob cache directory is shared by processes. A history-preserving pack removes the
    files of the blob revisions it packed away and then the object's whole folder when no
    ``.blob`` file is left in it (storage.py, pack). A download of the object's *current*
    revision by another process writes a ``.partial`` file in that folder and renames it when
    complete; the pack does not count it and removes it with the folder, so the download fails
    with FileNotFoundError (a non-transient error in Connection.setstate, which loads every
    Blob's file)."""
    a, b = hp_pair
    x = a.new_oid()
    first = _commit_blob(a, x, z64, 1, tmp_path / "one", b"one")
    second = _commit_blob(a, x, first, 2, tmp_path / "two", b"two")
    # The current revision is not in the cache (evicted by the size limit, or never downloaded
    # here); the packed-away one still is.
    os.remove(a.fshelper.getBlobFilename(x, second))
    assert os.path.exists(a.fshelper.getBlobFilename(x, first))

    downloaded = threading.Event()
    resume = threading.Event()
    real_chmod = os.chmod
    reader_thread: list[threading.Thread] = []

    def chmod(path, mode, *args, **kwargs):
        # Pause the reader's download after its chunks were written, before the rename.
        if reader_thread and threading.current_thread() is reader_thread[0] and str(path).endswith(".partial"):
            downloaded.set()
            resume.wait(10)
        return real_chmod(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "chmod", chmod)
    outcome: dict = {}
    reader = b.new_instance()

    def read():
        try:
            reader.poll_invalidations()
            outcome["path"] = reader.loadBlob(x, second)
        except BaseException as error:  # noqa: BLE001 - reported below
            outcome["error"] = error

    thread = threading.Thread(target=read)
    reader_thread.append(thread)
    thread.start()
    try:
        assert downloaded.wait(10), "the reader never reached its download"
        a.pack(_pack_time_after(second), referencesf)  # packs `first` away
    finally:
        resume.set()
        thread.join(10)
        reader.release()
    assert "error" not in outcome, f"loading the current blob revision failed: {outcome.get('error')!r}"
    with open(outcome["path"], "rb") as blob_file:
        assert blob_file.read() == b"two"


def test_a_load_after_the_snapshot_was_lost_does_not_silently_read_a_newer_one(storage, storage_dsn):
    """A load whose connection broke mid-transaction raises the transient DisconnectedError and
    drops the snapshot (``_drop_load_conn``). Nothing marks the transaction as broken: the next
    load in the same transaction (code that caught the error, e.g. Plone's portlet and viewlet
    renderers, which log and go on) starts a newer snapshot through ``_ensure_snapshot``, with
    no poll and no invalidations, and reads it next to objects read in the old one (read skew:
    here x from before another process's commit of x and y, y from after it). The store side
    refuses to go on after such a loss ("it must be aborted"); the load side should too, or
    keep answering from the lost snapshot's point in time."""
    import psycopg

    from plone_connector.storage.storage import DisconnectedError

    x, y = storage.new_oid(), storage.new_oid()
    t0 = _commit(storage, [(x, z64, 0), (y, z64, 0)])
    other = JsonbStorage(storage_dsn)  # another process
    reader = storage.new_instance()
    try:
        reader.poll_invalidations()
        assert zodb_unpickle(reader.load(x)[0]).value == 0  # the transaction reads x ...
        _commit(other, [(x, t0, 1), (y, t0, 1)])  # ... another process changes x and y together
        with psycopg.connect(storage_dsn, autocommit=True) as admin:
            admin.execute("select pg_terminate_backend(%s)", (reader._load_conn.info.backend_pid,))
        with pytest.raises(DisconnectedError):
            reader.load(y)
        # The same transaction goes on (no sync, no poll): y must not come from after x's snapshot.
        try:
            data, serial = reader.load(y)
        except DisconnectedError:
            return  # refusing until the transaction ends is correct
        assert serial == t0, (
            "after the snapshot was lost, the same transaction read y from a newer snapshot"
            f" (value {zodb_unpickle(data).value}) beside x from the old one: read skew"
        )
    finally:
        reader.release()
        other.close()


def test_a_blob_download_survives_its_folder_being_removed_meanwhile(storage, tmp_path, monkeypatch):
    """Another process's deletion or pack removes an object's folder in the shared blob cache
    (shutil.rmtree) while this one downloads a revision its snapshot still reads into it: the
    download starts again instead of failing with FileNotFoundError."""
    import shutil

    x = storage.new_oid()
    serial = _commit_blob(storage, x, z64, 1, tmp_path / "one", b"one")
    os.remove(storage.fshelper.getBlobFilename(x, serial))  # not cached here
    real_chmod = os.chmod
    removed = []

    def chmod(path, mode, *args, **kwargs):
        if str(path).endswith(".partial") and not removed:
            removed.append(path)
            shutil.rmtree(os.path.dirname(path))  # what the other process's cleanup does
        return real_chmod(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "chmod", chmod)
    reader = storage.new_instance()
    try:
        reader.poll_invalidations()
        with open(reader.loadBlob(x, serial), "rb") as blob_file:
            assert blob_file.read() == b"one"
    finally:
        reader.release()
    assert removed, "the download never reached the point the test removes its folder at"


def test_commit_subscribers_hear_none_after_the_listener_reconnected(storage, storage_dsn):
    """Commits while the listener was disconnected went unheard: its subscribers are told."""
    import psycopg

    listener = storage._shared.listener
    deadline = time.monotonic() + 10
    while listener.trusted_epoch() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    epoch = listener.trusted_epoch()
    assert epoch is not None
    heard: list = []
    resynced = threading.Event()
    storage.on_commit(lambda tid: (heard.append(tid), tid is None and resynced.set()))
    with psycopg.connect(storage_dsn, autocommit=True) as admin:
        (killed,) = admin.execute(
            "select count(pg_terminate_backend(pid)) from pg_stat_activity"
            " where query = 'listen zodb_commit' and pid <> pg_backend_pid()"
        ).fetchone()
    assert killed >= 1
    assert resynced.wait(15), f"no resync signal after the listener reconnected (heard {heard})"
    assert listener.trusted_epoch() is not None and listener.trusted_epoch() > epoch


def test_two_processes_recreating_an_undone_object_at_once_give_one_conflict(hp_pair):
    """History-preserving: after its creation was undone, an object has no current row, so two
    transactions writing it again (from the deletion revision they both saw) lock nothing at
    vote; both pass the conflict check before either commits, and the second's upsert
    overwrote the first's object. A check under the commit lock refuses the second."""
    import psycopg
    from ZODB.POSException import ConflictError

    a, b = hp_pair
    _commit(a, [(z64, z64, 0)])
    x = a.new_oid()
    created = _commit(a, [(x, z64, 1)])
    deleted = _undo(a, created)
    b.poll_invalidations()

    t1, t2 = TransactionMetaData(), TransactionMetaData()
    a.tpc_begin(t1)
    a.store(x, deleted, zodb_pickle(MinPO(2)), "", t1)
    b.tpc_begin(t2)
    b.store(x, deleted, zodb_pickle(MinPO(3)), "", t2)
    a.tpc_vote(t1)  # holds the commit lock until it finishes
    outcome: list = []

    def vote():
        try:
            b.tpc_vote(t2)
            outcome.append("voted")
            b.tpc_finish(t2)
        except ConflictError as error:
            outcome.append(error)
            b.tpc_abort(t2)
        except BaseException as error:  # noqa: BLE001 - reported below
            outcome.append(error)
            b.tpc_abort(t2)

    thread = threading.Thread(target=vote)
    thread.start()
    with psycopg.connect(a._shared.dsn, autocommit=True) as admin:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the second vote waits for the commit lock
            (waiting,) = admin.execute(
                "select count(*) from pg_stat_activity where wait_event_type = 'Lock'"
            ).fetchone()
            if waiting:
                break
            time.sleep(0.02)
        assert waiting, "the second vote never waited for the commit lock"
    committed = a.tpc_finish(t1)
    thread.join(30)
    assert isinstance(outcome[0], ConflictError), outcome
    reader = a.new_instance()
    try:
        reader.poll_invalidations()
        data, serial = reader.load(x)
        assert serial == committed
        assert zodb_unpickle(data).value == 2
    finally:
        reader.release()


def test_last_transaction_after_a_failed_poll_is_the_snapshot_reads_will_see(storage, storage_dsn, monkeypatch):
    """A poll that fails answers "invalidate everything" and leaves no snapshot; the next read
    starts one, possibly after commits of other processes. lastTransaction() (by which the
    catalog connector versions a transaction's entries) must not name an older point than what
    that transaction reads, or its entries lose against older ones."""
    from plone_connector.storage.storage import DisconnectedError

    x = storage.new_oid()
    _commit(storage, [(x, z64, 0)])
    other = JsonbStorage(storage_dsn)
    reader = storage.new_instance()
    try:
        reader.poll_invalidations()
        before = reader.lastTransaction()
        real = reader._new_snapshot

        def unreachable(since):
            raise DisconnectedError("the database is out of reach")

        reader.afterCompletion()  # the transaction ends; the next one's poll fails
        monkeypatch.setattr(reader, "_new_snapshot", unreachable)
        assert reader.poll_invalidations() is None  # invalidate everything
        monkeypatch.setattr(reader, "_new_snapshot", real)
        newer = _commit(other, [(x, _serial_of(other, x), 1)])
        last = reader.lastTransaction()
        assert last >= newer > before
        assert reader.load(x)[1] == newer
    finally:
        reader.release()
        other.close()


def _serial_of(storage, oid):
    instance = storage.new_instance()
    try:
        instance.poll_invalidations()
        return instance.load(oid)[1]
    finally:
        instance.release()
