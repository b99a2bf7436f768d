"""Review (stop 21): schema changes that replace an index, with the transaction's batch staged by
a query before the commit (ZCatalog is the oracle)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.connector.sites import CONNECTED, STOCK, on_site
from tests.connector.test_review_schema_changes import INDEX, _on_both, _same, probe  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.plone]


def test_replacing_a_field_index_by_a_keyword_index_with_a_query_between_the_reindexes(probe):  # noqa: F811
    # An upgrade step that replaces the index, reindexes, asks the catalog something (which
    # stages the transaction's batch in the service, the index still declared FieldIndex there)
    # and reindexes again: the entries changed after the query are staged by tpc_begin; their
    # list values must be left out of that staging too, as they were of the query's.
    def upgrade(site):
        catalog = site.portal_catalog
        catalog.delIndex(INDEX)
        catalog.addIndex(INDEX, "KeywordIndex", extra=SimpleNamespace(indexed_attrs="Subject"))
        catalog.manage_reindexIndex([INDEX])
        assert len(catalog.unrestrictedSearchResults(portal_type="Document")) >= 2
        site["rsc-doc-b"].setSubject(("red", "blue", "green"))
        site["rsc-doc-b"].reindexObject()

    _on_both(upgrade)
    assert _same(**{INDEX: "red"}) == ["rsc-doc-a", "rsc-doc-b"]
    assert _same(**{INDEX: "green"}) == ["rsc-doc-b"]


def test_removing_an_index_of_a_catalog_not_loaded_yet(probe):  # noqa: F811
    # An upgrade step's first touch of the catalog in its transaction may be delIndex: the
    # tool's _catalog is then a ghost (not loaded since the Connection's cache dropped it), whose
    # __dict__ is empty until it is activated (indexes.definition activates it first).
    from Acquisition import aq_base

    def upgrade(site):
        catalog = site.portal_catalog
        inner = aq_base(catalog._catalog)
        inner._p_deactivate()
        assert inner._p_changed is None  # a ghost
        catalog.delIndex(INDEX)

    _on_both(upgrade)
    for name in (STOCK, CONNECTED):
        with on_site(name, commit=False) as site:
            assert INDEX not in site.portal_catalog.indexes()


def test_clearing_an_index_whose_catalog_is_ghosted_before_the_commit(probe):  # noqa: F811
    # A long clear-and-reindex (savepoints, cache garbage collection) may leave the catalog, which
    # clear() does not modify, a ghost when the transaction commits and the schema update is made.
    from Acquisition import aq_base

    def upgrade(site):
        catalog = site.portal_catalog
        catalog.manage_clearIndex([INDEX])
        inner = aq_base(catalog._catalog)
        inner._p_deactivate()
        assert inner._p_changed is None  # a ghost

    _on_both(upgrade)
    assert _same(**{INDEX: "rsc-doc-a"}) == []
