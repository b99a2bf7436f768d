"""A Plone process killed (SIGKILL) in the middle of a commit, on FileStorage: a storage that records
nothing for the catalog service (no catalog_txn_outcome), so only the connector's own record of
each batch id in ZODB (plone_connector/catalog/outcomes.py, docs/decisions/0011) can tell whether
the transaction committed.

The connector's two-site layer runs on a FileStorage seeded from the Plone fixture. The commit runs
in a forked child that writes through the FileStorage it inherited and is killed:

- after FileStorage's tpc_finish, before the connector commits the staged batch: the batch must be
  committed;
- after both voted, before FileStorage's tpc_finish: the batch must be aborted.

Afterwards the parent reopens the FileStorage (as another Plone process sees the commit), the
batch is resolved by the connector, either called directly or by its background thread, while a
second service whose own resolver expires batches after 2 s runs on the same database (it must
leave the batch to the connector), and ``verify`` must find the catalog equal to ZODB.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from unittest import mock

import psycopg
import pytest
import transaction
import ZODB
from plone import api
from plone.app.testing import PLONE_FIXTURE
from plone.testing import zodb
from ZODB.FileStorage import FileStorage

from plone_connector.catalog import outcomes
from plone_connector.catalog.batch import BatchDataManager
from plone_connector.catalog.client import get_client, reset_client
from plone_connector.catalog.verify import verify
from tests.connector import sites
from tests.connector.sites import CONNECTED, ConnectorLayer
from tests.e2e import crashes, forking
from tests.e2e.jsonb_layer import layer_db, layer_set_up, seed

pytestmark = [pytest.mark.slow, pytest.mark.plone]

FOLDER = "crash"
AFTER_STORAGE_COMMIT = "after storage commit"
BEFORE_STORAGE_COMMIT = "before storage commit"


def open_db(path: Path) -> ZODB.DB:
    return ZODB.DB(FileStorage(str(path / "Data.fs"), blob_dir=str(path / "blobs")))


class FileStorageConnectorLayer(ConnectorLayer):
    """The connector's layer with its ZODB on a FileStorage in ``path`` (set before set-up)."""

    path: Path | None = None
    catalog_id = "fs-conn"

    def _file_db(self, base_db, name=None) -> ZODB.DB:
        # Seeded before a DB opens it: a DB on an empty storage writes a root object of its own.
        storage = FileStorage(str(self.path / "Data.fs"), blob_dir=str(self.path / "blobs"))
        try:
            seed(storage, layer_db(PLONE_FIXTURE).storage)
        finally:
            storage.close()
        return open_db(self.path)

    def setUp(self):
        with mock.patch.object(zodb, "stackDemoStorage", self._file_db), \
                mock.patch.dict(os.environ, {"CATALOG_SERVICE_CATALOG_ID": self.catalog_id}):
            super().setUp()

    def reopen(self) -> ZODB.DB:
        """Close the database and open the FileStorage again, with what other processes wrote."""
        transaction.abort()
        self["zodbDB"].close()
        del self["zodbDB"]
        self["zodbDB"] = db = open_db(self.path)
        return db


FS_LAYER = FileStorageConnectorLayer(name="FileStorageConnectorLayer")


@pytest.fixture(scope="module")
def fs_layer(catalog_service, tmp_path_factory):
    FS_LAYER.path = tmp_path_factory.mktemp("filestorage")
    with layer_set_up(FS_LAYER):
        with on_site() as site:
            api.content.create(container=site, type="Folder", id=FOLDER, title="Crash tests")
        yield FS_LAYER


def on_site(**options):
    """``sites.on_site`` for the connector site, on the layer's FileStorage as last (re)opened."""
    return sites.on_site(CONNECTED, db=FS_LAYER["zodbDB"], **options)


def killed_commit(obj_id: str, kill_at: str) -> str:
    """Create ``obj_id`` in a child process killed at ``kill_at``; return its catalog batch id."""

    def child(report_fd: int) -> None:
        # The child writes through the FileStorage it inherited (a second one could not lock the
        # file); the parent, waiting meanwhile, reopens it afterwards.
        reset_client()
        transaction.begin()
        db = FS_LAYER["zodbDB"]
        batch_ids = []
        real_tpc_begin = BatchDataManager.tpc_begin

        def tpc_begin(self, txn):
            batch_ids.append(self.batch.batch_id)
            return real_tpc_begin(self, txn)

        BatchDataManager.tpc_begin = tpc_begin
        if kill_at == AFTER_STORAGE_COMMIT:
            forking.kill_at_tpc_finish(BatchDataManager, report_fd, lambda manager: manager.batch.batch_id)
        else:
            forking.kill_at_tpc_finish(FileStorage, report_fd, lambda storage: batch_ids[0])
        with forking.site_as_manager(db, CONNECTED) as site:
            api.content.create(container=site[FOLDER], type="Document", id=obj_id, title=f"Crash {obj_id}")
            transaction.commit()

    report = forking.killed(child)
    assert report, "the child reported no batch id"
    FS_LAYER.reopen()
    return report


def batch_state(dsn: str, batch_id: str) -> str | None:
    with psycopg.connect(dsn) as conn:
        state = conn.execute("select state from catalog_batch where batch_id = %s", (batch_id,)).fetchone()
        recorded = conn.execute("select 1 from catalog_txn_outcome where batch_id = %s", (batch_id,)).fetchone()
    assert recorded is None  # FileStorage records nothing in PostgreSQL
    return state[0] if state else None


def resolve_directly(dsn: str, batch_id: str) -> None:
    with on_site(commit=False) as site:
        resolved = outcomes.resolve_expired(site.portal_catalog, older_than=0)
    assert batch_id in {resolved_id for resolved_id, _ in resolved}


def resolve_in_the_background(dsn: str, batch_id: str) -> None:
    env = {"CATALOG_SERVICE_RESOLVE_INTERVAL": "0.5", "CATALOG_SERVICE_RESOLVE_AFTER": "1"}
    with mock.patch.dict(os.environ, env):
        reset_client()
        try:
            with on_site(commit=False) as site:
                site.portal_catalog.unrestrictedSearchResults(id="anything")  # the tool is watched
            outcomes.wake()  # with the settings above
            deadline = time.monotonic() + 30
            while batch_state(dsn, batch_id) == "staged":
                assert time.monotonic() < deadline, "the connector's resolver thread did not resolve the batch"
                time.sleep(0.2)
        finally:
            reset_client()


RESOLVERS = {"directly": resolve_directly, "background thread": resolve_in_the_background}


def declared_resolver() -> str:
    client = get_client()
    return client._send("GET", client._catalog_path(FS_LAYER.catalog_id, "batches", "resolver"))["by"]


@pytest.fixture
def baseline(fs_layer):
    before = crashes.drift(FS_LAYER["zodbDB"])
    assert before["missing"] == [] and before["phantom"] == [], before
    # The connector told the service that it resolves this catalog's batches itself.
    deadline = time.monotonic() + 10
    while declared_resolver() != "client":
        assert time.monotonic() < deadline, "the connector did not declare itself the batches' resolver"
        time.sleep(0.1)
    return before


@pytest.mark.parametrize("resolver", sorted(RESOLVERS))
def test_killed_after_the_storage_committed(baseline, database_url, resolver):
    obj_id = f"survivor-{resolver.replace(' ', '-')}"
    batch_id = killed_commit(obj_id, AFTER_STORAGE_COMMIT)
    assert batch_state(database_url, batch_id) == "staged"
    with on_site(commit=False) as site:
        # ZODB has the document; the catalog does not yet (the batch is staged, invisible).
        assert obj_id in site[FOLDER].objectIds()
        assert verify(site).missing == [f"/{CONNECTED}/{FOLDER}/{obj_id}"]

    with crashes.eager_service_resolver(database_url):
        time.sleep(3)
        # Nothing recorded it in catalog_txn_outcome, but the service leaves it to the connector.
        assert batch_state(database_url, batch_id) == "staged"
        RESOLVERS[resolver](database_url, batch_id)

    assert batch_state(database_url, batch_id) == "committed"
    assert crashes.unrestricted_paths(obj_id, FS_LAYER["zodbDB"]) == [f"/{CONNECTED}/{FOLDER}/{obj_id}"]
    with on_site(user=None, commit=False) as site:
        assert [b.getPath() for b in site.portal_catalog(id=obj_id)] == []  # private, as in ZODB
    crashes.assert_no_new_drift(baseline, FS_LAYER["zodbDB"])


@pytest.mark.parametrize("resolver", sorted(RESOLVERS))
def test_killed_before_the_storage_committed(baseline, database_url, resolver):
    obj_id = f"lost-{resolver.replace(' ', '-')}"
    batch_id = killed_commit(obj_id, BEFORE_STORAGE_COMMIT)
    assert batch_state(database_url, batch_id) == "staged"

    RESOLVERS[resolver](database_url, batch_id)

    assert batch_state(database_url, batch_id) == "aborted"
    assert crashes.unrestricted_paths(obj_id, FS_LAYER["zodbDB"]) == []
    with on_site() as site:
        assert obj_id not in site[FOLDER].objectIds()
        # FileStorage dropped the unfinished transaction; later commits go through.
        api.content.create(container=site[FOLDER], type="Document", id=f"after-{obj_id}", title="After")
    assert crashes.unrestricted_paths(f"after-{obj_id}", FS_LAYER["zodbDB"]) == [f"/{CONNECTED}/{FOLDER}/after-{obj_id}"]
    crashes.assert_no_new_drift(baseline, FS_LAYER["zodbDB"])
