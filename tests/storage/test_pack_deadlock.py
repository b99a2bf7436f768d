"""A history-free pack chosen as a deadlock's victim runs its phase 2 again.

Phase 2 takes the commit lock, then deletes garbage rows; a transaction holding a lock on a
garbage row that then asks for the commit lock closes a cycle, and PostgreSQL aborts whichever
waited longest (after ``deadlock_timeout``): here the pack. Before, pack() raised psycopg's
DeadlockDetected, a driver error no ZODB caller expects; nothing was lost either way.
"""

from __future__ import annotations

import threading
import time

import psycopg
import transaction  # noqa: F401 - the storage's fixtures expect the package imported
from ZODB.serialize import referencesf
from ZODB.utils import u64

from tests.storage.test_pack import _root_and_garbage, row_count, storage  # noqa: F401 - fixture


def _wait_for_lock_wait(dsn: str, pid: int, timeout: float = 10.0) -> None:
    """Until the backend ``pid`` waits for a lock."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            (waiting,) = conn.execute(
                "select count(*) from pg_stat_activity where wait_event_type = 'Lock' and pid <> %s"
                " and pid <> pg_backend_pid() and datname = current_database()",
                (pid,),
            ).fetchone()
            if waiting:
                return
            time.sleep(0.02)
    raise AssertionError("the pack never waited for the row lock")


def test_a_pack_that_loses_a_deadlock_runs_phase_two_again(storage):  # noqa: F811 - fixture
    garbage = _root_and_garbage(storage)
    dsn = storage._shared.dsn
    before = row_count(storage)
    errors: list[BaseException] = []

    blocker = psycopg.connect(dsn, autocommit=True)
    try:
        # The writer checks for a deadlock only long after the pack does (after the server's
        # deadlock_timeout, 1 s), so that the pack is the one aborted however busy the machine is:
        # with equal timeouts, a full test run once saw the writer's check run first.
        blocker.execute("set deadlock_timeout = '30s'")
        blocker.execute("begin")
        # A writer's row lock on the garbage object, as a commit that stores it would hold.
        blocker.execute("select 1 from zodb_object_state where zoid = %s for update", (u64(garbage),))

        def pack():
            try:
                storage.pack(time.time(), referencesf)
            except BaseException as error:  # noqa: BLE001 - checked below
                errors.append(error)

        thread = threading.Thread(target=pack)
        thread.start()
        _wait_for_lock_wait(dsn, blocker.info.backend_pid)  # phase 2 holds the commit lock
        # The writer now asks for the commit lock: a cycle. The pack has waited longer, so its
        # deadlock check runs first and aborts it; the writer then gets the lock.
        blocker.execute("select tid from zodb_commit for update")
        time.sleep(0.2)
        blocker.execute("rollback")
    finally:
        blocker.close()
    thread.join(30)
    assert not thread.is_alive()
    assert errors == []
    assert row_count(storage) == before - 1  # the garbage went on the second try
