"""Dependencies shared by the routers: settings, database, catalog registry, the caller."""

from __future__ import annotations

import orjson
from fastapi import Header, Request
from fastapi.responses import Response

from ..planner.plan import Limits
from ..settings import Settings
from .auth import Credential

# Dependencies are coroutines: FastAPI runs plain functions in a thread pool, a thread hop per
# dependency per request.

async def settings(request: Request) -> Settings:
    return request.app.state.settings


def limits_of(s: Settings) -> Limits:
    return Limits(max_b_size=s.max_b_size, max_unbatched=s.max_unbatched, max_list_length=s.max_list_length,
                  max_text_length=s.max_text_length, max_query_terms=s.max_query_terms)


async def limits(request: Request) -> Limits:
    state = request.app.state
    lim = getattr(state, "limits", None)
    if lim is None:
        lim = state.limits = limits_of(state.settings)
    return lim


async def credential(
    authorization: str | None = Header(default=None),
    x_catalog_principals: str | None = Header(default=None),
    x_catalog_unrestricted: str | None = Header(default=None),
) -> Credential:
    bearer = None
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            bearer = value.strip()
    return Credential(bearer=bearer, principals_header=x_catalog_principals,
                      unrestricted=(x_catalog_unrestricted or "").strip() in ("1", "true", "yes"))


def json_response(body, status_code: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json")
