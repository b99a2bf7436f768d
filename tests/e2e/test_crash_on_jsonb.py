"""A Plone process killed (SIGKILL) in the middle of a commit, on JsonbStorage with the connector.

The commit runs in a forked child of the test process (it inherits the loaded Zope and Plone, and
opens its own database and HTTP connections); a patched method kills it at the chosen point:

- after the storage committed, before the connector commits the staged batch (the connector's
  data manager finishes last): the storage recorded the batch id in ``catalog_txn_outcome``, so
  the service's resolver must commit the batch;
- after both voted, before the storage committed: ZODB has nothing of the transaction and
  nothing recorded it. The connector declared that it resolves this catalog's batches itself, so
  the service's resolver leaves the batch staged, and the connector's (which finds no record of it
  in ZODB) must discard it.

The service's resolver runs either directly (``resolve_expired`` with ttl 0) or as the service's
own background task (a second service on the same database with a 2 s ttl). Afterwards the
connector's ``verify`` must find the catalog equal to ZODB.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import psycopg
import pytest
import transaction
from plone import api

from plone_connector.catalog.batch import BatchDataManager
from plone_connector.catalog.outcomes import resolve_expired as resolve_in_plone
from plone_connector.catalog.verify import verify
from plone_connector.storage import JsonbStorage
from tests.connector.service import ServiceProcess
from tests.connector.sites import CONNECTED, on_site
from tests.e2e import forking

pytestmark = [pytest.mark.slow, pytest.mark.plone]

FOLDER = "crash"
AFTER_STORAGE_COMMIT = "after storage commit"
BEFORE_STORAGE_COMMIT = "before storage commit"


def _die(report_fd: int, batch_ids) -> None:
    os.write(report_fd, ",".join(batch_ids).encode())
    os.kill(os.getpid(), signal.SIGKILL)


def killed_commit(dsn: str, obj_id: str, kill_at: str) -> str:
    """Create ``obj_id`` in a child process killed at ``kill_at``; return its catalog batch id."""

    def child(report_fd: int) -> None:
        db = forking.own_connections(dsn)
        if kill_at == AFTER_STORAGE_COMMIT:
            BatchDataManager.tpc_finish = lambda self, txn: _die(report_fd, [self.batch.batch_id])
        else:
            JsonbStorage.tpc_finish = lambda self, txn, f=None: _die(report_fd, self._batch_ids)
        with forking.site_as_manager(db, CONNECTED) as site:
            api.content.create(container=site[FOLDER], type="Document", id=obj_id, title=f"Crash {obj_id}")
            transaction.commit()

    status, report = forking.finish(*forking.start(child))
    # Exit status 0 or 3 would mean the kill point was never reached.
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"child status {status}"
    batch_ids = report.split(",")
    assert len(batch_ids) == 1 and batch_ids[0], batch_ids
    return batch_ids[0]


def batch_state(dsn: str, batch_id: str) -> tuple[str | None, bool]:
    """(state of the batch in the service, whether the storage recorded it as committed)."""
    with psycopg.connect(dsn) as conn:
        state = conn.execute("select state from catalog_batch where batch_id = %s", (batch_id,)).fetchone()
        recorded = conn.execute("select 1 from catalog_txn_outcome where batch_id = %s", (batch_id,)).fetchone()
    return (state[0] if state else None), recorded is not None


async def _resolve_now(dsn: str):
    import asyncpg

    from catalog_service.store import batches
    from catalog_service.store.database import _init_connection

    conn = await asyncpg.connect(dsn)
    try:
        await _init_connection(conn)
        return await batches.resolve_expired(conn, ttl_seconds=0)
    finally:
        await conn.close()


def resolve_directly(dsn: str, batch_id: str) -> None:
    outcomes = asyncio.run(_resolve_now(dsn))
    assert batch_id in {resolved for _, resolved, _ in outcomes}


def resolve_by_the_service(dsn: str, batch_id: str) -> None:
    # A second service on the same database, whose background resolver expires batches after 2 s.
    saved = os.environ.get("CATALOG_STAGED_BATCH_TTL")
    os.environ["CATALOG_STAGED_BATCH_TTL"] = "2"
    service = ServiceProcess(dsn)
    try:
        service.start()
    finally:
        if saved is None:
            del os.environ["CATALOG_STAGED_BATCH_TTL"]
        else:
            os.environ["CATALOG_STAGED_BATCH_TTL"] = saved
    try:
        deadline = time.monotonic() + 30
        while batch_state(dsn, batch_id)[0] == "staged":
            assert time.monotonic() < deadline, "the service's resolver did not resolve the batch"
            time.sleep(0.2)
    finally:
        service.stop()


RESOLVERS = {"resolve_expired": resolve_directly, "service resolver": resolve_by_the_service}


@pytest.fixture(scope="module")
def folder(plone_sites):
    """A folder for this module's documents, removed afterwards: the connector's differential
    scenario (which may run later on the same sites) compares the sites' top levels."""
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Folder", id=FOLDER, title="Crash tests")
    yield f"/{CONNECTED}/{FOLDER}"
    with on_site(CONNECTED) as site:
        api.content.delete(obj=site[FOLDER])


def unrestricted_paths(obj_id: str) -> list[str]:
    with on_site(CONNECTED, commit=False) as site:
        return [b.getPath() for b in site.portal_catalog.unrestrictedSearchResults(id=obj_id)]


def drift() -> dict:
    with on_site(CONNECTED, commit=False) as site:
        report = verify(site).as_dict()
    assert report["checked"] >= 1
    return {key: report[key] for key in ("missing", "phantom", "stale")}


def assert_no_new_drift(baseline: dict) -> None:
    after = drift()
    assert after["missing"] == [] and after["phantom"] == [], after
    # Adding to the site reindexes its root, which may clear the root's initial drift.
    assert set(after["stale"]) <= set(baseline["stale"]), after


@pytest.fixture
def baseline(folder):
    """The drift before the crash. A fresh connector site already has one stale entry, the site
    root (docs/e2e.md), so the test asserts that the crash adds none rather than repairing it."""
    before = drift()
    assert before["missing"] == [] and before["phantom"] == [], before
    return before


@pytest.mark.parametrize("resolver", sorted(RESOLVERS))
def test_killed_after_the_storage_committed(baseline, database_url, resolver):
    obj_id = f"survivor-{resolver.replace(' ', '-')}"
    batch_id = killed_commit(database_url, obj_id, AFTER_STORAGE_COMMIT)
    assert batch_state(database_url, batch_id) == ("staged", True)
    with on_site(CONNECTED, commit=False) as site:
        # ZODB has the document; the catalog does not yet (the batch is staged, invisible).
        assert obj_id in site[FOLDER].objectIds()
        assert verify(site).missing == [f"/{CONNECTED}/{FOLDER}/{obj_id}"]  # the crash's gap, until resolved
    assert unrestricted_paths(obj_id) == []

    RESOLVERS[resolver](database_url, batch_id)

    assert batch_state(database_url, batch_id) == ("committed", True)
    assert unrestricted_paths(obj_id) == [f"/{CONNECTED}/{FOLDER}/{obj_id}"]
    with on_site(CONNECTED, user=None, commit=False) as site:
        assert [b.getPath() for b in site.portal_catalog(id=obj_id)] == []  # private, as in ZODB
    assert_no_new_drift(baseline)


def service_pass_directly(dsn: str, batch_id: str) -> None:
    outcomes = asyncio.run(_resolve_now(dsn))
    assert batch_id not in {resolved for _, resolved, _ in outcomes}


def service_pass_by_the_service(dsn: str, batch_id: str) -> None:
    saved = os.environ.get("CATALOG_STAGED_BATCH_TTL")
    os.environ["CATALOG_STAGED_BATCH_TTL"] = "2"
    service = ServiceProcess(dsn)
    try:
        service.start()
    finally:
        if saved is None:
            del os.environ["CATALOG_STAGED_BATCH_TTL"]
        else:
            os.environ["CATALOG_STAGED_BATCH_TTL"] = saved
    try:
        time.sleep(4)  # two passes of its resolver at least (every ttl / 4, at least 1 s)
    finally:
        service.stop()


SERVICE_PASSES = {"resolve_expired": service_pass_directly, "service resolver": service_pass_by_the_service}


@pytest.mark.parametrize("resolver", sorted(SERVICE_PASSES))
def test_killed_before_the_storage_committed(baseline, database_url, resolver):
    obj_id = f"lost-{resolver.replace(' ', '-')}"
    batch_id = killed_commit(database_url, obj_id, BEFORE_STORAGE_COMMIT)
    assert batch_state(database_url, batch_id) == ("staged", False)

    # Nothing recorded it, and the connector declared that it resolves this catalog's batches
    # itself (docs/decisions/0011): the service leaves it staged ...
    SERVICE_PASSES[resolver](database_url, batch_id)
    assert batch_state(database_url, batch_id) == ("staged", False)
    # ... and the connector aborts it: ZODB has no record of it.
    with on_site(CONNECTED, commit=False) as site:
        assert (batch_id, "aborted") in resolve_in_plone(site.portal_catalog, older_than=0)

    assert batch_state(database_url, batch_id) == ("aborted", False)
    assert unrestricted_paths(obj_id) == []
    with on_site(CONNECTED) as site:
        assert obj_id not in site[FOLDER].objectIds()
        # The killed commit held the storage's commit lock; later commits must go through.
        api.content.create(container=site[FOLDER], type="Document", id=f"after-{obj_id}", title="After")
    assert unrestricted_paths(f"after-{obj_id}") == [f"/{CONNECTED}/{FOLDER}/after-{obj_id}"]
    assert_no_new_drift(baseline)
