"""The FastAPI application: lifespan opens the database, routers do the rest."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from contextlib import asynccontextmanager
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from starlette.exceptions import HTTPException
from starlette.routing import Match
from starlette.types import ASGIApp

from . import demo_page, logs
from .api import batches, catalogs, cors, docs, health, keys, problems, search
from .api.problems import problem
from .db import resolve_dsn
from .metrics import FACET_CACHE, LATENCY, PAGE_CACHE, REQUESTS, RESOLVED
from .public import routes as public_routes
from .public import suggest as public_suggest
from .settings import Settings, get_settings
from .store.batches import resolve_expired
from .store.catalogs import CatalogRegistry
from .store.database import Database
from .store.migrations import migrate
from .store.search import CountCache
from .store.upkeep import StatisticsUpkeep

log = logging.getLogger("catalog_service")


async def _resolver(app: FastAPI) -> None:
    """Resolve staged batches left behind by crashed clients, now and then."""
    settings: Settings = app.state.settings
    interval = max(1.0, min(60.0, settings.staged_batch_ttl / 4))
    while True:
        await asyncio.sleep(interval)
        try:
            async with app.state.db.acquire() as conn:
                for catalog, batch_id, outcome in await resolve_expired(
                        conn, settings.staged_batch_ttl, settings.staged_batch_abandon_ttl, batches.bulk_of(settings)):
                    RESOLVED.labels(outcome).inc()
                    log.warning("resolved expired batch %s of %s: %s", batch_id, catalog, outcome)
        except Exception:
            log.exception("batch resolver failed")


def tune_gc(settings: Settings) -> None:
    """Collect cyclic garbage less often (Settings.gc_thresholds): the process's own setting, so
    every worker sets it when it starts."""
    gc.set_threshold(*settings.gc_thresholds)


@asynccontextmanager
async def lifespan(app: FastAPI):
    settings: Settings = app.state.settings
    dsn = await asyncio.to_thread(resolve_dsn, settings)
    db = Database(settings, dsn)
    await db.open()
    if settings.migrate_on_start:
        async with db.acquire() as conn:
            applied = await migrate(conn)
            if applied:
                log.info("migrations applied: %s", ", ".join(applied))
            # Not waiting: a process holding the lock (a `migrate` building indexes, another
            # worker starting) is doing the same.
            await app.state.registry.upgrade_partitions(conn, wait=False)
    app.state.db = db
    app.state.upkeep = StatisticsUpkeep(db, pause=settings.analyze_pause)
    tune_gc(settings)
    resolver = asyncio.create_task(_resolver(app))
    try:
        yield
    finally:
        resolver.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await resolver
        await app.state.upkeep.close()
        await db.close()


class Observe:
    """Request counts and latency per route, and one log line for each failed or slow request.

    The line names the route, status, milliseconds and catalog, and carries the error of a failed
    request (the error handlers leave it in the scope, ``problems.ERROR``). An exception no handler
    answered is answered here with a 500 problem: past this middleware, Starlette would answer it
    and raise it again for the server to log, a second line (and not a JSON one).

    A plain ASGI middleware: Starlette's BaseHTTPMiddleware (``@app.middleware``) runs the
    application in a task group of its own and costs a noticeable part of a short request.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500
        responded = False
        error = None

        async def send_observed(message):
            nonlocal status, responded
            if message["type"] == "http.response.start":
                status = message["status"]
                responded = True
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        except Exception as exc:
            error = exc
            if responded:
                raise  # too late for an answer; the server closes the connection and logs it
            await problems.internal_error(scope["path"])(scope, receive, send_observed)
        finally:
            route = scope.get("route")
            name = getattr(route, "path", "unmatched")
            elapsed = time.perf_counter() - started
            REQUESTS.labels(name, scope["method"], str(status)).inc()
            LATENCY.labels(name).observe(elapsed)
            if status >= 500 or elapsed > 1.0:
                fields = {"route": name, "status": status, "ms": round(elapsed * 1000, 2)}
                catalog = _catalog_of(scope)
                if catalog is not None:
                    fields["catalog"] = catalog
                log.warning("slow or failed request", exc_info=error or scope.get(problems.ERROR), extra=fields)


def _catalog_of(scope) -> str | None:
    """The catalog a request is for: its path names it, or a search's ``catalog`` parameter."""
    name = scope.get("path_params", {}).get("name")
    if name is None and scope["path"] == "/search":
        names = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("catalog")
        name = names[0] if names else None
    return name


class BodyLimit:
    """Refuse request bodies over the configured size with 413, by Content-Length before reading
    and by counting what arrives (chunked bodies), so an oversized body is never parsed."""

    def __init__(self, app, settings: Settings):
        self.app = app
        self.settings = settings

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"].rstrip("/")
        # Index batches, appends to them (a rebuild's chunks of a thousand entries), and the
        # entries verify compares (chunks of the same kind).
        batch = scope["method"] == "POST" and (path.endswith(("/batches", "/verify")) or (
            path.endswith("/append") and "/batches/" in path))
        limit = self.settings.max_batch_body_size if batch else self.settings.max_body_size
        detail = f"request body larger than {limit} bytes"
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            response = problem(413, "Request body too large", detail, scope["path"])
            await response(scope, receive, send)
            return
        received = 0

        async def limited():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    # Re-raised as it is by FastAPI's body reading; problems.py answers it.
                    raise HTTPException(413, detail)
            return message

        await self.app(scope, limited, send)


class CatalogApp(FastAPI):
    """The application, with a front door for the searches.

    A search (the hot path: every Plone listing, navigation and collection) that matches one of
    ``search.FAST_ROUTES`` fully goes through the service's own middleware (Observe, BodyLimit) to
    its handler, and its errors through the same problem-details handlers as every route's. What
    it skips are FastAPI's and Starlette's own layers (their error, telemetry, body-limit and
    exit-stack middlewares, the router): 9% of the service's instructions for a folder listing
    (callgrind, in process). Everything else, a search route with another method included (405),
    goes to FastAPI as before.
    """

    def _front_door(self) -> ASGIApp:
        door = getattr(self, "_door", None)
        if door is None:
            door = self._door = Observe(BodyLimit(self._search, self.state.settings))
        return door

    async def __call__(self, scope, receive, send) -> None:
        layer = getattr(self, "_cors", None)
        if layer is None:
            layer = self._cors = cors.Cors(self._dispatch, self.state.settings)
        await layer(scope, receive, send)

    async def _dispatch(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            for route in search.FAST_ROUTES:
                match, child = route.matches(scope)
                if match is Match.FULL:
                    scope.update(child)
                    scope["app"] = self
                    scope["route"] = route
                    await self._front_door()(scope, receive, send)
                    return
        await super().__call__(scope, receive, send)

    async def _search(self, scope, receive, send) -> None:
        request = Request(scope, receive)
        try:
            response = await scope["endpoint"](request)
        except Exception as exc:
            handler = next(self.exception_handlers[cls] for cls in type(exc).__mro__ if cls in self.exception_handlers)
            response = await handler(request, exc)
        await response(scope, receive, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = CatalogApp(
        title="Plone catalog service",
        version="0.1.0",
        description="Plone's portal_catalog in PostgreSQL, queried in ZCatalog's language.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.registry = CatalogRegistry()
    app.state.counts = CountCache(settings.count_cache_size)
    app.state.facet_counts = CountCache(settings.facet_cache_size, metric=FACET_CACHE)
    app.state.pages = CountCache(settings.page_cache_size, metric=PAGE_CACHE)
    problems.install(app)
    app.add_middleware(BodyLimit, settings=settings)
    app.add_middleware(Observe)
    routers = (search, batches, catalogs, keys, health, public_routes, public_suggest)
    if settings.demo_page:
        routers += (demo_page,)
    for module in routers:
        app.include_router(module.router)
    app.state.api_routes = [*search.FAST_ROUTES, *(route for module in routers for route in module.router.routes)]
    docs.install(app)
    # Routes are matched in order: the searches come first, for a request that reaches the router
    # (CatalogApp takes the searches before that).
    app.router.routes[:0] = search.FAST_ROUTES

    return app


def app_factory() -> FastAPI:
    settings = get_settings()
    logs.configure(settings.log_level, settings.log_json)
    return create_app(settings)
