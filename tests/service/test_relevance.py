"""Relevance order of text queries without sort_on: the service's Okapi BM25 scores equal the
reference implementation's (itself checked against ZCTextIndex), also after updates and deletes,
because the statistics (documents, lengths, document frequencies) are maintained by each commit."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog_schemas.api import CatalogCreate, IndexDeclaration
from catalog_service.text import TextQueryError, index_words, okapi_scores, parse_query

VOCABULARY = ["plone", "zope", "catalog", "search", "python", "café", "Cafe", "über", "river", "garden"]
QUERIES = ["plone", "plone catalog", "plone OR zope", "cafe", "catalog AND NOT zope", '"plone catalog"',
           "gard*", "cat* OR riv*", "(plone OR python) AND search", "über river"]

texts = st.lists(st.sampled_from(VOCABULARY), min_size=0, max_size=12).map(" ".join)


@pytest.fixture(scope="module")
def client(live_service):
    with live_service.client() as c:
        yield c


def new_catalog(client) -> str:
    name = "rel-" + uuid.uuid4().hex[:10]
    spec = CatalogCreate(id=name, indexes=[IndexDeclaration(name="SearchableText", type="ZCTextIndex")])
    assert client.post("/catalogs", json=spec.model_dump()).status_code == 201
    return name


def put(client, name, docs: dict[str, str | None], version: int) -> None:
    entries = []
    for uid, text in docs.items():
        if text is None:
            entries.append({"op": "unindex", "uid": uid, "version": version})
        else:
            entries.append({"op": "index", "uid": uid, "path": f"/plone/{uid}", "version": version,
                            "values": {"SearchableText": text}})
    r = client.post(f"/catalogs/{name}/batches", json={"batch_id": uuid.uuid4().hex, "entries": entries})
    assert r.status_code == 200, r.text


def check(client, name, corpus: dict[str, str]) -> None:
    words = {uid: index_words(text) for uid, text in corpus.items()}
    for text in QUERIES:
        try:
            tree = parse_query(text)
        except TextQueryError:
            continue
        expected = okapi_scores(tree, words)
        r = client.post(f"/catalogs/{name}/query", json={"query": {"SearchableText": text}},
                        headers={"X-Catalog-Unrestricted": "1"})
        assert r.status_code == 200, r.text
        got = {item["uid"]: item["score"] for item in r.json()["items"]}
        assert got == expected, text
        scores = [item["score"] for item in r.json()["items"]]
        assert scores == sorted(scores, reverse=True), text


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.dictionaries(st.sampled_from([f"d{i}" for i in range(12)]), texts, min_size=1, max_size=12),
       second=st.dictionaries(st.sampled_from([f"d{i}" for i in range(12)]), st.none() | texts, max_size=6))
def test_scores_match_okapi_after_updates_and_deletes(client, first, second):
    name = new_catalog(client)
    try:
        put(client, name, first, version=1)
        check(client, name, first)
        put(client, name, second, version=2)
        corpus = {**first, **second}
        corpus = {uid: text for uid, text in corpus.items() if text is not None}
        check(client, name, corpus)
    finally:
        client.delete(f"/catalogs/{name}")


def test_staged_batch_is_scored_after_commit(client):
    name = new_catalog(client)
    try:
        put(client, name, {"a": "plone plone zope", "b": "plone"}, version=1)
        r = client.post(f"/catalogs/{name}/batches?stage=true", json={
            "batch_id": "s1", "entries": [{"op": "index", "uid": "c", "path": "/plone/c", "version": 2,
                                          "values": {"SearchableText": "plone catalog"}}]})
        assert r.status_code == 200
        check(client, name, {"a": "plone plone zope", "b": "plone"})
        assert client.post(f"/catalogs/{name}/batches/s1/commit").status_code == 200
        check(client, name, {"a": "plone plone zope", "b": "plone", "c": "plone catalog"})
    finally:
        client.delete(f"/catalogs/{name}")


def test_phrase_running_past_the_end_does_not_match(client):
    """Regression: the phrase check treated words past the end of the document as matching."""
    name = new_catalog(client)
    try:
        put(client, name, {"a": "catalog plone", "b": "plone catalog"}, version=1)
        r = client.post(f"/catalogs/{name}/query", json={"query": {"SearchableText": '"plone catalog"'}},
                        headers={"X-Catalog-Unrestricted": "1"})
        assert [item["uid"] for item in r.json()["items"]] == ["b"]
    finally:
        client.delete(f"/catalogs/{name}")
