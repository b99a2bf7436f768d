"""Review: catalog schema changes made the ways Plone sites make them (a GenericSetup catalog.xml
import on a site with content, an upgrade step's delIndex/addIndex/reindexIndex, the ZMI's
clearIndex) must leave the connector site answering as the stock ZCatalog site does after the
very same change (ZCatalog is the oracle)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from plone import api

from plone_connector.catalog import batch as batch_module
from tests.connector.sites import CONNECTED, SITES, STOCK, delete_from, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

INDEX = "rsc_attr"
NUMBER_INDEX = "rsc_number"
COLUMN = "rsc_column"
DOCS = {"rsc-doc-a": ("Alpha probe", 9, ("red",)), "rsc-doc-b": ("Beta probe", 10, ("red", "blue"))}


def _xml(*indexes: str) -> bytes:
    return ('<?xml version="1.0"?>\n<object name="portal_catalog">\n' + "\n".join(indexes)
            + "\n</object>\n").encode()


def _import(site, body: bytes) -> None:
    """What Plone's catalog import step does with a profile's catalog.xml (no purge)."""
    from Products.GenericSetup.testing import DummySetupEnviron
    from Products.GenericSetup.ZCatalog.exportimport import ZCatalogXMLAdapter

    environ = DummySetupEnviron()
    environ._should_purge = False
    ZCatalogXMLAdapter(site.portal_catalog, environ).body = body


def _paths(site, **query) -> list[str]:
    prefix = "/".join(site.getPhysicalPath())
    return [b.getPath()[len(prefix):].lstrip("/") for b in site.portal_catalog.unrestrictedSearchResults(**query)]


def _answers(**query) -> dict[str, list[str]]:
    """The answer of each site (stock and connector) to ``query``, sorted unless it sorts."""
    found = {}
    for name in SITES:
        with on_site(name, commit=False) as site:
            paths = _paths(site, **query)
            found[name] = paths if "sort_on" in query else sorted(paths)
    return found


def _on_both(action) -> None:
    for name in SITES:
        with on_site(name) as site:
            action(site)


@pytest.fixture
def probe(plone_sites):
    """A FieldIndex of the documents' ids, and two documents (with a number attribute)."""

    def setup(site):
        site.portal_catalog.addIndex(INDEX, "FieldIndex", extra=SimpleNamespace(indexed_attrs="getId"))
        site.portal_catalog.addIndex(NUMBER_INDEX, "FieldIndex")
        for doc_id, (title, number, subjects) in DOCS.items():
            doc = api.content.create(container=site, type="Document", id=doc_id, title=title,
                                     subject=subjects)
            doc.rsc_number = number
            doc.reindexObject()

    _on_both(setup)
    assert _answers(**{INDEX: "rsc-doc-a"}) == {STOCK: ["rsc-doc-a"], CONNECTED: ["rsc-doc-a"]}
    yield
    batch_module._unsent_schemas.clear()

    def teardown(site):
        catalog = site.portal_catalog
        for name in (INDEX, NUMBER_INDEX):
            if name in catalog.indexes():
                catalog.delIndex(name)
        if COLUMN in catalog.schema():
            catalog.delColumn(COLUMN)

    _on_both(teardown)
    for name in SITES:
        delete_from(name, *DOCS)


def _same(**query) -> list[str]:
    found = _answers(**query)
    assert found[CONNECTED] == found[STOCK], query
    return found[STOCK]


# -- 1. catalog.xml changing an existing index's properties -----------------------------------

def test_import_changing_indexed_attrs_empties_the_index_as_zcatalog_does(probe):
    # GenericSetup's PluggableIndexNodeAdapter sets the new indexed_attrs and clears the index:
    # ZCatalog answers nothing from it until it is reindexed.
    _on_both(lambda site: _import(site, _xml(
        f'<index name="{INDEX}" meta_type="FieldIndex"><indexed_attr value="Title"/></index>')))
    assert _same(**{INDEX: "rsc-doc-a"}) == []
    assert _same(**{INDEX: "Alpha probe"}) == []


def test_import_with_reindex_keeps_the_values_through_a_later_schema_change(probe):
    # An upgrade step: import the changed catalog.xml, then reindex the index.
    def upgrade(site):
        _import(site, _xml(f'<index name="{INDEX}" meta_type="FieldIndex"><indexed_attr value="Title"/></index>'))
        site.portal_catalog.manage_reindexIndex([INDEX])

    _on_both(upgrade)
    assert _same(**{INDEX: "Alpha probe"}) == ["rsc-doc-a"]
    # Any later schema change (here a metadata column) sends the whole schema again.
    _on_both(lambda site: site.portal_catalog.addColumn(COLUMN))
    assert _same(**{INDEX: "Alpha probe"}) == ["rsc-doc-a"]


def test_a_changed_property_then_reindexed_keeps_its_values_through_a_later_schema_change(probe):
    # A script or an upgrade step that sets the property itself (no clear), then reindexes.
    def upgrade(site):
        index = site.portal_catalog._catalog.getIndex(INDEX)
        index.indexed_attrs = ["Title"]
        site.portal_catalog.manage_reindexIndex([INDEX])

    _on_both(upgrade)
    assert _same(**{INDEX: "Alpha probe"}) == ["rsc-doc-a"]
    _on_both(lambda site: site.portal_catalog.addColumn(COLUMN))
    assert _same(**{INDEX: "Alpha probe"}) == ["rsc-doc-a"]


# -- clearIndex (ZMI "Clear" on the Indexes tab) -----------------------------------------------

def test_clear_index_empties_the_index_as_zcatalog_does(probe):
    _on_both(lambda site: site.portal_catalog.manage_clearIndex([INDEX]))
    assert _same(**{INDEX: "rsc-doc-a"}) == []


# -- replacing an index under the same name (upgrade steps: delIndex, addIndex, reindex) --------

def test_replacing_a_field_index_by_a_keyword_index_with_a_reindex(probe):
    def upgrade(site):
        catalog = site.portal_catalog
        catalog.delIndex(INDEX)
        catalog.addIndex(INDEX, "KeywordIndex", extra=SimpleNamespace(indexed_attrs="Subject"))
        catalog.manage_reindexIndex([INDEX])

    _on_both(upgrade)
    assert _same(**{INDEX: "red"}) == ["rsc-doc-a", "rsc-doc-b"]
    assert _same(**{INDEX: "blue"}) == ["rsc-doc-b"]


def test_recreating_an_index_without_a_reindex_leaves_it_empty_as_zcatalog_does(probe):
    def upgrade(site):
        catalog = site.portal_catalog
        catalog.delIndex(INDEX)
        catalog.addIndex(INDEX, "FieldIndex", extra=SimpleNamespace(indexed_attrs="getId"))

    _on_both(upgrade)
    assert _same(**{INDEX: "rsc-doc-a"}) == []


def test_recreating_a_number_index_with_a_reindex_keeps_comparing_numbers(probe):
    assert _same(**{NUMBER_INDEX: {"query": 5, "range": "min"}, "sort_on": NUMBER_INDEX}) == [
        "rsc-doc-a", "rsc-doc-b"]

    def upgrade(site):
        catalog = site.portal_catalog
        catalog.delIndex(NUMBER_INDEX)
        catalog.addIndex(NUMBER_INDEX, "FieldIndex")
        catalog.manage_reindexIndex([NUMBER_INDEX])

    _on_both(upgrade)
    assert _same(**{NUMBER_INDEX: {"query": 5, "range": "min"}, "sort_on": NUMBER_INDEX}) == [
        "rsc-doc-a", "rsc-doc-b"]


# -- adding an index or a column with catalog.xml on a site with content ----------------------

def test_import_adding_an_index_and_a_column(probe):
    name = "rsc_added"

    _on_both(lambda site: _import(site, _xml(
        f'<index name="{name}" meta_type="FieldIndex"><indexed_attr value="getId"/></index>',
        f'<column value="{COLUMN}"/>')))
    try:
        assert _same(**{name: "rsc-doc-a"}) == []  # not reindexed: empty in ZCatalog too
        for site_name in SITES:
            with on_site(site_name, commit=False) as site:
                brain = site.portal_catalog.unrestrictedSearchResults(**{INDEX: "rsc-doc-a"})[0]
                assert repr(getattr(brain, COLUMN)) == "Missing.Value", site_name
        _on_both(lambda site: site.portal_catalog.manage_reindexIndex([name]))
        assert _same(**{name: "rsc-doc-a"}) == ["rsc-doc-a"]
    finally:
        def remove(site):
            if name in site.portal_catalog.indexes():
                site.portal_catalog.delIndex(name)

        _on_both(remove)
