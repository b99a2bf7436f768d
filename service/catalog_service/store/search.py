"""Run a planned search and shape the answer (metadata passed through as raw JSON).

One round trip per query: the catalog's counter and schema revision (and the state of the batch
the caller waits for) come back with the page, from the same statement and snapshot. A query
planned with a stale copy of the catalog's schema is detected by its revision and run again.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass

import asyncpg
import orjson

from catalog_schemas.api import SearchRequest

from ..metrics import COUNT_CACHE
from ..planner.plan import UNRESTRICTED, Limits, Security, plan_search
from .catalogs import Catalog


@dataclass
class Answer:
    body: bytes
    complete: bool


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

    def __init__(self, size: int):
        self.size = size
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[tuple, tuple[int, int, int]] = OrderedDict()
        self._lock = threading.Lock()

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
        COUNT_CACHE.labels("hit" if hit else "miss").inc()


_PARAM = re.compile(r"\$(\d+)")


def _count_key(catalog: Catalog, plan, request: SearchRequest) -> tuple | None:
    if request.batch_ids:
        return None
    used = max((int(n) for n in _PARAM.findall(plan.count_sql)), default=0)
    # repr keeps types apart (1 and "1", lists and tuples); parameters are plain values.
    return (catalog.id, plan.count_sql, repr(plan.params[:used]))


def _batch_state(after: str) -> str:
    return f"(select b.state from catalog_batch b where b.catalog_id = c.id and b.batch_id = {after})"


class StaleSchema(Exception):
    """The catalog changed (schema revision, or dropped and recreated) since it was cached."""


async def search(conn: asyncpg.Connection, catalog: Catalog, request: SearchRequest,
                 security: Security, limits: Limits, counts: CountCache | None = None) -> Answer:
    plan = plan_search(
        request.query, catalog.schema, limits, security,
        batch_ids=request.batch_ids,
        metadata=None if request.metadata in (None, "*") else list(request.metadata),
        b_start=request.b_start, b_size=request.b_size,
    )
    if plan.deferred_error is not None:
        try:
            found = await conn.fetchval(plan.precheck_sql, *plan.precheck_params)
        except asyncpg.UndefinedTableError as exc:
            raise StaleSchema() from exc
        if found:
            raise plan.deferred_error
        plan = plan_search({}, catalog.schema, limits, UNRESTRICTED)  # nothing: an empty answer
    params = [] if plan.empty else list(plan.params)
    params.append(catalog.id)
    cat = f"${len(params)}::integer"
    if request.after_batch is None:
        batch_state = "null::text"  # nobody waits for a batch: no lookup to plan and run
    else:
        params.append(request.after_batch)
        batch_state = _batch_state(f"${len(params)}::text")
    # count_sql uses the first parameters of plan.params only, so it fits in the same statement.
    key = None if plan.empty or counts is None or counts.size <= 0 else _count_key(catalog, plan, request)
    if plan.empty:
        count = "0::bigint"
    elif key is None:
        count = f"({plan.count_sql})"
    else:
        # The count runs only if the catalog moved since the cached total (an InitPlan in an
        # untaken CASE branch is never executed).
        cached = counts.get(key) or (-1, -1, 0)
        params.extend(cached)
        n = len(params)
        count = (f"(case when c.counter = ${n - 2}::bigint and c.schema_rev = ${n - 1}::integer "
                 f"then ${n}::bigint else ({plan.count_sql}) end)")
    if plan.empty:
        sql = (f"select c.counter, c.schema_rev, {batch_state} as batch_state, {count} as total, "
               f"null::bigint as rid from catalog c where c.id = {cat}")
    else:
        # A page that is not full ends the result: then the total is its offset plus its rows,
        # and the count is not run. (A page size of 0 says nothing, nor does an empty page past
        # the first.)
        limit = plan.b_size if plan.b_size is not None else limits.max_unbatched
        params.extend((limit, plan.b_start))
        lim, off = f"${len(params) - 1}::bigint", f"${len(params)}::bigint"
        rows_on_page = "(select count(*) from page)"
        total = (f"(case when {lim} > 0 and {rows_on_page} between 1 and {lim} - 1 then {off} + {rows_on_page} "
                 f"when {lim} > 0 and {off} = 0 and {rows_on_page} = 0 then 0 else {count} end)")
        sql = (f"with page as materialized (select q.*, row_number() over () as n from ({plan.sql}) q) "
               f"select c.counter, c.schema_rev, {batch_state} as batch_state, {total} as total, r.* "
               f"from catalog c left join page r on true where c.id = {cat} order by r.n")
    try:
        rows = await conn.fetch(sql, *params)
    except asyncpg.UndefinedTableError as exc:
        raise StaleSchema() from exc
    if not rows or rows[0]["schema_rev"] != catalog.schema_rev:
        raise StaleSchema()
    head = rows[0]
    if key is not None:
        counts.record(hit=(head["counter"], head["schema_rev"]) == cached[:2])
        counts.put(key, head["counter"], head["schema_rev"], head["total"])
    hits = [r for r in rows if r["rid"] is not None]
    complete = request.after_batch is None or head["batch_state"] == "committed"
    items = [
        {"rid": r["rid"], "uid": r["uid"], "path": r["path"], "score": r["score"],
         "metadata": orjson.Fragment(r["meta"])}
        for r in hits
    ]
    body = orjson.dumps({
        "items_total": head["total"],
        "b_start": plan.b_start,
        "b_size": plan.b_size,
        "items": items,
        "counter": head["counter"],
        "complete": complete,
    })
    return Answer(body=body, complete=complete)
