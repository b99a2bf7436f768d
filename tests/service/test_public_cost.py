"""Cost bounds of public searches (anonymous, or a frontend's signed token): the words of a text
query, its globs, the lexicon words a glob matches, and the time a search may take; past them a
422 problem, while the connector's searches keep ZCatalog's behaviour."""

from __future__ import annotations

import uuid

import httpx
import pytest

from catalog_schemas.api import CatalogCreate, IndexDeclaration
from tests.live import start_service

D = IndexDeclaration
WORDS = ["garden", "gardener", "gardens", "river", "plone"]


def make_catalog(service) -> tuple[str, str]:
    name = "cost-" + uuid.uuid4().hex[:8]
    spec = CatalogCreate(id=name, indexes=[D(name="allowedRolesAndUsers", type="KeywordIndex"),
                                           D(name="SearchableText", type="ZCTextIndex")])
    with service.client() as admin:
        created = admin.post("/catalogs", json=spec.model_dump())
        assert created.status_code == 201, created.text
        entries = [{"op": "index", "uid": f"u{i}", "path": f"/plone/d{i}", "version": 1,
                    "values": {"allowedRolesAndUsers": ["Anonymous"], "SearchableText": f"{word} a b c"}}
                   for i, word in enumerate(WORDS)]
        assert admin.post(f"/catalogs/{name}/batches", json={"batch_id": "b", "entries": entries}).status_code == 200
    return name, created.json()["token"]


def search(service, name, text, token=None):
    headers = {"Authorization": f"Bearer {token}", "X-Catalog-Unrestricted": "1"} if token else {}
    return httpx.post(f"{service.url}/search", params={"catalog": name}, headers=headers, timeout=30,
                      json={"query": {"SearchableText": text}})


def assert_limit(response, words):
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["title"] == "Limit exceeded" and all(w in body["detail"] for w in words), body


@pytest.fixture(scope="module")
def bounded(database_url):
    service = start_service(database_url, extra_env={"CATALOG_PUBLIC_MAX_GLOB_WORDS": "2"})
    yield service, *make_catalog(service)
    service.stop()


def test_text_terms_are_bounded_for_public_searches(bounded):
    service, name, token = bounded
    assert_limit(search(service, name, "a " * 499), ["499 words", "at most 32"])
    assert search(service, name, " ".join(["garden"] * 32)).status_code == 200
    assert_limit(search(service, name, " ".join(["garden"] * 33)), ["33 words"])
    # A phrase counts its words.
    assert_limit(search(service, name, '"' + " ".join(["a"] * 40) + '"'), ["40 words"])
    # The connector searches as ZCatalog does: no such bound.
    assert search(service, name, "a " * 499, token).status_code == 200


def test_globs_are_bounded_for_public_searches(bounded):
    service, name, token = bounded
    assert_limit(search(service, name, "riv* plo*"), ["2 words with '*' or '?'", "at most 1"])
    assert_limit(search(service, name, " ".join(f"{a}{b}*" for a in "abcdefghij" for b in "abcdefghij"
                                                 )[:1000]), ["100 words", "at most 32"])
    assert search(service, name, "riv*").json()["items_total"] == 1
    assert search(service, name, "a riv*").json()["items_total"] == 1  # Plone's form: a glob after the last word
    assert search(service, name, " ".join(["r*"] * 5), token).status_code == 200


def test_glob_expansion_is_bounded_for_public_searches(bounded):
    service, name, token = bounded
    # "gard*" matches three lexicon words here, one past CATALOG_PUBLIC_MAX_GLOB_WORDS=2.
    assert_limit(search(service, name, "gard*"), ["more than 2 words", "make it longer"])
    assert search(service, name, "gardene*").json()["items_total"] == 1
    assert search(service, name, "garden*").status_code == 422  # garden, gardener, gardens
    assert search(service, name, "gardens*").json()["items_total"] == 1
    assert search(service, name, "gard*", token).json()["items_total"] == 3


def test_public_search_time_is_bounded(database_url):
    service = start_service(database_url, extra_env={"CATALOG_PUBLIC_SEARCH_TIMEOUT": "0.000001"})
    try:
        name, token = make_catalog(service)
        for _ in range(3):
            assert_limit(search(service, name, "garden"), ["took longer than 1e-06 s"])
        # The cancelled statements left the connections usable: the connector's searches answer.
        for _ in range(5):
            answer = search(service, name, "garden", token)
            assert answer.status_code == 200 and answer.json()["items_total"] == 1
    finally:
        service.stop()
