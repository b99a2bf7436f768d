"""Searches: /catalogs/{id}/query for the connector, /search for frontends and other programs."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError
from starlette.routing import Route

from catalog_schemas.api import FacetRequest, SearchRequest, SearchResult

from ..errors import BadRequest, Forbidden
from ..metrics import QUERIES
from ..planner.plan import SECURITY_INDEX, Limits
from ..store.search import Answer, StaleSchema, search
from .auth import Credential, identify, security_for
from .caching import conditional_search
from .deps import HEADERS, body_schema, credential_of, limits_for, read_body

router = APIRouter(tags=["search"])


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
            return await search(conn, catalog, body, security, lim, counts=state.counts,
                                facet_cache=state.facet_counts)
        except StaleSchema:
            if refresh:
                raise
            refresh = True


async def answer_search(request: Request, name: str, body: SearchRequest) -> Answer:
    """Answer a search for the caller that the request's headers name."""
    state = request.app.state
    cred, lim = credential_of(request.headers), limits_for(request)
    pool, conn = await state.db.acquire_read(request.headers.get("x-catalog-min-lsn"))
    try:
        answer = await _search_on(conn, request, name, body, cred, lim)
    finally:
        await state.db.release_read(pool, conn)
    if not answer.complete and pool is not state.db.primary:
        # A replica that has not replayed the caller's last batch yet: ask the primary, so the
        # caller reads its own writes.
        async with state.db.acquire() as conn:
            answer = await _search_on(conn, request, name, body, cred, lim)
    return answer


async def run_search(request: Request, name: str, body: SearchRequest) -> Response:
    answer = await answer_search(request, name, body)
    return Response(answer.body, media_type="application/json")


# The searches are the hot path: they read their headers and body themselves (deps.read_body,
# deps.credential_of), which takes a good part of FastAPI's per-request work off a short query;
# openapi_extra describes both.
@router.post("/catalogs/{name}/query", response_model=SearchResult,
             openapi_extra={**body_schema(SearchRequest), **HEADERS})
async def query_catalog(name: str, request: Request):
    body = await read_body(request, SearchRequest)
    return await run_search(request, name, body)


@router.post("/search", response_model=SearchResult, openapi_extra={**body_schema(SearchRequest), **HEADERS})
async def search_post(request: Request, catalog: str):
    body = await read_body(request, SearchRequest)
    return await run_search(request, catalog, body)


GET_PARAMETERS = {"parameters": [
    {"name": "q", "in": "query", "required": False, "schema": {"type": "string"},
     "description": 'A ZCatalog query as JSON, e.g. {"portal_type": "Document", "sort_on": "modified"}'},
    {"name": "b_start", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0},
     "description": "The first result of the page"},
    {"name": "b_size", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0},
     "description": "Results per page"},
    {"name": "metadata", "in": "query", "required": False, "style": "form", "explode": True,
     "schema": {"type": "array", "items": {"type": "string"}},
     "description": "Metadata columns to return (repeat the parameter); * for all"},
    {"name": "indexes", "in": "query", "required": False, "style": "form", "explode": True,
     "schema": {"type": "object", "additionalProperties": {"type": "string"}},
     "description": "Any other parameter is an index name and its value (repeat it for a list), "
                    "e.g. portal_type=Document&Subject=news"},
    {"name": "if-none-match", "in": "header", "required": False, "schema": {"type": "string"},
     "description": "An ETag of an earlier answer: 304 while the answer is unchanged"},
    *HEADERS["parameters"],
]}


@router.get("/search", response_model=SearchResult, openapi_extra=GET_PARAMETERS,
            responses={304: {"description": "Not modified: the ETag given in If-None-Match is current"}})
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
    control = {"catalog", "q", "b_start", "b_size", "metadata", "facets", "facet_limit", "facet_sort"}
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
            facets=_facets_of(params),
        )
    except ValidationError as exc:
        raise BadRequest("; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])) from exc
    except ValueError as exc:
        raise BadRequest("b_start, b_size and facet_limit must be integers") from exc
    return await conditional_search(request, catalog, lambda: answer_search(request, catalog, body))


def _facets_of(params) -> list[FacetRequest]:
    """``facets`` (repeated, or comma-separated index names), with ``facet_limit`` and
    ``facet_sort`` applying to each."""
    names = [name.strip() for value in params.getlist("facets") for name in value.split(",") if name.strip()]
    limit = int(params["facet_limit"]) if "facet_limit" in params else None
    sort = params.get("facet_sort", "count")
    return [FacetRequest(index=name, limit=limit, sort=sort) for name in names]


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
