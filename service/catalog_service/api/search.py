"""Searches: /catalogs/{id}/query for the connector (the public routes are in ``public/``)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.routing import Route

from catalog_schemas.api import SearchRequest, SearchResult

from ..errors import Forbidden, LimitExceeded, Unauthorized
from ..metrics import QUERIES
from ..planner.plan import SECURITY_INDEX, Limits
from ..store.search import Answer, StaleSchema, search
from .auth import Caller, Credential, identify, security_for
from .deps import HEADERS, body_schema, credential_of, idempotent, limits_for, read_body, state_limits
from .problems import CATALOG_ERRORS, errors

router = APIRouter(tags=["search"], responses=errors(400, *CATALOG_ERRORS, 413))


def caller_for(state, catalog, cred: Credential, refreshed: bool = True) -> Caller:
    """Who the credential names on ``catalog``. Raises StaleSchema when the catalog does not know
    the token but may be older than a rotation that made it (unless it was ``refreshed``)."""
    try:
        return identify(cred, catalog, state.settings.admin_token)
    except Unauthorized:
        if refreshed or cred.malformed:
            raise
        raise StaleSchema() from None  # the cached catalog may predate a rotation of its token


async def searched(conn, state, catalog, body: SearchRequest, cred: Credential, lim: Limits, runner=search,
                   refreshed: bool = True):
    """``runner``'s answer to ``body`` on ``catalog``, for the caller the credential names: its
    security comes from the credential, and only the connector names principals or staged
    batches. A caller without the service credential gets the public cost bounds (its text
    queries' words and globs, ``CATALOG_PUBLIC_SEARCH_TIMEOUT``). Raises StaleSchema when the
    catalog changed since it was loaded, and when a token the catalog does not know may be one
    of a rotation newer than the catalog loaded (unless it was ``refreshed`` already)."""
    caller = caller_for(state, catalog, cred, refreshed)
    caches = {"counts": state.counts, "facet_cache": state.facet_counts, "pages": getattr(state, "pages", None)}
    if caller.trusted:
        return await runner(conn, catalog, body, security_for(caller, cred, body.show_inactive, datetime.now(UTC)),
                            lim, **caches)
    if SECURITY_INDEX in body.query:
        raise Forbidden(f"{SECURITY_INDEX} is decided by the server, not by the query")
    if body.batch_ids:
        raise Forbidden("only the connector may see staged batches")
    security = security_for(caller, cred, body.show_inactive, datetime.now(UTC))
    bounded = state_limits(state, trusted=False)
    timeout = state.settings.public_search_timeout
    if timeout <= 0:
        return await runner(conn, catalog, body, security, bounded, **caches)
    try:
        async with asyncio.timeout(timeout):
            return await runner(conn, catalog, body, security, bounded, **caches)
    except TimeoutError:
        # asyncpg cancelled the statement on the server.
        raise LimitExceeded(f"the search took longer than {timeout:g} s, the most for a search without the "
                            f"service credential; narrow it") from None


async def _search_on(conn, request: Request, name: str, body: SearchRequest, cred: Credential,
                     lim: Limits) -> Answer:
    state = request.app.state
    refresh = False
    while True:
        catalog = await state.registry.current(conn, name, refresh=refresh)
        if not refresh:
            QUERIES.labels(name).inc()  # known catalogs only: made-up names make no series
        try:
            return await searched(conn, state, catalog, body, cred, lim, refreshed=refresh)
        except StaleSchema:
            if refresh:
                raise
            refresh = True


async def run_search(request: Request, name: str, body: SearchRequest) -> Response:
    """Answer a search for the caller that the request's headers name."""
    state = request.app.state
    cred, lim = credential_of(request.headers), limits_for(request)
    pool, conn = await state.db.acquire_read(request.headers.get("x-catalog-min-lsn"))
    try:
        answer = await _search_on(conn, request, name, body, cred, lim)
    except BaseException as exc:
        await state.db.release_read(pool, conn, failed=exc)
        raise
    await state.db.release_read(pool, conn)
    if not answer.complete and pool is not state.db.primary:
        # A replica that has not replayed the caller's last batch yet: ask the primary, so the
        # caller reads its own writes.
        async with state.db.acquire() as conn:
            answer = await _search_on(conn, request, name, body, cred, lim)
    return Response(answer.body, media_type="application/json")


# The searches are the hot path: they read their headers and body themselves (deps.read_body,
# deps.credential_of), which takes a good part of FastAPI's per-request work off a short query;
# openapi_extra describes both.
@router.post("/catalogs/{name}/query", response_model=SearchResult,
             openapi_extra={**body_schema(SearchRequest), **HEADERS})
@idempotent
async def query_catalog(name: str, request: Request):
    body = await read_body(request, SearchRequest)
    return await run_search(request, name, body)


# The search routes again, as plain Starlette routes that the application matches before FastAPI's
# (app.py): FastAPI's own dispatch (its router layers, dependency solving for the parameters) was a
# tenth of a folder listing's time in the service (0.2 ms of 1.9, measured in process). The
# middleware and the problem-details handlers apply as to every route; the FastAPI routes above
# stay for the OpenAPI description.
class _PlainRoute(Route):
    """A Starlette route that names itself in the scope, as FastAPI's router does only for its own
    routes (the Observe middleware labels its metrics with the route's path)."""

    async def handle(self, scope, receive, send) -> None:
        scope["route"] = self
        await super().handle(scope, receive, send)


async def _query_catalog_route(request: Request) -> Response:
    return await query_catalog(request.path_params["name"], request)


FAST_ROUTES = [_PlainRoute("/catalogs/{name}/query", _query_catalog_route, methods=["POST"])]
