"""ZCatalog's unmerged results (``search(query, merge=0)``, ``searchResults(_merge=False)``): for
a sorted or relevance-ranked query, raw (sort key or score, rid, getter) records for
``Catalog.mergeResults``; for other queries, brains as usual. No installed Plone package asks for
records, so the connector does not give them: it raises UnmergedResultsUnsupported (a
NotImplementedError) where ZCatalog answers records, rather than answering brains, and answers
the other unmerged queries as ZCatalog does. ``merge`` as a searchResults keyword is no argument
in ZCatalog but an unknown query key, which both ignore.
"""

from __future__ import annotations

import pytest

from plone_connector.catalog.errors import UnmergedResultsUnsupported
from tests.connector.sites import CONNECTED, STOCK, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]


def site_paths(site, brains) -> list[str]:
    prefix = "/".join(site.getPhysicalPath())
    return sorted(b.getPath()[len(prefix):] for b in brains)


def brains_of(site) -> dict:
    """The unmerged queries ZCatalog answers with brains, as paths below the site."""
    catalog = site.portal_catalog
    query = {"portal_type": "Plone Site"}
    return {
        "search": site_paths(site, catalog.search(query, merge=0)),
        "_merge=False": site_paths(site, catalog.unrestrictedSearchResults(_merge=False, **query)),
        "_merge=True": site_paths(site, catalog.unrestrictedSearchResults(_merge=True, **query)),
        "merge key": site_paths(site, catalog.searchResults(merge=0, **query)),
    }


def test_unmerged_results(plone_sites):
    with on_site(STOCK, commit=False) as site:
        catalog = site.portal_catalog
        # Sorted, or ranked by relevance, ZCatalog answers records, not brains.
        for records in (catalog.search({"portal_type": "Plone Site"}, sort_index="getId", merge=0),
                        catalog.searchResults(portal_type="Plone Site", sort_on="getId", _merge=False),
                        catalog.searchResults(SearchableText="Plone", _merge=False)):
            assert records and all(isinstance(r, tuple) and len(r) == 3 for r in records)
        stock = brains_of(site)
    with on_site(CONNECTED, commit=False) as site:
        catalog = site.portal_catalog
        with pytest.raises(UnmergedResultsUnsupported, match=r"merge=0"):
            catalog.search({"portal_type": "Plone Site"}, sort_index="getId", merge=0)
        with pytest.raises(NotImplementedError, match=r"_merge=False"):
            catalog.searchResults(portal_type="Plone Site", sort_on="getId", _merge=False)
        with pytest.raises(UnmergedResultsUnsupported, match="text query"):
            catalog.unrestrictedSearchResults(SearchableText="Plone", _merge=0)
        assert brains_of(site) == stock
    assert set(map(tuple, stock.values())) == {("",)}
