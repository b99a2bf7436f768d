"""Run a planned search and shape the answer (metadata passed through as raw JSON).

One round trip per query: the catalog's counter and schema revision (and the state of the batch
the caller waits for) come back with the page, from the same statement and snapshot. A query
planned with a stale copy of the catalog's schema is detected by its revision and run again.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg
import orjson

from catalog_schemas.api import SearchRequest

from ..planner.plan import UNRESTRICTED, Limits, Security, plan_search
from .catalogs import Catalog


@dataclass
class Answer:
    body: bytes
    complete: bool


class StaleSchema(Exception):
    """The catalog changed (schema revision, or dropped and recreated) since it was cached."""


async def search(conn: asyncpg.Connection, catalog: Catalog, request: SearchRequest,
                 security: Security, limits: Limits) -> Answer:
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
    params.append(request.after_batch)
    after = f"${len(params)}::text"
    # count_sql uses the first parameters of plan.params only, so it fits in the same statement.
    total = "0::bigint" if plan.empty else f"({plan.count_sql})"
    state = (f"select c.counter, c.schema_rev, (select b.state from catalog_batch b where b.catalog_id = c.id "
             f"and b.batch_id = {after}) as batch_state, {total} as total from catalog c where c.id = {cat}")
    if plan.empty:
        sql = f"select s.*, null::bigint as rid from ({state}) s"
    else:
        sql = (f"select s.*, r.* from ({state}) s left join lateral (select q.*, row_number() over () as n "
               f"from ({plan.sql}) q) r on true order by r.n")
    try:
        rows = await conn.fetch(sql, *params)
    except asyncpg.UndefinedTableError as exc:
        raise StaleSchema() from exc
    if not rows or rows[0]["schema_rev"] != catalog.schema_rev:
        raise StaleSchema()
    head = rows[0]
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
