"""The demo search page: ``GET /`` and its assets under ``/demo-assets/``, plus a token for it.

A page for trying the public search contract in a browser (search-as-you-type, facets,
highlights, pages, "did you mean", a bearer token). It is static (HTML, CSS, one plain JavaScript
module, all in this package: no CDN, no web fonts) and calls the service's own public routes from
the same origin, as any frontend would. The routes exist only when ``CATALOG_DEMO_PAGE`` is on
(``make run`` turns it on; off by default, so a production deployment shows no page at ``/``).

The token route mints a short-lived signed token with the principal ``Anonymous`` only: it shows
how a frontend sends a token without ever giving more than an anonymous visitor has.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse
from pydantic import BaseModel, Field

from ..api.auth import mint_token
from ..api.problems import errors
from ..errors import NotFound

HERE = Path(__file__).parent
# The files served, by the name in their URL: a fixed list, so no request path reaches the disk.
ASSETS = {"demo.js": "text/javascript", "demo.css": "text/css"}
TOKEN_TTL = 300
TOKEN_PRINCIPALS = ["Anonymous"]

router = APIRouter(tags=["demo"])


class DemoToken(BaseModel):
    token: str = Field(description="A signed token (Authorization: Bearer ...) for the catalog")
    catalog: str
    principals: list[str] = Field(description="Always Anonymous: the token sees what a visitor sees")
    ttl: int = Field(description="Seconds the token is valid")


def _static(name: str, media_type: str) -> FileResponse:
    # no-cache: the page and its assets change with the service's version, never stale.
    return FileResponse(HERE / name, media_type=media_type, headers={"Cache-Control": "no-cache"})


@router.get("/", include_in_schema=False)
async def demo_page() -> FileResponse:
    return _static("index.html", "text/html; charset=utf-8")


@router.get("/demo-assets/{name}", include_in_schema=False, responses=errors(404))
async def demo_asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise NotFound(f"no demo asset {name!r}")
    return _static(name, ASSETS[name])


@router.post("/demo-page/token", response_model=DemoToken, responses=errors(404))
async def demo_token(request: Request, catalog: str = "demo") -> DemoToken:
    """A token for the demo page's token field, valid five minutes, with the principal Anonymous
    only (present only while ``CATALOG_DEMO_PAGE`` is on)."""
    state = request.app.state
    async with state.db.acquire() as conn:
        found, _ = await state.registry.get(conn, catalog)
    return DemoToken(token=mint_token(found, TOKEN_PRINCIPALS, TOKEN_TTL), catalog=catalog,
                     principals=TOKEN_PRINCIPALS, ttl=TOKEN_TTL)
