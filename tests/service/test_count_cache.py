"""The count cache (store/search.py CountCache): totals are reused only while the catalog stands.

Each test runs the service's own search function against a real PostgreSQL and checks the
totals against a count computed without the cache, after every kind of write.
"""

from __future__ import annotations

import asyncio

import orjson
import pytest

from catalog_schemas.api import Batch, CatalogCreate, IndexDeclaration, SchemaUpdate, SearchRequest
from catalog_service.planner.plan import UNRESTRICTED, Limits, Security
from catalog_service.store import batches
from catalog_service.store.catalogs import CatalogRegistry
from catalog_service.store.database import _init_connection
from catalog_service.store.migrations import migrate
from catalog_service.store.search import CountCache, search
from tests.pg import create_database, drop_database

ANONYMOUS = Security(principals=("Anonymous",), effective_at=None)
DECLARATIONS = [IndexDeclaration(name="portal_type", type="FieldIndex"),
                IndexDeclaration(name="allowedRolesAndUsers", type="KeywordIndex"),
                IndexDeclaration(name="Subject", type="KeywordIndex")]


@pytest.fixture
def dsn():
    dsn, admin = create_database("cc")
    yield dsn
    drop_database(admin, dsn)


def entry(uid: str, portal_type: str, allowed=("Anonymous",), subjects=()) -> dict:
    return {"op": "index", "uid": uid, "path": f"/plone/{uid}",
            "values": {"portal_type": portal_type, "allowedRolesAndUsers": list(allowed),
                       "Subject": list(subjects)}}


class Harness:
    def __init__(self, conn, catalog, registry):
        self.conn = conn
        self.catalog = catalog
        self.registry = registry
        self.counts = CountCache(100)
        self.batches = 0

    async def write(self, *entries, staged: bool = False, clear: bool = False) -> str:
        self.batches += 1
        batch = Batch.model_validate({"batch_id": f"b{self.batches}", "entries": list(entries), "clear": clear})
        async with self.conn.transaction():
            await batches.stage(self.conn, self.catalog, batch, batches.convert(batch, self.catalog, 1000))
        if not staged:
            await batches.commit(self.conn, self.catalog, batch.batch_id)
        return batch.batch_id

    async def total(self, query: dict, security: Security = ANONYMOUS, cached: bool = True, **request) -> int:
        answer = await search(self.conn, self.catalog, SearchRequest(query=query, b_size=1, **request),
                              security, Limits(), counts=self.counts if cached else None)
        return orjson.loads(answer.body)["items_total"]

    async def check(self, query: dict, security: Security = ANONYMOUS, **request) -> int:
        """The cached answer's total, asserted equal to a count made without the cache."""
        cached = await self.total(query, security, **request)
        assert cached == await self.total(query, security, cached=False, **request), query
        return cached


def run(dsn, body):
    async def main():
        import asyncpg

        conn = await asyncpg.connect(dsn)
        await _init_connection(conn)
        try:
            await migrate(conn)
            registry = CatalogRegistry()
            catalog, _ = await registry.create(conn, CatalogCreate(id="cc", indexes=DECLARATIONS))
            await body(Harness(conn, catalog, registry))
        finally:
            await conn.close()

    asyncio.run(main())


def test_repeated_queries_reuse_the_total_until_a_commit(dsn):
    async def body(h: Harness):
        await h.write(entry("a", "Document"), entry("b", "Document"), entry("c", "Folder"))
        docs = {"portal_type": "Document"}
        assert await h.check(docs) == 2
        assert (h.counts.hits, h.counts.misses) == (0, 1)
        assert await h.check(docs) == 2
        assert h.counts.hits == 1
        # A commit that changes the answer: the counter moved, so it is counted again.
        await h.write(entry("d", "Document"))
        assert await h.check(docs) == 3
        assert h.counts.misses == 2
        # Unindexing and clearing move the counter too.
        await h.write({"op": "unindex", "uid": "a"})
        assert await h.check(docs) == 2
        await h.write(entry("e", "Folder"), clear=True)
        assert await h.check(docs) == 0
        assert await h.check({"portal_type": "Folder"}) == 1

    run(dsn, body)


def test_a_cached_total_is_never_used_for_another_state(dsn):
    async def body(h: Harness):
        await h.write(entry("a", "Document"))
        docs = {"portal_type": "Document"}
        assert await h.check(docs) == 1
        # Poison the entry: while the catalog stands it is served (the count is skipped) ...
        key = next(iter(h.counts._entries))
        counter, rev, _ = h.counts._entries[key]
        h.counts._entries[key] = (counter, rev, 99)
        assert await h.total(docs) == 99
        # ... and after any write it is not, whatever it says.
        await h.write(entry("b", "Folder"))
        assert await h.check(docs) == 1

    run(dsn, body)


def test_security_and_values_are_part_of_the_key(dsn):
    async def body(h: Harness):
        await h.write(entry("a", "Document"), entry("p", "Document", allowed=["Manager"]),
                      entry("s", "Document", subjects=["x"]))
        docs = {"portal_type": "Document"}
        assert await h.check(docs) == 2
        assert await h.check(docs, Security(principals=("Manager",), effective_at=None)) == 1
        assert await h.check(docs, UNRESTRICTED) == 3
        assert await h.check({"Subject": "x"}) == 1
        assert await h.check({"Subject": "y"}) == 0
        assert await h.check(docs) == 2

    run(dsn, body)


def test_staged_batches_and_schema_updates(dsn):
    async def body(h: Harness):
        await h.write(entry("a", "Document"))
        docs = {"portal_type": "Document"}
        assert await h.check(docs) == 1
        staged = await h.write(entry("b", "Document"), staged=True)
        # A query naming the staged batch sees it; staging moved no counter, so it is not cached.
        assert await h.check(docs, UNRESTRICTED, batch_ids=[staged]) == 2
        assert await h.check(docs) == 1
        await batches.commit(h.conn, h.catalog, staged)
        assert await h.check(docs) == 2
        # Removing the index changes the schema revision: the query now ignores portal_type.
        await h.write(entry("c", "Folder"))
        assert await h.check(docs) == 2
        misses = h.counts.misses
        h.catalog = await h.registry.update_schema(h.conn, h.catalog, SchemaUpdate(remove_indexes=["portal_type"]))
        # portal_type is no index now: the query keeps only the security filter (all three).
        assert await h.check(docs) == 3
        assert h.counts.misses == misses + 1

    run(dsn, body)


class WriteAfterFirstStatement:
    """The search's connection, with a commit from another connection slipped in right after the
    first statement returns: the race between reading a page and counting its total."""

    def __init__(self, conn, write):
        self.conn = conn
        self.write = write
        self.statements = 0

    async def fetch(self, sql, *params):
        rows = await self.conn.fetch(sql, *params)
        self.statements += 1
        if self.write is not None:
            write, self.write = self.write, None
            await write()
        return rows


def test_a_write_between_page_and_count_is_never_mixed_in(dsn):
    async def body(h: Harness):
        import asyncpg

        await h.write(entry("a", "Document"), entry("b", "Document"))
        other = await asyncpg.connect(dsn)
        await _init_connection(other)
        try:
            async def commit_another_document():
                batch = Batch.model_validate({"batch_id": "race", "entries": [entry("c", "Document")]})
                async with other.transaction():
                    await batches.stage(other, h.catalog, batch, batches.convert(batch, h.catalog, 1000))
                await batches.commit(other, h.catalog, "race")

            racing = WriteAfterFirstStatement(h.conn, commit_another_document)
            answer = orjson.loads((await search(racing, h.catalog, SearchRequest(query={"portal_type": "Document"},
                                                                                b_size=1),
                                                ANONYMOUS, Limits(), counts=h.counts)).body)
            # The page was read before the commit, the first count after it: the counters differ,
            # so page and count ran again together, both of the new state.
            assert racing.statements == 3
            assert answer["items_total"] == 3
            assert answer["counter"] == (await h.conn.fetchval("select counter from catalog where id = $1",
                                                               h.catalog.id))
            assert await h.check({"portal_type": "Document"}) == 3
        finally:
            await other.close()

    run(dsn, body)


def test_a_page_that_is_not_full_needs_no_count(dsn):
    async def body(h: Harness):
        await h.write(entry("a", "Document"), entry("b", "Document"))
        counted = WriteAfterFirstStatement(h.conn, None)
        answer = orjson.loads((await search(counted, h.catalog, SearchRequest(query={"portal_type": "Document"},
                                                                             b_size=5),
                                            ANONYMOUS, Limits(), counts=h.counts)).body)
        assert (answer["items_total"], counted.statements) == (2, 1)
        assert (h.counts.hits, h.counts.misses) == (0, 0)

    run(dsn, body)


def test_identical_misses_wait_for_one_count(dsn, monkeypatch):
    """Concurrent identical queries that miss the cache run one count between them (a common
    word's count over a large catalog takes a second; every key changes with the minute)."""
    import asyncpg

    from catalog_service.store import search as search_module

    counted = []
    fetch = search_module._fetch

    async def slow_count(conn, sql, params, **kw):
        if " as total from catalog c " in sql:
            counted.append(sql)
            await asyncio.sleep(0.3)  # both requests are past their page before this one ends
        return await fetch(conn, sql, params, **kw)

    monkeypatch.setattr(search_module, "_fetch", slow_count)

    async def body(h: Harness):
        await h.write(*(entry(f"d{n}", "Document") for n in range(5)))
        other = await asyncpg.connect(dsn)
        await _init_connection(other)
        try:
            docs = {"portal_type": "Document"}
            answers = await asyncio.gather(*(
                search(conn, h.catalog, SearchRequest(query=docs, b_size=1), ANONYMOUS, Limits(), counts=h.counts)
                for conn in (h.conn, other)))
        finally:
            await other.close()
        assert [orjson.loads(a.body)["items_total"] for a in answers] == [5, 5]
        assert len(counted) == 1 and h.counts.joined == 1
        assert (h.counts.hits, h.counts.misses) == (1, 1)

    run(dsn, body)


@pytest.mark.parametrize("cached", [True, False], ids=["facet cache", "no facet cache"])
def test_a_write_between_page_and_facet_counts_is_never_mixed_in(dsn, cached):
    """Facets, with or without their cache: the page alone (in its best form: a relevance page
    from its score cells, not scoring every match), then the counts; a commit between the two
    makes them run again together, of the new state."""
    import asyncpg

    async def body(h: Harness):
        await h.write(entry("a", "Document", subjects=["x"]), entry("b", "Document", subjects=["x", "y"]))
        facet_cache = CountCache(100) if cached else None
        request = SearchRequest(query={"portal_type": "Document"}, b_size=1, facets=["Subject"])

        class Recording(WriteAfterFirstStatement):
            async def fetch(self, sql, *params):
                self.sql = [*getattr(self, "sql", []), sql]
                return await super().fetch(sql, *params)

        quiet = Recording(h.conn, None)
        answer = orjson.loads((await search(quiet, h.catalog, request, ANONYMOUS, Limits(),
                                            facet_cache=facet_cache)).body)
        assert (answer["items_total"], quiet.statements) == (2, 2)
        assert "fm as materialized" not in quiet.sql[0] and "fm as materialized" in quiet.sql[1]
        assert answer["facets"]["Subject"]["values"] == [{"value": "x", "count": 2}, {"value": "y", "count": 1}]

        other = await asyncpg.connect(dsn)
        await _init_connection(other)
        try:
            async def commit_another_document():
                batch = Batch.model_validate({"batch_id": "race", "entries": [entry("c", "Document", subjects=["y"])]})
                async with other.transaction():
                    await batches.stage(other, h.catalog, batch, batches.convert(batch, h.catalog, 1000))
                await batches.commit(other, h.catalog, "race")

            racing = Recording(h.conn, commit_another_document)
            answer = orjson.loads((await search(racing, h.catalog, request, ANONYMOUS, Limits(),
                                                facet_cache=CountCache(100) if cached else None)).body)
            assert racing.statements == 3
            assert answer["items_total"] == 3
            assert answer["facets"]["Subject"]["values"] == [{"value": "x", "count": 2}, {"value": "y", "count": 2}]
            assert answer["counter"] == await h.conn.fetchval("select counter from catalog where id = $1",
                                                              h.catalog.id)
        finally:
            await other.close()

    run(dsn, body)
