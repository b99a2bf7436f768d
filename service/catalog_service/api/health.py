"""Liveness, readiness and metrics."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..errors import Unavailable
from ..metrics import POOL_SIZE, REGISTRY
from ..store.migrations import pending
from .problems import errors, problem

log = logging.getLogger(__name__)
router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz():
    return {"status": "ok"}


@router.get("/readyz", responses=errors(503))
async def readyz(request: Request):
    try:
        async with request.app.state.db.acquire() as conn:
            missing = await pending(conn)
    except Exception as exc:  # any failure to reach the database means not ready
        log.warning("not ready: %s", exc)
        return _not_ready(request, "the database cannot be reached")
    if missing:
        return _not_ready(request, "migrations are pending", pending=missing)
    return {"status": "ready"}


def _not_ready(request: Request, detail: str, **extra):
    response = problem(503, "Not ready", detail, str(request.url.path), **extra)
    response.headers["Retry-After"] = str(Unavailable.retry_after)
    return response


@router.get("/metrics", response_class=PlainTextResponse)
async def metrics(request: Request):
    pool = request.app.state.db.primary
    if pool is not None:
        POOL_SIZE.set(pool.get_size())
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
