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

from tests.service.oracle import (  # noqa: F401
    OracleError,
    ServiceCatalog,
    ZCatalogOracle,
    compare,
    service_client_fixture,
)
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


# --- a transaction's own pending changes -----------------------------------------------------
# Inside a Plone transaction ZCatalog has indexed the pending changes already: its lexicon knows
# their words (globs expand to them) and its Okapi statistics (documents, mean length, document
# frequencies) count them. The service's query names the staged batch and must answer the same.

# Words only the staged documents bring, next to committed ones with the same prefixes.
FRESH = ["gartenzwerg", "gardenia", "rivière"]
STAGED_TREES = ["gartenz*", "gartenzwerg", "gard*", "garden", "riv*", "gartenzwerg OR garden",
                '"gartenzwerg garden"', "gard* AND NOT river"]


@st.composite
def staged_documents(draw) -> str:
    words = draw(st.lists(st.sampled_from(WORDS + FRESH), max_size=draw(st.sampled_from([3, 12, 40]))))
    return " ".join(words)


@st.composite
def pending_corpora(draw):
    """Committed objects, and the changes of an open transaction: updated, new and removed objects,
    staged in one batch (or as a clear of the catalog that indexes only them)."""
    count = draw(st.integers(3, 30))

    def make(number: int, text: str) -> CatalogObject:
        uid = f"{number:04d}" + uuid.uuid4().hex[:28]
        return CatalogObject(uid=uid, path=f"/plone/doc-{number}", attrs={
            "UID": uid, "getId": f"doc-{number}", "portal_type": draw(st.sampled_from(TYPES)),
            "SearchableText": text})

    first = [make(n, draw(documents())) for n in range(count)]
    changed = [CatalogObject(uid=o.uid, path=o.path, attrs={**o.attrs, "SearchableText": draw(staged_documents())})
               for o in draw(st.lists(st.sampled_from(first), max_size=count // 2, unique_by=lambda o: o.uid))]
    changed.extend(make(n, draw(staged_documents())) for n in range(count, count + draw(st.integers(0, 6))))
    changed_uids = {o.uid for o in changed}
    removable = [o.uid for o in first if o.uid not in changed_uids]
    removed = draw(st.lists(st.sampled_from(removable), max_size=len(removable) // 2, unique=True)) if removable else []
    return first, changed, removed, draw(st.booleans()), draw(st.integers(0, len(changed)))


def _stage(catalog: ServiceCatalog, changed, removed, clear: bool, appended: int) -> str:
    """Stage the transaction's changes as the connector does: the batch whole, then (if
    ``appended``) its last entries appended to it."""
    entries = [to_wire(o) for o in changed] + [{"op": "unindex", "uid": u} for u in removed]
    batch_id = uuid.uuid4().hex
    split = len(entries) - appended
    response = catalog.client.post(f"/catalogs/{catalog.id}/batches?stage=true",
                                   json={"batch_id": batch_id, "entries": entries[:split], "clear": clear})
    assert response.status_code == 200, response.text
    if entries[split:]:
        response = catalog.client.post(f"/catalogs/{catalog.id}/batches/{batch_id}/append",
                                       json={"entries": entries[split:]})
        assert response.status_code == 200, response.text
    return batch_id


def _check_pending(oracle, catalog: ServiceCatalog, query: dict, batch_id: str, paths) -> str | None:
    status, body = catalog.query(query_to_wire(query), batch_ids=[batch_id])
    problem = compare(oracle, query, status, body, paths)
    if problem is not None or status != 200 or set(query) - {"SearchableText", "b_start", "b_size"}:
        return problem
    # With the text index alone, ZCatalog's score is the Okapi score itself (other indexes add
    # one per intersection): the values must be equal, not only the order.
    unpaged = {"SearchableText": query["SearchableText"]}
    try:
        whole = oracle.run(unpaged)
    except OracleError:
        return None
    want = dict(zip(whole.uids, whole.scores or [], strict=False))
    got = {item["uid"]: item["score"] for item in body["items"]}
    if any(want.get(uid) != score for uid, score in got.items()):
        return f"scores differ: ZCatalog {[want.get(u) for u in got]}, service {list(got.values())}"
    return None


@pytest.mark.slow
@given(corpus=pending_corpora(),
       asked=st.lists(st.fixed_dictionaries(
           {"SearchableText": st.sampled_from([*STAGED_TREES, *TREES, *WORDS, *FRESH])},
           optional={"b_size": st.integers(1, 8), "b_start": st.sampled_from([0, 1, 3]),
                     "portal_type": st.sampled_from([TYPES[:1], TYPES[:2]])}), min_size=1, max_size=6))
def test_pending_changes_in_text_queries_match_zcatalog(relevance_catalog, corpus, asked):
    first, changed, removed, clear, appended = corpus
    oracle = ZCatalogOracle(INDEXES, METADATA)
    paths = {}
    for obj in first:
        oracle.index(obj)
    if clear:
        oracle.clear()
        removed = []
    for obj in changed:
        oracle.index(obj)
    for uid in removed:
        oracle.unindex(uid)
    for obj in first + changed:
        paths[obj.uid] = obj.path
    relevance_catalog.load([to_wire(o) for o in first])
    batch_id = _stage(relevance_catalog, changed, removed, clear, appended)
    try:
        for query in asked:
            problem = _check_pending(oracle, relevance_catalog, query, batch_id, paths)
            if problem is not None:
                note(f"first: {[(o.uid[:4], o.attrs['SearchableText']) for o in first]}")
                note(f"staged (clear {clear}): {[(o.uid[:4], o.attrs['SearchableText']) for o in changed]}; "
                     f"removed {removed}")
                raise AssertionError(f"query {query!r}: {problem}")
    finally:
        relevance_catalog.client.post(f"/catalogs/{relevance_catalog.id}/batches/{batch_id}/abort")


def test_new_document_of_the_open_transaction_is_globbed_and_scored(relevance_catalog):
    """The case measured on a Plone site: committed content, and one new document "Gartenzwerg
    Garten" in the open transaction. ZCatalog finds it by ``Gartenz*``, scores ``Gartenzwerg``
    and ranks it first for ``Garten*``; so must a query naming the transaction's batch."""
    texts = ["Garten Garten Blumen", "Der Garten am See", "Katzen im Garten", "Katzen und Hunde",
             "Gartenhaus aus Holz", "Ein Garten"]
    committed = [CatalogObject(uid=f"c{n}", path=f"/plone/c{n}", attrs={
        "UID": f"c{n}", "getId": f"c{n}", "portal_type": "Document", "SearchableText": text})
        for n, text in enumerate(texts)]
    new = CatalogObject(uid="new", path="/plone/new", attrs={
        "UID": "new", "getId": "new", "portal_type": "Document", "SearchableText": "Gartenzwerg Garten"})
    oracle = ZCatalogOracle(INDEXES, METADATA)
    for obj in committed + [new]:
        oracle.index(obj)
    relevance_catalog.load([to_wire(o) for o in committed])
    batch_id = _stage(relevance_catalog, [new], [], False, 0)
    paths = {o.uid: o.path for o in committed + [new]}
    try:
        for text in ["Gartenz*", "Gartenzwerg", "Garten*", "Garten", "Katzen"]:
            query = {"SearchableText": text}
            assert _check_pending(oracle, relevance_catalog, query, batch_id, paths) is None, text
        assert oracle.search({"SearchableText": "Garten*"})[0] == "new"  # the case is the one measured
    finally:
        relevance_catalog.client.post(f"/catalogs/{relevance_catalog.id}/batches/{batch_id}/abort")
