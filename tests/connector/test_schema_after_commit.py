"""Schema removals reach the service only once ZODB has committed (docs/decisions/0016): in
tpc_finish, before the batch's commit, which is staged again first when they changed the indexes
it was staged against; a failure there is retried before the next query of the process."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from plone import api

from plone_connector.catalog import batch as batch_module
from plone_connector.catalog.client import CatalogClient, get_client
from tests.connector.sites import CONNECTED, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

INDEX = "schema_probe_range"
DOC = "schema-probe-doc"


def _service_index_names(catalog_id: str) -> set[str]:
    return {index.name for index in get_client().get_catalog(catalog_id).indexes}


@pytest.fixture
def probe(plone_sites):
    """A DateRangeIndex (every object holds a value of it: an open range at least) and a document."""
    with on_site(CONNECTED) as site:
        extra = SimpleNamespace(since_field="effective", until_field="expires")
        site.portal_catalog.addIndex(INDEX, "DateRangeIndex", extra=extra)
        api.content.create(container=site, type="Document", id=DOC, title="Probe")
        catalog_id = site.portal_catalog.catalog_id()
    assert INDEX in _service_index_names(catalog_id)
    yield catalog_id
    batch_module._unsent_schemas.clear()
    with on_site(CONNECTED) as site:
        if INDEX in site.portal_catalog.indexes():
            site.portal_catalog.delIndex(INDEX)
    delete_from(CONNECTED, DOC)


def _indexed(catalog_id: str) -> dict:
    return get_client().get_object(catalog_id, f"/{CONNECTED}/{DOC}")["indexes"]


def test_a_removal_with_a_reindex_leaves_nothing_of_the_index(probe):
    catalog_id = probe
    assert INDEX in _indexed(catalog_id)
    sent = []
    real = CatalogClient.update_schema

    def update_schema(client, catalog_id, update):
        sent.append(update.only_add)
        return real(client, catalog_id, update)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CatalogClient, "update_schema", update_schema)
        with on_site(CONNECTED) as site:
            site.portal_catalog.delIndex(INDEX)
            site[DOC].reindexObject()
            site.portal_catalog.unrestrictedSearchResults(portal_type="Document")  # stages the batch
            # Not sent before ZODB commits: the service still has the index.
            assert sent == [True] and INDEX in _service_index_names(catalog_id)
    assert sent == [True, False]
    assert INDEX not in _service_index_names(catalog_id)
    # The batch was staged while the service still had the index (its full entry got the index's
    # open range); staged again after the removal, it left none of it behind.
    assert INDEX not in _indexed(catalog_id)


def test_a_removal_that_fails_after_the_commit_is_sent_again_before_the_next_query(probe):
    catalog_id = probe
    real = CatalogClient.update_schema

    def unavailable(client, catalog_id, update):
        if not update.only_add:
            raise batch_module.ServiceUnavailable("the service is down", 503)
        return real(client, catalog_id, update)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(CatalogClient, "update_schema", unavailable)
        with on_site(CONNECTED) as site:
            site.portal_catalog.delIndex(INDEX)
            site[DOC].reindexObject()
    # ZODB committed; the removal is kept for a retry (the service keeps the index meanwhile).
    unsent = batch_module._unsent_schemas
    assert list(unsent) == [catalog_id]
    assert (unsent[catalog_id].indexes, unsent[catalog_id].metadata) == ({INDEX}, set())
    assert unsent[catalog_id].after > 0  # the retry waits for a snapshot with this commit
    assert INDEX in _service_index_names(catalog_id)
    with on_site(CONNECTED, commit=False) as site:
        assert INDEX not in site.portal_catalog.indexes()
        site.portal_catalog.unrestrictedSearchResults(portal_type="Document")
    assert batch_module._unsent_schemas == {}
    assert INDEX not in _service_index_names(catalog_id)
    # The batch was committed as first staged (with the index's open range); the removal sent
    # again dropped that too.
    assert INDEX not in _indexed(catalog_id)
