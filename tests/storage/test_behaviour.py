"""Behaviour of JsonbStorage beyond ZODB's mixins: tids, invalidations, conflicts, batch ids."""

from __future__ import annotations

import logging
import math
import threading
import time

import psycopg
import pytest
import transaction
import ZODB
from BTrees.Length import Length
from BTrees.OOBTree import OOBTree
from persistent.mapping import PersistentMapping
from persistent.TimeStamp import TimeStamp
from ZODB.Connection import TransactionMetaData
from ZODB.POSException import StorageTransactionError
from ZODB.tests.MinPO import MinPO
from ZODB.tests.StorageTestBase import zodb_pickle
from ZODB.utils import u64, z64

from plone_connector.storage import JsonbStorage, jsonstate
from plone_connector.storage.schema import LATEST, SchemaError, StateFormatError, migrate


@pytest.fixture
def other_process(storage_dsn):
    """Another client of the same database, sharing nothing with the first (as a process)."""
    opened = []

    def open_storage(**options):
        storage = JsonbStorage(storage_dsn, **options)
        opened.append(storage)
        return storage

    yield open_storage
    for storage in opened:
        storage.close()


def _commit_value(db, key, value, tm=None):
    tm = tm or transaction.TransactionManager()
    conn = db.open(tm)
    conn.root()[key] = value
    tm.commit()
    tid = conn.root()._p_serial
    conn.close()
    return tid


def test_the_refs_column_holds_each_record_s_references(storage):
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        a, b, leaf = PersistentMapping(), PersistentMapping(), PersistentMapping(x=1)
        conn.root()["pair"] = parent = PersistentMapping(a=a, b=b, again=a)
        a["leaf"] = leaf
        tm.commit()
        with psycopg.connect(storage._shared.dsn) as pg:
            refs = dict(pg.execute("select zoid, refs from zodb_object_state").fetchall())
        assert refs[u64(parent._p_oid)] == [u64(a._p_oid), u64(b._p_oid)]  # once each, in order
        assert refs[u64(a._p_oid)] == [u64(leaf._p_oid)]
        assert refs[u64(leaf._p_oid)] == [] and refs[u64(b._p_oid)] == []
    finally:
        db.close()



# What COPY's text format reads specially, in keys, values and the end-of-data marker.
COPY_TEXTS = ["a\\b", "\\", "\\\\N", "\\N", "\\.", "tab\there", "line\nbreak", "cr\rlf\r\n", '"\\"', "é\u2028\x7f"]


def test_texts_copy_reads_specially_come_back_unchanged(storage, other_process):
    """Rows go to PostgreSQL as COPY text lines the storage writes itself (rows.copy_line)."""
    db = ZODB.DB(storage)
    try:
        value = PersistentMapping({text: [text, (text,), {text: text}] for text in COPY_TEXTS})
        value["exact"] = PersistentMapping(x=float("nan"))  # a tagged form, and bytes in a list
        value["bytes"] = [b"\\\t\n", b"\\N"]
        _commit_value(db, "copy", value)
        with psycopg.connect(storage._shared.dsn) as pg:
            (state,) = pg.execute(
                "select state from zodb_object_state where zoid = %s", (u64(value._p_oid),)
            ).fetchone()
        assert state["data"]["tab\there"] == ["tab\there", {"@t": ["tab\there"]}, {"tab\there": "tab\there"}]
    finally:
        db.close()
    # Read back by a process that shares no cache with the writer.
    other = ZODB.DB(other_process())
    try:
        conn = other.open()
        loaded = conn.root()["copy"]
        for text in COPY_TEXTS:
            assert loaded[text] == [text, (text,), {text: text}]
        assert loaded["bytes"] == [b"\\\t\n", b"\\N"]
        assert math.isnan(loaded["exact"]["x"])
        conn.close()
    finally:
        other.close()

def test_new_oids_come_in_growing_blocks_and_never_repeat(storage, other_process):
    from plone_connector.storage.storage import OID_BLOCK_MAX, OID_BLOCK_MIN

    def sequence_value() -> int:
        """The last value handed out (after a restart, the one before the first)."""
        with psycopg.connect(storage._shared.dsn) as conn:
            value, called = conn.execute("select last_value, is_called from zodb_oid_seq").fetchone()
        return value if called else value - 1

    start = sequence_value()
    ours = [u64(storage.new_oid())]
    assert sequence_value() - start == OID_BLOCK_MIN  # a few objects take one small block
    ours += [u64(storage.new_oid()) for _ in range(OID_BLOCK_MIN - 1)]
    assert sequence_value() - start == OID_BLOCK_MIN
    # Each refill doubles the block: 64, 128, ... up to the largest.
    expected = OID_BLOCK_MIN
    block = OID_BLOCK_MIN
    while block < OID_BLOCK_MAX:
        block *= 2
        ours.append(u64(storage.new_oid()))
        expected += block
        assert sequence_value() - start == expected, block
        ours += [u64(storage.new_oid()) for _ in range(block - 1)]
    ours.append(u64(storage.new_oid()))
    assert sequence_value() - start == expected + OID_BLOCK_MAX  # and stays there
    theirs = [u64(other.new_oid()) for other in [other_process()] for _ in range(3000)]
    assert ours == sorted(ours) and theirs == sorted(theirs)
    assert len(set(ours) | set(theirs)) == len(ours) + len(theirs)


def test_tids_increase_across_processes_and_follow_the_database_clock(storage, other_process, monkeypatch):
    db1, db2 = ZODB.DB(storage), ZODB.DB(other_process())
    try:
        # Local clocks play no part: a process whose clock is years behind still gets later tids.
        monkeypatch.setattr(time, "time", lambda: 631152000.0)  # 1990
        tids = []
        for i in range(6):
            db = (db1, db2)[i % 2]
            tids.append(_commit_value(db, "x", i))
        assert tids == sorted(tids) and len(set(tids)) == len(tids)
        with psycopg.connect(storage._shared.dsn) as conn:
            db_now = conn.execute("select extract(epoch from now())").fetchone()[0]
        assert abs(TimeStamp(tids[-1]).timeTime() - float(db_now)) < 60
    finally:
        db1.close()
        db2.close()


def test_tid_stays_monotonic_when_the_counter_is_ahead_of_the_clock(storage):
    future = TimeStamp(2100, 1, 1, 0, 0, 0.0).raw()
    db = ZODB.DB(storage)
    with psycopg.connect(storage._shared.dsn, autocommit=True) as conn:
        conn.execute("update zodb_commit set tid = %s", (u64(future),))
    try:
        assert u64(_commit_value(db, "x", 1)) == u64(future) + 1
    finally:
        db.close()


def test_commits_reach_another_process_through_notify(storage, other_process):
    db1 = ZODB.DB(storage)
    storage2 = other_process()
    db2 = ZODB.DB(storage2)
    try:
        listener = storage2._shared.listener
        deadline = time.monotonic() + 5
        while listener.trusted_epoch() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        heard = threading.Event()
        heard_tids = []
        storage2.on_commit(lambda tid: (heard_tids.append(tid), heard.set()))
        tm2 = transaction.TransactionManager()
        conn2 = db2.open(tm2)
        assert "x" not in conn2.root()
        tid = _commit_value(db1, "x", "hello")
        assert heard.wait(5)
        assert heard_tids[-1] == tid
        tm2.begin()
        assert conn2.root()["x"] == "hello"
        conn2.close()
    finally:
        db1.close()
        db2.close()


def test_polling_fallback_without_listener(storage, other_process):
    db1 = ZODB.DB(storage)
    db2 = ZODB.DB(other_process(listen=False))
    try:
        tm2 = transaction.TransactionManager()
        conn2 = db2.open(tm2)
        conn2.root()
        _commit_value(db1, "x", "polled")
        tm2.abort()  # the implicit next transaction polls
        assert conn2.root()["x"] == "polled"
        conn2.close()
    finally:
        db1.close()
        db2.close()


def test_snapshot_is_consistent_within_a_transaction(storage, other_process):
    db1, db2 = ZODB.DB(storage), ZODB.DB(other_process())
    try:
        tm = transaction.TransactionManager()
        conn = db1.open(tm)
        conn.root()["a"] = PersistentMapping(v=0)
        conn.root()["b"] = PersistentMapping(v=0)
        tm.commit()
        tm2 = transaction.TransactionManager()
        conn2 = db2.open(tm2)
        root2 = conn2.root()
        tm2.begin()
        assert root2["a"]["v"] == 0  # snapshot taken; "b" not loaded yet
        conn.root()["a"]["v"] = 1
        conn.root()["b"]["v"] = 1
        tm.commit()
        # "b" is loaded after the other commit, yet from the same snapshot as "a".
        assert (root2["a"]["v"], root2["b"]["v"]) == (0, 0)
        tm2.begin()
        assert (root2["a"]["v"], root2["b"]["v"]) == (1, 1)
        conn.close()
        conn2.close()
    finally:
        db1.close()
        db2.close()


def test_conflicts_resolve_across_processes_for_length_and_buckets(storage, other_process):
    db1, db2 = ZODB.DB(storage), ZODB.DB(other_process())
    try:
        tm1, tm2 = transaction.TransactionManager(), transaction.TransactionManager()
        c1 = db1.open(tm1)
        c1.root()["length"] = Length(0)
        c1.root()["tree"] = OOBTree({"m": 0})
        tm1.commit()
        c2 = db2.open(tm2)
        # c2 loads both in one transaction and uses them from its cache in the next one.
        assert c2.root()["length"]() == 0 and list(c2.root()["tree"]) == ["m"]
        tm2.commit()
        tm2.begin()
        c2.root()["length"].change(5)
        c2.root()["tree"]["z"] = 2
        c1.root()["length"].change(3)
        c1.root()["tree"]["a"] = 1
        tm1.commit()
        tm2.commit()  # conflicts with c1 on both objects; resolved, not raised
        tm1.begin()
        assert c1.root()["length"]() == 8
        assert dict(c1.root()["tree"]) == {"a": 1, "m": 0, "z": 2}
        c1.close()
        c2.close()
    finally:
        db1.close()
        db2.close()


def _bucket_holding(tree, key):
    bucket = tree._firstbucket
    while bucket.maxKey() < key:
        bucket = bucket._next
    return bucket


def test_conflicts_resolve_in_a_bucket_of_a_split_tree(storage, other_process):
    # Several hundred keys: the tree has split, each bucket is a record of its own, and two
    # processes insert different keys into the same bucket.
    db1, db2 = ZODB.DB(storage), ZODB.DB(other_process())
    try:
        tm1, tm2 = transaction.TransactionManager(), transaction.TransactionManager()
        c1 = db1.open(tm1)
        c1.root()["tree"] = OOBTree({f"k{i:04d}": i for i in range(0, 600, 2)})
        tm1.commit()
        tree1 = c1.root()["tree"]
        bucket1 = _bucket_holding(tree1, "k0300")
        keys = list(bucket1.keys())
        assert bucket1._p_oid not in (None, tree1._p_oid) and bucket1 is not tree1._firstbucket
        # Odd numbers: new keys, between two of the bucket's keys.
        first, second = (f"k{int(keys[n][1:]) + 1:04d}" for n in (3, -4))
        c2 = db2.open(tm2)
        tree2 = c2.root()["tree"]
        assert len(tree2) == 300  # loads every bucket, in an earlier transaction than the write
        tm2.commit()
        tm2.begin()
        bucket2 = _bucket_holding(tree2, "k0300")
        created = bucket2._p_serial
        assert bucket2._p_changed is False  # in the cache, not loaded by this transaction
        tree2[second] = "from c2"
        tree1[first] = "from c1"
        tm1.commit()
        assert bucket1._p_serial != created
        tm2.commit()  # the bucket conflicts with c1's commit; resolved, not raised
        assert bucket2._p_changed is None  # ZODB turns a resolved object into a ghost
        for tm, tree in ((tm1, tree1), (tm2, tree2)):
            tm.begin()
            assert (tree[first], tree[second]) == ("from c1", "from c2")
            assert _bucket_holding(tree, first) is _bucket_holding(tree, second)
            assert len(tree) == 302
            tree._check()
        c1.close()
        c2.close()
    finally:
        db1.close()
        db2.close()


def test_catalog_batch_ids_recorded_with_the_commit(storage):
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()["doc"] = 1
        tm.get().extension["catalog_batch_ids"] = ["batch-1", "batch-2"]
        tm.commit()
        tid = u64(storage.lastTransaction())
        conn.root()["doc"] = 2
        tm.get().extension["catalog_batch_ids"] = ["batch-aborted"]
        tm.abort()
        with psycopg.connect(storage._shared.dsn) as pg:
            rows = pg.execute("select batch_id, tid from catalog_txn_outcome order by 1").fetchall()
        assert rows == [("batch-1", tid), ("batch-2", tid)]
        conn.close()
    finally:
        db.close()


def test_catalog_batch_ids_recorded_only_when_the_commit_happens(storage):
    t = TransactionMetaData(extension={"catalog_batch_ids": ["voted-then-aborted"]})
    storage.tpc_begin(t)
    storage.store(storage.new_oid(), b"\0" * 8, zodb_pickle(MinPO(1)), "", t)
    storage.tpc_vote(t)
    storage.tpc_abort(t)
    with psycopg.connect(storage._shared.dsn) as pg:
        assert pg.execute("select count(*) from catalog_txn_outcome").fetchone()[0] == 0
    bad = TransactionMetaData(extension={"catalog_batch_ids": "not-a-list"})
    with pytest.raises(StorageTransactionError):
        storage.tpc_begin(bad)


class Holder(PersistentMapping):
    pass


def test_state_is_readable_jsonb_and_inexact_records_keep_the_exact_pickle(storage, monkeypatch):
    # The transcoder decides what JSON cannot hold; here it is made to refuse one marked record,
    # so the storage's side of the contract (keep, count and read back the exact bytes) is shown.
    real_encode = jsonstate.encode_row

    def encode(data):
        class_name, text, refs, exact, reason, record = real_encode(data)
        if b"keep-exact" in data:
            return class_name, text, refs, data, "test", None
        return class_name, text, refs, exact, reason, record

    monkeypatch.setattr(jsonstate, "encode_row", encode)
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()["plain"] = PersistentMapping(title="Hello wörld", count=3)
        conn.root()["odd"] = PersistentMapping(value="keep-exact")
        before = storage.exact_records
        tm.commit()
        plain_oid, odd_oid = conn.root()["plain"]._p_oid, conn.root()["odd"]._p_oid
        with psycopg.connect(storage._shared.dsn) as pg:
            rows = dict(
                pg.execute(
                    "select zoid, exact is not null from zodb_object_state where zoid = any(%s)",
                    ([u64(plain_oid), u64(odd_oid)],),
                ).fetchall()
            )
            text = pg.execute(
                "select state::text from zodb_object_state where zoid = %s", (u64(plain_oid),)
            ).fetchone()[0]
        assert rows == {u64(plain_oid): False, u64(odd_oid): True}
        assert "Hello wörld" in text
        assert storage.exact_records == before + 1
        # A different process reads both back: the exact bytes, and the state rebuilt from JSON.
        monkeypatch.setattr(jsonstate, "encode_row", real_encode)
        storage2 = JsonbStorage(storage._shared.dsn)
        try:
            conn2 = ZODB.DB(storage2).open(transaction.TransactionManager())
            assert conn2.root()["odd"]["value"] == "keep-exact"
            assert dict(conn2.root()["plain"]) == {"title": "Hello wörld", "count": 3}
            assert storage2.load(odd_oid)[0] == storage.load(odd_oid)[0]
            conn2.close()
        finally:
            storage2.close()
        conn.close()
    finally:
        db.close()


def test_exact_copies_are_counted_and_logged_only_when_committed(storage, caplog):
    # An integer longer than Python will print (sys.get_int_max_str_digits) has no JSON form:
    # the transcoder keeps the record exact ("unsupported: integer too long"). Bytes that are no
    # ZODB pickle are kept exact too ("opaque").
    huge = zodb_pickle(PersistentMapping(n=10**5000))
    caplog.set_level(logging.INFO, logger="plone_connector.storage.storage")
    before = storage.exact_copy_counts()

    txn = TransactionMetaData()
    storage.tpc_begin(txn)
    storage.store(storage.new_oid(), z64, huge, "", txn)
    storage.tpc_vote(txn)
    storage.tpc_abort(txn)
    assert storage.exact_copy_counts() == before
    assert not [r for r in caplog.records if "exact pickle" in r.getMessage()]

    txn = TransactionMetaData()
    storage.tpc_begin(txn)
    storage.store(huge_oid := storage.new_oid(), z64, huge, "", txn)
    storage.store(storage.new_oid(), z64, b"\x00not a pickle", "", txn)
    storage.tpc_vote(txn)
    storage.tpc_finish(txn)
    counts = storage.exact_copy_counts()
    assert counts.get("unsupported", 0) == before.get("unsupported", 0) + 1
    assert counts.get("opaque", 0) == before.get("opaque", 0) + 1
    assert storage.exact_records == sum(before.values()) + 2
    logged = [r for r in caplog.records if "exact pickle" in r.getMessage()]
    assert len(logged) == 2
    (huge_log,) = [r for r in logged if f"0x{u64(huge_oid):x}" in r.getMessage()]
    assert huge_log.levelno == logging.INFO
    assert "persistent.mapping.PersistentMapping" in huge_log.getMessage()
    assert "unsupported: integer too long" in huge_log.getMessage()
    assert storage.load(huge_oid)[0] == huge


def test_migration_is_safe_when_processes_race(fresh_dsn):
    errors = []
    barrier = threading.Barrier(4)

    def run():
        try:
            with psycopg.connect(fresh_dsn, autocommit=True) as conn:
                barrier.wait()
                migrate(conn, history_preserving=False)
        except Exception as error:  # noqa: BLE001 - collected and asserted below
            errors.append(error)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with psycopg.connect(fresh_dsn) as conn:
        versions = [row[0] for row in conn.execute("select version from zodb_schema_version")]
        assert versions == list(range(1, LATEST + 1))
        with pytest.raises(SchemaError):
            migrate(conn, history_preserving=True)


def _state_format(dsn):
    with psycopg.connect(dsn) as conn:
        return conn.execute("select state_format from zodb_commit").fetchone()[0]


def test_state_format_version_is_recorded_and_a_newer_one_refused(fresh_dsn, monkeypatch):
    version = jsonstate.FORMAT_VERSION
    running = JsonbStorage(fresh_dsn)
    try:
        running.poll_invalidations()
        assert _state_format(fresh_dsn) == version
        with monkeypatch.context() as newer:
            newer.setattr(jsonstate, "FORMAT_VERSION", version + 1)
            JsonbStorage(fresh_dsn, read_only=True).close()  # a newer reader writes nothing
            assert _state_format(fresh_dsn) == version
            JsonbStorage(fresh_dsn).close()  # a newer writer records its version
        assert _state_format(fresh_dsn) == version + 1
        # This code could misread what the newer code writes: refused on open, and by a storage
        # that was open already at its next snapshot.
        for read_only in (False, True):
            with pytest.raises(StateFormatError, match=f"format version {version + 1};"):
                JsonbStorage(fresh_dsn, read_only=read_only)
        running.sync()
        with pytest.raises(StateFormatError):
            running.poll_invalidations()
    finally:
        running.close()


def test_process_cache_never_serves_a_revision_the_snapshot_does_not_have(storage, other_process):
    db1, db2 = ZODB.DB(storage), ZODB.DB(other_process())
    try:
        tm1, tm2 = transaction.TransactionManager(), transaction.TransactionManager()
        c1 = db1.open(tm1)
        c1.root()["doc"] = PersistentMapping(v=1)
        tm1.commit()
        oid = c1.root()["doc"]._p_oid
        cache = storage._shared.cache
        old_snapshot = storage.new_instance()
        old_snapshot.poll_invalidations()
        assert old_snapshot.load(oid)[1] == storage.new_instance().load(oid)[1]
        hits = cache.hits
        assert storage.new_instance().load(oid)
        assert cache.hits == hits + 1  # unchanged: served from the cache after the tid check
        c2 = db2.open(tm2)
        c2.root()["doc"]["v"] = 2  # another process: this process's cache is not told
        tm2.commit()
        fresh = storage.new_instance()
        data, serial = fresh.load(oid)
        assert serial == c2.root()["doc"]._p_serial
        assert _value(c1, data) == 2
        data, serial = old_snapshot.load(oid)  # the older snapshot still reads its revision
        assert _value(c1, data) == 1
        for instance in (old_snapshot, fresh):
            instance.release()
        c1.close()
        c2.close()
    finally:
        db1.close()
        db2.close()


def _value(conn, record):
    state = conn._reader.getState(record)
    return state.get("data", state)["v"]


@pytest.mark.slow
def test_snapshots_stay_consistent_with_the_process_cache_under_concurrency(storage, other_process):
    """Threads of two processes keep a == b; every transaction must see them equal."""
    from ZODB.POSException import ConflictError

    db_setup = ZODB.DB(storage)
    with db_setup.transaction() as conn:
        conn.root()["a"] = PersistentMapping(v=0)
        conn.root()["b"] = PersistentMapping(v=0)
    dbs = [db_setup, ZODB.DB(other_process())]
    stop, errors, commits = threading.Event(), [], []

    def worker(db, seed):
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        try:
            while not stop.is_set():
                try:
                    tm.begin()
                    root = conn.root()
                    a, b = root["a"]["v"], root["b"]["v"]
                    if a != b:
                        errors.append((seed, a, b))
                    if seed % 2:  # half the threads write, half only read
                        root["a"]["v"] = a + 1
                        root["b"]["v"] = b + 1
                        tm.commit()
                        commits.append(1)
                    else:
                        tm.abort()
                except ConflictError:
                    tm.abort()
        except Exception as error:  # noqa: BLE001 - asserted below
            errors.append(error)
        finally:
            tm.abort()
            conn.close()

    threads = [threading.Thread(target=worker, args=(dbs[i % 2], i)) for i in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(4)
    stop.set()
    for thread in threads:
        thread.join()
    try:
        assert errors == []
        assert len(commits) > 20
        assert storage._shared.cache.hits > 0  # the cache was really in play
        with dbs[1].transaction() as conn:
            assert conn.root()["a"]["v"] == conn.root()["b"]["v"] == len(commits)
    finally:
        for db in dbs:
            db.close()


def test_prefetch_loads_many_objects_in_one_round_trip(storage, other_process):
    db = ZODB.DB(storage)
    with db.transaction() as conn:
        for i in range(20):
            conn.root()[i] = PersistentMapping(v=i)
    db.close()
    reader = other_process()  # cold process cache
    db = ZODB.DB(reader)
    try:
        conn = db.open(transaction.TransactionManager())
        children = [conn.root()[i] for i in range(20)]
        conn.prefetch(children)
        cache = reader._shared.cache
        hits = cache.hits
        assert [child["v"] for child in children] == list(range(20))
        assert cache.hits == hits + 20  # every load served from the prefetched records
        conn.close()
    finally:
        db.close()


def test_own_commits_are_loaded_from_the_process_cache(storage, other_process):
    """Records this process committed are served without a round trip, as the same bytes another
    process loads from PostgreSQL; a snapshot from before the commit still reads the old revision,
    and another process's later change is seen."""
    db = ZODB.DB(storage)
    try:
        tm = transaction.TransactionManager()
        conn = db.open(tm)
        conn.root()["docs"] = docs = [PersistentMapping(v=i) for i in range(10)]
        tm.commit()
        oids = [doc._p_oid for doc in docs]
        before = storage.new_instance()
        before.poll_invalidations()
        old_record = before.load(oids[0])
        for doc in docs:
            doc["v"] += 100
        tm.commit()
        cache = storage._shared.cache
        reader = storage.new_instance()
        reader.poll_invalidations()
        hits = cache.hits
        records = [reader.load(oid) for oid in oids]
        assert cache.hits == hits + len(oids)
        assert [_value(conn, data) for data, _ in records] == [100 + i for i in range(10)]
        elsewhere = other_process()
        assert [elsewhere.load(oid) for oid in oids] == records  # same bytes, same tids
        assert before.load(oids[0]) == old_record  # its snapshot predates the commit
        # Another process changes one object; this process's next snapshot reads its revision.
        db2 = ZODB.DB(other_process())
        tm2 = transaction.TransactionManager()
        conn2 = db2.open(tm2)
        conn2.get(oids[0])["v"] = -1
        tm2.commit()
        fresh = storage.new_instance()
        fresh.poll_invalidations()
        assert _value(conn, fresh.load(oids[0])[0]) == -1
        conn2.close()
        db2.close()
        for instance in (before, reader, fresh, elsewhere):
            instance.release()
        conn.close()
    finally:
        db.close()


def test_process_cache_takes_nothing_from_before_a_deletion():
    """A poll that sees objects deleted (gc_tid moved) empties the cache and moves its horizon to
    its snapshot, even when the poll starts above the horizon: a record written or read before the
    deletion, which no later poll would report, is refused afterwards (found in review)."""
    from plone_connector.storage.cache import StateCache

    cache = StateCache(1 << 20)
    cache.advance(90, 100, [], [], gc_tid=1)  # horizon 100
    cache.put_own(100, [(7, b"kept")])
    assert cache.current(7, 100) == (100, b"kept")
    # An instance that loaded before its first poll polls from 180: a pack deleted objects.
    cache.advance(180, 190, [], [], gc_tid=2)
    assert cache.current(7, 100) is None
    assert cache.horizon == 190
    assert not cache.put_own(150, [(8, b"deleted since")])  # committed before the deletion
    cache.put(8, 150, b"deleted since", snapshot=160)  # read before the deletion
    cache.advance(100, 220, [], [], gc_tid=2)  # nothing reports the deleted object
    assert cache.current(8, 215) is None
