"""First end to end: content created in both sites is found identically in both catalogs."""

import pytest
import transaction
from plone import api

from tests.connector.sites import CONNECTED, SITES, STOCK, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]


@pytest.fixture(autouse=True)
def removed_afterwards(plone_sites):
    """Other modules compare the two sites' indexes: what these tests made goes afterwards."""
    yield
    for name in SITES:
        delete_from(name, "e2e", "cache-probe")


def brains_view(brains, site):
    """What a brain says, with the site's own path prefix removed so the two sites compare."""
    prefix = "/" + site.getId()
    rows = []
    for brain in brains:
        rows.append((brain.getPath()[len(prefix):], brain.Title, brain.portal_type, brain.review_state))
    return rows


def test_create_and_find(plone_sites):
    for name in SITES:
        with on_site(name) as site:
            folder = api.content.create(container=site, type="Folder", id="e2e", title="End to end")
            api.content.create(container=folder, type="Document", id="doc-1", title="First document")
            api.content.create(container=folder, type="Document", id="doc 2", title="Second document")
    answers = {}
    for name in SITES:
        with on_site(name) as site:
            catalog = site.portal_catalog
            path = "/".join(site.getPhysicalPath()) + "/e2e"
            brains = catalog(path={"query": path, "depth": 1}, sort_on="getObjPositionInParent")
            answers[name] = brains_view(brains, site)
            assert len(brains) == 2
            obj = brains[0].getObject()
            assert obj.getId() == "doc-1"
    assert answers[STOCK] == answers[CONNECTED]
    assert [row[0] for row in answers[CONNECTED]] == ["/e2e/doc-1", "/e2e/doc 2"]


def test_pending_changes_visible_inside_transaction_only(plone_sites):
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Document", id="pending", title="Pending one")
        found = site.portal_catalog.unrestrictedSearchResults(Title="Pending")
        assert [b.getId for b in found] == ["pending"]
        transaction.abort()
    with on_site(CONNECTED) as site:
        assert len(site.portal_catalog.unrestrictedSearchResults(Title="Pending")) == 0


def test_pending_changes_visible_to_restricted_search(plone_sites):
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Document", id="pending-2", title="Pending two")
        found = site.portal_catalog(Title="Pending")
        assert [b.getId for b in found] == ["pending-2"]
        transaction.abort()


def test_query_cache_hits_until_a_batch_commits(plone_sites):
    from plone_connector.catalog.cache import query_cache

    def ask():
        with on_site(CONNECTED, user=None, commit=False) as site:
            return [b.getPath() for b in site.portal_catalog(portal_type="Folder", sort_on="sortable_title")]

    first = ask()
    hits = query_cache.hits
    assert ask() == first
    assert query_cache.hits == hits + 1
    with on_site(CONNECTED) as site:
        folder = api.content.create(container=site, type="Folder", id="cache-probe", title="Cache probe")
        api.content.transition(folder, "publish")
    misses = query_cache.misses
    after = ask()
    assert query_cache.misses == misses + 1  # the counter moved with the commit: a new key
    assert set(after) == {*first, "/conn/cache-probe"}
