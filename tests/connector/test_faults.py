"""Consistency under faults: the service down at vote, and a commit that fails after ZODB committed."""

from __future__ import annotations

import pytest
import transaction
from plone import api

from plone_connector.catalog import batch as batch_module
from plone_connector.catalog.errors import CatalogServiceError, ServiceUnavailable
from plone_connector.catalog.verify import verify
from tests.connector.sites import CONNECTED, delete_from, on_site
from tests.connector.sites import catalog_paths as paths

pytestmark = [pytest.mark.slow, pytest.mark.plone]

# What the tests of this module create in the connected site.
MADE_HERE = ("faults", "late", "kept", "rolled-back", "vote-lost", "hooked", "crashed")


@pytest.fixture(autouse=True)
def clean_baseline(plone_sites, catalog_service):
    """Start from a catalog that matches ZODB. Earlier tests can leave drift that stock Plone
    leaves in ZCatalog too (an indexer that failed while an object was being created, and partial
    reindexes since): verify finds it, and this test is about what faults add. Afterwards, remove
    what the test made."""
    with on_site(CONNECTED) as site:
        verify(site, repair=True)
    with on_site(CONNECTED) as site:
        assert verify(site).clean
    yield
    # The stock site never gets these objects, and test_index_data compares the two sites' indexes.
    delete_from(CONNECTED, *MADE_HERE)


def test_service_down_at_commit_aborts_the_transaction(plone_sites, catalog_service):
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Folder", id="faults", title="Faults")
    # Whether a query inside the transaction or the vote meets the dead service first, the user
    # gets the service error and the transaction is aborted.
    with catalog_service.killed(), pytest.raises(CatalogServiceError, match="not reachable"), \
            on_site(CONNECTED) as site:
        api.content.create(container=site["faults"], type="Document", id="lost", title="Lost")
        site["faults"].title = "Faults renamed"
        site["faults"].reindexObject()
    with on_site(CONNECTED) as site:
        # Nothing half-applied: neither ZODB nor the catalog has any of the transaction's changes.
        assert "lost" not in site["faults"]
        assert site["faults"].title == "Faults"
        assert paths(site, path="/conn/faults") == ["/conn/faults"]
        assert [b.Title for b in site.portal_catalog.unrestrictedSearchResults(path="/conn/faults")] == ["Faults"]
        report = verify(site)
        assert report.clean, report.as_dict()
        assert report.checked > 1


def test_commit_failing_after_zodb_committed_is_retried(plone_sites, monkeypatch):
    from plone_connector.catalog.client import CatalogClient

    real_commit = CatalogClient.commit_batch
    failures = []

    def failing_commit(self, catalog_id, batch_id):
        if not failures:
            failures.append(batch_id)
            raise ServiceUnavailable("simulated: connection reset during commit")
        return real_commit(self, catalog_id, batch_id)

    monkeypatch.setattr(CatalogClient, "commit_batch", failing_commit)
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Document", id="late", title="Late commit")
    assert failures and batch_module._unfinished
    with on_site(CONNECTED) as site:
        # The next query of this process commits the batch first, so it reads its own write.
        assert paths(site, id="late") == ["/conn/late"]
        assert not batch_module._unfinished
        assert verify(site).clean


def test_aborted_and_rolled_back_changes_never_become_visible(plone_sites):
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Document", id="kept", title="Kept")
        savepoint = transaction.savepoint()
        api.content.create(container=site, type="Document", id="rolled-back", title="Rolled back")
        assert paths(site, id="rolled-back") == ["/conn/rolled-back"]
        savepoint.rollback()
        assert paths(site, id="rolled-back") == []
    with on_site(CONNECTED) as site:
        assert paths(site, id="kept") == ["/conn/kept"]
        assert paths(site, id="rolled-back") == []
        assert "rolled-back" not in site


def test_service_killed_just_before_vote(plone_sites, catalog_service):
    with pytest.raises(CatalogServiceError, match="nothing was saved"), on_site(CONNECTED) as site:
        api.content.create(container=site, type="Document", id="vote-lost", title="Vote lost")
        # The change is queued; the service dies before the transaction votes.
        catalog_service.stop(kill=True)
    catalog_service.start()
    with on_site(CONNECTED) as site:
        assert "vote-lost" not in site
        assert paths(site, id="vote-lost") == []
        assert verify(site).clean


def test_after_commit_hooks_send_no_abort_for_a_committed_batch(plone_sites, monkeypatch):
    from plone_connector.catalog.client import CatalogClient

    aborted = []
    real_abort = CatalogClient.abort_batch

    def abort_batch(client, catalog_id, batch_id):
        aborted.append(batch_id)
        return real_abort(client, catalog_id, batch_id)

    monkeypatch.setattr(CatalogClient, "abort_batch", abort_batch)
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Document", id="hooked", title="Hooked")
        # Add-ons (task queues, mailers) register after-commit hooks; the transaction then calls
        # abort() on its resources once more, after tpc_finish.
        transaction.get().addAfterCommitHook(lambda success: None)
    assert aborted == []
    with on_site(CONNECTED) as site:
        assert paths(site, id="hooked") == ["/conn/hooked"]
        api.content.delete(site["hooked"])


def test_service_killed_between_vote_and_commit(plone_sites, catalog_service, monkeypatch):
    """A real crash of the service after the batch was staged and ZODB voted: ZODB commits, the
    staged batch survives in PostgreSQL, and the process commits it once the service is back."""
    from plone_connector.catalog.client import CatalogClient

    real_commit = CatalogClient.commit_batch
    killed = []

    def commit_after_a_crash(self, catalog_id, batch_id):
        if not killed:
            killed.append(batch_id)
            catalog_service.stop(kill=True)
        return real_commit(self, catalog_id, batch_id)

    monkeypatch.setattr(CatalogClient, "commit_batch", commit_after_a_crash)
    try:
        with on_site(CONNECTED) as site:
            api.content.create(container=site, type="Document", id="crashed", title="Crashed")
        assert killed, "the catalog commit was never reached"
        assert killed[0] in [batch_id for _, batch_id in batch_module._unfinished]
    finally:
        catalog_service.start()
    with on_site(CONNECTED) as site:
        # ZODB has the document; the first query after the restart commits the staged batch.
        assert "crashed" in site
        assert paths(site, id="crashed") == ["/conn/crashed"]
        assert not batch_module._unfinished
        report = verify(site)
        assert report.clean, report.as_dict()
