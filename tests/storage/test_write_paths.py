"""The two ways a history-free transaction's rows reach zodb_object_state.

Changed objects stream into the temporary table through a COPY that stays open while the
transaction stores (the server parses rows while the client pickles the next ones) and are moved
from there under the commit lock. New objects cannot conflict with anything, so they wait in memory
and are copied once, at vote, with the transaction's tid (store.py, DIRECT_MAX_BYTES). These
tests pin what the paths must share: what is committed, conflicts, aborts, statements between
stores, and the fallback to the temporary table.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time

import psycopg
import pytest
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import ConflictError, ReadConflictError, StorageTransactionError
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle, zodb_unpickle
from ZODB.utils import p64, z64

from plone_connector.storage import JsonbStorage
from plone_connector.storage import sql as sql_module
from plone_connector.storage import storage as storage_module
from plone_connector.storage import store as store_module
from plone_connector.storage.listener import CHANNEL


def _store_all(storage, t, items):
    for oid, serial, value in items:
        storage.store(oid, serial, zodb_pickle(MinPO(value)), "", t)


def _commit(storage, items):
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, items)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


def _rows(dsn):
    """zoid: (tid, MinPO's value) of every row, read with SQL."""
    with psycopg.connect(dsn) as conn:
        return {
            zoid: (tid, value)
            for zoid, tid, value in conn.execute(
                "select zoid, tid, (state #> '{@record,state,value}')::int from zodb_object_state"
            )
        }


def test_new_and_changed_objects_in_one_transaction_commit_alike(storage, storage_dsn):
    old = [storage.new_oid() for _ in range(3)]
    first = _commit(storage, [(oid, z64, 1) for oid in old])
    new = [storage.new_oid() for _ in range(4)]
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, [(oid, first, 2) for oid in old] + [(oid, z64, 3) for oid in new])
    # Changes wait for the temporary table, creations for the vote.
    assert sorted(storage._pending) == sorted(int.from_bytes(oid, "big") for oid in old)
    assert sorted(storage._direct) == sorted(int.from_bytes(oid, "big") for oid in new)
    storage.tpc_vote(t)
    second = storage.tpc_finish(t)
    rows = _rows(storage_dsn)
    for oids, value in ((old, 2), (new, 3)):
        for oid in oids:
            tid, stored = rows[int.from_bytes(oid, "big")]
            assert (p64(tid), stored) == (second, value)
    other = JsonbStorage(storage_dsn)
    try:
        for oids, value in ((old, 2), (new, 3)):
            for oid in oids:
                data, serial = other.load(oid)
                assert (zodb_unpickle(data).value, serial) == (value, second)
    finally:
        other.close()


def test_a_transaction_that_only_creates_leaves_the_temporary_table_alone(storage):
    oids = [storage.new_oid() for _ in range(600)]  # more than a batch of the temporary table
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, [(oid, z64, 1) for oid in oids])
    storage.tpc_vote(t)
    conn = storage._store_conn
    assert conn.execute("select count(*) from zodb_temp_store").fetchone()[0] == 0
    assert conn.execute("select count(*) from zodb_object_state").fetchone()[0] == 600
    storage.tpc_finish(t)


def test_creations_beyond_the_memory_limit_take_the_temporary_table(storage, storage_dsn, monkeypatch):
    monkeypatch.setattr(store_module, "DIRECT_MAX_BYTES", 200)
    oids = [storage.new_oid() for _ in range(20)]
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, [(oid, z64, n) for n, oid in enumerate(oids)])
    direct, pending = len(storage._direct), len(storage._pending)
    assert direct and pending and direct + pending == 20
    assert storage._direct_bytes >= 200
    storage.tpc_vote(t)
    tid = storage.tpc_finish(t)
    rows = _rows(storage_dsn)
    assert [rows[int.from_bytes(oid, "big")] for oid in oids] == [
        (int.from_bytes(tid, "big"), n) for n in range(20)
    ]


def test_a_new_object_whose_oid_exists_is_a_conflict_not_an_overwrite(storage, storage_dsn):
    oid = storage.new_oid()
    tid = _commit(storage, [(oid, z64, 1)])
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, [(oid, z64, 2)])  # "new" (serial zero), but it exists
    assert int.from_bytes(oid, "big") in storage._direct
    with pytest.raises(ConflictError):
        storage.tpc_vote(t)
    storage.tpc_abort(t)
    assert _rows(storage_dsn)[int.from_bytes(oid, "big")] == (int.from_bytes(tid, "big"), 1)


def _round_trips_under_the_commit_lock(storage, items):
    """Round trips of the store connection from the commit lock's statement to COMMIT, both
    included, counted in libpq's protocol trace (a ReadyForQuery ends each)."""
    trace = storage._store().pgconn
    with tempfile.TemporaryFile("w+") as log:
        trace.trace(log.fileno())
        try:
            _commit(storage, items)
        finally:
            trace.untrace()
        log.seek(0)
        # timestamp, direction (F: to the server, B: from it), length, message type, contents
        messages = [line.split("\t", 4) + [""] for line in log.read().splitlines()]
    locked = next(i for i, m in enumerate(messages) if m[1] == "F" and "update zodb_commit" in m[4])
    return sum(1 for m in messages[locked:] if m[1] == "B" and m[3] == "ReadyForQuery")


def test_the_commit_lock_is_held_for_few_round_trips(storage):
    old = [storage.new_oid() for _ in range(3)]
    tid = _commit(storage, [(oid, z64, 1) for oid in old])
    # The lock (with the tid, the transaction id and the notification), then the new objects'
    # COPY and one pipeline with the moves from the temporary table, then COMMIT.
    assert _round_trips_under_the_commit_lock(storage, [(storage.new_oid(), z64, 1)]) == 3
    changed = _round_trips_under_the_commit_lock(storage, [(oid, tid, 2) for oid in old])
    assert changed == 3
    tid = storage.lastTransaction()
    both = [(oid, tid, 3) for oid in old] + [(storage.new_oid(), z64, 1)]
    assert _round_trips_under_the_commit_lock(storage, both) == 4


def _changes(storage, count):
    """``count`` committed objects, then a transaction storing a change of each (not voted)."""
    oids = [storage.new_oid() for _ in range(count)]
    tid = _commit(storage, [(oid, z64, 1) for oid in oids])
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, [(oid, tid, 2) for oid in oids])
    return t, oids, tid


def test_changes_stream_through_an_open_copy_and_an_abort_discards_them(storage, storage_dsn):
    t, oids, tid = _changes(storage, 3 * storage_module.STORE_BATCH_ROWS)
    assert storage._copy is not None  # still open between stores
    storage.tpc_abort(t)
    assert storage._copy is None
    assert set(_rows(storage_dsn).values()) == {(int.from_bytes(tid, "big"), 1)}
    # The connection is usable again: the next transaction commits its changes.
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, [(oid, tid, 3) for oid in oids])
    storage.tpc_vote(t)
    second = storage.tpc_finish(t)
    assert set(_rows(storage_dsn).values()) == {(int.from_bytes(second, "big"), 3)}


def test_statements_between_stores_end_the_copy_and_the_stream_goes_on(storage, storage_dsn, tmp_path):
    """New oids, a blob upload and a second store of a streamed object each need the
    connection while the COPY is open."""
    t, oids, tid = _changes(storage, 2 * storage_module.STORE_BATCH_ROWS)
    assert storage._copy is not None
    storage._oid_pool.clear()  # the next new_oid asks the database
    fresh = storage.new_oid()
    assert storage._copy is None
    _store_all(storage, t, [(oid, tid, 4) for oid in oids])  # each stored again
    assert storage._copy is not None
    blob = tmp_path / "blob"
    blob.write_bytes(b"blob data")
    storage.storeBlob(fresh, z64, zodb_pickle(MinPO(6)), str(blob), "", t)
    assert storage._copy is None
    _store_all(storage, t, [(oid, tid, 5) for oid in oids[1:]])  # and again
    assert storage._copy is not None
    storage.tpc_vote(t)
    second = storage.tpc_finish(t)
    rows = _rows(storage_dsn)
    assert [rows[int.from_bytes(oid, "big")] for oid in oids] == [(int.from_bytes(second, "big"), 4)] + [
        (int.from_bytes(second, "big"), 5)
    ] * (len(oids) - 1)
    assert rows[int.from_bytes(fresh, "big")] == (int.from_bytes(second, "big"), 6)
    with open(storage.loadBlob(fresh, second), "rb") as stored:
        assert stored.read() == b"blob data"


def test_the_vote_locks_every_row_it_writes_and_returns_only_conflicts(storage, storage_dsn):
    """The vote's lock query returns nothing for a commit without conflicts or blobs, yet every
    row the transaction writes or deletes stays locked until it ends."""
    oids = [storage.new_oid() for _ in range(4)]
    tid = _commit(storage, [(oid, z64, 1) for oid in oids])
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, [(oid, tid, 2) for oid in oids[:3]])
    storage.deleteObject(oids[3], tid, t)
    returned, locked = [], []
    conn = storage._store()
    real_execute = conn.execute

    def execute(query, params=None, **kwargs):
        cursor = real_execute(query, params, **kwargs)
        if query is sql_module.LOCK_AND_COMPARE:
            # Before the vote writes anything: the lock query's own locks.
            returned.append(cursor.rowcount)
            with psycopg.connect(storage_dsn, autocommit=True) as other:
                for oid in oids:
                    try:
                        other.execute(
                            "select 1 from zodb_object_state where zoid = %s for update nowait",
                            (int.from_bytes(oid, "big"),),
                        )
                    except psycopg.errors.LockNotAvailable:
                        locked.append(oid)
        return cursor

    conn.execute = execute
    try:
        storage.tpc_vote(t)
    finally:
        del conn.execute
    assert returned == [0]
    assert locked == oids
    storage.tpc_finish(t)
    assert sorted(_rows(storage_dsn).values()) == [(int.from_bytes(storage.lastTransaction(), "big"), 2)] * 3


def test_a_changed_object_whose_row_moved_on_conflicts(storage, storage_dsn):
    """The row is newer than the revision the transaction changed: ConflictError (MinPO cannot
    resolve), nothing written; deleting with an old serial conflicts too."""
    oids = [storage.new_oid() for _ in range(2)]
    first = _commit(storage, [(oid, z64, 1) for oid in oids])
    second = _commit(storage, [(oid, first, 2) for oid in oids])
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, [(oids[0], first, 3)])
    with pytest.raises(ConflictError) as raised:
        storage.tpc_vote(t)
    assert raised.value.oid == oids[0]
    storage.tpc_abort(t)
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.deleteObject(oids[1], first, t)
    with pytest.raises(ConflictError) as raised:
        storage.tpc_vote(t)
    assert raised.value.oid == oids[1]
    storage.tpc_abort(t)
    assert sorted(_rows(storage_dsn).values()) == [(int.from_bytes(second, "big"), 2)] * 2


def _temp_rows_and_pages(storage):
    conn = storage._store_conn
    live = conn.execute("select count(*) from zodb_temp_store").fetchone()[0]
    pages = conn.execute("select pg_relation_size('zodb_temp_store') / current_setting('block_size')::int").fetchone()[0]
    return live, pages


def test_the_temporary_table_is_emptied_by_each_vote_and_truncated_now_and_then(storage, storage_dsn, monkeypatch):
    """It keeps rows across commits (no ON COMMIT DELETE ROWS, whose truncation cost every
    commit a millisecond): each vote deletes what it moved, an abort leaves nothing visible, and
    the dead rows are truncated away once TEMP_TRUNCATE_ROWS went in."""
    monkeypatch.setattr(store_module, "TEMP_TRUNCATE_ROWS", 250)
    oids = [storage.new_oid() for _ in range(100)]
    tid = _commit(storage, [(oid, z64, 0) for oid in oids])
    pages = []
    for value in range(1, 5):  # 100 rows each: the fourth transaction finds 300 and truncates first
        tid = _commit(storage, [(oid, tid, value) for oid in oids])
        live, used = _temp_rows_and_pages(storage)
        assert live == 0
        pages.append(used)
    assert pages[0] < pages[1] < pages[2] and pages[3] < pages[2]  # dead rows, then truncated
    assert storage._temp_rows == 100
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, [(oid, tid, 9) for oid in oids])
    storage.tpc_vote(t)
    storage.tpc_abort(t)
    assert _temp_rows_and_pages(storage)[0] == 0
    assert set(_rows(storage_dsn).values()) == {(int.from_bytes(tid, "big"), 4)}


# -- found in review (stop 19): each of these failed before its fix ------------------------


def _values(dsn):
    return {zoid: value for zoid, (_tid, value) in _rows(dsn).items()}


@pytest.mark.parametrize("reopen", ["new oid block", "second store of a sent object"])
def test_a_copy_reopened_mid_transaction_never_truncates_the_rows_sent_before(
    storage, storage_dsn, monkeypatch, reopen
):
    """The temporary table is truncated when a COPY opens after TEMP_TRUNCATE_ROWS went in, but
    only while this transaction has no rows in it: reopened later (after a new oid block, a
    blob upload, a second store of an object already sent) it must keep them."""
    monkeypatch.setattr(store_module, "TEMP_TRUNCATE_ROWS", 100)
    oids = [storage.new_oid() for _ in range(101)]
    tid = _commit(storage, [(oid, z64, 0) for oid in oids])
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, [(oid, tid, 1) for oid in oids[:100]])  # a batch: 100 went in
    if reopen == "new oid block":
        storage._oid_pool.clear()
        storage.new_oid()  # ends the COPY
        _store_all(storage, t, [(oids[100], tid, 1)])
    else:
        _store_all(storage, t, [(oids[0], tid, 1)] + [(oid, tid, 1) for oid in oids[100:]])
        storage._flush()  # the object sent again: its row is deleted, the COPY reopened
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    assert set(_values(storage_dsn).values()) == {1}


def test_undo_of_more_objects_than_a_batch(hp_storage):
    """undo() writes rows through the streaming COPY: every query it makes after a batch went
    out must end the COPY first (psycopg holds the connection's lock while one is open, so a
    query that does not would wait forever)."""
    storage = hp_storage
    count = storage_module.STORE_BATCH_ROWS + 5
    oids = [storage.new_oid() for _ in range(count)]
    first = _commit(storage, [(oid, z64, 0) for oid in oids])
    second = _commit(storage, [(oid, first, 1) for oid in oids])
    storage._store().lock = _TimedLock()  # a wait of more than 5 s fails the test
    t = TransactionMetaData()
    storage.tpc_begin(t)
    try:
        storage.undo(second, t)
        storage.tpc_vote(t)
        undone = storage.tpc_finish(t)
    except BaseException:
        storage.tpc_abort(t)
        raise
    assert {zodb_unpickle(storage.load(oid)[0]).value for oid in oids} == {0}
    assert {storage.load(oid)[1] for oid in oids} == {undone}


class _TimedLock:
    """psycopg's connection lock, but a wait of more than a few seconds is a deadlock."""

    def __init__(self):
        self._lock = threading.Lock()

    def __enter__(self):
        if not self._lock.acquire(timeout=5):
            raise TimeoutError("the connection's lock was never granted: a COPY holds it")

    def __exit__(self, *exc_info):
        self._lock.release()

    def acquire(self, *args, **kwargs):
        return self._lock.acquire(*args, **kwargs)

    def release(self):
        self._lock.release()

    def locked(self):
        return self._lock.locked()


@pytest.mark.parametrize("path", ["direct", "temporary table", "history-preserving"])
def test_two_processes_creating_one_oid_at_once_give_one_conflict(
    storage_dsn, hp_storage_dsn, monkeypatch, path
):
    """The second of two transactions creating one oid at once (an oid made up by both, as an
    import with fixed oids might) gets a ConflictError, whichever way its rows take: the direct
    COPY has the table's unique key; through the temporary table (beyond DIRECT_MAX_BYTES, or
    history-preserving) the vote finds no row to lock, and a check under the commit lock keeps
    the upsert from overwriting the first transaction's object."""
    hp = path == "history-preserving"
    dsn = hp_storage_dsn if hp else storage_dsn
    if path != "direct":
        monkeypatch.setattr(store_module, "DIRECT_MAX_BYTES", 0)
    first = JsonbStorage(dsn, history_preserving=hp)
    first.cleanup()
    second = JsonbStorage(dsn, history_preserving=hp)
    oid = p64(10**12)
    listening = psycopg.connect(dsn, autocommit=True)
    listening.execute(f"listen {CHANNEL}")
    try:
        t1, t2 = TransactionMetaData(), TransactionMetaData()
        first.tpc_begin(t1)
        _store_all(first, t1, [(oid, z64, 1)])
        second.tpc_begin(t2)
        _store_all(second, t2, [(oid, z64, 2)])
        first.tpc_vote(t1)  # holds the commit lock until it finishes
        outcome = []

        def vote():
            try:
                second.tpc_vote(t2)
                outcome.append("voted")
            except ConflictError as error:
                outcome.append(error)
            finally:
                second.tpc_abort(t2)

        thread = threading.Thread(target=vote)
        thread.start()
        time.sleep(0.3)  # the second vote is waiting for the commit lock
        assert not outcome
        committed = first.tpc_finish(t1)
        thread.join(30)
        assert isinstance(outcome[0], ConflictError) and "created twice" in str(outcome[0])
        assert _rows(dsn)[10**12] == (int.from_bytes(committed, "big"), 1)
        # The refused vote had taken the commit lock, whose statement queues the notification:
        # its rollback took the notification along, and only the commit was announced.
        payloads = [n.payload for n in listening.notifies(timeout=1.0)]
        assert payloads == [str(int.from_bytes(committed, "big"))]
    finally:
        listening.close()
        first.close()
        second.close()


def _blob_rows(dsn):
    """(blob ids the objects refer to, blob ids that have chunks)"""
    with psycopg.connect(dsn) as conn:
        referred = {b for (b,) in conn.execute("select blob_id from zodb_object_state where blob_id is not null")}
        chunked = {b for (b,) in conn.execute("select distinct blob_id from zodb_blob_chunk")}
    return referred, chunked


def test_a_blob_stored_twice_in_one_transaction_leaves_one_upload(storage, storage_dsn, tmp_path):
    """A blob changed, a savepoint, changed again: ZODB's Connection calls storeBlob twice for
    the oid in one transaction. The first upload is referenced by nothing afterwards, and no
    pack would find its chunks (pack removes the chunks of the rows it removes)."""
    oid = storage.new_oid()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    for n in range(2):
        blob = tmp_path / f"blob{n}"
        blob.write_bytes(b"version %d" % n)
        storage.storeBlob(oid, z64, zodb_pickle(MinPO(n)), str(blob), "", t)
        if n == 0:
            storage._flush()  # the first row already in the temporary table
    storage.tpc_vote(t)
    tid = storage.tpc_finish(t)
    referred, chunked = _blob_rows(storage_dsn)
    assert len(referred) == 1 and referred == chunked
    with open(storage.loadBlob(oid, tid), "rb") as blob_file:
        assert blob_file.read() == b"version 1"


def test_a_store_after_store_blob_in_one_transaction_keeps_the_blob(storage, storage_dsn, tmp_path):
    """FileStorage keeps the blob stored for (oid, tid) when the object's state is stored again
    in the same transaction without one; so does this storage, and the blob the object had
    before goes as with any new blob."""
    oid = storage.new_oid()
    old = tmp_path / "old"
    old.write_bytes(b"old")
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.storeBlob(oid, z64, zodb_pickle(MinPO(0)), str(old), "", t)
    storage.tpc_vote(t)
    first = storage.tpc_finish(t)
    new = tmp_path / "new"
    new.write_bytes(b"new")
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.storeBlob(oid, first, zodb_pickle(MinPO(1)), str(new), "", t)
    storage.store(oid, first, zodb_pickle(MinPO(2)), "", t)
    storage.tpc_vote(t)
    second = storage.tpc_finish(t)
    assert zodb_unpickle(storage.load(oid)[0]).value == 2
    referred, chunked = _blob_rows(storage_dsn)
    assert len(referred) == 1 and referred == chunked
    storage._shared.cache.drop([int.from_bytes(oid, "big")])
    blob_file = storage.loadBlob(oid, second)
    os.remove(blob_file)  # not from the blob cache: from the database's chunks
    with open(storage.loadBlob(oid, second), "rb") as blob_file:
        assert blob_file.read() == b"new"


def test_an_object_created_and_deleted_in_one_transaction_commits(storage, storage_dsn):
    """deleteObject with serial zero (the object was created in this transaction, or never
    committed): there is no row to expect, so no conflict."""
    kept, gone = storage.new_oid(), storage.new_oid()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    _store_all(storage, t, [(kept, z64, 1), (gone, z64, 2)])
    storage.deleteObject(gone, z64, t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    assert set(_rows(storage_dsn)) == {int.from_bytes(kept, "big")}


class _Reference:
    """Pickled by zodb_pickle as a persistent reference to ``oid``."""

    def __init__(self, oid):
        self._p_oid = oid


def test_after_a_deletion_new_objects_still_skip_the_temporary_table(storage, storage_dsn):
    """A deletion (or a pack) moves gc_tid past this instance's start, so every later vote
    checks the references it adds against removed objects; the new objects' references go
    along with that check, and their rows still take the direct COPY."""
    gone, keeper = storage.new_oid(), storage.new_oid()
    tid = _commit(storage, [(gone, z64, 0), (keeper, z64, 0)])
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.deleteObject(gone, tid, t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    fresh = storage.new_oid()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(fresh, z64, zodb_pickle(MinPO(1)), "", t)
    storage.tpc_vote(t)
    assert not storage._flushed and list(storage._direct) == [int.from_bytes(fresh, "big")]
    storage.tpc_finish(t)
    # A new object referring to the deleted one is refused, one referring to a live one is not.
    for target, refused in ((gone, True), (keeper, False)):
        holder = storage.new_oid()
        t = TransactionMetaData()
        storage.tpc_begin(t)
        storage.store(holder, z64, zodb_pickle(MinPO(_Reference(target))), "", t)
        if refused:
            with pytest.raises(ReadConflictError, match="removed by pack"):
                storage.tpc_vote(t)
            storage.tpc_abort(t)
        else:
            storage.tpc_vote(t)
            storage.tpc_finish(t)
    with psycopg.connect(storage_dsn) as conn:
        zoids = {zoid for (zoid,) in conn.execute("select zoid from zodb_object_state")}
    assert int.from_bytes(fresh, "big") in zoids and int.from_bytes(gone, "big") not in zoids
    assert len(zoids) == 3  # keeper, fresh and the holder of keeper


def test_finish_after_a_failed_vote_commits_nothing(storage, storage_dsn):
    """ZODB never calls tpc_finish after a vote raised; a caller that does must get an error,
    not a commit of what the failed vote left. Here the vote fails after taking the commit lock
    and its tid (a new reference to an object deleted since the instance started)."""
    gone = storage.new_oid()
    tid = _commit(storage, [(gone, z64, 0)])
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.deleteObject(gone, tid, t)
    storage.tpc_vote(t)
    storage.tpc_finish(t)
    holder = storage.new_oid()
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(holder, z64, zodb_pickle(MinPO(_Reference(gone))), "", t)
    with pytest.raises(ReadConflictError):
        storage.tpc_vote(t)
    assert storage._tid is not None  # the failed vote had its tid
    with pytest.raises(StorageTransactionError):
        storage.tpc_finish(t)
    storage.tpc_abort(t)
    assert _rows(storage_dsn) == {}


def _commit_values(storage, values, serials=None):
    t = TransactionMetaData()
    storage.tpc_begin(t)
    for oid, value in values.items():
        serial = (serials or {}).get(oid, z64)
        storage.store(oid, serial, zodb_pickle(MinPO(value)), "", t)
    storage.tpc_vote(t)
    return storage.tpc_finish(t)


def test_a_refused_finish_leaves_nothing_to_the_next_transaction(storage):
    """tpc_finish refuses a transaction whose vote failed; its database transaction (rows in
    zodb_temp_store) must end with it, not be taken over by the next transaction's vote (found
    in a review of this stop's fixes; failed before)."""
    a, b, c = storage.new_oid(), storage.new_oid(), storage.new_oid()
    tid = _commit_values(storage, {a: 1, b: 1, c: 1})

    # Transaction 1: changes a (streamed to the temporary table at vote), then its vote fails
    # in Python (a read-current check), leaving the database transaction open and healthy.
    t = TransactionMetaData()
    storage.tpc_begin(t)
    storage.store(a, tid, zodb_pickle(MinPO(666)), "", t)
    storage.checkCurrentSerialInTransaction(c, b"\0" * 7 + b"\1", t)
    with pytest.raises(ReadConflictError):
        storage.tpc_vote(t)
    with pytest.raises(StorageTransactionError):
        storage.tpc_finish(t)  # no tpc_abort: the refusal is meant to protect this caller

    # Transaction 2 changes only b.
    _commit_values(storage, {b: 2}, {b: tid})

    storage._shared.cache.clear()
    storage.sync()
    assert zodb_unpickle(storage.load(b)[0]).value == 2
    assert zodb_unpickle(storage.load(a)[0]).value == 1, "transaction 1's refused change was committed"
