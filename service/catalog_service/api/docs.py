"""/docs (Swagger UI) and /redoc from assets shipped in a Python package (fastapi-offline's
static files), so both work without a network; the OpenAPI document gets a bearer scheme, which
gives Swagger UI its Authorize button."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.staticfiles import StaticFiles

ASSETS = Path(fastapi_offline.__file__).parent / "static"
ASSETS_URL = "/docs/assets"
SECURITY_SCHEME = "bearer"

router = APIRouter(include_in_schema=False)


@router.get("/docs")
async def swagger_ui(request: Request):
    return get_swagger_ui_html(
        openapi_url=request.app.openapi_url, title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js", swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
        swagger_ui_parameters={"persistAuthorization": True})


@router.get("/redoc")
async def redoc(request: Request):
    return get_redoc_html(
        openapi_url=request.app.openapi_url, title=f"{request.app.title} - ReDoc",
        redoc_js_url=f"{ASSETS_URL}/redoc.standalone.js", redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
        with_google_fonts=False)


def install(app: FastAPI) -> None:
    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS), name="docs-assets")
    app.include_router(router)

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description,
                                 routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = {SECURITY_SCHEME: {
                "type": "http", "scheme": "bearer",
                "description": "The admin token, a catalog's connector token, or a signed token the connector "
                               "minted for a user (POST /catalogs/{id}/tokens). Without one: Anonymous."}}
            # Optional everywhere: a route without a credential answers as Anonymous (or refuses).
            schema["security"] = [{SECURITY_SCHEME: []}, {}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
