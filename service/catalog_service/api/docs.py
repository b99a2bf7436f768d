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

from catalog_schemas.api import Problem

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
            _truthful(schema, app.state.settings)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


def _truthful(document: dict, settings) -> None:
    """FastAPI's document, made truthful about errors and limits: every error is the Problem
    schema (FastAPI would describe its own 422 body, which the service never sends; the routes
    list their errors with ``problems.errors``), the bodies that routes read themselves are
    components, and the limits the service enforces (its settings) are in the schemas."""
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(problem.pop("$defs", {}))
    schemas["Problem"] = problem
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    _components_for_bodies(document, schemas)
    _document_limits(schemas, settings)


def _components_for_bodies(document: dict, schemas: dict) -> None:
    """The request bodies that routes read themselves (deps.body_schema: the model's JSON schema,
    its nested models under ``$defs``) as components, so that their references resolve."""
    for operations in document["paths"].values():
        for operation in operations.values():
            content = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if not content or "$ref" in content["schema"]:
                continue
            body = _to_components(content["schema"])
            for name, definition in body.pop("$defs", {}).items():
                schemas.setdefault(name, _to_components(definition))
            schemas.setdefault(body["title"], body)
            content["schema"] = {"$ref": f"#/components/schemas/{body['title']}"}


def _to_components(schema):
    """``schema`` with its ``#/$defs/`` references pointing at the document's components."""
    if isinstance(schema, dict):
        return {key: (value.replace("#/$defs/", "#/components/schemas/") if key == "$ref" else _to_components(value))
                for key, value in schema.items()}
    if isinstance(schema, list):
        return [_to_components(item) for item in schema]
    return schema


def _document_limits(schemas: dict, settings) -> None:
    """The limits of a search, from the settings the service runs with."""
    search = schemas.get("SearchRequest")
    if search is None:
        return
    for page in ("b_size",):
        for option in search["properties"][page].get("anyOf", []):
            if option.get("type") == "integer":
                option["maximum"] = settings.max_b_size
    search["description"] = (search.get("description", "") + (
        f"\n\nLimits (422 past them): b_size at most {settings.max_b_size} (also inside ``query``); without "
        f"b_size at most {settings.max_unbatched} results; lists of at most {settings.max_list_length} values; "
        f"texts of at most {settings.max_text_length} characters; at most {settings.max_query_terms} indexes "
        f"queried.")).strip()
