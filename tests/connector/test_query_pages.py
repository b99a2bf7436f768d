"""What an uncached query fetches: the page a caller reads, not more, with ZCatalog's answer."""

from __future__ import annotations

import pytest
from plone import api

from plone_connector.catalog.cache import query_cache
from plone_connector.catalog.client import get_client
from tests.connector.sites import CONNECTED, SITES, STOCK, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

DOCUMENTS = 45


@pytest.fixture(scope="module")
def pages_folder(plone_sites):
    for name in SITES:
        with on_site(name) as site:
            folder = api.content.create(container=site, type="Folder", id="pages", title="Pages")
            for n in range(DOCUMENTS):
                api.content.create(container=folder, type="Document", id=f"p{n:02d}", title=f"Page {n}")
    yield
    for name in SITES:
        with on_site(name) as site:
            api.content.delete(site["pages"])


@pytest.fixture
def searches(monkeypatch):
    """The search requests the connector sends (b_start, b_size, metadata asked), in order."""
    client = get_client()
    sent = []
    real = client.search

    def search(catalog_id, request, principals, unrestricted=False):
        sent.append((request.b_start, request.b_size, request.metadata))
        return real(catalog_id, request, principals, unrestricted)

    monkeypatch.setattr(client, "search", search)
    query_cache.clear()
    return sent


def listing(site, **query):
    return site.portal_catalog.searchResults(path={"query": "/".join(site["pages"].getPhysicalPath()), "depth": 1},
                                             sort_on="getObjPositionInParent", **query)


def ids(brains, count=None):
    return [b.getId for b in (brains if count is None else brains[:count])]


def test_a_listing_without_b_size_fetches_the_twenty_it_reads(pages_folder, searches):
    with on_site(STOCK, commit=False) as site:
        stock = listing(site)
        expected_len, expected_first, expected_all = len(stock), ids(stock, 20), ids(stock)
    with on_site(CONNECTED, commit=False) as site:
        brains = listing(site)
        assert len(brains) == expected_len == DOCUMENTS
        assert ids(brains, 20) == expected_first
        assert searches == [(0, 20, "*")]  # the count came with the first page
        assert ids(brains) == expected_all
        # Reading on: the rest in one page (four times the 20 read, cut at the end).
        assert searches == [(0, 20, "*"), (20, 25, "*")]


def test_a_batch_up_to_one_hundred_is_fetched_whole(pages_folder, searches):
    with on_site(STOCK, commit=False) as site:
        expected = ids(listing(site, b_start=0, b_size=40))
    with on_site(CONNECTED, commit=False) as site:
        assert ids(listing(site, b_start=0, b_size=40)) == expected
    assert searches == [(0, 40, "*")]


def test_rid_lookups_fetch_no_metadata(pages_folder, searches):
    with on_site(CONNECTED, commit=False) as site:
        catalog = site.portal_catalog
        rids = catalog._rids_for({"portal_type": "Document", "path": "/".join(site["pages"].getPhysicalPath())})
        assert len(rids) == DOCUMENTS
        assert sorted(catalog.getpath(rid) for rid in rids) == sorted(
            "/".join(doc.getPhysicalPath()) for doc in site["pages"].objectValues())
    assert searches and all(metadata == [] for _, _, metadata in searches)
