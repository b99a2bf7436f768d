"""A transaction whose staged batch another process's resolver aborted before ZODB committed it
(its commit came later than the resolve delay, decisions/0011): the service refuses the commit
with a 409, and the connector applies the batch's entries again under a new id."""

from __future__ import annotations

import pytest
from plone import api

from plone_connector.catalog.client import CatalogClient
from plone_connector.catalog.committed import batch_watch
from plone_connector.catalog.verify import verify
from tests.connector.sites import CONNECTED, delete_from, on_site
from tests.connector.sites import catalog_paths as paths

pytestmark = [pytest.mark.slow, pytest.mark.plone]


@pytest.fixture
def remove_created(plone_sites):
    """Other test modules compare this site with the stock one: leave no extra content behind."""
    yield
    delete_from(CONNECTED, "late-folder")


def test_a_batch_aborted_before_its_late_commit_is_applied_again(remove_created, monkeypatch):
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Folder", id="late-folder", title="Late")
    real_commit = CatalogClient.commit_batch
    aborted = []

    def commit_after_a_resolver_aborted(client, catalog_id, batch_id):
        # Another process's resolver took this batch for one a crash left, just before our commit.
        client.abort_batch(catalog_id, batch_id)
        aborted.append(batch_id)
        return real_commit(client, catalog_id, batch_id)

    monkeypatch.setattr(CatalogClient, "commit_batch", commit_after_a_resolver_aborted)
    with on_site(CONNECTED) as site:
        api.content.create(container=site["late-folder"], type="Document", id="late", title="Late")
        site["late-folder"].setTitle("Late, renamed")
        site["late-folder"].reindexObject()
    monkeypatch.undo()
    assert len(aborted) == 1
    waits = batch_watch.waits
    with on_site(CONNECTED) as site:
        assert paths(site, path="/conn/late-folder") == ["/conn/late-folder", "/conn/late-folder/late"]
        brains = site.portal_catalog.unrestrictedSearchResults(path={"query": "/conn/late-folder", "depth": 0})
        assert [b.Title for b in brains] == ["Late, renamed"]
        report = verify(site)
        assert "/conn/late-folder/late" not in report.missing and "/conn/late-folder" not in report.stale, \
            report.as_dict()
    # The catalog counter's mark still names the aborted batch; its entries are in the catalog
    # again, so this process's queries do not wait for it (about a second) nor skip the cache.
    assert batch_watch.waits == waits
