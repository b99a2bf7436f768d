"""Indexes added to a running site are typed by their first values, so ranges and sorts over
numbers and dates answer as ZCatalog's (a text-typed index would put "10" before "9")."""

from __future__ import annotations

import pytest
from DateTime import DateTime
from plone import api

from plone_connector.catalog.schema import wire_value_type
from plone_connector.catalog.wire import IsoDate, index_scalar
from tests.connector.sites import CONNECTED, SITES, STOCK, on_site

pytestmark = [pytest.mark.slow, pytest.mark.plone]

ROOT = "typed"
# index name -> (meta type, value per document number)
NEW_INDEXES = {
    "bench_priority": ("FieldIndex", lambda n: n * 7 % 12),
    "bench_ratings": ("KeywordIndex", lambda n: [n % 5, n * 3 % 11]),
    "bench_due": ("FieldIndex", lambda n: DateTime(2024, 1 + n % 12, 1 + n, 12, 0, 0, "GMT+2")),
    "bench_label": ("FieldIndex", lambda n: f"label {n % 4}"),
}


def test_wire_value_types():
    assert wire_value_type(index_scalar(5)) == "number"
    assert wire_value_type(index_scalar(2.5)) == "number"
    assert wire_value_type(index_scalar(True)) == "boolean"
    assert wire_value_type(index_scalar(DateTime(2024, 1, 1))) == "datetime"
    assert isinstance(index_scalar(DateTime(2024, 1, 1)), IsoDate)
    assert wire_value_type(index_scalar("5")) == "text"
    assert wire_value_type([None, 3]) == "number"
    assert wire_value_type([]) is None


@pytest.fixture
def typed_sites(plone_sites):
    for name in SITES:
        with on_site(name) as site:
            folder = api.content.create(container=site, type="Folder", id=ROOT, title="Typed")
            for n in range(12):
                doc = api.content.create(container=folder, type="Document", id=f"t{n}", title=f"Typed {n}")
                for index, (_, value) in NEW_INDEXES.items():
                    setattr(doc, index, value(n))
    for name in SITES:
        with on_site(name) as site:
            catalog = site.portal_catalog
            for index, (meta_type, _) in NEW_INDEXES.items():
                catalog.addIndex(index, meta_type)
            catalog.reindexIndex(list(NEW_INDEXES), None)
    yield
    for name in SITES:
        with on_site(name) as site:
            for index in NEW_INDEXES:
                site.portal_catalog.delIndex(index)
            api.content.delete(site[ROOT])


def answer(site, query):
    base = "/".join(site.getPhysicalPath()) + "/" + ROOT
    brains = site.portal_catalog.unrestrictedSearchResults(path=base, **query)
    return [b.getId for b in brains]


QUERIES = [
    {"bench_priority": {"query": 5, "range": "min"}, "sort_on": "bench_priority"},
    {"bench_priority": {"query": [3, 10], "range": "min:max"}},
    {"sort_on": "bench_priority", "sort_order": "reverse"},
    {"bench_ratings": {"query": 8, "range": "min"}},
    {"bench_ratings": [4, 10]},
    {"bench_due": {"query": DateTime(2024, 6, 1), "range": "min"}, "sort_on": "bench_due"},
    {"sort_on": "bench_due"},
    {"bench_label": "label 2", "sort_on": "bench_priority"},
]


def test_new_indexes_are_typed_by_their_values(typed_sites):
    with on_site(CONNECTED, commit=False) as site:
        types = site.portal_catalog._service_value_types
        assert {k: types[k] for k in NEW_INDEXES} == {
            "bench_priority": "number", "bench_ratings": "number", "bench_due": "datetime", "bench_label": "text",
        }
        declared = {d.name: d.value_type for d in site.portal_catalog.schema_update().indexes}
        assert declared["bench_due"] == "datetime"
    for query in QUERIES:
        answers = {}
        for name in (STOCK, CONNECTED):
            with on_site(name, commit=False) as site:
                answers[name] = answer(site, dict(query))
        ordered = "sort_on" in query
        stock, connected = answers[STOCK], answers[CONNECTED]
        if not ordered:
            stock, connected = sorted(stock), sorted(connected)
        assert connected == stock, query
        assert stock, query  # each query selects something, so the comparison means something
