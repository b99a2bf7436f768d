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
import time

import psycopg
import pytest
import transaction
from plone import api

from plone_connector.catalog.batch import BatchDataManager
from plone_connector.catalog.outcomes import resolve_expired as resolve_in_plone
from plone_connector.catalog.verify import verify
from plone_connector.storage import JsonbStorage
from tests.connector.sites import CONNECTED, on_site
from tests.e2e import forking
from tests.e2e.crashes import assert_no_new_drift, drift, eager_service_resolver, unrestricted_paths

pytestmark = [pytest.mark.slow, pytest.mark.plone]

FOLDER = "crash"
AFTER_STORAGE_COMMIT = "after storage commit"
BEFORE_STORAGE_COMMIT = "before storage commit"


def killed_commit(dsn: str, obj_id: str, kill_at: str) -> str:
    """Create ``obj_id`` in a child process killed at ``kill_at``; return its catalog batch id."""

    def child(report_fd: int) -> None:
        db = forking.own_connections(dsn)
        if kill_at == AFTER_STORAGE_COMMIT:
            forking.kill_at_tpc_finish(BatchDataManager, report_fd, lambda manager: manager.batch.batch_id)
        else:
            forking.kill_at_tpc_finish(JsonbStorage, report_fd, lambda storage: ",".join(storage._batch_ids))
        with forking.site_as_manager(db, CONNECTED) as site:
            api.content.create(container=site[FOLDER], type="Document", id=obj_id, title=f"Crash {obj_id}")
            transaction.commit()

    batch_ids = forking.killed(child).split(",")
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
    with eager_service_resolver(dsn):
        deadline = time.monotonic() + 30
        while batch_state(dsn, batch_id)[0] == "staged":
            assert time.monotonic() < deadline, "the service's resolver did not resolve the batch"
            time.sleep(0.2)


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
    with eager_service_resolver(dsn):
        time.sleep(4)  # two passes of its resolver at least (every ttl / 4, at least 1 s)


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
