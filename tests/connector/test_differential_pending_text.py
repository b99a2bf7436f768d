"""Text queries inside a transaction with a new document, stock Plone against the connector.

Measured on a Plone site: with committed content and one new document "Gartenzwerg Garten" in the
open transaction, ZCatalog found it by ``Gartenz*``, scored ``Gartenzwerg`` 2576 and ranked it
first for ``Garten*``; the connector found nothing, scored 0 and ranked it second, because the
service's glob expansion and Okapi statistics knew only committed rows. Both sites get the same
committed content, then the same new document in a transaction that is never committed, and must
rank and score alike, through the catalog and plone.restapi's ``@search``.
"""

from __future__ import annotations

import pytest
from plone import api
from plone.restapi.search.handler import SearchHandler

from tests.connector.sites import CONNECTED, SITES, STOCK, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ROOT = "garten"
COMMITTED = {
    "blumen": ("Blumen", "Garten Garten Blumen"),
    "see": ("Am See", "Der Garten am See"),
    "katzen": ("Katzen", "Katzen im Garten"),
    "hunde": ("Hunde", "Katzen und Hunde und Katzen"),
    "gartenhaus": ("Gartenhaus", "Gartenhaus aus Holz"),
}


@pytest.fixture
def garden(plone_sites):
    for name in SITES:
        with on_site(name) as site:
            root = api.content.create(container=site, type="Folder", id=ROOT, title="Garten")
            for obj_id, (title, text) in COMMITTED.items():
                api.content.create(container=root, type="Document", id=obj_id, title=title, description=text)
    yield
    for name in SITES:
        delete_from(name, ROOT)


def relative(site, path: str) -> str:
    return path[len("/".join(site.getPhysicalPath())):]


def pending_answers(name: str) -> dict:
    """The answers inside a transaction that adds "Gartenzwerg Garten" (aborted afterwards)."""
    found = {}
    with on_site(name, commit=False) as site:
        api.content.create(container=site[ROOT], type="Document", id="zwerg", title="Gartenzwerg",
                           description="Gartenzwerg Garten")
        for text in ("Gartenz*", "Gartenzwerg", "Garten*", "Garten", "Katzen"):
            brains = site.portal_catalog.unrestrictedSearchResults(SearchableText=text)
            found[text] = [(relative(site, b.getPath()), b.data_record_score_) for b in brains]
        search = SearchHandler(site, site.REQUEST).search({"SearchableText": "Katzen", "b_size": 2})
        found["@search Katzen"] = (search["items_total"],
                                   [item["@id"].split(site.getId(), 1)[1] for item in search["items"]])
    return found


def test_pending_document_is_globbed_and_scored_as_with_zcatalog(garden):
    stock, connected = pending_answers(STOCK), pending_answers(CONNECTED)
    assert stock["Gartenz*"][0][0] == f"/{ROOT}/zwerg"  # the scenario is the one measured
    assert stock["Garten*"][0][0] == f"/{ROOT}/zwerg"
    for label in stock:
        if label.startswith("@"):
            assert connected[label] == stock[label], label
            continue
        # Equal scores are in record-id order, which the two sites need not share: the scores in
        # their order, and each document's score.
        assert [s for _, s in connected[label]] == [s for _, s in stock[label]], label
        assert sorted(connected[label]) == sorted(stock[label]), label
