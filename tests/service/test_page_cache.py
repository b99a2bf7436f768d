"""The page cache (store/search.py): a repeated search's whole answer comes from it while the
catalog's counter and schema revision stand, and never across a write, another caller, another
minute of the effective-date filter, other facets, or for a search over staged batches."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest

from catalog_schemas.api import CatalogCreate, IndexDeclaration, SearchRequest
from catalog_service.planner.plan import Limits, Security
from catalog_service.store import search as search_module
from catalog_service.store.catalogs import CatalogRegistry
from catalog_service.store.search import PAGE_CACHE_MAX_ROWS, CountCache, search
from tests.service.test_text_cells import _commit, migrated_database, run


@pytest.fixture(scope="module")
def db():
    yield from migrated_database("pages")


async def _catalog(conn, name: str):
    indexes = [IndexDeclaration(name="SearchableText", type="ZCTextIndex"),
               IndexDeclaration(name="portal_type", type="FieldIndex"),
               IndexDeclaration(name="allowedRolesAndUsers", type="KeywordIndex"),
               IndexDeclaration(name="effectiveRange", type="DateRangeIndex", since_field="effective",
                                until_field="expires")]
    catalog, _ = await CatalogRegistry().create(conn, CatalogCreate(id=name, indexes=indexes))
    return catalog


def _entry(n: int, text: str, allowed=("Anonymous",)) -> dict:
    return {"op": "index", "uid": f"u{n}", "path": f"/plone/u{n}",
            "values": {"SearchableText": text, "portal_type": "News Item" if n % 3 else "Document",
                       "allowedRolesAndUsers": list(allowed),
                       "effectiveRange": ["2025-01-01T00:00:00+00:00", None]}}


def _security(principals, minute=0) -> Security:
    return Security(principals=principals, effective_at=datetime(2026, 1, 1, 0, minute, tzinfo=UTC))


def test_a_repeated_search_is_answered_from_the_cache_until_the_catalog_moves(db, monkeypatch):
    statements = []
    fetch = search_module._fetch

    async def spy(conn, sql, params, **kw):
        statements.append(sql)
        return await fetch(conn, sql, params, **kw)

    monkeypatch.setattr(search_module, "_fetch", spy)

    async def work(conn):
        catalog = await _catalog(conn, "pages")
        await _commit(conn, catalog, "b0", [_entry(n, "garden river" if n % 2 else "river")
                                            for n in range(60)])
        pages, counts, facet_counts = CountCache(10), CountCache(10), CountCache(10)

        async def ask(query, principals=("Anonymous",), minute=0, **request):
            statements.clear()
            answer = await search(conn, catalog, SearchRequest(query=query, **request), _security(principals, minute),
                                  Limits(), counts=counts, facet_cache=facet_counts, pages=pages)
            return orjson.loads(answer.body), list(statements)

        query = {"SearchableText": "garden", "sort_on": "portal_type"}
        first, read = await ask(query, b_size=5)
        assert first["items_total"] == 30 and len(first["items"]) == 5 and read
        again, read = await ask(query, b_size=5)
        assert again == first and read == []  # no search statement ran
        assert (pages.hits, pages.misses) == (1, 1)
        # Facets, another page, another minute, another caller: other answers, each read.
        for request, principals, minute in (({"facets": ["portal_type"]}, ("Anonymous",), 0),
                                            ({"b_start": 5}, ("Anonymous",), 0),
                                            ({}, ("Anonymous",), 1),
                                            ({}, ("Manager",), 0)):
            other, read = await ask(query, principals, minute, **{"b_size": 5, **request})
            assert read, (request, principals, minute)
        assert other["items_total"] == 0  # Manager alone sees none of these (Anonymous may)
        assert pages.hits == 1
        # A write moves the counter: the same search is read again and shows it.
        await _commit(conn, catalog, "b1", [_entry(100, "garden")])
        after, read = await ask(query, b_size=5)
        assert read and after["items_total"] == 31
        assert (await ask(query, b_size=5))[1] == []
        # Searches over staged batches are never kept.
        staged = SearchRequest(query=query, b_size=5, batch_ids=["nothing-staged"])
        for _ in range(2):
            statements.clear()
            await search(conn, catalog, staged, _security(("Anonymous",)), Limits(), counts=counts, pages=pages)
            assert statements
        # A long page is not kept.
        await _commit(conn, catalog, "b2", [_entry(n, "river") for n in range(200, 260)])
        for _ in range(2):
            _, read = await ask({"SearchableText": "river"}, b_size=PAGE_CACHE_MAX_ROWS + 1)
            assert read

    run(db, work)


def test_no_page_cache_when_its_size_is_zero(db):
    async def work(conn):
        catalog = await _catalog(conn, "nopages")
        await _commit(conn, catalog, "b0", [_entry(n, "garden") for n in range(5)])
        pages = CountCache(0)
        for _ in range(2):
            await search(conn, catalog, SearchRequest(query={"SearchableText": "garden"}, b_size=5),
                         _security(("Anonymous",)), Limits(), pages=pages)
        assert (pages.hits, pages.misses) == (0, 0)

    run(db, work)
