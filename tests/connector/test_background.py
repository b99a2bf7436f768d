"""The stage sent in the background while ZODB votes, the commit sent before the commit returns.

A transaction's stage goes to the process's background thread at tpc_begin and tpc_vote waits for
it. Every other request of the process waits for that thread's requests first (client.settle).
"""

from __future__ import annotations

import threading
import time

import pytest
import transaction
from plone import api

from catalog_schemas.api import SearchRequest
from plone_connector.catalog import client as client_module
from plone_connector.catalog.client import CatalogClient
from plone_connector.catalog.errors import CatalogServiceError, ServiceUnavailable
from plone_connector.catalog.verify import verify
from tests.connector.sites import CONNECTED, delete_from, on_site
from tests.connector.sites import catalog_paths as paths

pytestmark = [pytest.mark.slow, pytest.mark.plone]



@pytest.fixture
def remove_created(plone_sites):
    yield
    delete_from(CONNECTED, "bg-commit", "bg-stage", "bg-late")


class Recorded:
    """The thread each call of a client method ran on, with an optional delay."""

    def __init__(self, monkeypatch, name: str, delay: float = 0.0, fail: Exception | None = None):
        self.threads: list[str] = []
        real = getattr(CatalogClient, name)
        recorded = self

        def call(client, *args, **kw):
            recorded.threads.append(threading.current_thread().name)
            time.sleep(delay)
            if fail is not None:
                raise fail
            return real(client, *args, **kw)

        monkeypatch.setattr(CatalogClient, name, call)


def test_a_commit_is_visible_to_every_query_when_it_returns(remove_created, monkeypatch):
    """Read-your-writes for programs that ask the service directly (no after_batch to wait for):
    the batch is committed before transaction.commit() returns, even with a slow service."""
    commits = Recorded(monkeypatch, "commit_batch", delay=0.3)
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Document", id="bg-commit", title="Background")
        catalog_id = site.portal_catalog.catalog_id()
    answer = client_module.get_client().search(
        catalog_id, SearchRequest(query={"id": "bg-commit"}, metadata=[]), None, unrestricted=True)
    assert [item["path"] for item in answer.items] == ["/conn/bg-commit"]
    assert commits.threads and not any(t.startswith("catalog-batches") for t in commits.threads)


def test_staging_runs_beside_the_storages_vote(remove_created, monkeypatch):
    stages = Recorded(monkeypatch, "stage_batch")
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Document", id="bg-stage", title="Staged aside")
    assert stages.threads and all(t.startswith("catalog-batches") for t in stages.threads)
    with on_site(CONNECTED, commit=False) as site:
        assert paths(site, id="bg-stage") == ["/conn/bg-stage"]
        assert verify(site).clean


def test_a_refused_background_staging_fails_the_commit(remove_created, monkeypatch):
    Recorded(monkeypatch, "stage_batch", fail=ServiceUnavailable("catalog service: down", 503, "down"))
    with pytest.raises(CatalogServiceError, match="nothing was saved"), on_site(CONNECTED) as site:
        api.content.create(container=site, type="Document", id="bg-late", title="Never saved")
    monkeypatch.undo()
    with on_site(CONNECTED, commit=False) as site:
        assert "bg-late" not in site
        assert paths(site, id="bg-late") == []
        assert verify(site).clean


def test_changes_made_after_tpc_begin_are_staged_again_at_vote(remove_created, monkeypatch):
    """A data manager that changes the catalog during the commit, after ours began (rare; the
    indexing queue runs before the commit): the vote sends the change, appended to the batch."""
    stages = Recorded(monkeypatch, "stage_batch")
    appends = Recorded(monkeypatch, "append_batch")

    class LateIndexer:
        def __init__(self, site):
            self.site = site

        def sortKey(self):
            return "\uffff\uffff-after-the-catalog"  # tpc_begin after the catalog's

        def tpc_begin(self, txn):
            # ZODB objects cannot change during the commit; the pending batch can.
            manager = self.site.portal_catalog._manager(create=False)
            entry = next(e for e in manager.batch.entries.values() if e.get("path", "").endswith("/bg-late"))
            values = {**entry["values"], "Title": "Changed during the commit"}
            manager.batch.index(entry["uid"], entry["path"], values, None, ["Title"])

        def commit(self, txn):
            pass

        def tpc_vote(self, txn):
            pass

        def tpc_finish(self, txn):
            pass

        def tpc_abort(self, txn):
            pass

        def abort(self, txn):
            pass

    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Document", id="bg-late", title="Before")
        transaction.get().join(LateIndexer(site))
    assert len(stages.threads) == 1  # at tpc_begin, in the background
    assert len(appends.threads) == 1  # the late change, at tpc_vote
    client_module.settle()
    with on_site(CONNECTED, commit=False) as site:
        # The batch's late change (not a ZODB change, so verify would call it drift) arrived.
        assert paths(site, Title="during") == ["/conn/bg-late"]
