"""Run a planned search and shape the answer (metadata passed through as raw JSON).

Usually one round trip per query: the catalog's counter and schema revision (and the state of the
batch the caller waits for) come back with the page, from the same statement and snapshot; the
total comes from the page, the count cache or a count of the same state (docs/decisions/0006).
A query planned with a stale copy of the catalog's schema is detected by its revision and run
again.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace

import asyncpg
import orjson

from catalog_schemas.api import SearchRequest

from ..errors import LimitExceeded
from ..metrics import COUNT_CACHE
from ..planner.facets import FacetPlan, facet_counts, parse_facets, plan_facets
from ..planner.plan import UNRESTRICTED, Limits, SearchPlan, Security, plan_search
from ..planner.sql import Params
from .catalogs import Catalog


@dataclass
class Answer:
    body: bytes
    complete: bool
    # (catalog id, counter, schema revision) the answer was read at: HTTP caching's ETag.
    state: tuple = ()


class CountCache:
    """Totals of recent queries, valid while the catalog's counter and schema revision stand.

    Every write to a catalog's rows bumps its counter in the same database transaction (batch
    commit, clear) or its schema revision (schema update), so a total counted at (counter, rev)
    is the total of the same count statement and parameters at any later snapshot with the same
    pair. The search statement compares the pair in its own snapshot and runs the count only
    when they differ: the cache can save work, never return a total of another state. Values
    that change with time (``now`` of the effective-date filter) are parameters, so part of the
    key. Queries over staged batches are never cached (staging changes no counter).
    """

    def __init__(self, size: int, metric=COUNT_CACHE):
        self.size = size
        self.metric = metric
        self.hits = 0
        self.misses = 0
        self.joined = 0
        self._entries: OrderedDict[tuple, tuple[int, int, int]] = OrderedDict()
        self._lock = threading.Lock()
        # Counts running now, by key: identical queries that miss together wait for one count
        # instead of each running it (a common word's count over a large catalog takes a second,
        # and every key changes when the minute of the effective-date filter does).
        self._flights: dict[tuple, asyncio.Future] = {}

    async def count(self, key: tuple, state: tuple[int, int], run) -> int | None:
        """The total for ``key`` at ``state`` (counter, schema revision): from a count of the same
        key running in this process if it counts that state, else from ``run()``, which returns
        (counter, schema revision, total) of its own snapshot. None when that snapshot is not
        ``state`` (a write came between)."""
        loop = asyncio.get_running_loop()
        flight = self._flights.get(key)
        if flight is not None and flight.get_loop() is loop:
            found = await asyncio.shield(flight)
            if found is not None and found[:2] == state:
                self.joined += 1
                self.record(hit=True)  # no count ran for this request
                return found[2]
        flight = loop.create_future()
        self._flights[key] = flight
        found = None
        try:
            found = await run()
        finally:
            flight.set_result(found)  # waiters count themselves when this failed (None)
            if self._flights.get(key) is flight:
                del self._flights[key]
        if found is None or found[:2] != state:
            return None
        self.record(hit=False)
        self.put(key, *found)
        return found[2]

    def get(self, key: tuple) -> tuple[int, int, int] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: tuple, counter: int, schema_rev: int, total: int) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._entries[key] = (counter, schema_rev, total)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def record(self, hit: bool) -> None:
        if hit:
            self.hits += 1
        else:
            self.misses += 1
        self.metric.labels("hit" if hit else "miss").inc()


_PARAM = re.compile(r"\$(\d+)")


@functools.lru_cache(maxsize=4096)
def _params_used(sql: str) -> int:
    """The highest parameter number in ``sql`` (the text depends only on the query's shape)."""
    return max((int(n) for n in _PARAM.findall(sql)), default=0)


def _leading_params(sql: str, params: list) -> list:
    """The parameters ``sql`` uses, when they are the first ones of ``params``."""
    return params[:_params_used(sql)]


def _count_params(plan) -> list:
    """The parameters of ``plan.count_sql``: the first ones of the plan's."""
    return _leading_params(plan.count_sql, plan.params)


def _count_key(catalog: Catalog, plan, request: SearchRequest) -> tuple | None:
    if request.batch_ids:
        return None
    # repr keeps types apart (1 and "1", lists and tuples); parameters are plain values.
    return (catalog.id, plan.count_sql, repr(_count_params(plan)))


def _batch_column(request: SearchRequest, params: list) -> str:
    """The state of the batch the caller waits for (``after_batch``), as a column; appends its
    parameter to ``params``."""
    if request.after_batch is None:
        return "null::text"  # nobody waits for a batch: no lookup to plan and run
    params.append(request.after_batch)
    return (f"(select b.state from catalog_batch b where b.catalog_id = c.id "
            f"and b.batch_id = ${len(params)}::text)")


async def _fetch(conn: asyncpg.Connection, sql: str, params: list, generic_plan: bool = False) -> list:
    try:
        if generic_plan and not conn.is_in_transaction():  # inside a caller's transaction: as planned
            return await _fetch_generic(conn, sql, params)
        return await conn.fetch(sql, *params)
    except asyncpg.UndefinedTableError as exc:
        raise StaleSchema() from exc


async def _fetch_generic(conn: asyncpg.Connection, sql: str, params: list) -> list:
    """Run ``sql`` with a generic plan, made once per connection and kept with its prepared
    statement, in a transaction of its own so that the setting ends with it.

    For the statement of a relevance page read from score cells (docs/decisions/0007). The service
    plans every other statement for its parameters (``plan_cache_mode``, database.server_settings),
    and this one took PostgreSQL 0.9-1.6 ms to plan, several times its run on a small catalog. Its
    plan does not depend on the parameters: the rows come through the cells index, whose keys
    (the ``cell`` CTE) are known only when it runs, whatever the mode (docs/decisions/0012).

    A failure rolls the transaction back; a cancelled task leaves it open, and the pool rolls it
    back when the connection comes back (Database.release_read keeps no connection that is in a
    transaction)."""
    await conn.execute("begin; set local plan_cache_mode = force_generic_plan")
    try:
        rows = await conn.fetch(sql, *params)
    except asyncio.CancelledError:
        raise
    except Exception:
        with contextlib.suppress(Exception):  # a broken connection: the pool drops it
            await conn.execute("rollback")
        raise
    await conn.execute("commit")
    return rows


def _head(rows: list, catalog: Catalog):
    if not rows or rows[0]["schema_rev"] != catalog.schema_rev:
        raise StaleSchema()
    return rows[0]


def _short_page_total(rows_on_page: int, limit: int, offset: int) -> int | None:
    """The total when the page alone tells it: a page that is not full ends the result. (A page
    size of 0 says nothing, nor does an empty page past the first.)"""
    if limit > 0 and 0 < rows_on_page < limit:
        return offset + rows_on_page
    if limit > 0 and offset == 0 and rows_on_page == 0:
        return 0
    return None


def _with_known_total(plan: SearchPlan, total: int) -> SearchPlan:
    """The score cells' page told the result's total as last counted (at any state: it only
    scales how many documents the cells read, the page is exact either way)."""
    if plan.known_total_param is None or plan.sql is plan.plain_sql:
        return plan
    params = list(plan.params)
    params[plan.known_total_param] = total
    return replace(plan, params=params)


async def _page_and_total(conn, catalog: Catalog, plan, request: SearchRequest, limits: Limits,
                          counts: CountCache | None) -> tuple[list, object]:
    """The page's rows and the head row (counter, schema revision, batch state, total).

    With a count cache, the page is read first without its count: a statement with the count in
    it costs twice the planning, even when the count is not run. The total then comes from a page
    that is not full, from the cache if the catalog has not moved, or from a count whose own
    snapshot shows the same counter and revision as the page's (every write moves one of them, so
    it counted the page's state). If a write slipped in between, or without a cache, page and
    count run as one statement.
    """
    limit = plan.b_size if plan.b_size is not None else limits.max_unbatched
    key = None if counts is None or counts.size <= 0 else _count_key(catalog, plan, request)
    if plan.plain_sql and key is not None:
        known = counts.get(key)
        if known is not None and known[2] < plan.plain_below:
            # Few results the last time (at any state: this only picks one of two exact plans).
            plan = replace(plan, sql=plan.plain_sql, params=_leading_params(plan.plain_sql, plan.params))
        elif known is not None:
            plan = _with_known_total(plan, known[2])
    # The statement from the score cells (not its plain form) gets a generic plan (decision 0012).
    from_cells = limits.relevance_generic_plan and bool(plan.plain_sql) and plan.sql is not plan.plain_sql
    params = list(plan.params) + [catalog.id]
    cat = f"${len(params)}::integer"
    batch_state = _batch_column(request, params)
    head_sql = f"select c.counter, c.schema_rev, {batch_state} as batch_state"
    if key is not None:
        # row_number() carries the page's order through the join (SQL keeps no order otherwise).
        rows = await _fetch(conn, f"{head_sql}, null::bigint as total, r.* from catalog c "
                                  f"left join (select q.*, row_number() over () as n from ({plan.sql}) q) r on true "
                                  f"where c.id = {cat} order by r.n", params, generic_plan=from_cells)
        head = dict(_head(rows, catalog))
        rows = rows if head["rid"] is not None else []
        state = (head["counter"], head["schema_rev"])
        total = _short_page_total(len(rows), limit, plan.b_start)
        if total is None:
            cached = counts.get(key)
            if cached is not None and cached[:2] == state:
                total = cached[2]
                counts.record(hit=True)
            else:
                count_params = _count_params(plan) + [catalog.id]

                async def run_count():
                    counted = _head(await _fetch(conn, f"select c.counter, c.schema_rev, ({plan.count_sql}) "
                                                       f"as total from catalog c where c.id = "
                                                       f"${len(count_params)}::integer", count_params), catalog)
                    return counted["counter"], counted["schema_rev"], counted["total"]

                total = await counts.count(key, state, run_count)
        if total is not None:
            head["total"] = total
            return rows, head
    # Page and count in one statement, one snapshot. The count runs only if the page does not tell
    # the total (an InitPlan in an untaken CASE branch is never executed).
    params.extend((limit, plan.b_start))
    lim, off = f"${len(params) - 1}::bigint", f"${len(params)}::bigint"
    rows_on_page = "(select count(*) from page)"
    total = (f"(case when {lim} > 0 and {rows_on_page} between 1 and {lim} - 1 then {off} + {rows_on_page} "
             f"when {lim} > 0 and {off} = 0 and {rows_on_page} = 0 then 0 else ({plan.count_sql}) end)")
    rows = await _fetch(conn, f"with page as materialized (select q.*, row_number() over () as n from ({plan.sql}) q) "
                              f"{head_sql}, {total} as total, r.* "
                              f"from catalog c left join page r on true where c.id = {cat} order by r.n", params)
    head = _head(rows, catalog)
    if key is not None:
        counts.record(hit=False)
        counts.put(key, head["counter"], head["schema_rev"], head["total"])
    return [r for r in rows if r["rid"] is not None], head


async def _page_and_facets(conn, catalog: Catalog, plan: SearchPlan, request: SearchRequest, limits: Limits,
                           cache: CountCache | None, facets_planned) -> tuple[list, dict, dict]:
    """The page's rows, the head row and the facet counts (with the result's total), from one
    snapshot (docs/decisions/0019).

    ``facets_planned(params)`` plans the facet statement, its parameters after ``params``'s. The
    page alone first, in its best form (a relevance page from its score cells), then the counts
    of the same (counter, schema revision): from the cache when it has them, else from a facet
    statement whose own snapshot shows that state (every write moves one of the two, so it counted
    the page's rows). Only if a write slipped in between, or for a read of staged batches (their
    rows are not in the counter), do page and counts run as one statement: there the page comes in
    its plain form, which scores every match."""
    alone: FacetPlan = facets_planned(None)
    caching = cache is not None and cache.size > 0
    key = (catalog.id, alone.sql, repr(alone.params)) if not request.batch_ids else None
    params = [catalog.id]
    batch_state = _batch_column(request, params)
    if key is not None:
        known = cache.get(key) if caching else None
        if plan.empty:
            rows = await _fetch(conn, f"select c.counter, c.schema_rev, {batch_state} as batch_state, "
                                      f"null::bigint as rid from catalog c where c.id = $1::integer", params)
        else:
            if plan.plain_sql and known is not None and known[2]["total"] < plan.plain_below:
                plan = replace(plan, sql=plan.plain_sql, params=_leading_params(plan.plain_sql, plan.params))
            elif plan.plain_sql and known is not None:
                plan = _with_known_total(plan, known[2]["total"])
            from_cells = limits.relevance_generic_plan and bool(plan.plain_sql) and plan.sql is not plan.plain_sql
            page_params = list(plan.params) + [catalog.id]
            batch_state = _batch_column(request, page_params)
            rows = await _fetch(conn, f"select c.counter, c.schema_rev, {batch_state} as batch_state, r.* "
                                      f"from catalog c left join (select q.*, row_number() over () as n "
                                      f"from ({plan.sql}) q) r on true where c.id = ${len(plan.params) + 1}::integer "
                                      f"order by r.n", page_params, generic_plan=from_cells)
        head = dict(_head(rows, catalog))
        rows = rows if head["rid"] is not None else []
        state = (head["counter"], head["schema_rev"])
        found = None
        if known is not None and known[:2] == state:
            found = known[2]
            cache.record(hit=True)
        else:
            count_params = list(alone.params) + [catalog.id]

            async def run_facets():
                counted = _head(await _fetch(conn, f"select c.counter, c.schema_rev, ({alone.sql}) as facets "
                                                   f"from catalog c where c.id = ${len(count_params)}::integer",
                                             count_params), catalog)
                return counted["counter"], counted["schema_rev"], orjson.loads(counted["facets"])

            if caching:
                found = await cache.count(key, state, run_facets)
            else:
                counted = await run_facets()
                found = counted[2] if counted[:2] == state else None
        if found is not None:
            return rows, head, found
    # Page and facets in one statement, one snapshot. The page of a relevance query comes in its
    # plain form here: the score cells' form wants a generic plan, the counts a custom one.
    if plan.plain_sql:
        plan = replace(plan, sql=plan.plain_sql, params=_leading_params(plan.plain_sql, plan.params))
    seeded = Params()
    if not plan.empty:
        seeded.values = list(plan.params)
    both = facets_planned(seeded)
    params = list(both.params) + [catalog.id]
    cat = f"${len(params)}::integer"
    batch_state = _batch_column(request, params)
    head_sql = f"select c.counter, c.schema_rev, {batch_state} as batch_state, ({both.sql}) as facets"
    if plan.empty:
        rows = await _fetch(conn, f"{head_sql}, null::bigint as rid from catalog c where c.id = {cat}", params)
    else:
        rows = await _fetch(conn, f"with page as materialized (select q.*, row_number() over () as n "
                                  f"from ({plan.sql}) q) {head_sql}, r.* from catalog c left join page r on true "
                                  f"where c.id = {cat} order by r.n", params)
    head = dict(_head(rows, catalog))
    found = orjson.loads(head["facets"])
    if key is not None and caching:
        cache.record(hit=False)
        cache.put(key, head["counter"], head["schema_rev"], found)
    return [r for r in rows if r["rid"] is not None], head, found


class StaleSchema(Exception):
    """The catalog changed (schema revision, or dropped and recreated) since it was cached."""


# The page cache keeps answers of at most this many rows (a page of Plone's metadata is about
# 1.3 kB a row: 1,000 pages of 20 rows take about 26 MB).
PAGE_CACHE_MAX_ROWS = 100


def _page_key(catalog: Catalog, plan: SearchPlan, request: SearchRequest, nothing: bool) -> tuple:
    """What an answer depends on: the statement and its parameters (the query, the caller's
    principals and scope, the minute of the effective-date filter, the page's bounds, the
    metadata asked for) and the facets asked for."""
    return (catalog.id, plan.sql, repr(plan.params), repr(request.facets), nothing)


async def _execute(conn: asyncpg.Connection, catalog: Catalog, request: SearchRequest, security: Security,
                   limits: Limits, counts: CountCache | None, facet_cache: CountCache | None,
                   pages: CountCache | None = None):
    """(plan, the page's rows, head row: counter, schema revision, batch state, total; the facet
    counts as facet_counts gives them, or None when none were asked).

    With ``pages``, the whole answer of a search repeated while the catalog's counter and schema
    revision stand comes from the cache: the pair is read first (one short statement) and
    compared with the one the answer was read at, as the count cache does. Searches over staged
    batches or waiting for one (``after_batch``) are never kept."""
    facets = parse_facets(request.facets, catalog.schema, limits) if request.facets else []  # errors first
    plan, nothing = await _plan(conn, catalog, request, security, limits)
    page_key = None
    if pages is not None and pages.size > 0 and not request.batch_ids and request.after_batch is None:
        page_key = _page_key(catalog, plan, request, nothing)
        cached = pages.get(page_key)
        if cached is not None:
            now = await conn.fetchrow("select counter, schema_rev from catalog where id = $1", catalog.id)
            if now is not None and cached[:2] == (now["counter"], now["schema_rev"]):
                pages.record(hit=True)
                return cached[2]
    result = await _answer(conn, catalog, request, security, limits, counts, facet_cache, plan, nothing, facets)
    if page_key is not None and len(result[1]) <= PAGE_CACHE_MAX_ROWS:
        pages.record(hit=False)
        pages.put(page_key, result[2]["counter"], result[2]["schema_rev"], result)
    return result


async def _plan(conn: asyncpg.Connection, catalog: Catalog, request: SearchRequest, security: Security,
                limits: Limits) -> tuple[SearchPlan, bool]:
    """The search's plan, after the checks that need the database (the globs' lexicon words, a
    deferred error's precheck), and whether it is the empty answer a deferred error gives."""
    nothing = False
    plan = plan_search(
        request.query, catalog.schema, limits, security,
        batch_ids=request.batch_ids,
        metadata=None if request.metadata in (None, "*") else list(request.metadata),
        b_start=request.b_start, b_size=request.b_size,
    )
    if plan.expansion_sql:
        # A public search's globs, each counted up to one past the limit: the search itself would
        # read every word's documents (and score them).
        try:
            words = await conn.fetchval(plan.expansion_sql, *plan.expansion_params)
        except asyncpg.UndefinedTableError as exc:
            raise StaleSchema() from exc
        if words is not None and words > limits.max_glob_words:
            raise LimitExceeded(f"a word with '*' or '?' matches more than {limits.max_glob_words} words of the "
                                f"lexicon, the most in a search without the service credential; make it longer")
    if plan.deferred_error is not None:
        try:
            found = await conn.fetchval(plan.precheck_sql, *plan.precheck_params)
        except asyncpg.UndefinedTableError as exc:
            raise StaleSchema() from exc
        if found:
            raise plan.deferred_error
        plan = plan_search({}, catalog.schema, limits, UNRESTRICTED)  # nothing: an empty answer
        nothing = True
    return plan, nothing


async def _answer(conn: asyncpg.Connection, catalog: Catalog, request: SearchRequest, security: Security,
                  limits: Limits, counts: CountCache | None, facet_cache: CountCache | None, plan: SearchPlan,
                  nothing: bool, facets: list):
    """_execute's answer read from the database (``facets`` as parse_facets gave them)."""
    counted = None
    if facets:
        def facets_planned(params):
            return plan_facets(request.query, catalog.schema, limits, security, facets,
                               batch_ids=request.batch_ids, params=params, nothing=nothing)

        rows, head, counted = await _page_and_facets(conn, catalog, plan, request, limits, facet_cache,
                                                     facets_planned)
        head["total"] = 0 if plan.empty else counted["total"]
        rows = plan.first_half_page(rows, head["total"])
    elif plan.empty:
        params = [catalog.id]
        batch_state = _batch_column(request, params)
        rows = await _fetch(conn, f"select c.counter, c.schema_rev, {batch_state} as batch_state, "
                                  f"0::bigint as total, null::bigint as rid from catalog c where c.id = $1::integer",
                            params)
        head = _head(rows, catalog)
    else:
        rows, head = await _page_and_total(conn, catalog, plan, request, limits, counts)
        rows = plan.first_half_page(rows, head["total"])
    facet_result = facet_counts(facets, counted["counts"]) if facets else None
    return plan, [r for r in rows if r["rid"] is not None], head, facet_result


async def search(conn: asyncpg.Connection, catalog: Catalog, request: SearchRequest,
                 security: Security, limits: Limits, counts: CountCache | None = None,
                 facet_cache: CountCache | None = None, pages: CountCache | None = None) -> Answer:
    plan, hits, head, facet_result = await _execute(conn, catalog, request, security, limits, counts, facet_cache,
                                                    pages)
    complete = request.after_batch is None or head["batch_state"] == "committed"
    items = [
        {"rid": r["rid"], "uid": r["uid"], "path": r["path"],
         "score": plan.zcatalog_score(r["score"]),
         "metadata": orjson.Fragment(r["meta"])}
        for r in hits
    ]
    answer = {
        "items_total": head["total"],
        "b_start": plan.b_start,
        "b_size": plan.b_size,
        "items": items,
        "counter": head["counter"],
        "complete": complete,
    }
    if facet_result is not None:
        answer["facets"] = facet_result
    body = orjson.dumps(answer)
    return Answer(body=body, complete=complete, state=(catalog.id, head["counter"], head["schema_rev"]))


@dataclass
class Brain:
    uid: str
    path: str
    score: int | None
    metadata: dict


@dataclass
class Page:
    """A search's page as Python values, for the public routes to shape (store.search.search
    serializes the connector's answer without parsing the metadata)."""

    brains: list[Brain]
    total: int
    b_start: int
    b_size: int | None
    counter: int
    complete: bool
    facets: dict | None = None
    # (catalog id, counter, schema revision) the page was read at: what an ETag is made of.
    state: tuple | None = None


async def search_page(conn: asyncpg.Connection, catalog: Catalog, request: SearchRequest,
                      security: Security, limits: Limits, counts: CountCache | None = None,
                      facet_cache: CountCache | None = None, pages: CountCache | None = None) -> Page:
    plan, hits, head, facet_result = await _execute(conn, catalog, request, security, limits, counts, facet_cache,
                                                    pages)
    complete = request.after_batch is None or head["batch_state"] == "committed"
    brains = [Brain(uid=r["uid"], path=r["path"], score=plan.zcatalog_score(r["score"]),
                    metadata=orjson.loads(r["meta"])) for r in hits]
    return Page(brains=brains, total=head["total"], b_start=plan.b_start, b_size=plan.b_size,
                counter=head["counter"], complete=complete, facets=facet_result,
                state=(catalog.id, head["counter"], head["schema_rev"]))
