"""The one place where errors become RFC 9457 problem details."""

from __future__ import annotations

import asyncpg
import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from ..errors import CatalogBusy, CatalogError, DatabaseUnavailable
from ..store.database import database_unavailable

MEDIA_TYPE = "application/problem+json"


def problem(status: int, title: str, detail: str | None = None, instance: str | None = None, **extra) -> Response:
    body = {"type": "about:blank", "title": title, "status": status}
    if detail:
        body["detail"] = detail
    if instance:
        body["instance"] = instance
    body.update(extra)
    return Response(orjson.dumps(body, default=str), status_code=status, media_type=MEDIA_TYPE)


# The errors of the API, as the OpenAPI document lists them (app.CatalogApp.openapi adds the
# Problem schema): ``responses=errors(404, 503)`` on a router or a route.
PROBLEM_SCHEMA = {"$ref": "#/components/schemas/Problem"}
ERROR_TITLES = {
    400: "Invalid query or request: ZCatalog would raise, or a value the index cannot take",
    401: "Unknown, expired or malformed credential",
    403: "The credential does not allow this",
    404: "No such catalog, batch, index or object",
    409: "Conflicts with the catalog's state (an existing catalog, an aborted or committed batch)",
    413: "Request body larger than the service accepts",
    422: "The body or parameters do not match the API, or exceed a limit of the service",
    503: "The database cannot be reached now: try again after Retry-After seconds",
}


def errors(*statuses: int) -> dict:
    return {status: {"description": ERROR_TITLES[status], "content": {MEDIA_TYPE: {"schema": PROBLEM_SCHEMA}},
                     **({"headers": {"Retry-After": {"schema": {"type": "integer"},
                                                     "description": "seconds to wait"}}} if status == 503 else {})}
            for status in statuses}


# What every route on a catalog can answer: credentials, the catalog, validation, the database.
CATALOG_ERRORS = (401, 403, 404, 422, 503)


# Where a handler leaves the error of a failed request (5xx) in the request's scope: the request's
# one log line (app.Observe) carries it, instead of a line of its own.
ERROR = "catalog_service.error"


def internal_error(path: str) -> Response:
    return problem(500, "Internal server error", "see the service log", path)


def _answer(request: Request, exc: CatalogError) -> Response:
    if exc.status >= 500:
        request.scope[ERROR] = exc
    response = problem(exc.status, exc.title, exc.detail, str(request.url.path), **exc.extra)
    response.headers.update(exc.headers)  # WWW-Authenticate of a 401, Retry-After of a 503
    return response


# What the driver raises when PostgreSQL is away or closed the connection (store.database decides
# which of them are that); the rest of these classes are faults of the service, answered 500.
DRIVER_ERRORS = (asyncpg.PostgresConnectionError, asyncpg.exceptions.OperatorInterventionError,
                 asyncpg.exceptions.InsufficientResourcesError, asyncpg.InterfaceError, asyncpg.InternalClientError,
                 OSError)


# PostgreSQL's refusals of a value the request brought, which no model check catches in every
# place it may hide (index values and metadata are any JSON): a NUL or an unpaired surrogate in a
# string, a number past numeric's or a date past timestamp's range.
REFUSED_VALUES = {"22P05", "22021", "22003", "22008"}


def allowed_methods(request: Request) -> list[str]:
    """The methods of every route that matches the request's path: Starlette's 405 names those of
    the first route only (``/catalogs/{name}`` is answered by GET and DELETE routes). The routes
    are the routers' own (``app.state.api_routes``): FastAPI's application keeps included
    routers as branches of its own making."""
    methods: set[str] = set()
    for route in request.app.state.api_routes:
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match is not Match.NONE:
            methods.update(getattr(route, "methods", None) or ())
    return sorted(methods)


def install(app: FastAPI) -> None:
    @app.exception_handler(CatalogError)
    async def catalog_error(request: Request, exc: CatalogError):
        return _answer(request, exc)

    async def driver_error(request: Request, exc: Exception):
        if isinstance(exc, asyncpg.QueryCanceledError):
            # statement_timeout: mostly a query that waited for a lock, such as the catalog's
            # partition held by a large rebuild's commit (docs/decisions/0018). A passing state.
            busy = CatalogBusy("the statement took longer than the service's statement timeout "
                               "(CATALOG_STATEMENT_TIMEOUT); the catalog may be held by a large rebuild's "
                               "commit. Try again shortly")
            busy.__cause__ = exc
            return _answer(request, busy)
        if not database_unavailable(exc):
            request.scope[ERROR] = exc
            return internal_error(str(request.url.path))
        unavailable = DatabaseUnavailable("the database cannot be reached now; try again shortly")
        unavailable.__cause__ = exc  # the request's log line shows what the driver said
        return _answer(request, unavailable)

    for cls in DRIVER_ERRORS:
        app.add_exception_handler(cls, driver_error)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        errors = [
            {"loc": [str(p) for p in e.get("loc", ())], "msg": e.get("msg", ""), "type": e.get("type", "")}
            for e in exc.errors()[:20]
        ]
        return problem(422, "Invalid request", "the request body or parameters do not match the API",
                       str(request.url.path), errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        response = problem(exc.status_code, str(exc.detail), None, str(request.url.path))
        # The exception's headers belong to the answer: Allow on a 405 (RFC 9110 requires it).
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:
            response.headers["Allow"] = ", ".join(allowed_methods(request))
        return response

    @app.exception_handler(asyncpg.DataError)
    async def refused_value(request: Request, exc: asyncpg.DataError):
        if exc.sqlstate not in REFUSED_VALUES:
            request.scope[ERROR] = exc
            return internal_error(str(request.url.path))
        return problem(422, "Invalid value", f"PostgreSQL cannot hold a value of the request: {exc}",
                       str(request.url.path))


    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        request.scope[ERROR] = exc
        return internal_error(str(request.url.path))
