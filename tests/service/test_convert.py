"""Conversion of batch entries into stored values (store.batches.convert), without a database.

The indexes an entry can fill are computed once per catalog (Catalog.entry_slots); these cases
pin what the conversion gives for the shapes ZCatalog treats specially.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from catalog_schemas.api import Batch, CatalogCreate, IndexDeclaration
from catalog_service.indexes import BadValue
from catalog_service.store import batches
from catalog_service.store.catalogs import build

D = IndexDeclaration


def catalog(catalog_id: int, indexes: list[IndexDeclaration], metadata=("Title",)):
    spec = CatalogCreate(id=f"c{catalog_id}", indexes=indexes, metadata=list(metadata))
    return build({"id": catalog_id, "name": spec.id, "title": "", "token_hash": "", "schema_rev": 1,
                  "indexes": orjson.dumps([d.model_dump(mode="json") for d in spec.indexes]),
                  "metadata": orjson.dumps(list(spec.metadata))})


PLONE_LIKE = [
    D(name="path", type="ExtendedPathIndex"),
    D(name="effectiveRange", type="DateRangeIndex", since_field="effective", until_field="expires"),
    D(name="portal_type", type="FieldIndex"),
    D(name="Subject", type="KeywordIndex"),
    D(name="modified", type="DateIndex"),
]


def convert(cat, *entries):
    return batches.convert(Batch.model_validate({"batch_id": "b", "entries": list(entries)}), cat, 100)


def test_a_full_reindex_fills_every_index_the_object_has_and_opens_date_ranges():
    cat = catalog(1, PLONE_LIKE)
    first, second = convert(cat, {"uid": "a", "path": "/plone//a/", "values": {"portal_type": "Document"}},
                            {"uid": "b", "path": "/plone/b", "values": {"Subject": ["y", "x", "y"]}})
    # The physical path is the row's own columns; ZCatalog puts every object in a DateRangeIndex.
    assert first.path == "/plone/a" and first.idxs is None
    assert first.idx == {"effectiveRange": [None, None], "portal_type": "Document"}
    assert second.idx == {"effectiveRange": [None, None], "Subject": ["x", "y"]}
    first.idx["effectiveRange"][0] = 1  # each object has a list of its own
    assert second.idx["effectiveRange"] == [None, None]


def test_a_partial_reindex_fills_only_the_indexes_it_names_once_each_in_order():
    cat = catalog(2, PLONE_LIKE)
    (change,) = convert(cat, {"uid": "a", "path": "/plone/a", "values": {"portal_type": "News Item"},
                              "idxs": ["portal_type", "path", "effectiveRange", "portal_type"]})
    assert change.idxs == ["portal_type", "path", "effectiveRange"]
    assert change.idx == {"portal_type": "News Item", "effectiveRange": [None, None]}
    assert change.meta_partial


@pytest.mark.parametrize("entry, message", [
    ({"values": {"nope": 1}}, "no such index ['nope']"),
    ({"metadata": {"nope": 1}}, "no such metadata column ['nope']"),
    ({"idxs": ["portal_type", "nope"]}, "idxs names unknown indexes ['nope']"),
    ({"values": {"modified": "not a date"}}, "index 'modified'"),
])
def test_unknown_names_and_bad_values_are_named_errors(entry, message):
    cat = catalog(3, PLONE_LIKE)
    with pytest.raises(BadValue) as raised:
        convert(cat, {"uid": "a", "path": "/plone/a", **entry})
    assert message in raised.value.detail and "'a'" in raised.value.detail


def test_each_catalog_converts_with_its_own_indexes():
    small = catalog(4, [D(name="portal_type", type="FieldIndex")])
    large = catalog(5, PLONE_LIKE)
    entry = {"uid": "a", "path": "/plone/a", "values": {"portal_type": "Document"}}
    assert convert(small, entry)[0].idx == {"portal_type": "Document"}
    assert convert(large, entry)[0].idx == {"portal_type": "Document", "effectiveRange": [None, None]}
    with pytest.raises(BadValue):
        convert(small, {**entry, "values": {"Subject": ["x"]}})


@given(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1),
                    timezones=st.sampled_from([None, UTC, timezone(timedelta(hours=5, minutes=30)),
                                               timezone(-timedelta(hours=8))])))
def test_the_server_clock_converts_as_its_iso_text(moment):
    """A query's effective date is the server's datetime, converted without a round trip through
    its ISO text (planner): the same minutes either way."""
    from catalog_service.indexes.dates import epoch_minutes

    assert epoch_minutes(moment) == epoch_minutes(moment.isoformat())
