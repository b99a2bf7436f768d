"""Differential test of unique values: the service's ``GET /catalogs/{id}/unique/{index}`` answers
as a real ZCatalog's ``uniqueValuesFor(name)`` and, with ``lengths``, as the index's
``uniqueValues(withLengths=True)`` and ``numObjects()``; ``GET /catalogs/{id}/words/{index}``
answers a ZCTextIndex's ``numObjects()`` and ``indexSize()``.

Each hypothesis example loads generated objects (with None and missing values) into a ZCatalog
(tests/service/oracle.py) and a service catalog, compares every index, then unindexes some
objects and reindexes others with new values in both, and compares again. Where ZCatalog raises
(a ZCTextIndex, a GopipIndex), the service must answer 4xx; ExtendedPathIndex's withLengths
raises too, and the service answers PathIndex's (see path_lengths). A DateRangeIndex's values of
its since and until attributes are compared too (check_range_bounds)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from tests.service.oracle import ServiceCatalog, ZCatalogOracle, service_client_fixture  # noqa: F401
from tests.service.strategies import INDEXES, METADATA, CatalogObject, plone_objects, to_wire

COMPARED = [decl.name for decl in INDEXES if decl.type != "ZCTextIndex"]
TEXT = [decl.name for decl in INDEXES if decl.type == "ZCTextIndex"]
KIND = {decl.name: decl.type for decl in INDEXES}


@pytest.fixture(scope="module")
def service_catalog(service_client):
    catalog = ServiceCatalog(service_client, f"uniq-{uuid.uuid4().hex[:12]}", INDEXES, METADATA)
    yield catalog
    catalog.drop()


def zcatalog_answer(oracle: ZCatalogOracle, name: str, lengths: bool) -> dict | Exception:
    """What ZCatalog answers, in the service's shape; the exception if it raises."""
    index = oracle.catalog._catalog.getIndex(name)
    if lengths and index.meta_type == "ExtendedPathIndex":
        return path_lengths(index)
    try:
        if not lengths:
            return {"values": list(oracle.catalog.uniqueValuesFor(name))}
        pairs = list(index.uniqueValues(withLengths=True))
    except Exception as exc:  # whatever ZCatalog raises is the expected behaviour
        return exc
    answer = {"values": [value for value, _ in pairs], "lengths": [length for _, length in pairs]}
    # A DateRangeIndex lists no values but holds every object (numObjects()), open range or not.
    answer["objects"] = index.numObjects() if index.meta_type == "DateRangeIndex" else holders(index)
    return answer


def path_lengths(index) -> dict:
    """ExtendedPathIndex's uniqueValues(withLengths=True) raises a TypeError on its None key (the
    connector raises it too); the service answers what PathIndex's would: per component, the
    objects holding it at any level, counted from the component mapping; and numObjects()."""
    values, lengths = [], []
    for component, levels in index._index.items():
        documents: set[int] = set()
        for rows in levels.values():
            documents.update(rows)
        values.append(component)
        lengths.append(len(documents))
    return {"values": values, "lengths": lengths, "objects": index.numObjects()}


def holders(index) -> int:
    """How many objects hold some value of ``index``: ZCatalog's ``numObjects()``, counted from
    the index's forward mapping. numObjects() counts the reverse one, where a DateRecurringIndex
    keeps an object's old dates when it is reindexed with none (it removes them from the forward
    mapping only)."""
    if index.meta_type == "BooleanIndex":  # its forward mapping holds the objects of one value
        return index.numObjects()
    documents: set[int] = set()
    for _, rows in index.items():
        documents.update(rows)
    return len(documents)


def service_answer(catalog: ServiceCatalog, name: str, lengths: bool) -> tuple[int, Any]:
    response = catalog.client.get(f"/catalogs/{catalog.id}/unique/{name}",
                                  params={"lengths": "true"} if lengths else None)
    return response.status_code, response.json()


def _in_order(answer: dict, name: str) -> dict:
    """A BooleanIndex lists True and False in the order of its internal state (whichever value it
    keeps the smaller set for), which means nothing: compare booleans in a fixed order."""
    if KIND[name] != "BooleanIndex":
        return answer
    pairs = sorted(zip(answer["values"], answer.get("lengths") or [None] * len(answer["values"]), strict=True))
    ordered = {**answer, "values": [value for value, _ in pairs]}
    if "lengths" in answer:
        ordered["lengths"] = [length for _, length in pairs]
    return ordered


def check_unique_values(oracle: ZCatalogOracle, catalog: ServiceCatalog, moment: str) -> None:
    for name in COMPARED:
        for lengths in (False, True):
            want = zcatalog_answer(oracle, name, lengths)
            status, body = service_answer(catalog, name, lengths)
            where = f"{moment}, {name} ({KIND[name]}), lengths={lengths}"
            if isinstance(want, Exception):
                assert 400 <= status < 500, f"{where}: ZCatalog raises {want!r}, service answered {status}: {body}"
                assert body["status"] == status
                continue
            assert status == 200, f"{where}: ZCatalog answers {want}, service {status}: {body}"
            got = {key: body[key] for key in want}
            assert _in_order(got, name) == _in_order(want, name), f"{where}: ZCatalog {want}, service {got}"


def check_range_bounds(oracle: ZCatalogOracle, catalog: ServiceCatalog, moment: str) -> None:
    """A DateRangeIndex lists values for its since and until attribute names only (``attribute``):
    the objects with both ends first, then those with one, so not in order overall."""
    for decl in INDEXES:
        if decl.type != "DateRangeIndex":
            continue
        index = oracle.catalog._catalog.getIndex(decl.name)
        for attribute in (decl.since_field, decl.until_field, "other"):
            pairs = list(index.uniqueValues(name=attribute, withLengths=True))
            want = {"values": list(index.uniqueValues(name=attribute)),
                    "lengths": [length for _, length in pairs], "objects": index.numObjects()}
            assert want["values"] == [value for value, _ in pairs]
            response = catalog.client.get(f"/catalogs/{catalog.id}/unique/{decl.name}",
                                          params={"attribute": attribute, "lengths": "true"})
            assert response.status_code == 200, response.text
            got = {key: response.json()[key] for key in want}
            assert got == want, f"{moment}, {decl.name}, {attribute}: ZCatalog {want}, service {got}"


def check_text_sizes(oracle: ZCatalogOracle, catalog: ServiceCatalog, moment: str) -> None:
    """A ZCTextIndex has no unique values (ZCatalog raises, the service answers 4xx); its
    numObjects() counts distinct words, its indexSize() documents: the service's ``/words``."""
    for name in TEXT:
        index = oracle.catalog._catalog.getIndex(name)
        status, body = service_answer(catalog, name, lengths=False)
        assert 400 <= status < 500 and body["status"] == status, f"{moment}, {name}: {status} {body}"
        response = catalog.client.get(f"/catalogs/{catalog.id}/words/{name}")
        assert response.status_code == 200, response.text
        got = response.json()
        want = {"words": index.numObjects(), "documents": index.indexSize()}
        assert {key: got[key] for key in want} == want, f"{moment}, {name}: ZCatalog {want}, service {got}"


def avoid_stale_entries(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """New attributes for a reindexed object, without the two changes after which ZCatalog keeps
    a stale entry: UnIndex leaves a falsy old value ("" or 0) in place when the new one is None
    (``if oldDatum:``), and DateRecurringIndex leaves the old dates when the attribute is gone.
    Plone never reindexes so (its indexers return the same kinds of values each time); the
    service indexes the object as it is now."""
    new = dict(new)
    for name in COMPARED:
        if KIND[name] in ("FieldIndex", "UUIDIndex", "DateIndex") and new.get(name, 0) is None \
                and name in old and old[name] is not None and not old[name]:
            new[name] = old[name]
    if "start" in old and "start" not in new:
        for key in ("start", "start_recurrence", "start_recurrence_until"):
            if key in old:
                new[key] = old[key]
    return new


@st.composite
def histories(draw):
    """Objects, then which of them are unindexed and which reindexed with which new values."""
    objects = draw(plone_objects(max_size=12))
    fresh = draw(plone_objects(min_size=len(objects), max_size=len(objects)))
    fates = draw(st.lists(st.sampled_from(["keep", "unindex", "reindex"]), min_size=len(objects),
                          max_size=len(objects)))
    return objects, fresh, fates


@pytest.mark.slow
@given(history=histories())
def test_unique_values_answer_like_zcatalog(service_catalog, history):
    objects, fresh, fates = history
    oracle = ZCatalogOracle(INDEXES, METADATA)
    for obj in objects:
        oracle.index(obj)
    service_catalog.load([to_wire(obj) for obj in objects])
    check_unique_values(oracle, service_catalog, "after indexing")
    check_text_sizes(oracle, service_catalog, "after indexing")
    check_range_bounds(oracle, service_catalog, "after indexing")

    entries = []
    for obj, new, fate in zip(objects, fresh, fates, strict=True):
        if fate == "unindex":
            oracle.unindex(obj.uid)
            entries.append({"op": "unindex", "uid": obj.uid, "version": 1})
        elif fate == "reindex":
            attrs = avoid_stale_entries(obj.attrs, {**new.attrs, "UID": obj.uid, "getId": obj.attrs["getId"]})
            changed = CatalogObject(uid=obj.uid, path=obj.path, attrs=attrs)
            oracle.index(changed)
            entries.append({**to_wire(changed), "version": 1})
    note(f"changes: {fates}")
    response = service_catalog.client.post(f"/catalogs/{service_catalog.id}/batches",
                                           json={"batch_id": uuid.uuid4().hex, "entries": entries})
    assert response.status_code == 200, response.text
    check_unique_values(oracle, service_catalog, "after unindexing and reindexing")
    check_text_sizes(oracle, service_catalog, "after unindexing and reindexing")
    check_range_bounds(oracle, service_catalog, "after unindexing and reindexing")


def test_unique_values_of_an_empty_catalog(service_catalog):
    service_catalog.load([])
    check_unique_values(ZCatalogOracle(INDEXES, METADATA), service_catalog, "empty")
    check_text_sizes(ZCatalogOracle(INDEXES, METADATA), service_catalog, "empty")
    check_range_bounds(ZCatalogOracle(INDEXES, METADATA), service_catalog, "empty")


def test_unique_values_of_unknown_indexes_are_404(service_catalog):
    status, body = service_answer(service_catalog, "no_such_index", lengths=False)
    assert status == 404 and body["status"] == 404
