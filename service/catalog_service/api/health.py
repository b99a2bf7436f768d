"""Liveness, readiness and metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ..metrics import POOL_SIZE, REGISTRY
from ..store.migrations import pending
from .deps import json_response

router = APIRouter(tags=["operations"])


@router.get("/healthz")
async def healthz():
    return {"status": "ok"}


@router.get("/readyz")
async def readyz(request: Request):
    try:
        async with request.app.state.db.acquire() as conn:
            missing = await pending(conn)
    except Exception as exc:  # any failure to reach the database means not ready
        return json_response({"status": "unavailable", "detail": str(exc)}, status_code=503)
    if missing:
        return json_response({"status": "migrations pending", "pending": missing}, status_code=503)
    return {"status": "ready"}


@router.get("/metrics")
async def metrics(request: Request):
    pool = request.app.state.db.primary
    if pool is not None:
        POOL_SIZE.set(pool.get_size())
    return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)
