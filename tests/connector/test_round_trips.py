"""What a write costs in service round trips, and that saving one never changes an answer."""

from __future__ import annotations

import pytest
import transaction
from plone import api

from plone_connector.catalog.client import get_client
from tests.connector.sites import CONNECTED, SITES, STOCK, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]


def relative(site, brains):
    prefix = "/".join(site.getPhysicalPath())
    return sorted(b.getPath()[len(prefix):] for b in brains)


def test_creating_a_document_costs_a_stage_and_a_commit(plone_sites):
    with on_site(CONNECTED) as site:
        api.content.create(container=site, type="Folder", id="trips", title="Trips")
    client = get_client()
    before = client.requests_sent
    with on_site(CONNECTED) as site:
        api.content.create(container=site["trips"], type="Document", id="one", title="One")
    # The workflow's security reindex of the new object asks for its subtree: answered without
    # the service, since nothing can be catalogued under an object this transaction created.
    assert client.requests_sent - before == 2
    with on_site(CONNECTED) as site:
        assert [b.getId for b in site.portal_catalog.unrestrictedSearchResults(path="/conn/trips/one")] == ["one"]
        api.content.delete(site["trips"])


def test_subtree_of_a_new_folder_holding_moved_content(plone_sites):
    """A folder created in this transaction with existing content moved into it: its subtree query
    must still find that content, as ZCatalog does."""
    for name in SITES:
        with on_site(name) as site:
            api.content.create(container=site, type="Document", id="mover", title="Mover")
    answers = {}
    for name in SITES:
        with on_site(name) as site:
            fresh = api.content.create(container=site, type="Folder", id="fresh", title="Fresh")
            api.content.move(source=site["mover"], target=fresh)
            catalog = site.portal_catalog
            search = catalog._unrestrictedSearchResults
            answers[name] = relative(site, search(path="/".join(fresh.getPhysicalPath())))
            transaction.abort()
    assert answers[CONNECTED] == answers[STOCK]
    assert "/fresh/mover" in answers[CONNECTED]
    for name in SITES:
        with on_site(name) as site:
            api.content.delete(site["mover"])
