"""Searches: /catalogs/{id}/query for the connector, /search for frontends and other programs."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.routing import Route

from catalog_schemas.api import SearchRequest, SearchResult

from ..errors import BadRequest, Forbidden
from ..metrics import QUERIES
from ..planner.plan import SECURITY_INDEX, Limits
from ..store.search import Answer, StaleSchema, search
from .auth import Credential, identify, security_for
from .deps import HEADERS, body_schema, credential_of, idempotent, limits_for, read_body
from .problems import CATALOG_ERRORS, errors

router = APIRouter(tags=["search"], responses=errors(400, *CATALOG_ERRORS, 413))


async def _search_on(conn, request: Request, name: str, body: SearchRequest, cred: Credential,
                     lim: Limits) -> Answer:
    state = request.app.state
    refresh = False
    while True:
        catalog = await state.registry.current(conn, name, refresh=refresh)
        if not refresh:
            QUERIES.labels(name).inc()  # known catalogs only: made-up names make no series
        caller = identify(cred, catalog, state.settings.admin_token)
        if not caller.trusted:
            if SECURITY_INDEX in body.query:
                raise Forbidden(f"{SECURITY_INDEX} is decided by the server, not by the query")
            if body.batch_ids:
                raise Forbidden("only the connector may see staged batches")
        security = security_for(caller, cred, body.show_inactive, datetime.now(UTC))
        try:
            return await search(conn, catalog, body, security, lim, counts=state.counts)
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


@router.post("/search", response_model=SearchResult, openapi_extra={**body_schema(SearchRequest), **HEADERS})
@idempotent
async def search_post(request: Request, catalog: str):
    body = await read_body(request, SearchRequest)
    return await run_search(request, catalog, body)


@router.get("/search", response_model=SearchResult, openapi_extra=HEADERS)
@idempotent
async def search_get(request: Request, catalog: str):
    """Query string form: ``q`` is a JSON ZCatalog query, or index=value pairs (repeat for lists)."""
    params = request.query_params
    query: dict = {}
    if "q" in params:
        try:
            query = orjson.loads(params["q"])
        except orjson.JSONDecodeError as exc:
            raise BadRequest("q must be a JSON object") from exc
        if not isinstance(query, dict):
            raise BadRequest("q must be a JSON object")
    control = {"catalog", "q", "b_start", "b_size", "metadata"}
    for key in params:
        if key not in control:
            values = params.getlist(key)
            query[key] = values if len(values) > 1 else values[0]
    try:
        body = SearchRequest(
            query=query,
            b_start=int(params["b_start"]) if "b_start" in params else None,
            b_size=int(params["b_size"]) if "b_size" in params else None,
            metadata=params.getlist("metadata") or None,
        )
    except ValueError as exc:
        raise BadRequest("b_start and b_size must be integers") from exc
    return await run_search(request, catalog, body)


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


async def _search_route(request: Request) -> Response:
    catalog = request.query_params.get("catalog")
    if catalog is None:  # as FastAPI answers a missing required query parameter
        raise RequestValidationError([{"type": "missing", "loc": ("query", "catalog"), "msg": "Field required",
                                       "input": None}])
    if request.method == "GET":
        return await search_get(request, catalog)
    return await search_post(request, catalog)


FAST_ROUTES = [_PlainRoute("/catalogs/{name}/query", _query_catalog_route, methods=["POST"]),
               _PlainRoute("/search", _search_route, methods=["GET", "POST"])]
FAST_ROUTES[1].methods.discard("HEAD")  # Starlette adds it to GET; the API never answered HEAD
