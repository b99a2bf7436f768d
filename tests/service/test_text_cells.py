"""Score cells (docs/decisions/0007) on a real PostgreSQL: the SQL and Python definitions agree,
every commit keeps the per-cell counts equal to a recount of the rows, migration 0003 counts the
rows of older catalogs the same way, and a one-word relevance page is read from the cells when
they settle it and from the whole query when they do not, with the same answer."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import UTC, datetime

import asyncpg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from catalog_schemas.api import Batch, CatalogCreate, IndexDeclaration
from catalog_service.planner.plan import UNRESTRICTED, Limits, Security, plan_search
from catalog_service.store import batches
from catalog_service.store.catalogs import CatalogRegistry
from catalog_service.store.migrations import available, migrate
from catalog_service.store.search import _leading_params
from catalog_service.text import index_words
from catalog_service.text.cells import BOUNDS, bucket, cell_labels, cells
from tests.pg import create_database, drop_database
from tests.service.test_store import connect

WORDS = ["garden", "river", "café", "plone", "zope", "x"]


def migrated_database(prefix: str):
    """A fresh database with the service's schema, for one test module (a generator fixture)."""
    dsn, admin = create_database(prefix)

    async def setup():
        conn = await connect(dsn)
        await migrate(conn)
        await conn.close()

    asyncio.run(setup())
    yield dsn
    drop_database(admin, dsn)


@pytest.fixture(scope="module")
def db():
    yield from migrated_database("cells")


def run(dsn, work):
    async def go():
        conn = await connect(dsn)
        try:
            return await work(conn)
        finally:
            await conn.close()

    return asyncio.run(go())


def test_buckets_in_sql_are_the_python_buckets(db):
    probes = sorted({1, 2, 2**31 - 1} | {b + d for b in BOUNDS for d in (-1, 0, 1) if b + d >= 1})

    async def work(conn):
        rows = await conn.fetch("select x, catalog_text_bucket(x) as b, catalog_text_bucket_lo(catalog_text_bucket(x)) "
                                "as lo, catalog_text_bucket_hi(catalog_text_bucket(x)) as hi "
                                "from unnest($1::integer[]) x", probes)
        for r in rows:
            assert r["b"] == bucket(r["x"]), r
            assert r["lo"] <= r["x"] <= r["hi"], r
            assert r["lo"] == BOUNDS[r["b"] - 1]

    run(db, work)


# No NUL: batches holding one are refused before anything is stored (test_api).
# Index values reach the service as JSON, which holds no NUL in text and no lone surrogate
# (orjson refuses to read or write one).
_TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=12)
_JSON_SCALARS = st.one_of(_TEXT, st.integers(-10**6, 10**6), st.booleans(), st.none(),
                         st.floats(allow_nan=False, allow_infinity=False, width=32))


@settings(max_examples=100, deadline=None)
@given(value=st.one_of(st.lists(_TEXT, max_size=6), st.lists(_JSON_SCALARS, max_size=6),
                       _JSON_SCALARS, st.just(batches.MISSING)))
def test_allowed_in_python_is_catalog_allowed_in_sql(db, value):
    """A commit stores the principals the batch code derived (coalesce(allowed, catalog_allowed(idx))):
    where Python gives them, they are exactly what the SQL function gives."""
    import orjson

    idx = {} if value is batches.MISSING else {"allowedRolesAndUsers": value}
    mine = batches._allowed(idx)

    async def work(conn):
        return await conn.fetchval("select coalesce($2::text[], catalog_allowed($1::text::jsonb))",
                                   orjson.dumps(idx).decode(), mine)

    stored = run(db, work)
    assert stored == run(db, lambda conn: conn.fetchval("select catalog_allowed($1::text::jsonb)",
                                                        orjson.dumps(idx).decode()))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        assert mine == value  # the function is not needed for the common case


@settings(max_examples=60, deadline=None)
@given(words=st.lists(st.sampled_from(WORDS + ["Ärger", "日本語"]), max_size=40))
def test_cells_in_sql_are_the_python_cells(db, words):
    async def work(conn):
        import orjson

        return await conn.fetchval("select catalog_text_cells($1::text::jsonb)", orjson.dumps(words).decode())

    got = run(db, work)
    assert Counter(got) == Counter(f"{fb}:{lb}:{w}" for fb, lb, w in cells(words))
    assert Counter(got) == Counter(cell_labels(words))


@settings(max_examples=200, deadline=None)
@given(counts=st.dictionaries(st.sampled_from(WORDS + ["Ärger", "日本語", "a:b", ""]),
                              st.integers(min_value=1, max_value=60), max_size=12),
       seed=st.randoms(use_true_random=False))
def test_cell_labels_are_the_cells_as_stored(counts, seed):
    # Frequencies past EXACT and documents hundreds of words long reach the wide buckets.
    words = [w for w, n in counts.items() for _ in range(n)]
    seed.shuffle(words)
    assert cell_labels(words) == [f"{fb}:{lb}:{w}" for fb, lb, w in cells(words)]


def _entry(uid: str, text: str | None) -> dict:
    values = {"portal_type": "Document" if int(uid[1:]) % 5 else "News Item"}
    if text is not None:
        values["SearchableText"] = text
    return {"op": "index", "uid": uid, "path": f"/plone/{uid}", "values": values}


def _text(rnd: random.Random) -> str:
    favourite = rnd.choice(WORDS)
    words = [favourite] * rnd.randrange(0, 12) + [rnd.choice(WORDS) for _ in range(rnd.randrange(0, 50))]
    rnd.shuffle(words)
    return " ".join(words)


async def _catalog(conn, name: str, **indexes: str):
    """A new catalog with the given indexes (name=type)."""
    spec = CatalogCreate(id=name, indexes=[IndexDeclaration(name=n, type=t) for n, t in indexes.items()])
    catalog, _ = await CatalogRegistry().create(conn, spec)
    return catalog


async def _commit(conn, catalog, batch_id, entries, clear=False, profile="json"):
    """Stage and commit in one transaction. ``profile``: "json", the text profile kept with the
    batch and read back by the commit (two-phase batches); "memory", handed over by apply_one_shot."""
    batch = Batch.model_validate({"batch_id": batch_id, "entries": entries, "clear": clear})
    changes = batches.convert(batch, catalog, 100_000)
    async with conn.transaction():
        if profile == "memory":
            await batches.apply_one_shot(conn, catalog, batch, changes)
            return
        rows = await batches.one_shot_rows(conn, catalog, batch_id)
        await batches.stage(conn, catalog, batch, changes, rows)
        await batches.commit(conn, catalog, batch_id, rows)


RECOUNT = ("select 'SearchableText' as key, c.w, catalog_text_bucket(c.f) as fb, "
           "catalog_text_bucket(jsonb_array_length(o.text->'SearchableText')) as lb, count(*) as n "
           "from {table} o, lateral (select w, count(*)::integer from "
           "jsonb_array_elements_text(o.text->'SearchableText') w group by w) c(w, f) "
           "where jsonb_typeof(o.text->'SearchableText') = 'array' group by 1, 2, 3, 4")
# Rows whose stored cells are not the cells of their words.
WRONG_CELLS = ("select count(*) from {table} o, lateral (select to_jsonb(catalog_text_cells(o.text->'SearchableText'))) "
               "c(cells) where o.text ? 'SearchableText' and not (o.text->'SearchableText#cells' @> c.cells "
               "and c.cells @> (o.text->'SearchableText#cells'))")


# The lexicon (documents per word) and the documents and words per index, recounted from the rows.
LEXICON = ("select e.key, w, count(distinct o.rid) as df from {table} o, jsonb_each(o.text) e, "
           "jsonb_array_elements_text(e.value) w where jsonb_typeof(e.value) = 'array' "
           "and e.key not like '%#cells' group by 1, 2")
STATS = ("select e.key, count(*) as docs, sum(jsonb_array_length(e.value)) as words from {table} o, "
         "jsonb_each(o.text) e where jsonb_typeof(e.value) = 'array' and e.key not like '%#cells' group by 1")


async def _counts(conn, catalog) -> tuple[dict, dict]:
    assert await conn.fetchval(WRONG_CELLS.format(table=catalog.table)) == 0
    lexicon = {(r["index_name"], r["word"]): r["df"] for r in await conn.fetch(
        "select * from catalog_lexicon where catalog_id = $1 and df <> 0", catalog.id)}
    assert lexicon == {(r["key"], r["w"]): r["df"] for r in await conn.fetch(LEXICON.format(table=catalog.table))}
    stats = {r["index_name"]: (r["docs"], r["words"]) for r in await conn.fetch(
        "select * from catalog_text_stats where catalog_id = $1 and docs <> 0", catalog.id)}
    assert stats == {r["key"]: (r["docs"], r["words"]) for r in await conn.fetch(STATS.format(table=catalog.table))}
    kept = {(r["index_name"], r["word"], r["fb"], r["lb"]): r["n"]
            for r in await conn.fetch("select * from catalog_text_cell where catalog_id = $1 and n <> 0", catalog.id)}
    recount = {(r["key"], r["w"], r["fb"], r["lb"]): r["n"]
               for r in await conn.fetch(RECOUNT.format(table=catalog.table))}
    return kept, recount


@pytest.mark.parametrize("profile", ["json", "memory"])
def test_commits_keep_cell_counts_and_the_migration_counts_alike(db, profile):
    rnd = random.Random(7)

    async def work(conn):
        catalog = await _catalog(conn, f"counts-{profile}", SearchableText="ZCTextIndex", Title="ZCTextIndex",
                                 portal_type="FieldIndex")
        await _commit(conn, catalog, "b0", [_entry(f"u{n}", _text(rnd)) for n in range(60)], profile=profile)
        if profile == "memory":
            # A one-shot batch whose id was staged (two-phase) before: its rows replace the staged
            # ones, and none are left behind.
            early = Batch.model_validate({"batch_id": "b1", "entries": [_entry("u1", "stale words")]})
            async with conn.transaction():
                await batches.stage(conn, catalog, early, batches.convert(early, catalog, 10))
        # Changed texts, texts kept (None), partial reindexes, removals, new objects.
        changes = [_entry(f"u{n}", _text(rnd) if n % 3 else None) for n in range(0, 60, 2)]
        changes += [{"op": "unindex", "uid": f"u{n}"} for n in range(1, 30, 4)]
        changes += [{**_entry(f"u{n}", _text(rnd)), "idxs": ["SearchableText"]} for n in range(31, 60, 6)]
        changes += [_entry(f"u{n}", _text(rnd)) for n in range(60, 70)]
        await _commit(conn, catalog, "b1", changes, profile=profile)
        assert await conn.fetchval("select count(*) from catalog_staged where catalog_id = $1", catalog.id) == 0
        kept, recount = await _counts(conn, catalog)
        assert kept == recount and kept
        if profile == "memory":
            return  # the migration and the clear below do not depend on how the profile travels
        assert {k[0] for k in kept} == {"SearchableText"}  # Title has no cells (docs/decisions/0007)
        # The migration's cells and counts for older catalogs are the same.
        backfill = next(sql for _, name, sql in available() if name.startswith("0003_"))
        backfill = backfill[backfill.index("update catalog_object"):]
        await conn.execute("delete from catalog_text_cell where catalog_id = $1", catalog.id)
        await conn.execute(f"update {catalog.table} set text = text - 'SearchableText#cells'")
        await conn.execute(backfill)
        kept_again, _ = await _counts(conn, catalog)
        assert kept_again == recount
        await _commit(conn, catalog, "b2", [_entry("u99", "garden")], clear=True)
        kept, recount = await _counts(conn, catalog)
        assert kept == recount == {("SearchableText", "garden", 1, 1): 1}

    run(db, work)


def _scanned(plan: dict):
    """Rows each scan of a plan (EXPLAIN's JSON) returned."""
    if plan["Node Type"].endswith("Heap Scan"):
        yield plan["Actual Rows"] * plan["Actual Loops"]
    for child in plan.get("Plans", []):
        yield from _scanned(child)


ANONYMOUS = Security(principals=("Anonymous",), effective_at=datetime(2026, 1, 1, tzinfo=UTC))


def test_relevance_page_from_cells_or_from_the_whole_query(db):
    rnd = random.Random(11)

    async def work(conn):
        catalog = await _catalog(conn, "paths", SearchableText="ZCTextIndex", portal_type="FieldIndex",
                                 allowedRolesAndUsers="KeywordIndex")
        entries = []
        for n in range(2000):
            entry = _entry(f"u{n}", _text(rnd))
            entry["values"]["allowedRolesAndUsers"] = ["Anonymous"] if n % 4 else ["Manager"]
            entries.append(entry)
        await _commit(conn, catalog, "b0", entries)
        await conn.execute(f"analyze {catalog.table}")
        texts = {e["uid"]: index_words(e["values"]["SearchableText"]) for e in entries}

        async def page(query, limits, analyze=False, told_total=False):
            plan = plan_search(query, catalog.schema, limits, ANONYMOUS, b_size=query.pop("b_size", 10))
            if told_total:  # as the executor tells it from its count cache
                counted = await conn.fetchval(plan.count_sql, *_leading_params(plan.count_sql, plan.params))
                assert plan.params[plan.known_total_param] is None
                plan.params[plan.known_total_param] = counted
            rows = await conn.fetch(plan.sql, *plan.params)
            branches = None
            if analyze:
                import orjson

                explained = orjson.loads(await conn.fetchval("explain (analyze, format json) " + plan.sql, *plan.params))
                top = explained[0]["Plan"]
                if top["Node Type"] != "Append":
                    return [(r["uid"], r["score"]) for r in rows], [0, top["Actual Rows"], 0]  # no cells path
                # Rows from the cells' page, rows from the whole query, rows the cells' page read.
                branches = [p["Actual Rows"] for p in top["Plans"] if p["Parent Relationship"] == "Member"]
                best = next(p for p in top["Plans"] if p.get("Subplan Name") == "CTE best")
                branches.append(max(_scanned(best), default=0))
            return [(r["uid"], r["score"]) for r in rows], branches

        whole = Limits(relevance_top=0)
        # Common words, a page deep in: the cells settle it and the whole query never runs.
        for word in ("garden", "river"):
            for b_start in (0, 25):
                query = {"SearchableText": word, "b_start": b_start}
                cut, branches = await page(dict(query), Limits(), analyze=True)
                assert cut == (await page(dict(query), whole))[0]
                assert len(cut) == 10
                page_rows, whole_rows, read = branches
                assert (page_rows, whole_rows) == (10, 0)
                # A real cut: the cells' documents are a small part of the word's.
                assert read < sum(1 for words in texts.values() if word in words) / 3
        # Plone's search form sends globs: they read cells too. Sums of several words do not.
        for text, expected in (("gard*", [10, 0]), ("garden OR river", [0, 10]), ("garden AND NOT river", [0, 10])):
            query = {"SearchableText": text}
            cut, branches = await page(dict(query), Limits(), analyze=True)
            assert cut == (await page(dict(query), whole))[0] and len(cut) == 10
            assert branches[:2] == expected, text
        # A glob matching more words than the cells path takes: the whole query answers.
        wide = [_entry(f"w{n}", f"wide{n:02d} garden") for n in range(20)]
        for entry in wide:
            entry["values"]["allowedRolesAndUsers"] = ["Anonymous"]
        await _commit(conn, catalog, "b1", wide)
        query = {"SearchableText": "wide*"}
        cut, branches = await page(dict(query), Limits(), analyze=True)
        assert cut == (await page(dict(query), whole))[0] and len(cut) == 10
        assert branches[:2] == [0, 10]
        # A catalog whose cells index is not built yet (made before migration 0003, until
        # `catalog-service migrate`): the whole query answers instead of a scan for the cells.
        index = catalog.schema.indexes["SearchableText"].index_name(catalog.table, "c")
        await conn.execute(f"drop index {index}")
        query = {"SearchableText": "garden"}
        cut, branches = await page(dict(query), Limits(), analyze=True)
        assert cut == (await page(dict(query), whole))[0] and branches[:2] == [0, 10]
        await conn.execute(catalog.schema.indexes["SearchableText"].ddl(catalog.table)[1])
        assert (await page(dict(query), Limits(), analyze=True))[1][:2] == [10, 0]
        # A criterion the best cells' documents fail (News Items are every fifth object, and
        # the candidates are few): the whole query answers, with the same page.
        query = {"SearchableText": "garden", "portal_type": "News Item", "b_size": 30}
        cut, branches = await page(dict(query), Limits(relevance_candidates=1), analyze=True)
        assert cut == (await page(dict(query), whole))[0]
        assert len(cut) == 30
        assert branches[:2] == [0, 30]
        # Told the result's total, the cells hold twice the share of the word's documents the
        # criteria keep, per result: they settle the same page, reading a part of the word's.
        told, branches = await page(dict(query), Limits(relevance_candidates=1), analyze=True, told_total=True)
        assert told == cut
        assert branches[:2] == [30, 0]
        assert branches[2] < sum(1 for words in texts.values() if "garden" in words) / 2

    run(db, work)


def test_queries_known_to_have_few_results_skip_the_cells(db, monkeypatch):
    """The cells' statement costs planning time; once the count cache knows a query has fewer
    results than the cells would be cut at, the plain plan answers it (same page)."""
    import orjson

    from catalog_schemas.api import SearchRequest
    from catalog_service.store import search as search_module
    from catalog_service.store.search import CountCache, search

    sent, generic = [], []
    fetch = search_module._fetch

    async def spy(conn, sql, params, **kw):
        sent.append(sql)
        generic.append(kw.get("generic_plan", False))
        return await fetch(conn, sql, params, **kw)

    monkeypatch.setattr(search_module, "_fetch", spy)

    async def work(conn):
        catalog = await _catalog(conn, "few", SearchableText="ZCTextIndex")
        entries = [{"op": "index", "uid": f"u{n}", "path": f"/plone/u{n}",
                    "values": {"SearchableText": "rare word" if n < 12 else "common word"}} for n in range(400)]
        await _commit(conn, catalog, "b0", entries)
        counts = CountCache(10)
        pages = {}
        for word in ("rare", "common", "rare", "common"):
            sent.clear()
            answer = orjson.loads((await search(conn, catalog, SearchRequest(query={"SearchableText": word}, b_size=5),
                                                UNRESTRICTED, Limits(), counts=counts)).body)
            used_cells = any("best as materialized" in sql for sql in sent)
            # The cells' statement, and only it, runs with a generic plan.
            assert generic == ["best as materialized" in sql for sql in sent]
            generic.clear()
            pages.setdefault(word, []).append((answer["items_total"], [i["uid"] for i in answer["items"]], used_cells))
        # First time: the cells' statement; then the plain one for the rare word only.
        assert [p[2] for p in pages["rare"]] == [True, False]
        assert [p[2] for p in pages["common"]] == [True, True]
        for word, (first, second) in pages.items():
            assert first[:2] == second[:2], word
        assert pages["rare"][0][0] == 12 and pages["common"][0][0] == 388

    run(db, work)


def test_the_executor_tells_the_cells_the_total_it_counted_last(db, monkeypatch):
    """A relevance page from the cells is told the result's total the count cache (or, with
    facets, the facet cache) holds, at any state; the first time it is unknown (null). Pages and
    totals are the same either way."""
    import orjson

    from catalog_schemas.api import SearchRequest
    from catalog_service.store import search as search_module
    from catalog_service.store.search import CountCache, search

    sent = []
    fetch = search_module._fetch

    async def spy(conn, sql, params, **kw):
        sent.append((sql, list(params)))
        return await fetch(conn, sql, params, **kw)

    monkeypatch.setattr(search_module, "_fetch", spy)

    async def work(conn):
        catalog = await _catalog(conn, "told", SearchableText="ZCTextIndex", portal_type="FieldIndex")
        rnd = random.Random(5)
        await _commit(conn, catalog, "b0", [_entry(f"u{n}", _text(rnd)) for n in range(1500)])
        query = {"SearchableText": "garden", "portal_type": "News Item"}
        plan = plan_search(query, catalog.schema, Limits(), UNRESTRICTED, b_size=5)
        assert plan.plain_sql and plan.known_total_param is not None
        for facets in ([], ["portal_type"]):
            counts, facet_counts, told, answers = CountCache(10), CountCache(10), [], []
            for _ in range(3):
                sent.clear()
                request = SearchRequest(query=query, b_size=5, facets=facets)
                answers.append(orjson.loads((await search(conn, catalog, request, UNRESTRICTED, Limits(),
                                                          counts=counts, facet_cache=facet_counts)).body))
                cells = [params for sql, params in sent if "best as materialized" in sql]
                told.append([params[plan.known_total_param] for params in cells])
            total = answers[0]["items_total"]
            assert total > plan.plain_below  # the cells' statement is the one that runs
            assert told == [[None], [total], [total]], facets
            assert all(a == answers[0] for a in answers[1:])

    run(db, work)


def test_cells_statement_runs_with_a_generic_plan_and_leaves_the_session_as_it_was(db):
    """The relevance page from the cells is planned once per connection (a generic plan kept with
    its prepared statement), in a transaction of its own: afterwards, also after a failure, the
    connection plans each statement for its parameters again and is in no transaction. With
    ``relevance_generic_plan`` off it is planned for its parameters, with the same answer."""
    import orjson

    from catalog_schemas.api import SearchRequest
    from catalog_service.store.search import CountCache, _fetch, search

    async def work(conn):
        await conn.execute("set plan_cache_mode = force_custom_plan")  # as the service's sessions
        catalog = await _catalog(conn, "generic", SearchableText="ZCTextIndex", portal_type="FieldIndex")
        rnd = random.Random(7)
        await _commit(conn, catalog, "b0", [_entry(f"u{n}", _text(rnd)) for n in range(300)])
        request = SearchRequest(query={"SearchableText": "garden"}, b_size=5)

        async def page(limits):
            body = (await search(conn, catalog, request, UNRESTRICTED, limits, counts=CountCache(10))).body
            return orjson.loads(body)

        async def cells_plans():
            return await conn.fetch("select generic_plans, custom_plans from pg_prepared_statements "
                                    "where strpos(statement, 'best as ' || 'materialized') > 0")

        answers = [await page(Limits()) for _ in range(3)]
        plans = await cells_plans()
        assert [tuple(r) for r in plans] == [(3, 0)]
        assert await conn.fetchval("show plan_cache_mode") == "force_custom_plan"
        assert not conn.is_in_transaction()

        assert await page(Limits(relevance_generic_plan=False)) == answers[0]
        plans = await cells_plans()
        assert [tuple(r) for r in plans] == [(3, 1)]  # the same statement, planned for its parameters
        assert answers[0]["items_total"] > 5 and answers.count(answers[0]) == 3

        with pytest.raises(asyncpg.DataError):  # fails inside the statement's transaction
            await _fetch(conn, "select 1 / $1::integer", [0], generic_plan=True)
        assert await conn.fetchval("show plan_cache_mode") == "force_custom_plan"
        assert not conn.is_in_transaction()

        # Inside a caller's transaction it neither commits that transaction nor changes its plans.
        await conn.execute("create temporary table probe (n integer)")
        tr = conn.transaction()
        await tr.start()
        await conn.execute("insert into probe values (1)")
        assert await _fetch(conn, "select count(*) as n from probe", [], generic_plan=True) == [(1,)]
        assert conn.is_in_transaction()
        assert await conn.fetchval("show plan_cache_mode") == "force_custom_plan"
        await tr.rollback()
        assert await conn.fetchval("select count(*) from probe") == 0

    run(db, work)
