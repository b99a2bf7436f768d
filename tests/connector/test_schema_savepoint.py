"""A schema removal rolled back to a savepoint must not reach the service.

The data manager computes the transaction's whole schema update (``_schema_final``) when it sends
the additions, at the first staging (a query of the transaction stages its batch). A savepoint
rollback afterwards takes the delIndex back in ZODB, but not ``_schema_final``: tpc_finish then
sends the removal of an index ZODB still has, and the service drops it with its values.
"""

from __future__ import annotations

import pytest
import transaction
from plone import api

from plone_connector.catalog.client import get_client
from tests.connector.sites import CONNECTED, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

PROBE_INDEX = "review2_sp_probe"
PROBE_DOC = "review2-sp-doc"


def _service_index_names(catalog_id: str) -> set[str]:
    return {index.name for index in get_client().get_catalog(catalog_id).indexes}


@pytest.fixture
def probe_index(plone_sites):
    with on_site(CONNECTED) as site:
        site.portal_catalog.addIndex(PROBE_INDEX, "FieldIndex", extra={"indexed_attrs": "Title"})
        api.content.create(container=site, type="Document", id=PROBE_DOC, title="Probe")
    yield
    with on_site(CONNECTED) as site:
        site.portal_catalog._schema_changed()  # declares ZODB's indexes to the service again
    with on_site(CONNECTED) as site:
        if PROBE_INDEX in site.portal_catalog.indexes():
            site.portal_catalog.delIndex(PROBE_INDEX)
    delete_from(CONNECTED, PROBE_DOC)


def test_del_index_rolled_back_to_a_savepoint_stays_in_the_service(probe_index):
    with on_site(CONNECTED, commit=False) as site:
        catalog_id = site.portal_catalog.catalog_id()
    assert PROBE_INDEX in _service_index_names(catalog_id)

    with on_site(CONNECTED) as site:
        catalog = site.portal_catalog
        site[PROBE_DOC].reindexObject()
        catalog.unrestrictedSearchResults(portal_type="Document")  # the data manager joins
        savepoint = transaction.savepoint()
        catalog.delIndex(PROBE_INDEX)
        site[PROBE_DOC].reindexObject()
        catalog.unrestrictedSearchResults(portal_type="Document")  # stages: the additions are sent
        savepoint.rollback()  # e.g. an upgrade step that failed, caught by its caller
        assert PROBE_INDEX in catalog.indexes()
        site[PROBE_DOC].setTitle("Probe, edited")
        site[PROBE_DOC].reindexObject()

    with on_site(CONNECTED, commit=False) as site:
        assert PROBE_INDEX in site.portal_catalog.indexes()  # ZODB kept the index
    assert PROBE_INDEX in _service_index_names(catalog_id), (
        "the rolled-back delIndex reached the service when the transaction committed"
    )
    # And its values: the edit indexed the title in it.
    with on_site(CONNECTED, commit=False) as site:
        brains = site.portal_catalog.unrestrictedSearchResults(**{PROBE_INDEX: "Probe, edited"})
        assert [b.getId for b in brains] == [PROBE_DOC]
