"""Relevance pages read from score cells (docs/decisions/0007) against a real ZCatalog.

A text query without ``sort_on`` reads only the documents of its words' best cells when its page
ends within ``CATALOG_RELEVANCE_TOP`` results. The tests' service reads as few cells as
it may (``CATALOG_RELEVANCE_CANDIDATES=1``, tests/conftest.py), so that catalogs of tens of
documents already cut the cells at a bound, and the check that the cut was deep enough decides
between the cells' page and the whole query. Documents are long and short, repeat words many
times, change and go away between batches, and queries add other criteria that reject some of the
cells' documents; every page must show ZCatalog's score sequence.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given, note
from hypothesis import strategies as st

from tests.service.oracle import ServiceCatalog, ZCatalogOracle, compare, service_client_fixture  # noqa: F401
from tests.service.strategies import INDEXES, METADATA, CatalogObject, query_to_wire, to_wire

WORDS = ["garden", "river", "café", "Cafe", "plone", "zope"]
TYPES = ["Document", "News Item", "Folder"]
# Globs (Plone's search form sends "word*") and trees: several scored words, phrases, Not.
TREES = ["gard*", "caf*", "r*", "garden AND river", "garden OR zope", '"garden river"', "garden AND NOT river",
         "ri* OR pl*", "plone AND z*"]


@st.composite
def documents(draw) -> str:
    """A text of 1 to 80 words where one word may repeat many times."""
    favourite = draw(st.sampled_from(WORDS))
    repeats = draw(st.integers(0, 15))
    others = draw(st.lists(st.sampled_from(WORDS), max_size=draw(st.sampled_from([3, 12, 60]))))
    words = [favourite] * repeats + others
    return " ".join(draw(st.permutations(words))) if words else ""


@st.composite
def corpora(draw) -> tuple[list[CatalogObject], list[CatalogObject], list[str]]:
    """Objects of a first batch, the changed objects of a second one, and the uids it removes."""
    count = draw(st.integers(5, 60))

    def make(number: int) -> CatalogObject:
        uid = f"{number:04d}" + uuid.uuid4().hex[:28]
        return CatalogObject(uid=uid, path=f"/plone/doc-{number}", attrs={
            "UID": uid, "getId": f"doc-{number}", "portal_type": draw(st.sampled_from(TYPES)),
            "SearchableText": draw(documents())})

    first = [make(n) for n in range(count)]
    changed = []
    for obj in draw(st.lists(st.sampled_from(first), max_size=count // 2, unique_by=lambda o: o.uid)):
        changed.append(CatalogObject(uid=obj.uid, path=obj.path,
                                     attrs={**obj.attrs, "SearchableText": draw(documents())}))
    changed.extend(make(n) for n in range(count, count + draw(st.integers(0, 10))))
    changed_uids = {o.uid for o in changed}
    removable = [o.uid for o in first if o.uid not in changed_uids]
    removed = draw(st.lists(st.sampled_from(removable), max_size=len(removable) // 3, unique=True)) if removable else []
    return first, changed, removed


@st.composite
def queries(draw) -> dict:
    query: dict = {"SearchableText": draw(st.sampled_from([*WORDS, *TREES, "absent"])),
                   "b_size": draw(st.integers(1, 8)), "b_start": draw(st.sampled_from([0, 0, 1, 3, 10, 30]))}
    if draw(st.booleans()):
        query["portal_type"] = draw(st.sampled_from([TYPES[:1], TYPES[:2]]))
    return query


@pytest.fixture(scope="module")
def relevance_catalog(service_client):
    catalog = ServiceCatalog(service_client, f"rank-{uuid.uuid4().hex[:12]}", INDEXES, METADATA)
    yield catalog
    catalog.drop()


@pytest.mark.slow
@given(corpus=corpora(), asked=st.lists(queries(), min_size=1, max_size=6))
def test_relevance_pages_from_cells_match_zcatalog(relevance_catalog, corpus, asked):
    first, changed, removed = corpus
    oracle = ZCatalogOracle(INDEXES, METADATA)
    paths = {}
    for obj in first + changed:
        oracle.index(obj)
        paths[obj.uid] = obj.path
    for uid in removed:
        oracle.unindex(uid)
    relevance_catalog.load([to_wire(o) for o in first])
    # The second batch is not a clear: the commit updates the cell counts by difference.
    response = relevance_catalog.client.post(
        f"/catalogs/{relevance_catalog.id}/batches",
        json={"batch_id": uuid.uuid4().hex,
              "entries": [to_wire(o) for o in changed] + [{"op": "unindex", "uid": u} for u in removed]})
    assert response.status_code == 200, response.text
    for query in asked:
        status, body = relevance_catalog.query(query_to_wire(query))
        problem = compare(oracle, query, status, body, paths)
        if problem is not None:
            note(f"first: {[(o.uid[:4], o.attrs['SearchableText']) for o in first]}")
            note(f"changed: {[(o.uid[:4], o.attrs['SearchableText']) for o in changed]}; removed {removed}")
            raise AssertionError(f"query {query!r}: {problem}")
